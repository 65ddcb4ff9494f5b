#!/usr/bin/env bash
# A run: one user message to the demo agent, its answer streamed as AG-UI events.
#   examples/curl/run.sh "What is AG-UI?"
set -euo pipefail
. "$(dirname "$0")/common.sh"
THREAD="${THREAD:-curl-run-$(date +%s)-$$}"
body="$(jq -cn --arg thread "$THREAD" --arg text "${1:-What is AG-UI?}" \
  '{threadId: $thread, runId: "run-1", protocolVersion: "1.0", messages: [{id: "u1", role: "user", content: $text}]}')"
run demo "$body"
