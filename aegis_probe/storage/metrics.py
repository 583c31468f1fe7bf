"""GenAI client metrics, derived from aegis-probe's own spans as they end.

``gen_ai.client.operation.duration`` (s) and ``gen_ai.client.token.usage`` (tokens, one point per
token type) for every ``chat`` span, with the attributes the GenAI conventions list for them;
``aegis.client.cost`` (USD) adds up the priced ones; ``aegis.agent.steps`` counts agent steps per agent. A span processor on the tracer provider
records them, so the adapters need no metric code; spans a sampler drops are not counted.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from opentelemetry.context import Context
from opentelemetry.metrics import MeterProvider
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.semconv._incubating.metrics.gen_ai_metrics import (
    GEN_AI_CLIENT_OPERATION_DURATION,
    GEN_AI_CLIENT_TOKEN_USAGE,
)

from ..capture import semconv as sc

#: The bucket boundaries the GenAI conventions advise.
DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
TOKEN_BUCKETS = [4.0 ** i for i in range(14)]
#: Attributes of a chat span that the metrics carry.
_METRIC_ATTRIBUTES = (sc.OPERATION, sc.PROVIDER, sc.REQUEST_MODEL, sc.RESPONSE_MODEL, sc.SERVER_ADDRESS,
                      sc.SERVER_PORT, sc.ERROR_TYPE)
_TOKENS = ((sc.USAGE_INPUT_TOKENS, "input"), (sc.USAGE_OUTPUT_TOKENS, "output"))
STEPS = "aegis.agent.steps"
COST = "aegis.client.cost"

_attached: "weakref.WeakKeyDictionary[Any, set[int]]" = weakref.WeakKeyDictionary()
#: Span ids of ``chat`` spans whose duration and tokens another instrumentation records (capture.coexist).
METERED_ELSEWHERE: set[int] = set()
_lock = threading.Lock()


class MetricsSpanProcessor(SpanProcessor):
    """Records the GenAI metrics of aegis-probe's spans when they end."""

    def __init__(self, meter_provider: MeterProvider, version: str) -> None:
        meter = meter_provider.get_meter("aegis_probe", version)
        self.duration = meter.create_histogram(
            GEN_AI_CLIENT_OPERATION_DURATION, unit="s", description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS)
        self.tokens = meter.create_histogram(
            GEN_AI_CLIENT_TOKEN_USAGE, unit="{token}", description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS)
        self.steps = meter.create_counter(STEPS, unit="{step}", description="Agent steps, per agent.")
        self.cost = meter.create_counter(COST, unit="USD", description="Cost of the model calls priced (aegis.cost.usd).")

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        scope = span.instrumentation_scope
        if scope is None or scope.name != "aegis_probe" or not span.attributes:
            return
        attrs = span.attributes
        op = attrs.get(sc.OPERATION)
        if op == sc.OP_AGENT and sc.STEP_INDEX in attrs:
            self.steps.add(1, {sc.AGENT_NAME: attrs.get(sc.AGENT_NAME, ""), sc.FRAMEWORK: attrs.get(sc.FRAMEWORK, "")})
            return
        if op != sc.OP_CHAT or span.end_time is None or span.start_time is None:
            return
        labels = {key: attrs[key] for key in _METRIC_ATTRIBUTES if key in attrs}
        try:
            METERED_ELSEWHERE.remove(span.context.span_id)  # openai-v2 records this call's (capture.coexist)
        except KeyError:
            self.duration.record((span.end_time - span.start_time) / 1e9, labels)
            for key, kind in _TOKENS:
                if key in attrs:
                    self.tokens.record(attrs[key], {**labels, sc.TOKEN_TYPE: kind})  # type: ignore[arg-type]
        usd = attrs.get(sc.COST_USD)
        if isinstance(usd, float):
            self.cost.add(usd, labels)

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def leave_metrics(tracer_provider: Any, span_id: int) -> None:
    """Record no duration or tokens for the ``chat`` span ``span_id``: another instrumentation does."""
    if _attached.get(tracer_provider):  # a metrics processor takes it off the set when the span ends
        METERED_ELSEWHERE.add(span_id)


def add_metrics(tracer_provider: Any, meter_provider: MeterProvider, version: str) -> None:
    """Record GenAI metrics of ``tracer_provider``'s aegis spans into ``meter_provider`` (once per pair)."""
    if not hasattr(tracer_provider, "add_span_processor"):
        return  # an API-only provider: no spans end in this process
    with _lock:
        seen = _attached.setdefault(tracer_provider, set())
        if id(meter_provider) in seen:
            return
        seen.add(id(meter_provider))
    tracer_provider.add_span_processor(MetricsSpanProcessor(meter_provider, version))
