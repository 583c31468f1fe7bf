"""Span names and attribute keys: OpenTelemetry GenAI conventions plus the ``aegis.*`` namespace.

The GenAI conventions are "Development" status; the names here follow the current registry
(``gen_ai.provider.name`` rather than the deprecated ``gen_ai.system``).
"""

from __future__ import annotations

# Operations (gen_ai.operation.name) and the span names built from them.
OP_WORKFLOW = "invoke_workflow"
OP_AGENT = "invoke_agent"
OP_CHAT = "chat"
OP_TOOL = "execute_tool"

# GenAI attributes.
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
AGENT_ID = "gen_ai.agent.id"
AGENT_NAME = "gen_ai.agent.name"
AGENT_DESCRIPTION = "gen_ai.agent.description"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_CALL_RESULT = "gen_ai.tool.call.result"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
ERROR_TYPE = "error.type"

# aegis.* attributes.
FRAMEWORK = "aegis.framework"
RUN_ID = "aegis.run.id"
TASK = "aegis.task"
STEP_INDEX = "aegis.step.index"
AGENT_ROLE = "aegis.agent.role"
AGENT_CALL_INDEX = "aegis.agent.call_index"
OUTCOME_SUCCESS = "aegis.outcome.success"
OUTCOME_ANSWER = "aegis.outcome.answer"
OUTCOME_EXPECTED = "aegis.outcome.expected"
LABEL_FAULTS = "aegis.label.faults"
LABEL_SOURCE = "aegis.label.source"

# Events.
EVENT_INJECTION = "aegis.injection"

# A trained attributor's verdict: ``aegis.attribution.<field>`` on the root span, and an event of
# that name on the blamed step's span.
ATTRIBUTION = "aegis.attribution"
EVENT_ATTRIBUTION = "aegis.attribution"


def span_name(operation: str, target: str | None) -> str:
    """``{operation} {target}`` as the conventions name spans, or the bare operation."""
    return f"{operation} {target}" if target else operation

# Replay and blame.
REPLAY_OF = "aegis.replay.of"
REPLAY_UNTIL_STEP = "aegis.replay.until_step"
EVENT_BLAME = "aegis.blame"
