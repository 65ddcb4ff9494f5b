#!/usr/bin/env bash
# Installs the benchmark peers (pinned): the AG-UI Python stack into bench/peers/.venv and
# CopilotKit's runtime into bench/peers/node_modules. Idempotent; needs python3 (with venv),
# node and npm, and access to PyPI and the npm registry.
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
COPILOTKIT_TELEMETRY_DISABLED=true npm ci --no-audit --no-fund --loglevel=error
echo "peers installed: $(.venv/bin/python -c 'import importlib.metadata as m; print("ag-ui-protocol", m.version("ag-ui-protocol"))'), $(node -p 'require("./node_modules/@copilotkit/runtime/package.json").version' | sed 's/^/@copilotkit\/runtime /')"
