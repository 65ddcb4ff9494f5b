#!/usr/bin/env bash
# A conversation with agui-gateway over plain HTTP, the way an AG-UI client has it:
#
#   1. a run: POST the first user message, read the SSE stream ... and drop the connection
#      after a few events (the turn runs on without us);
#   2. a reconnect: the same request with `Last-Event-ID`, which continues right after the last
#      event we saw: nothing missed, nothing twice;
#   3. a follow-up turn: load the thread with GET /v1/threads/{thread}/messages (the gateway's
#      own record, with its ids) and send it back with one new user message.
#
# Start a gateway first (the built-in config serves the `demo` agent on SQLite):
#   cargo run --release -- serve                 # or: agui-gateway serve
# then:
#   examples/curl/conversation.sh                         # GATEWAY=http://127.0.0.1:9000 to point elsewhere
#
# Needs curl and jq. Without authentication configured the gateway answers only loopback
# callers, so run this on the gateway's host.
set -euo pipefail

GATEWAY="${GATEWAY:-http://127.0.0.1:8080}"
AGENT="${AGENT:-demo}"
TENANT="${TENANT:-default}"
THREAD="${THREAD:-curl-demo-$(date +%s)-$$}"
# How many events to read before dropping the first connection.
DROP_AFTER="${DROP_AFTER:-5}"

for tool in curl jq; do
  command -v "$tool" >/dev/null || { echo "this example needs $tool" >&2; exit 1; }
done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

RUN_URL="$GATEWAY/v1/agui/agents/$AGENT?tenant=$TENANT"

# POST a RunAgentInput ($1) and print the SSE stream; extra curl arguments follow.
run() {
  local body="$1"
  shift
  curl -sS -N "$RUN_URL" \
    -H 'Content-Type: application/json' \
    -H 'Accept: text/event-stream' \
    "$@" \
    --data-binary "$body"
}

# The `id:` of the last event in a saved stream.
last_id() {
  sed -n 's/^id: //p' "$1" | tail -n 1
}

# The event types of a saved stream, one line.
types() {
  sed -n 's/^data: //p' "$1" | jq -r .type | paste -sd ' ' -
}

curl -sSf "$GATEWAY/readyz" >/dev/null || {
  echo "no ready gateway at $GATEWAY (start one with: agui-gateway serve)" >&2
  exit 1
}

first_run="$(jq -cn --arg thread "$THREAD" '{
  threadId: $thread,
  runId: "run-1",
  protocolVersion: "1.0",
  state: {},
  tools: [],
  context: [],
  messages: [{id: "u1", role: "user", content: "What is AG-UI?"}]
}')"

echo "== 1. run: thread $THREAD, first $DROP_AFTER events, then the connection drops"
# Each event is three lines (id, data, blank). `head` closes the pipe once it has them, which
# ends curl's connection (curl's "Failure writing output" is that drop, hence the 2>/dev/null):
# the turn goes on in the gateway.
set +o pipefail
run "$first_run" 2>/dev/null | head -n "$((DROP_AFTER * 3))" >"$work/part1.sse"
set -o pipefail
cat "$work/part1.sse"
seen="$(last_id "$work/part1.sse")"
[ -n "$seen" ] || { echo "the first run streamed no event" >&2; exit 1; }

echo "== 2. reconnect: the same request with Last-Event-ID: $seen"
run "$first_run" -H "Last-Event-ID: $seen" >"$work/part2.sse"
cat "$work/part2.sse"

# The same (threadId, runId) without Last-Event-ID replays the whole turn from the log:
# the two parts joined must be exactly that.
run "$first_run" >"$work/whole.sse"
joined="$(cat "$work/part1.sse" "$work/part2.sse" | sed -n 's/^id: //p')"
whole="$(sed -n 's/^id: //p' "$work/whole.sse")"
if [ "$joined" = "$whole" ]; then
  echo "-- the two parts join into the whole run: $(wc -l <<<"$whole") events, none missed, none twice"
else
  echo "-- the parts do not join into the whole run" >&2
  diff <(echo "$joined") <(echo "$whole") >&2 || true
  exit 1
fi

echo "== 3. follow-up: load the thread's messages and add a question"
curl -sSf "$GATEWAY/v1/threads/$THREAD/messages?tenant=$TENANT" >"$work/messages.json"
jq . "$work/messages.json"
next_run="$(jq -c --arg thread "$THREAD" '{
  threadId: $thread,
  runId: "run-2",
  protocolVersion: "1.0",
  messages: (.messages + [{id: "u2", role: "user", content: "And how does reconnecting work?"}])
}' "$work/messages.json")"
run "$next_run" >"$work/next.sse"
cat "$work/next.sse"
echo "-- events: $(types "$work/next.sse")"

echo "== the thread now"
curl -sSf "$GATEWAY/v1/threads/$THREAD?tenant=$TENANT" | jq '{threadId, status, turnCount, latestTurn, notes: [.board.notes[].text]}'
