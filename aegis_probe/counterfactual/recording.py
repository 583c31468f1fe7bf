"""The recording inside every trace: each LLM call's request and response, keyed by agent.

With content capture on, every ``chat`` span already holds what replay needs: the calling agent
(``gen_ai.agent.name``), that agent's call index in the run (``aegis.agent.call_index``), the
request messages and the response (text, tool calls, usage, finish reason). Keys are
(agent, call index) rather than a global order, because concurrent agents interleave differently
from run to run. Calls a team's manager makes outside any step (a selector choosing the next
speaker) use the manager's name; other calls outside any step the agent key ``""``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..capture import semconv as sc
from ..errors import AegisProbeError
from ..capture.interception import LLMResponse
from ..storage.otlp_json import SpanRecord

Key = tuple[str, int]


@dataclass(frozen=True)
class RecordedCall:
    """One recorded model call."""

    agent: str
    call_index: int
    step_index: int | None
    request: str  # gen_ai.input.messages JSON, as captured
    response: LLMResponse
    start_ns: int = 0  # when the call was made and answered, as recorded
    end_ns: int = 0
    #: The call got no answer (the client or the endpoint failed it, or the run was cancelled in
    #: it): its error as recorded; ``response`` is then empty.
    failure: str | None = None


class RecordingError(AegisProbeError, ValueError):
    """The trace cannot be replayed (no content captured, or no LLM calls)."""


def response_from_span(span: SpanRecord) -> LLMResponse:
    """The neutral response a ``chat`` span recorded."""
    raw = span.attributes.get(sc.OUTPUT_MESSAGES)
    content: list[str] = []
    refusal: list[str] = []
    tool_calls: list[dict] = []
    finish = None
    for msg in json.loads(raw) if raw else []:
        finish = msg.get("finish_reason", finish)
        for part in msg.get("parts", []):
            if part.get("type") == "text":  # a refusal is a text part marked as one: given back as a refusal
                (refusal if part.get("refusal") is True else content).append(part.get("content", ""))
            elif part.get("type") == "tool_call":
                tool_calls.append({"id": part.get("id"), "name": part.get("name"), "arguments": part.get("arguments")})
    return LLMResponse(
        content="".join(content) if content else None,
        refusal="".join(refusal) if refusal else None,
        tool_calls=tool_calls,
        input_tokens=span.attributes.get(sc.USAGE_INPUT_TOKENS),
        output_tokens=span.attributes.get(sc.USAGE_OUTPUT_TOKENS),
        cache_read_input_tokens=span.attributes.get(sc.USAGE_CACHE_READ_INPUT_TOKENS),
        cache_creation_input_tokens=span.attributes.get(sc.USAGE_CACHE_CREATION_INPUT_TOKENS),
        reasoning_output_tokens=span.attributes.get(sc.USAGE_REASONING_OUTPUT_TOKENS),
        model=span.attributes.get(sc.RESPONSE_MODEL),
        finish_reason=finish,
    )


def load_recording(spans: list[SpanRecord]) -> dict[Key, RecordedCall]:
    """All recorded model calls of one trace."""
    by_id = {s.span_id: s for s in spans}

    def step_of(span: SpanRecord) -> int | None:
        parent = span.parent_span_id
        for _ in range(len(by_id)):  # as many hops as spans: the parents form a cycle, no step
            if parent not in by_id:
                return None
            attrs = by_id[parent].attributes
            if sc.STEP_INDEX in attrs:
                return int(attrs[sc.STEP_INDEX])
            parent = by_id[parent].parent_span_id
        return None

    calls: dict[Key, RecordedCall] = {}
    for span in spans:
        attrs = span.attributes
        if attrs.get(sc.OPERATION) != sc.OP_CHAT or sc.AGENT_CALL_INDEX not in attrs:
            continue
        failure = None
        if sc.OUTPUT_MESSAGES not in attrs and sc.INPUT_MESSAGES in attrs and span.status == "ERROR":
            failure = span.status_message or str(attrs.get(sc.ERROR_TYPE) or "the call failed")  # no answer to record
        elif sc.OUTPUT_MESSAGES not in attrs:
            raise RecordingError(
                f"trace {span.trace_id}: LLM call {span.span_id} has no captured content; "
                "replay needs runs recorded with capture_content on"
            )
        try:
            response = LLMResponse() if failure is not None else response_from_span(span)
        except (ValueError, AttributeError) as exc:  # cut by OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT, or not aegis's messages
            raise RecordingError(f"trace {span.trace_id}: LLM call {span.span_id}: its recorded response is not "
                                 f"readable messages JSON ({exc}); was it cut by OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT?") from exc
        request = attrs.get(sc.INPUT_MESSAGES, "")
        index = attrs[sc.AGENT_CALL_INDEX]
        index = int(index) if isinstance(index, str) and index.isdigit() else index
        where = f"trace {span.trace_id}: LLM call {span.span_id}"  # not as aegis writes it: no replay could match it
        if not isinstance(request, str):
            raise RecordingError(f"{where}: its recorded request is {request!r}, not messages JSON text"[:500])
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise RecordingError(f"{where}: its {sc.AGENT_CALL_INDEX} is {index!r}, not a call number"[:500])
        key = (str(attrs.get(sc.AGENT_NAME, "")), index)
        calls[key] = RecordedCall(key[0], key[1], step_of(span), request, response, span.start_ns, span.end_ns, failure)
    if not calls:
        raise RecordingError("the trace holds no recorded LLM calls")
    return calls
