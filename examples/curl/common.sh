# Shared by the curl examples: where the gateway is, and a POST of a run that prints its stream.
GATEWAY="${GATEWAY:-http://127.0.0.1:8080}"
TENANT="${TENANT:-default}"

for tool in curl jq; do
  command -v "$tool" >/dev/null || { echo "this example needs $tool" >&2; exit 1; }
done
curl -sSf "$GATEWAY/readyz" >/dev/null || {
  echo "no ready gateway at $GATEWAY (start one with: agui-gateway serve --config examples/curl/gateway.toml)" >&2
  exit 1
}

# run AGENT BODY [curl arguments…]: POST a RunAgentInput and print the SSE stream as it comes.
run() {
  local agent="$1" body="$2"
  shift 2
  curl -sS -N "$GATEWAY/v1/agui/agents/$agent?tenant=$TENANT" \
    -H 'Content-Type: application/json' -H 'Accept: text/event-stream' "$@" --data-binary "$body"
}

# The `id:` of the last event, and the `data:` of the last event, of a saved stream.
last_id() { sed -n 's/^id: //p' "$1" | tail -n 1; }
last_event() { sed -n 's/^data: //p' "$1" | tail -n 1; }
