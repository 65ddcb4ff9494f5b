#!/usr/bin/env bash
# Starts the chat app example with one command: agui-gateway with this folder's gateway.toml
# (SQLite in this folder) and the app's backend, then waits; Ctrl-C stops both.
#
#   examples/chat-app/start.sh          # then open http://127.0.0.1:3000
#
# Environment:
#   AGUI_GATEWAY_BIN   the gateway binary (else target/release/agui-gateway, else
#                      target/debug/agui-gateway, else agui-gateway on PATH)
#   GATEWAY_LISTEN     where the gateway listens (127.0.0.1:8080)
#   PORT               the app's port (3000); HOST its address (127.0.0.1)
#   AGUI_APP_TOKEN     a gateway app token the backend sends; unset: the gateway's local
#                      development mode (anonymous callers from loopback), see README.md
#   AGUI_GATEWAY_URL   use a gateway that is already running instead of starting one
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

command -v node >/dev/null || { echo "the chat app needs Node.js 20 or later" >&2; exit 1; }

pids=()
stop() {
  trap - INT TERM EXIT
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [[ -z "${AGUI_GATEWAY_URL:-}" ]]; then
  bin="${AGUI_GATEWAY_BIN:-}"
  if [[ -z "$bin" ]]; then
    for candidate in "$repo/target/release/agui-gateway" "$repo/target/debug/agui-gateway" "$(command -v agui-gateway || true)"; do
      if [[ -n "$candidate" && -x "$candidate" ]]; then bin="$candidate"; break; fi
    done
  fi
  if [[ -z "$bin" || ! -x "$bin" ]]; then
    echo "no agui-gateway binary: build one (cargo build --release) or set AGUI_GATEWAY_BIN" >&2
    exit 1
  fi
  listen="${GATEWAY_LISTEN:-127.0.0.1:8080}"
  export AGUI_GATEWAY_URL="http://$listen"
  echo "starting $bin on $listen"
  # The database lives beside the example (git ignores *.db), so conversations survive a restart.
  # The gateway refuses AGUI_GATEWAY_* variables that are not its settings: these two are ours.
  env -u AGUI_GATEWAY_BIN -u AGUI_GATEWAY_URL "$bin" serve --config "$here/gateway.toml" --listen "$listen" --database "sqlite://$here/chat-app.db" &
  pids+=($!)

  # The backend is only useful once the gateway answers; give it a few seconds to migrate.
  for _ in $(seq 1 100); do
    if node -e 'fetch(process.argv[1]).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))' "$AGUI_GATEWAY_URL/readyz"; then
      break
    fi
    if ! kill -0 "${pids[0]}" 2>/dev/null; then
      echo "the gateway exited; see its log above" >&2
      exit 1
    fi
    sleep 0.1
  done
fi

node "$here/server.mjs" &
pids+=($!)
echo "chat app: http://${HOST:-127.0.0.1}:${PORT:-3000}  (Ctrl-C stops it)"

# Whichever stops first (or Ctrl-C) ends the example, and the EXIT trap stops the other.
wait -n
