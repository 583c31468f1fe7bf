"""OTLP/JSON text of spans (the format :mod:`.otlp_json` describes and reads).

The store's writer thread encodes every span, so the text is built directly rather than through
``json.dumps`` of nested dicts: the same document, byte for byte, as
``json.dumps(obj, separators=(",", ":"), ensure_ascii=False)`` of the OTLP/JSON objects. Short
string attributes repeat across the spans of a run (agent names, the conversation id, operation
names), so their encoded ``KeyValue`` is kept in a bounded table.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring as _quote  # what json.dumps(ensure_ascii=False) uses
from typing import Any, Iterable, Mapping, Sequence

from .otlp_json import SpanRecord

_STATUS_NUMBER = {"UNSET": 0, "OK": 1, "ERROR": 2}
_KEY_JSON: dict[str, str] = {}  # attribute key -> '{"key":"...","value":'
_SHORT_KV: dict[tuple[str, str], str] = {}  # (key, short string value) -> encoded KeyValue
_SHORT = 256  # characters
_TABLE_MAX = 8192  # entries, then the tables start again


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
    if isinstance(value, str):
        return '{"stringValue":' + _quote(str(value)) + "}"
    if isinstance(value, (list, tuple)):
        return '{"arrayValue":{"values":[' + ",".join([_value_json(v) for v in value]) + "]}}"
    return '{"stringValue":' + _quote(str(value)) + "}"


def _key_value(key: str, value: Any) -> str:
    if type(value) is str and len(value) <= _SHORT:
        kv = _SHORT_KV.get((key, value))
        if kv is not None:
            return kv
    head = _KEY_JSON.get(key)
    if head is None:
        if len(_KEY_JSON) >= _TABLE_MAX:
            _KEY_JSON.clear()
        head = _KEY_JSON[key] = '{"key":' + _quote(str(key)) + ',"value":'
    kv = head + _value_json(value) + "}"
    if type(value) is str and len(value) <= _SHORT:
        if len(_SHORT_KV) >= _TABLE_MAX:
            _SHORT_KV.clear()
        _SHORT_KV[(key, value)] = kv
    return kv


def attributes_json(attrs: Mapping[str, Any]) -> str:
    """The OTLP/JSON ``KeyValue`` list of an attribute mapping."""
    return "[" + ",".join([_key_value(k, v) for k, v in attrs.items()]) + "]"


def span_json(
    trace_id: str, span_id: str, parent_span_id: str | None, name: str, kind: int, start_ns: int, end_ns: int,
    attributes: Mapping[str, Any], events: Sequence[Mapping[str, Any]], status: str, status_message: str,
) -> str:
    """The OTLP/JSON ``Span`` object, as text (ids in hex, ``kind`` as OTLP numbers it)."""
    out = ['{"traceId":"', trace_id, '","spanId":"', span_id, '","name":', _quote(name), ',"kind":', str(int(kind)),
           ',"startTimeUnixNano":"', str(int(start_ns)), '","endTimeUnixNano":"', str(int(end_ns)),
           '","attributes":', attributes_json(attributes), ',"status":{"code":', str(_STATUS_NUMBER[status])]
    if status_message:
        out += [',"message":', _quote(status_message)]
    out.append("}")
    if parent_span_id:
        out += [',"parentSpanId":"', parent_span_id, '"']
    if events:
        out += [',"events":[', ",".join([
            '{"timeUnixNano":"' + str(int(e["time_ns"])) + '","name":' + _quote(str(e["name"]))
            + ',"attributes":' + attributes_json(e["attributes"]) + "}" for e in events]), "]"]
    out.append("}")
    return "".join(out)


def request_json(spans: Iterable[tuple[Mapping[str, Any], str, str]]) -> str:
    """One ``ExportTraceServiceRequest`` line (no newline) from (resource attributes, scope name,
    span text) triples, grouped by resource and scope in first-seen order."""
    groups: list[tuple[Mapping[str, Any], dict[Any, list[str]]]] = []
    for resource, scope, text in spans:
        # Spans of one provider share one resource: compare with the last group first.
        group = next((g for g in reversed(groups) if g[0] is resource or g[0] == resource), None)
        if group is None:
            new: tuple[Mapping[str, Any], dict[Any, list[str]]] = (resource, {})
            groups.append(group := new)
        group[1].setdefault(scope, []).append(text)
    return '{"resourceSpans":[' + ",".join(
        '{"resource":{"attributes":' + attributes_json(resource) + '},"scopeSpans":['
        + ",".join('{"scope":{"name":' + _quote(scope) + '},"spans":[' + ",".join(texts) + "]}"
                   for scope, texts in scopes.items())
        + "]}"
        for resource, scopes in groups
    ) + "]}"


def encode_span(rec: SpanRecord) -> str:
    """The OTLP/JSON ``Span`` object of one record, as text."""
    return span_json(rec.trace_id, rec.span_id, rec.parent_span_id, rec.name, rec.kind, rec.start_ns, rec.end_ns,
                     rec.attributes, rec.events, rec.status, rec.status_message)


def encode_request(records: Sequence[SpanRecord]) -> str:
    """One JSON line (no newline) holding ``records``, grouped by resource and scope."""
    return request_json((rec.resource, rec.scope, encode_span(rec)) for rec in records)
