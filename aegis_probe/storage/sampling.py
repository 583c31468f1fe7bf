"""Outcome-aware sampling: every failed run kept whole, successful runs kept at a ratio, never a part of one.

OTel's head samplers decide when a trace starts, before anyone knows how the run went. This
processor wraps the trace store's and each exporter's processor and holds a trace's spans until
its root ends (a run is always its own trace), then passes them all on or drops them all. A run
is kept when its root span says it failed (status ``ERROR``, ``aegis.outcome.success`` false, or a
fault label of an injection), else with probability ``keep_successes``, decided from its trace id
(as ``TraceIdRatioBased`` does), so the store and every exporter keep the same runs.
"""

from __future__ import annotations

import logging
import threading

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import StatusCode

from ..capture import semconv as sc
from ..capture.leanspans import _does_nothing

logger = logging.getLogger("aegis_probe")

#: Unfinished traces held at once; past it the oldest is passed on unsampled (kept, never cut).
MAX_PENDING = 4096
#: Decisions remembered for spans that end after their trace's root.
_DECIDED_MAX = 4096
_ID_MASK = (1 << 64) - 1


def failed(span: ReadableSpan) -> bool:
    """Whether a run's root span says the run failed or was judged bad."""
    attrs = span.attributes or {}
    return (span.status.status_code is StatusCode.ERROR or attrs.get(sc.OUTCOME_SUCCESS) is False
            or bool(attrs.get(sc.LABEL_FAULTS)))


class OutcomeSampling(SpanProcessor):
    """Pass whole traces to ``processor``: failures always, successes at ``keep_successes`` (0..1)."""

    def __init__(self, processor: SpanProcessor, keep_successes: float) -> None:
        self.processor = processor
        if not _does_nothing(processor, "on_start"):
            self.on_start = processor.on_start  # type: ignore[method-assign]
        self.keep_successes = keep_successes
        self._bound = round(keep_successes * (1 << 64))
        self._lock = threading.Lock()
        self._pending: dict[int, list[ReadableSpan]] = {}
        self._decided: dict[int, bool] = {}
        #: Runs dropped as successes (for tests and diagnostics).
        self.dropped_runs = 0

    def keeps(self, trace_id: int, root: ReadableSpan) -> bool:
        """The decision for a trace whose root ``root`` just ended."""
        return failed(root) or (trace_id & _ID_MASK) < self._bound

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None  # the wrapped processor's, when it does something (set in __init__)

    def on_end(self, span: ReadableSpan) -> None:
        trace_id = span.context.trace_id
        parent = span.parent
        evicted: list[ReadableSpan] = []
        with self._lock:
            keep = self._decided.get(trace_id)
            if keep is None and not (parent is None or parent.is_remote):  # the trace's root is still open
                self._pending.setdefault(trace_id, []).append(span)
                if len(self._pending) > MAX_PENDING:
                    evicted = self._pending.pop(next(iter(self._pending)))
                    logger.warning("aegis-probe: more than %d unfinished runs held for sampling; the oldest "
                                   "is passed on unsampled", MAX_PENDING)
                if not evicted:
                    return
                spans = evicted
                keep = True
            else:
                spans = self._pending.pop(trace_id, [])
                spans.append(span)
                if keep is None:
                    keep = self._decide(trace_id, span)
        if keep:
            for held in spans:
                self.processor.on_end(held)

    def _decide(self, trace_id: int, root: ReadableSpan) -> bool:
        try:
            keep = self.keeps(trace_id, root)
        except Exception:  # never lose a run to a bug here
            logger.warning("aegis-probe: outcome sampling failed; the run is kept", exc_info=True)
            keep = True
        self._decided[trace_id] = keep
        if len(self._decided) > _DECIDED_MAX:
            del self._decided[next(iter(self._decided))]
        if not keep:
            self.dropped_runs += 1
        return keep

    def _release_pending(self) -> None:
        """Pass on the spans of unfinished traces (their outcome is not known: kept)."""
        with self._lock:
            pending, self._pending = self._pending, {}
        for spans in pending.values():
            for span in spans:
                self.processor.on_end(span)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Flush what was passed on; unfinished runs stay held until their root ends."""
        return bool(self.processor.force_flush(timeout_millis))

    def shutdown(self) -> None:
        self._release_pending()
        self.processor.shutdown()


def sampled(processor: SpanProcessor, keep_successes: float) -> SpanProcessor:
    """``processor`` behind :class:`OutcomeSampling`, or as it is when every run is kept."""
    return processor if keep_successes >= 1 else OutcomeSampling(processor, keep_successes)
