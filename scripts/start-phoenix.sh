#!/usr/bin/env bash
# Arize Phoenix, a real OTLP receiver for the OTLP round-trip tests (tests/test_otlp.py).
# Phoenix conflicts with the project's pins, so it lives in its own venv: .venv-phoenix.
#
#   scripts/start-phoenix.sh --install-only   create/refresh .venv-phoenix (about 850 MB, ~65 s), exit
#   scripts/start-phoenix.sh                  install if needed, then serve in the foreground:
#                                             UI + OTLP/HTTP on 127.0.0.1:6006 (/v1/traces), gRPC on 4317
#
# The tests start their own Phoenix (free ports, temp dir) from .venv-phoenix/bin/phoenix; only
# the install step is needed for them. Override with PHOENIX_PORT, PHOENIX_GRPC_PORT, PYTHON.
set -euo pipefail
cd "$(dirname "$0")/.."
REQ=requirements/phoenix.txt
PHOENIX_VERSION=$(sed -n 's/^arize-phoenix==//p' "$REQ")
VENV=.venv-phoenix
PY=${PYTHON:-python3}

if [[ ! -x "$VENV/bin/phoenix" ]] || ! "$VENV/bin/python" -c \
    "import importlib.metadata as m, sys; sys.exit(m.version('arize-phoenix') != '$PHOENIX_VERSION')"; then
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -r "$REQ"
fi
[[ "${1:-}" == "--install-only" ]] && exit 0

WORKDIR=${PHOENIX_WORKING_DIR:-$(mktemp -d -t phoenix.XXXXXX)}
echo "Phoenix $PHOENIX_VERSION: http://127.0.0.1:${PHOENIX_PORT:-6006} (OTLP/HTTP /v1/traces), gRPC :${PHOENIX_GRPC_PORT:-4317}, data in $WORKDIR" >&2
export PHOENIX_HOST=127.0.0.1 PHOENIX_PORT=${PHOENIX_PORT:-6006} PHOENIX_GRPC_PORT=${PHOENIX_GRPC_PORT:-4317}
export PHOENIX_WORKING_DIR="$WORKDIR" PHOENIX_TELEMETRY_ENABLED=false
exec "$VENV/bin/phoenix" serve
