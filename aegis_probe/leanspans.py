"""The tracer provider aegis-probe creates for itself: the SDK's own spans, built with less work.

Used only where aegis-probe owns the provider (``instrument(app)`` with no provider of the app's,
and injection campaigns); a provider the app passes or sets globally is used as it is.

Its spans are SDK spans (``opentelemetry.sdk.trace.Span``; every processor and exporter reads them
as usual) that differ in how they are made, never in what they hold:

- a span is assembled field by field instead of through three constructors;
- an attribute with a non-empty ``str`` key and a ``str``/``bool``/``int``/``float`` value, on a
  provider with no value-length limit and with room left, is stored without the SDK's per-value
  validation (which would return it unchanged); anything else goes the SDK's way;
- processors get the span itself at ``on_end`` instead of a read-only copy of it (an ended span
  refuses changes, as the copy would).

The SDK's layout is checked once per tracer against a span built by the SDK's own constructor: an
SDK version whose spans hold other fields gets the SDK's tracer unchanged (slower, never wrong).
"""

from __future__ import annotations

import logging
import threading
from time import time_ns
from typing import Any, Mapping, Sequence

from opentelemetry import context as context_api
from opentelemetry import trace as trace_api
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk import trace as sdk_trace
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, DEFAULT_ON, Decision
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import SpanKind
from opentelemetry.trace.status import Status, StatusCode
from opentelemetry.util import types

logger = logging.getLogger("aegis_probe")

_PLAIN = frozenset((str, bool, int, float))
_SCALAR = (str, int, float, bytes)  # and their subclasses (enums, bool): the SDK keeps these as they are
_UNSET = Status(StatusCode.UNSET)
_SAMPLED = trace_api.TraceFlags(trace_api.TraceFlags.SAMPLED)
_NOT_SAMPLED = trace_api.TraceFlags(trace_api.TraceFlags.DEFAULT)
#: The key ``trace.set_span_in_context`` sets (read through the API, not imported).
(_SPAN_KEY,) = trace_api.set_span_in_context(trace_api.INVALID_SPAN, context_api.Context()).keys()


class LeanAttributes(BoundedAttributes):
    """``BoundedAttributes`` storing plain entries directly: same values, same order, same limits."""

    def __setitem__(self, key: str, value: types.AnyValue) -> None:
        entries = self._dict
        if ((type(value) in _PLAIN or isinstance(value, _SCALAR)) and type(key) is str and key and not self._immutable
                and self.max_value_len is None
                and (self.maxlen is None or len(entries) < self.maxlen or key in entries)):
            entries.pop(key, None)  # a key set again moves to the end, as in the SDK
            entries[key] = value
        else:
            super().__setitem__(key, value)

    def _set_items(self, attributes: Mapping[str, types.AnyValue]) -> None:
        plain = True
        for key, value in attributes.items():
            if type(key) is not str or not key:  # the SDK renames or drops such keys here
                super()._set_items(attributes)
                return
            plain = plain and type(value) in _PLAIN
        entries = self._dict
        if (plain and not entries and not self._immutable and self.max_value_len is None
                and (self.maxlen is None or len(attributes) <= self.maxlen)):
            entries.update(attributes)  # a new span's attributes: all fit, in their order
        else:
            for key, value in attributes.items():  # with str keys, item by item is what the SDK does
                self[key] = value


class LeanSpan(sdk_trace._Span):  # pylint: disable=protected-access
    """An SDK span handed to processors as itself when it ends (no read-only copy)."""

    def _readable_span(self) -> sdk_trace.ReadableSpan:
        return self


class LeanTracer(sdk_trace.Tracer):
    """An SDK tracer whose recording spans are :class:`LeanSpan`\\ s (same sampling, ids, limits)."""

    _lean_fixed: dict[str, Any]

    def start_span(  # type: ignore[override]
        self,
        name: str,
        context: context_api.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[trace_api.Link] | None = (),
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace_api.Span:
        links = links or ()
        # trace_api.get_current_span(context), without its two Python calls
        current = (context_api.get_current() if context is None else context).get(_SPAN_KEY)
        parent: trace_api.SpanContext | None = (
            current if isinstance(current, trace_api.Span) else trace_api.INVALID_SPAN).get_span_context()
        if parent is not None and not isinstance(parent, trace_api.SpanContext):
            raise TypeError("parent_span_context must be a SpanContext or None.")
        if not self._is_enabled():
            return trace_api.NonRecordingSpan(context=parent)  # type: ignore[arg-type]  # None as in the SDK
        if parent is None or not parent.is_valid:
            parent = None
            trace_id = self.id_generator.generate_trace_id()
            random_id = self.id_generator.is_trace_id_random()
        else:
            trace_id = parent.trace_id
            random_id = parent.trace_flags.random_trace_id
        if self.sampler is ALWAYS_ON or (self.sampler is DEFAULT_ON and (parent is None or parent.trace_flags.sampled)):
            # what these two samplers (the default one included) decide, without calling them
            decision, trace_state = Decision.RECORD_AND_SAMPLE, parent.trace_state if parent else None
        else:
            sampled = self.sampler.should_sample(context, trace_id, name, kind, attributes, links)
            decision, trace_state, attributes = sampled.decision, sampled.trace_state, sampled.attributes
        flags = _SAMPLED if decision.is_sampled() else _NOT_SAMPLED
        if random_id:
            flags = trace_api.TraceFlags(flags | trace_api.TraceFlags.RANDOM_TRACE_ID)
        span_context = trace_api.SpanContext(trace_id, self.id_generator.generate_span_id(), is_remote=False,
                                             trace_flags=flags, trace_state=trace_state)
        record_end_metrics = self._tracer_metrics.start_span(parent, decision)
        if not decision.is_recording():
            return trace_api.NonRecordingSpan(context=span_context)
        span = _new_span(self._lean_fixed, name, span_context, parent, kind, attributes, links,
                         record_exception, set_status_on_exception, record_end_metrics)
        span._start_time = start_time if start_time is not None else time_ns()
        self.span_processor.on_start(span, parent_context=context)
        return span


def _new_span(fixed: dict[str, Any], name: str, span_context: trace_api.SpanContext, parent: Any,
              kind: SpanKind, attributes: types.Attributes, links: Sequence[trace_api.Link],
              record_exception: bool, set_status_on_exception: bool, record_end_metrics: Any) -> LeanSpan:
    """A not yet started :class:`LeanSpan` holding what the SDK's constructor would put in it."""
    limits = fixed["_limits"]
    span = object.__new__(LeanSpan)
    fields = span.__dict__
    fields.update(fixed)
    fields["_name"] = name
    fields["_context"] = span_context
    fields["_parent"] = parent
    fields["_kind"] = kind
    fields["_start_time"] = None
    fields["_end_time"] = None
    fields["_status"] = _UNSET
    fields["_record_exception"] = record_exception
    fields["_set_status_on_exception"] = set_status_on_exception
    fields["_record_end_metrics"] = record_end_metrics
    fields["_lock"] = threading.Lock()
    fields["_attributes"] = LeanAttributes(limits.max_span_attributes, attributes, immutable=False,
                                           max_value_len=limits.max_span_attribute_length)
    fields["_events"] = BoundedList(limits.max_events)
    fields["_links"] = span._new_links(links) if links else BoundedList(limits.max_links)
    return span


def _fixed_fields(tracer: sdk_trace.Tracer) -> dict[str, Any] | None:
    """The per-tracer fields of its spans, or None when this SDK's spans hold anything else."""
    try:
        fixed = {"_sampler": tracer.sampler, "_trace_config": None, "_resource": tracer.resource,
                 "_span_processor": tracer.span_processor, "_limits": tracer._span_limits,
                 "_instrumentation_info": tracer.instrumentation_info,
                 "_instrumentation_scope": tracer._instrumentation_scope}
        if not (callable(getattr(tracer, "_is_enabled", None)) and hasattr(tracer, "_tracer_metrics")
                and hasattr(trace_api.TraceFlags, "RANDOM_TRACE_ID")
                and hasattr(tracer.span_processor, "_on_ending")):
            return None
        probe_context = trace_api.SpanContext(1, 1, is_remote=False)
        reference = sdk_trace._Span(  # pylint: disable=protected-access
            "layout", probe_context, sampler=tracer.sampler, resource=tracer.resource,
            attributes={"k": "v"}, span_processor=tracer.span_processor, limits=tracer._span_limits,
            instrumentation_info=tracer.instrumentation_info,
            instrumentation_scope=tracer._instrumentation_scope, record_end_metrics=None)
        lean = _new_span(fixed, "layout", probe_context, None, SpanKind.INTERNAL, {"k": "v"}, (), True, True, None)
        same = (vars(reference).keys() == vars(lean).keys()
                and vars(reference._attributes).keys() == vars(lean._attributes).keys()
                and type(reference._events) is type(lean._events) and type(reference._links) is type(lean._links))
        return fixed if same else None
    except Exception:  # any other SDK layout: the SDK's own spans
        logger.debug("aegis-probe: this OpenTelemetry SDK's span layout is not the one known; using its spans as they are",
                     exc_info=True)
        return None


class LeanTracerProvider(sdk_trace.TracerProvider):
    """An SDK tracer provider whose tracers make :class:`LeanSpan`\\ s where the SDK's layout allows."""

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace_api.Tracer:
        tracer = super().get_tracer(*args, **kwargs)
        if type(tracer) is sdk_trace.Tracer:  # the provider's cached tracer: converted once
            fixed = _fixed_fields(tracer)
            if fixed is not None:
                tracer._lean_fixed = fixed  # type: ignore[attr-defined]
                tracer.__class__ = LeanTracer
        return tracer
