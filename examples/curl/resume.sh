#!/usr/bin/env bash
# A resume: the mailer agent proposes a tool call and the run ends with an interrupt; answer it
# with `resume` in a new run of the same thread, and the same turn goes on to its end.
#   examples/curl/resume.sh [approve|reject]
set -euo pipefail
. "$(dirname "$0")/common.sh"
THREAD="${THREAD:-curl-resume-$(date +%s)-$$}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
body="$(jq -cn --arg thread "$THREAD" \
  '{threadId: $thread, runId: "run-1", protocolVersion: "1.0", messages: [{id: "u1", role: "user", content: "the launch is on Friday"}]}')"

echo "== a run that ends waiting for an approval"
run mailer "$body" | tee "$work/first.sse"
interrupt="$(last_event "$work/first.sse" | jq -r '.outcome.interrupts[0].id // empty')"
[ -n "$interrupt" ] || { echo "the run did not end with an interrupt" >&2; exit 1; }

approved=true
[ "${1:-approve}" = "reject" ] && approved=false
echo "== resume: $interrupt, approved: $approved"
resume="$(jq -cn --arg thread "$THREAD" --arg id "$interrupt" --argjson approved "$approved" \
  '{threadId: $thread, runId: "run-2", protocolVersion: "1.0", messages: [],
    resume: [{interruptId: $id, status: "resolved", payload: {approved: $approved}}]}')"
run mailer "$resume" | tee "$work/second.sse"
last_event "$work/second.sse" | jq -e '.type == "RUN_FINISHED" and .outcome.type == "success"' >/dev/null
echo "-- the turn finished: $(curl -sS "$GATEWAY/v1/threads/$THREAD?tenant=$TENANT" | jq -c .latestTurn)"
