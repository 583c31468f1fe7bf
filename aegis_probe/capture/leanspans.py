"""The tracer provider aegis-probe creates for itself: the SDK's own spans, built with less work.

Used only where aegis-probe owns the provider (``instrument(app)`` with no provider of the app's,
and injection campaigns); a provider the app passes or sets globally is used as it is.

Its spans are SDK spans (``opentelemetry.sdk.trace.Span``; every processor and exporter reads them
as usual) that differ in how they are made, never in what they hold:

- a span, its span context, attributes and lists are assembled field by field instead of
  through their constructors;
- an attribute with a non-empty ``str`` key and a ``str``/``bool``/``int``/``float`` value (or a
  list or tuple of them, stored as the tuple the SDK makes of it), on a provider with no
  value-length limit and with room left, is stored without the SDK's per-value validation (which
  would return it unchanged); anything else goes the SDK's way;
- processors get the span itself at ``on_end`` instead of a read-only copy of it (an ended span
  refuses changes, as the copy would), and their ``on_start`` / ``_on_ending`` hooks are called
  only where they do something (:class:`LeanSpanProcessors`; an empty hook is skipped).

The SDK's layout is checked once per tracer against a span built by the SDK's own constructor: an
SDK version whose spans hold other fields gets the SDK's tracer unchanged (slower, never wrong).
"""

from __future__ import annotations

import dis
import logging
import random
import threading
from collections import deque
from time import time_ns
from typing import Any, Mapping, Sequence

from opentelemetry import context as context_api
from opentelemetry import trace as trace_api
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk import trace as sdk_trace
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, DEFAULT_ON, Decision
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import SpanKind
from opentelemetry.trace.status import Status, StatusCode
from opentelemetry.util import types

logger = logging.getLogger("aegis_probe")

_PLAIN = frozenset((str, bool, int, float))
_STR = frozenset((str,))
_SEQUENCES = frozenset((list, tuple))
_PLAIN_OR_SEQUENCE = _PLAIN | _SEQUENCES
_PLAIN_OR_TUPLE = _PLAIN | {tuple}
_NOT_PLAIN = object  # a type, so a sequence of other values fails the plain check
_SCALAR = (str, int, float, bytes)  # and their subclasses (enums, bool): the SDK keeps these as they are
_UNSET = Status(StatusCode.UNSET)
#: Trace flags by (sampled, random trace id).
_FLAGS = {(s, r): trace_api.TraceFlags((s and trace_api.TraceFlags.SAMPLED) | (r and trace_api.TraceFlags.RANDOM_TRACE_ID))
          for s in (False, True) for r in (False, True)}
_TRACE_ID_MAX, _SPAN_ID_MAX = 2**128 - 1, 2**64 - 1
#: The key ``trace.set_span_in_context`` sets (read through the API, not imported).
(_SPAN_KEY,) = trace_api.set_span_in_context(trace_api.INVALID_SPAN, context_api.Context()).keys()
_DEFAULT_TRACE_STATE = trace_api.SpanContext(0, 0, False).trace_state
_SDK_LOGGER = sdk_trace.logger
try:  # the SDK's span metrics: off unless enabled (a private module, absent from other SDK versions)
    from opentelemetry.sdk.trace._tracer_metrics import NoOpTracerMetrics, noop
except ImportError:  # pragma: no cover
    NoOpTracerMetrics, noop = None, None  # type: ignore[assignment,misc]
#: The names the SDK's ``_Span.end`` and ``Tracer._is_enabled`` use: what :meth:`LeanSpan.end` and
#: :meth:`LeanTracer.start_span` do in their place (another SDK's: they call the SDK's).
_OWN_END = sdk_trace._Span.end.__code__.co_names == (  # pylint: disable=protected-access
    "_lock", "_start_time", "RuntimeError", "_end_time", "logger", "warning", "time_ns", "_attributes", "_immutable",
    "_record_end_metrics", "_span_processor", "_on_ending", "on_end", "_readable_span")
_OWN_ENABLED = sdk_trace.Tracer._is_enabled.__code__.co_names == ("_tracer_config", "is_enabled")


def _does_nothing(processor: Any, hook: str) -> bool:
    """Whether ``processor``'s ``hook`` is a function of its class whose body is only ``pass`` (or a
    docstring, or ``return None``): the SDK's base processor's ``on_start`` and ``_on_ending``, its
    simple and batch processors', the store's. Calling it can be skipped."""
    if hook in getattr(processor, "__dict__", ()):
        return False
    code = getattr(getattr(type(processor), hook, None), "__code__", None)
    if code is None:
        return False
    ops = [(i.opname, i.argval) for i in dis.get_instructions(code) if i.opname not in ("RESUME", "NOP", "CACHE")]
    return ops in ([("LOAD_CONST", None), ("RETURN_VALUE", None)], [("RETURN_CONST", None)])


class LeanSpanProcessors(sdk_trace.SynchronousMultiSpanProcessor):
    """The SDK's synchronous multi-processor, also keeping the processors whose ``on_start`` and
    ``_on_ending`` do something: lean spans call only those (the others' hooks are empty)."""

    def __init__(self) -> None:
        super().__init__()
        self._starting: tuple[sdk_trace.SpanProcessor, ...] = ()
        self._ending: tuple[sdk_trace.SpanProcessor, ...] = ()

    def add_span_processor(self, span_processor: sdk_trace.SpanProcessor) -> None:
        with self._lock:
            processors = (*self._span_processors, span_processor)
            self._starting = tuple(p for p in processors if not _does_nothing(p, "on_start"))
            self._ending = tuple(p for p in processors if not _does_nothing(p, "_on_ending"))
            self._span_processors = processors


class LeanAttributes(BoundedAttributes):
    """``BoundedAttributes`` storing plain entries directly: same values, same order, same limits."""

    def __setitem__(self, key: str, value: types.AnyValue) -> None:
        entries = self._dict
        if (type(key) is str and key and not self._immutable and self.max_value_len is None
                and (self.maxlen is None or len(entries) < self.maxlen or key in entries)):
            if type(value) in _SEQUENCES and _PLAIN.issuperset(map(type, value)):  # type: ignore[arg-type]
                value = tuple(value)  # type: ignore[arg-type]  # the SDK's cleaning of a list or tuple of plain values
            elif not (type(value) in _PLAIN or isinstance(value, _SCALAR)):
                super().__setitem__(key, value)
                return
            entries.pop(key, None)  # a key set again moves to the end, as in the SDK
            entries[key] = value
        else:
            super().__setitem__(key, value)

    def _set_items(self, attributes: Mapping[str, types.AnyValue]) -> None:
        # the keys' and values' types checked in C (a map over the mapping), not item by item
        if not _STR.issuperset(map(type, attributes)) or "" in attributes:
            super()._set_items(attributes)  # the SDK renames or drops such keys
            return
        entries = self._dict
        kinds, items = set(map(type, attributes.values())), attributes
        if not _PLAIN.issuperset(kinds) and _PLAIN_OR_SEQUENCE.issuperset(kinds):  # e.g. a chat span's finish reasons
            # the SDK's cleaning of a list or tuple of plain values, in one pass (another sequence: item by item)
            items = {k: v if type(v) not in _SEQUENCES else tuple(v) if _PLAIN.issuperset(map(type, v)) else _NOT_PLAIN  # type: ignore[arg-type,misc]
                     for k, v in attributes.items()}
            kinds = set(map(type, items.values()))
        if (not self._immutable and self.max_value_len is None and _PLAIN_OR_TUPLE.issuperset(kinds)
                and (not entries or entries.keys().isdisjoint(attributes))
                and (self.maxlen is None or len(entries) + len(attributes) <= self.maxlen)):
            entries.update(items)  # new keys that all fit: appended in their order, as one by one
        else:
            for key, value in attributes.items():  # with str keys, item by item is what the SDK does
                self[key] = value


class LeanSpan(sdk_trace._Span):  # pylint: disable=protected-access
    """An SDK span handed to processors as itself when it ends (no read-only copy)."""

    def _readable_span(self) -> sdk_trace.ReadableSpan:
        return self

    def end(self, end_time: int | None = None) -> None:
        """The SDK's ``end``, calling only the processors' hooks that do something."""
        if not _OWN_END:
            super().end(end_time)
            return
        with self._lock:
            if self._start_time is None:
                raise RuntimeError("Calling end() on a not started span.")
            if self._end_time is not None:
                _SDK_LOGGER.warning("Calling end() on an ended span.")
                return
            self._end_time = end_time if end_time is not None else time_ns()
            self._attributes._immutable = True  # type: ignore[union-attr]  # pylint: disable=protected-access
        record_end_metrics = self._record_end_metrics
        if record_end_metrics and record_end_metrics is not noop:
            record_end_metrics()
        processor = self._span_processor
        if type(processor) is LeanSpanProcessors:
            for each in processor._ending:  # pylint: disable=protected-access
                each._on_ending(self)  # pylint: disable=protected-access
            for each in processor._span_processors:  # pylint: disable=protected-access
                each.on_end(self)
        else:
            processor._on_ending(self)  # pylint: disable=protected-access
            processor.on_end(self)


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
        # trace_api.get_current_span(context).get_span_context(), without its Python calls for a lean span
        current = (context_api.get_current() if context is None else context).get(_SPAN_KEY)
        if type(current) is LeanSpan:
            parent: trace_api.SpanContext | None = current._context
        else:
            parent = (current if isinstance(current, trace_api.Span) else trace_api.INVALID_SPAN).get_span_context()
            if parent is not None and not isinstance(parent, trace_api.SpanContext):
                raise TypeError("parent_span_context must be a SpanContext or None.")
        if not (self._tracer_config.is_enabled if _OWN_ENABLED else self._is_enabled()):
            return trace_api.NonRecordingSpan(context=parent)  # type: ignore[arg-type]  # None as in the SDK
        # A SpanContext is a tuple: trace id, span id, is remote, trace flags, trace state, is valid.
        if parent is None or not parent[5]:
            parent = None
            trace_id = self.id_generator.generate_trace_id()
            random_id = self.id_generator.is_trace_id_random()
        else:
            trace_id = parent[0]
            random_id = bool(parent[3] & trace_api.TraceFlags.RANDOM_TRACE_ID)
        sampler = self.sampler
        if sampler is ALWAYS_ON or (sampler is DEFAULT_ON and (parent is None or parent[3] & trace_api.TraceFlags.SAMPLED)):
            # what these two samplers (the default one included) decide, without calling them
            decision, sampled, trace_state = Decision.RECORD_AND_SAMPLE, True, parent[4] if parent else None
        else:
            result = sampler.should_sample(context, trace_id, name, kind, attributes, links)
            decision, trace_state, attributes = result.decision, result.trace_state, result.attributes
            sampled = decision.is_sampled()
        generator = self.id_generator
        if type(generator) is RandomIdGenerator:  # its generate_span_id, inline
            span_id = random.getrandbits(64)
            while not span_id:
                span_id = random.getrandbits(64)
        else:
            span_id = generator.generate_span_id()
        # trace_api.SpanContext(trace_id, span_id, False, flags, trace_state): what its __new__ makes
        span_context = tuple.__new__(trace_api.SpanContext, (
            trace_id, span_id, False, _FLAGS[sampled, random_id],
            _DEFAULT_TRACE_STATE if trace_state is None else trace_state,
            0 < trace_id <= _TRACE_ID_MAX and 0 < span_id <= _SPAN_ID_MAX))
        metrics = self._tracer_metrics
        record_end_metrics = noop if type(metrics) is NoOpTracerMetrics else metrics.start_span(parent, decision)
        if decision is not Decision.RECORD_AND_SAMPLE and not decision.is_recording():
            return trace_api.NonRecordingSpan(context=span_context)
        span = _new_span(self._lean_fixed, name, span_context, parent, kind, attributes, links,
                         record_exception, set_status_on_exception, record_end_metrics)
        span._start_time = start_time if start_time is not None else time_ns()
        processor = self.span_processor
        if type(processor) is LeanSpanProcessors:
            for each in processor._starting:  # pylint: disable=protected-access
                each.on_start(span, parent_context=context)
        else:
            processor.on_start(span, parent_context=context)
        return span


def _new_span(fixed: dict[str, Any], name: str, span_context: trace_api.SpanContext, parent: Any,
              kind: SpanKind, attributes: types.Attributes, links: Sequence[trace_api.Link],
              record_exception: bool, set_status_on_exception: bool, record_end_metrics: Any) -> LeanSpan:
    """A not yet started :class:`LeanSpan` holding what the SDK's constructor would put in it (its
    attributes and lists assembled as their constructors would, for plain attributes that fit)."""
    limits = fixed["_limits"]
    maxlen, max_value_len = limits.max_span_attributes, limits.max_span_attribute_length
    if not attributes or (max_value_len is None and (maxlen is None or len(attributes) <= maxlen)
                          and _STR.issuperset(map(type, attributes)) and "" not in attributes
                          and _PLAIN.issuperset(map(type, attributes.values()))):
        # LeanAttributes(maxlen, attributes, immutable=False, max_value_len=max_value_len)
        attrs = object.__new__(LeanAttributes)
        attrs.__dict__ = {"_dict": dict(attributes) if attributes else {}, "maxlen": maxlen, "dropped": 0,
                          "max_value_len": max_value_len, "_lock": threading.Lock(), "_immutable": False}
    else:
        attrs = LeanAttributes(maxlen, attributes, immutable=False, max_value_len=max_value_len)
    # BoundedList(maxlen) for the events and (without links) the links, without its Python constructor
    events = object.__new__(BoundedList)
    events.__dict__ = {"dropped": 0, "_dq": deque(maxlen=limits.max_events), "_lock": threading.Lock()}
    span_links = object.__new__(BoundedList)
    span_links.__dict__ = {"dropped": 0, "_dq": deque(maxlen=limits.max_links), "_lock": threading.Lock()}
    span = object.__new__(LeanSpan)
    span.__dict__ = {**fixed, "_name": name, "_context": span_context, "_parent": parent, "_kind": kind,
                     "_start_time": None, "_end_time": None, "_status": _UNSET, "_record_exception": record_exception,
                     "_set_status_on_exception": set_status_on_exception, "_record_end_metrics": record_end_metrics,
                     "_lock": threading.Lock(), "_attributes": attrs, "_events": events, "_links": span_links}
    if links:
        span._links = span._new_links(links)  # reads the span's limits
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
                and tuple(probe_context) == (1, 1, False, _FLAGS[False, False], _DEFAULT_TRACE_STATE, True)
                and type(reference._attributes) is BoundedAttributes and type(reference._events) is BoundedList
                and type(reference._links) is BoundedList
                and all(vars(sdk).keys() == vars(own).keys() for sdk, own in (
                    (reference._attributes, lean._attributes), (reference._events, lean._events),
                    (reference._links, lean._links))))
        return fixed if same else None
    except Exception:  # any other SDK layout: the SDK's own spans
        logger.debug("aegis-probe: this OpenTelemetry SDK's span layout is not the one known; using its spans as they are",
                     exc_info=True)
        return None


class LeanTracerProvider(sdk_trace.TracerProvider):
    """An SDK tracer provider whose tracers make :class:`LeanSpan`\\ s where the SDK's layout allows
    (its processors held by a :class:`LeanSpanProcessors` unless it is given ``active_span_processor``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if len(args) > 3:  # (sampler, resource, shutdown_on_exit, active_span_processor, ...)
            args = (*args[:3], args[3] or LeanSpanProcessors(), *args[4:])
        elif kwargs.get("active_span_processor") is None:
            kwargs["active_span_processor"] = LeanSpanProcessors()
        super().__init__(*args, **kwargs)

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace_api.Tracer:
        tracer = super().get_tracer(*args, **kwargs)
        if type(tracer) is sdk_trace.Tracer:  # the provider's cached tracer: converted once
            fixed = _fixed_fields(tracer)
            if fixed is not None:
                tracer._lean_fixed = fixed  # type: ignore[attr-defined]
                tracer.__class__ = LeanTracer
        return tracer
