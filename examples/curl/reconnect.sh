#!/usr/bin/env bash
# A reconnect: read a few events, drop the connection (the turn runs on), then send the same
# request with Last-Event-ID and get exactly the rest; the two parts join into the whole run.
#   examples/curl/reconnect.sh [events-before-the-drop]
set -euo pipefail
. "$(dirname "$0")/common.sh"
THREAD="${THREAD:-curl-reconnect-$(date +%s)-$$}"
DROP_AFTER="${1:-4}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
body="$(jq -cn --arg thread "$THREAD" \
  '{threadId: $thread, runId: "run-1", protocolVersion: "1.0", messages: [{id: "u1", role: "user", content: "reconnect me"}]}')"

echo "== the first $DROP_AFTER events, then the connection drops"
set +o pipefail
run demo "$body" 2>/dev/null | head -n "$((DROP_AFTER * 3))" >"$work/head.sse"
set -o pipefail
cat "$work/head.sse"
seen="$(last_id "$work/head.sse")"
echo "== reconnect with Last-Event-ID: $seen"
run demo "$body" -H "Last-Event-ID: $seen" | tee "$work/tail.sse"

run demo "$body" >"$work/whole.sse"
if [ "$(cat "$work/head.sse" "$work/tail.sse")" = "$(cat "$work/whole.sse")" ]; then
  echo "-- joined = the whole run: $(grep -c '^id: ' "$work/whole.sse") events, none missed, none twice"
else
  echo "-- the parts do not join into the whole run" >&2
  exit 1
fi
