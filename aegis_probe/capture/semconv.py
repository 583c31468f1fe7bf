"""Span names and attribute keys: OpenTelemetry GenAI conventions plus the ``aegis.*`` namespace.

GenAI names come from the ``opentelemetry-semantic-conventions`` package (the conventions are
"Development" status; ``gen_ai.provider.name`` rather than the deprecated ``gen_ai.system``).
Every ``aegis.*`` name is aegis-probe's own and listed in docs/otel.md.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Mapping
from urllib.parse import urlsplit

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as _ga
from opentelemetry.semconv.attributes import error_attributes as _err
from opentelemetry.semconv.attributes import server_attributes as _server
from opentelemetry.semconv.schemas import Schemas as _Schemas

#: The tracer's schema URL: the newest semantic-conventions schema the installed package knows.
SCHEMA_URL: str = list(_Schemas)[-1].value

# Operations (gen_ai.operation.name) and the span names built from them.
OP_WORKFLOW = _ga.GenAiOperationNameValues.INVOKE_WORKFLOW.value
OP_AGENT = _ga.GenAiOperationNameValues.INVOKE_AGENT.value
OP_CHAT = _ga.GenAiOperationNameValues.CHAT.value
OP_TOOL = _ga.GenAiOperationNameValues.EXECUTE_TOOL.value

# GenAI attributes.
OPERATION = _ga.GEN_AI_OPERATION_NAME
PROVIDER = _ga.GEN_AI_PROVIDER_NAME
CONVERSATION_ID = _ga.GEN_AI_CONVERSATION_ID
WORKFLOW_NAME = _ga.GEN_AI_WORKFLOW_NAME
AGENT_ID = _ga.GEN_AI_AGENT_ID
AGENT_NAME = _ga.GEN_AI_AGENT_NAME
AGENT_DESCRIPTION = _ga.GEN_AI_AGENT_DESCRIPTION
REQUEST_MODEL = _ga.GEN_AI_REQUEST_MODEL
REQUEST_TEMPERATURE = _ga.GEN_AI_REQUEST_TEMPERATURE
REQUEST_TOP_P = _ga.GEN_AI_REQUEST_TOP_P
REQUEST_TOP_K = _ga.GEN_AI_REQUEST_TOP_K
REQUEST_MAX_TOKENS = _ga.GEN_AI_REQUEST_MAX_TOKENS
REQUEST_SEED = _ga.GEN_AI_REQUEST_SEED
REQUEST_FREQUENCY_PENALTY = _ga.GEN_AI_REQUEST_FREQUENCY_PENALTY
REQUEST_PRESENCE_PENALTY = _ga.GEN_AI_REQUEST_PRESENCE_PENALTY
REQUEST_STOP_SEQUENCES = _ga.GEN_AI_REQUEST_STOP_SEQUENCES
REQUEST_CHOICE_COUNT = _ga.GEN_AI_REQUEST_CHOICE_COUNT
RESPONSE_ID = _ga.GEN_AI_RESPONSE_ID
RESPONSE_MODEL = _ga.GEN_AI_RESPONSE_MODEL
RESPONSE_FINISH_REASONS = _ga.GEN_AI_RESPONSE_FINISH_REASONS
USAGE_INPUT_TOKENS = _ga.GEN_AI_USAGE_INPUT_TOKENS
USAGE_OUTPUT_TOKENS = _ga.GEN_AI_USAGE_OUTPUT_TOKENS
USAGE_CACHE_READ_INPUT_TOKENS = _ga.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS
USAGE_CACHE_CREATION_INPUT_TOKENS = _ga.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS
USAGE_REASONING_OUTPUT_TOKENS = _ga.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS
TOKEN_TYPE = _ga.GEN_AI_TOKEN_TYPE
TOOL_NAME = _ga.GEN_AI_TOOL_NAME
TOOL_TYPE = _ga.GEN_AI_TOOL_TYPE
TOOL_DESCRIPTION = _ga.GEN_AI_TOOL_DESCRIPTION
TOOL_CALL_ID = _ga.GEN_AI_TOOL_CALL_ID
TOOL_CALL_ARGUMENTS = _ga.GEN_AI_TOOL_CALL_ARGUMENTS
TOOL_CALL_RESULT = _ga.GEN_AI_TOOL_CALL_RESULT
INPUT_MESSAGES = _ga.GEN_AI_INPUT_MESSAGES
OUTPUT_MESSAGES = _ga.GEN_AI_OUTPUT_MESSAGES
ERROR_TYPE = _err.ERROR_TYPE
SERVER_ADDRESS = _server.SERVER_ADDRESS
SERVER_PORT = _server.SERVER_PORT

#: ``gen_ai.request.*`` attribute of each model parameter name adapters report (OpenAI's names).
REQUEST_PARAMS = {
    "temperature": REQUEST_TEMPERATURE,
    "top_p": REQUEST_TOP_P,
    "top_k": REQUEST_TOP_K,
    "max_tokens": REQUEST_MAX_TOKENS,
    "max_completion_tokens": REQUEST_MAX_TOKENS,
    "seed": REQUEST_SEED,
    "frequency_penalty": REQUEST_FREQUENCY_PENALTY,
    "presence_penalty": REQUEST_PRESENCE_PENALTY,
    "stop": REQUEST_STOP_SEQUENCES,
    "n": REQUEST_CHOICE_COUNT,
}

# aegis.* attributes.
FRAMEWORK = "aegis.framework"
RUN_ID = "aegis.run.id"
TASK = "aegis.task"
STEP_INDEX = "aegis.step.index"
AGENT_ROLE = "aegis.agent.role"
AGENT_CALL_INDEX = "aegis.agent.call_index"
AGENT_PATH = "aegis.agent.path"  # the teams from the run's app down to the agent
# The agent graph backends draw (OpenInference's names): a step's agent, and the team (else the run) it acts in.
GRAPH_NODE_ID = "graph.node.id"
GRAPH_NODE_PARENT_ID = "graph.node.parent_id"
# A step that takes over from another agent (experimental: the GenAI hand-over proposal's names).
HANDOFF_SOURCE = "gen_ai.agent.handoff.source.name"
HANDOFF_TARGET = "gen_ai.agent.handoff.target.name"
STEP_NEXT_SPEAKER = "aegis.step.next_speaker"  # a manager step's choice of the next speaker
LLM_PURPOSE = "aegis.llm.purpose"  # why a model call outside any step was made
PURPOSE_SPEAKER_SELECTION = "speaker_selection"
OUTCOME_SUCCESS = "aegis.outcome.success"
OUTCOME_ANSWER = "aegis.outcome.answer"
OUTCOME_EXPECTED = "aegis.outcome.expected"
LABEL_FAULTS = "aegis.label.faults"
LABEL_SOURCE = "aegis.label.source"
#: USD of a model call (``chat`` span), of a step's calls and of a run's (root span); see aegis_probe.pricing.
COST_USD = "aegis.cost.usd"
#: ``aegis.labels.<source>``: the faults a later source (blame, ...) labelled, next to the run's own label.
LABELS_PREFIX = "aegis.labels."

# Events.
EVENT_INJECTION = "aegis.injection"

# A trained attributor's verdict: ``aegis.attribution.<field>`` on the root span, and an event of
# that name on the blamed step's span.
ATTRIBUTION = "aegis.attribution"
EVENT_ATTRIBUTION = "aegis.attribution"

# Replay and blame.
REPLAY_OF = "aegis.replay.of"
REPLAY_UNTIL_STEP = "aegis.replay.until_step"
EVENT_BLAME = "aegis.blame"


def span_name(operation: str, target: str | None) -> str:
    """``{operation} {target}`` as the conventions name spans, or the bare operation."""
    return f"{operation} {target}" if target else operation


# -- values derived from a model client -------------------------------------------------------------
_P = _ga.GenAiProviderNameValues
#: Host suffixes of well-known providers' endpoints, most specific first.
_PROVIDER_HOSTS = (
    ("openai.azure.com", _P.AZURE_AI_OPENAI.value),
    ("services.ai.azure.com", _P.AZURE_AI_INFERENCE.value),
    ("models.inference.ai.azure.com", _P.AZURE_AI_INFERENCE.value),
    ("api.openai.com", _P.OPENAI.value),
    ("api.anthropic.com", _P.ANTHROPIC.value),
    ("api.deepseek.com", _P.DEEPSEEK.value),
    ("api.groq.com", _P.GROQ.value),
    ("api.mistral.ai", _P.MISTRAL_AI.value),
    ("api.x.ai", _P.X_AI.value),
    ("api.perplexity.ai", _P.PERPLEXITY.value),
    ("api.cohere.com", _P.COHERE.value),
    ("api.cohere.ai", _P.COHERE.value),
    ("generativelanguage.googleapis.com", _P.GCP_GEMINI.value),
    ("aiplatform.googleapis.com", _P.GCP_VERTEX_AI.value),
    ("amazonaws.com", _P.AWS_BEDROCK.value),
    ("cloud.ibm.com", _P.IBM_WATSONX_AI.value),
)


def provider_name(base_url: Any, default: str) -> str:
    """``gen_ai.provider.name`` of a client whose endpoint is ``base_url``: the well-known provider
    serving that host, else ``default`` (the API the client speaks, e.g. ``openai`` for any
    OpenAI-compatible server)."""
    return _provider(_endpoint(str(base_url))[0] if base_url else "", default)


@lru_cache(maxsize=256)
def _provider(host: str, default: str) -> str:
    return next((name for suffix, name in _PROVIDER_HOSTS if host == suffix or host.endswith("." + suffix)), default)


def server_attributes(base_url: Any) -> dict[str, Any]:
    """``server.address`` and ``server.port`` of an endpoint URL (the scheme's port when none is given)."""
    if not base_url:
        return {}
    host, port = _endpoint(str(base_url))
    if not host:
        return {}
    return {SERVER_ADDRESS: host, **({SERVER_PORT: port} if port else {})}


@lru_cache(maxsize=256)
def _endpoint(base_url: str) -> tuple[str, int | None]:
    """(host, port) of an endpoint URL, parsed once per URL: every model call asks."""
    parts = urlsplit(base_url)
    try:
        port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
    except ValueError:  # a malformed port
        port = None
    return parts.hostname or "", port


def request_attributes(params: Mapping[str, Any]) -> dict[str, Any]:
    """``gen_ai.request.*`` attributes of model parameters in OpenAI's names (unknown ones and None skipped)."""
    attrs: dict[str, Any] = {}
    for name, value in params.items():
        key = REQUEST_PARAMS.get(name)
        if key is None or value is None:
            continue
        if key == REQUEST_STOP_SEQUENCES:
            value = [value] if isinstance(value, str) else [str(v) for v in value]
        elif not isinstance(value, (bool, int, float, str)):
            continue
        attrs[key] = value
    return attrs
