"""Message content as GenAI events, through the OpenTelemetry logs API.

With ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` set to ``EVENT_ONLY`` or
``SPAN_AND_EVENT`` (the modes of opentelemetry-util-genai's ``ContentCapturingMode``), each model
call also emits a ``gen_ai.client.inference.operation.details`` event, as util-genai does: the call's
GenAI attributes (operation, provider, models, usage, finish reasons, server) with its input and
output messages as structured values, in the ``chat`` span's context. It goes to the
``logger_provider`` given to ``instrument()``, else the global one. Secrets are redacted as on spans.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Sequence

from opentelemetry._logs import Logger, LoggerProvider, LogRecord, get_logger
from opentelemetry.trace import set_span_in_context

from . import semconv as sc
from .messages import ChatMessage, encode_messages

if TYPE_CHECKING:
    from .interception import LLMResponse
    from .probe import Probe
    from .spans import LLMScope

#: The event util-genai emits per model call (semantic conventions' GenAI events).
INFERENCE_DETAILS = "gen_ai.client.inference.operation.details"
_CONTENT_KEYS = frozenset({sc.INPUT_MESSAGES, sc.OUTPUT_MESSAGES})
_EVENT_PREFIXES = ("gen_ai.", "server.", "error.")


def event_logger(logger_provider: LoggerProvider | None, version: str) -> Logger:
    """aegis-probe's logger on ``logger_provider`` (None: the global one)."""
    return get_logger("aegis_probe", version, logger_provider=logger_provider, schema_url=sc.SCHEMA_URL)


def structured(messages: Sequence[ChatMessage], probe: "Probe") -> list[Any]:
    """``messages`` in the GenAI message structure (as on spans, redacted), as a value, not JSON text."""
    return json.loads(encode_messages(messages, probe.redact))  # type: ignore[no-any-return]


def emit_inference_details(probe: "Probe", scope: "LLMScope", messages: Sequence[ChatMessage],
                           response: "LLMResponse") -> None:
    """Emit the ``gen_ai.client.inference.operation.details`` event of the call ``scope`` traced."""
    if probe.events is None:
        return
    span_attrs = getattr(scope.span, "attributes", None) or {}
    attrs: dict[str, Any] = {k: v for k, v in span_attrs.items()
                             if k.startswith(_EVENT_PREFIXES) and k not in _CONTENT_KEYS}
    attrs.setdefault(sc.OPERATION, sc.OP_CHAT)
    output = dict(response.as_message())
    if response.finish_reason:
        output["finish_reason"] = response.finish_reason
    attrs[sc.INPUT_MESSAGES] = structured(messages, probe)
    attrs[sc.OUTPUT_MESSAGES] = structured([output], probe)
    probe.events.emit(LogRecord(event_name=INFERENCE_DETAILS, attributes=attrs,
                                context=set_span_in_context(scope.span)))
