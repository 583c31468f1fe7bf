"""OTLP/JSON text of spans (the format :mod:`.otlp_json` describes and reads).

The store's writer thread encodes every span, so the text is built directly, from the SDK's span
(:func:`sdk_span_json`) or a :class:`SpanRecord` (:func:`encode_span`), rather than through
``json.dumps`` of nested dicts: the same document, byte for byte, as
``json.dumps(obj, separators=(",", ":"), ensure_ascii=False)`` of the OTLP/JSON objects.
Attribute keys are encoded once, and the encoded ``KeyValue`` of a short value (agent names, the
conversation id, operation names, counters: they repeat across a run's spans) is looked up, not
built; long strings go through :mod:`.store_delta` when the caller keeps delta bases.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring as _quote  # what json.dumps(ensure_ascii=False) uses
from typing import Any, Iterable, Mapping, Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from ..capture import semconv as sc
from .otlp_json import SpanRecord, plain_attributes
from .delta import DELTA_PREFIX, MIN_SHARED, Bases, shorten

_STATUS_NUMBER = {"UNSET": 0, "OK": 1, "ERROR": 2}
# Looked up by id: hashing an enum member runs Python code.
_STATUS_TEXT = {id(StatusCode.UNSET): "0", id(StatusCode.OK): "1", id(StatusCode.ERROR): "2"}
_KIND_TEXT = {id(kind): str(kind.value + 1) for kind in SpanKind}  # OTLP numbers span kinds from 1
#: Attributes holding content: their values rarely repeat, so their encodings are not kept.
_CONTENT_KEYS = frozenset({sc.INPUT_MESSAGES, sc.OUTPUT_MESSAGES, sc.TOOL_CALL_ARGUMENTS, sc.TOOL_CALL_RESULT})
#: attribute key -> ('{"key":...,"value":', {value -> encoded KeyValue} or None for content keys).
#: The value tables hold strings shorter than ``MIN_SHARED`` and tuples of strings (never equal
#: to a value of another type: ``1 == True == 1.0``, ``(1,) == (True,)``).
_KEYS: dict[str, tuple[str, dict[Any, str] | None]] = {}
_NAMES: dict[str, str] = {}  # span name -> its JSON string
_TABLE_MAX = 4096  # entries per table, then it starts again


def _value_json(value: Any) -> str:
    """The OTLP/JSON ``AnyValue`` of an attribute value."""
    kind = type(value)
    if kind is str:
        return '{"stringValue":' + _quote(value) + "}"
    if kind is int:
        return '{"intValue":"' + str(value) + '"}'
    if isinstance(value, bool):
        return '{"boolValue":true}' if value else '{"boolValue":false}'
    if isinstance(value, int):
        return '{"intValue":"' + str(int(value)) + '"}'
    if isinstance(value, float):
        return '{"doubleValue":' + json.dumps(value) + "}"
    if isinstance(value, str):  # a str enum: its text, as the SDK's exporters write it (str() is 'Tag.ONE')
        return '{"stringValue":' + _quote(value) + "}"
    if isinstance(value, (list, tuple)):
        return '{"arrayValue":{"values":[' + ",".join([_value_json(v) for v in value]) + "]}}"
    return '{"stringValue":' + _quote(str(value)) + "}"


def _key(key: str) -> tuple[str, dict[Any, str] | None]:
    if len(_KEYS) >= _TABLE_MAX:
        _KEYS.clear()
    entry = _KEYS[key] = ('{"key":' + _quote(key if isinstance(key, str) else str(key)) + ',"value":', None if key in _CONTENT_KEYS else {})
    return entry


def attributes_json(attrs: Mapping[str, Any], bases: Bases | None = None, name: str = "", span_id: str = "") -> str:
    """The OTLP/JSON ``KeyValue`` list of an attribute mapping.

    With ``bases`` (the delta bases of the span's trace), a long string that extends an earlier
    span's value is written as its delta (:func:`.store_delta.shorten`), after the other attributes.
    """
    out: list[str] = []
    append = out.append
    deltas = None
    keys = _KEYS
    for k, v in attrs.items():
        entry = keys.get(k) or _key(k)
        kind = type(v)
        if kind is str:
            if len(v) < MIN_SHARED:
                known = entry[1]
                if known is None:
                    append(entry[0] + '{"stringValue":' + _quote(v) + "}}")
                    continue
                kv = known.get(v)
                if kv is None:
                    if len(known) >= _TABLE_MAX:
                        known.clear()
                    kv = known[v] = entry[0] + '{"stringValue":' + _quote(v) + "}}"
                append(kv)
                continue
            if bases is not None:
                delta = shorten(bases, (name, attrs.get(sc.AGENT_NAME), k), span_id, v)
                if delta is not None:
                    if deltas is None:
                        deltas = []
                    deltas.append((keys.get(DELTA_PREFIX + k) or _key(DELTA_PREFIX + k))[0]
                                  + '{"arrayValue":{"values":[{"stringValue":' + _quote(delta[0]) + '},{"intValue":"'
                                  + str(delta[1]) + '"},{"stringValue":' + _quote(delta[2]) + "}]}}}")
                    continue
            append(entry[0] + '{"stringValue":' + _quote(v) + "}}")
        elif kind is int:
            append(entry[0] + '{"intValue":"' + str(v) + '"}}')
        elif kind is tuple and entry[1] is not None:  # agent paths, finish reasons: they repeat
            known = entry[1]
            try:
                kv = known.get(v)
            except TypeError:  # a tuple holding a list (an amendment's attribute)
                kv = None
            if kv is None:
                kv = entry[0] + _value_json(v) + "}"
                if all(type(x) is str for x in v):
                    if len(known) >= _TABLE_MAX:
                        known.clear()
                    known[v] = kv
            append(kv)
        else:
            append(entry[0] + _value_json(v) + "}")
    if deltas is not None:
        out += deltas
    return "[" + ",".join(out) + "]"


_SPAN = ('{"traceId":"%s","spanId":"%s","name":%s,"kind":%s,"startTimeUnixNano":"%d","endTimeUnixNano":"%d",'
         '"attributes":%s,"status":{"code":%s%s}%s%s}')


def _span_text(trace_id: str, span_id: str, parent_span_id: str | None, name: str, kind: str, start_ns: int,
               end_ns: int, attributes: str, status: str, status_message: str | None, events: str | None) -> str:
    """A ``Span`` object from its parts (``attributes`` and ``events`` already encoded)."""
    quoted = _NAMES.get(name)
    if quoted is None:
        if len(_NAMES) >= _TABLE_MAX:
            _NAMES.clear()
        quoted = _NAMES[name] = _quote(name)
    return _SPAN % (trace_id, span_id, quoted, kind, start_ns, end_ns, attributes, status,
                    ',"message":' + _quote(status_message) if status_message else "",
                    ',"parentSpanId":"' + parent_span_id + '"' if parent_span_id else "",
                    ',"events":[' + events + "]" if events else "")


def _events_json(events: Iterable[Any]) -> str:
    """The OTLP/JSON ``Event`` objects (comma-separated) of SDK events or record event dicts."""
    return ",".join([
        '{"timeUnixNano":"' + str(int(t)) + '","name":' + _quote(n if isinstance(n, str) else str(n)) + ',"attributes":' + attributes_json(a) + "}"
        for n, t, a in ((e["name"], e["time_ns"], e["attributes"]) if isinstance(e, Mapping)
                        else (e.name, e.timestamp, plain_attributes(e.attributes)) for e in events)])


def span_json(
    trace_id: str, span_id: str, parent_span_id: str | None, name: str, kind: int, start_ns: int, end_ns: int,
    attributes: Mapping[str, Any], events: Sequence[Mapping[str, Any]], status: str, status_message: str,
) -> str:
    """The OTLP/JSON ``Span`` object, as text (ids in hex, ``kind`` as OTLP numbers it)."""
    return _span_text(trace_id, span_id, parent_span_id, name, str(int(kind)), int(start_ns), int(end_ns),
                      attributes_json(attributes), str(_STATUS_NUMBER[status]), status_message,
                      _events_json(events) if events else None)


def sdk_span_json(span: ReadableSpan, trace_id: str, bases: Bases | None = None) -> str:
    """The ``Span`` object of a finished SDK span, as text, straight from the span (the same text
    as :func:`encode_span` of its :class:`SpanRecord`). ``trace_id``: its trace id in hex;
    ``bases``: the delta bases of its trace (updated), or None to write every value whole.

    The span's fields are read where ``ReadableSpan`` keeps them (its properties are Python calls,
    and a ``SpanContext`` is a tuple: trace id, span id, is remote, ...).
    """
    ctx: Any = span._context  # never None on a finished span
    parent, name, status, attrs, events = span._parent, span._name, span._status, span._attributes, span._events
    span_id = format(ctx[1], "016x")
    inner = getattr(attrs, "_dict", None)  # the SDK's BoundedAttributes: its inner dict
    return _span_text(
        trace_id, span_id, format(parent[1], "016x") if parent else None, name, _KIND_TEXT[id(span._kind)],
        span._start_time or 0, span._end_time or 0,
        attributes_json(inner if type(inner) is dict else (attrs or {}), bases, name, span_id),
        _STATUS_TEXT[id(status._status_code)], status._description, _events_json(events) if events else None)


def request_json(spans: Iterable[tuple[Mapping[str, Any], str, str]]) -> str:
    """One ``ExportTraceServiceRequest`` line (no newline) from (resource attributes, scope name,
    span text) triples, grouped by resource and scope in first-seen order."""
    groups: list[tuple[Mapping[str, Any], dict[Any, list[str]]]] = []
    last: tuple[Mapping[str, Any], dict[Any, list[str]]] | None = None
    for resource, scope, text in spans:
        # Spans of one provider share one resource: compare with the last group first.
        if last is None or not (last[0] is resource or last[0] == resource):
            last = next((g for g in groups if g[0] is resource or g[0] == resource), None)
            if last is None:
                last = (resource, {})
                groups.append(last)
        texts = last[1].get(scope)
        if texts is None:
            texts = last[1][scope] = []
        texts.append(text)
    out = ['{"resourceSpans":[']  # one join: concatenating the long parts would copy them again and again
    for i, (resource, scopes) in enumerate(groups):
        out += [',{"resource":{"attributes":' if i else '{"resource":{"attributes":', attributes_json(resource),
                '},"scopeSpans":[']
        for j, (scope, texts) in enumerate(scopes.items()):
            out += [',{"scope":{"name":' if j else '{"scope":{"name":', _quote(scope), '},"spans":[', ",".join(texts), "]}"]
        out.append("]}")
    out.append("]}")
    return "".join(out)


def encode_span(rec: SpanRecord) -> str:
    """The OTLP/JSON ``Span`` object of one record, as text."""
    return span_json(rec.trace_id, rec.span_id, rec.parent_span_id, rec.name, rec.kind, rec.start_ns, rec.end_ns,
                     rec.attributes, rec.events, rec.status, rec.status_message)


def encode_request(records: Sequence[SpanRecord]) -> str:
    """One JSON line (no newline) holding ``records``, grouped by resource and scope."""
    return request_json((rec.resource, rec.scope, encode_span(rec)) for rec in records)
