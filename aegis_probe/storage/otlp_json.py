"""OTLP/JSON encoding of spans, as the OpenTelemetry Collector's file exporter writes it.

One line holds one ``ExportTraceServiceRequest`` (``{"resourceSpans": [...]}``). Trace and span
ids are lower-case hex and 64-bit integers are strings, as the OTLP/JSON spec requires.
"""

from __future__ import annotations

import codecs
import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import msgspec
from msgspec import UNSET, UnsetType
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from ..redact import encodable

_STATUS_CODE = {StatusCode.UNSET: 0, StatusCode.OK: 1, StatusCode.ERROR: 2}
_STATUS_NAME = {0: "UNSET", 1: "OK", 2: "ERROR"}
_KIND = {kind: kind.value + 1 for kind in SpanKind}  # OTLP numbers span kinds from 1


@dataclass
class SpanRecord:
    """A finished span, independent of where it was read from."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    status: str = "UNSET"
    status_message: str = ""
    kind: int = 1
    resource: dict[str, Any] = field(default_factory=dict)
    scope: str = ""

    @classmethod
    def from_readable(cls, span: ReadableSpan) -> "SpanRecord":
        ctx = span.context
        parent = span.parent
        attributes = getattr(span, "_attributes", None)  # the SDK's own; else the public mapping
        status = span.status
        return cls(
            trace_id=format(ctx.trace_id, "032x"),
            span_id=format(ctx.span_id, "016x"),
            parent_span_id=format(parent.span_id, "016x") if parent else None,
            name=span.name,
            start_ns=span.start_time or 0,
            end_ns=span.end_time or 0,
            attributes=plain_attributes(attributes if attributes is not None else span.attributes),
            events=[
                {"name": e.name, "time_ns": e.timestamp, "attributes": dict(e.attributes or {})}
                for e in span.events
            ],
            status=_STATUS_NAME[_STATUS_CODE[status.status_code]],
            status_message=status.description or "",
            kind=_KIND[span.kind],
            resource=resource_attributes(span.resource),
            scope=span.instrumentation_scope.name if span.instrumentation_scope else "",
        )


_RESOURCES: dict[int, tuple[Any, dict[str, Any]]] = {}  # id -> (resource, attributes): one dict per provider


def resource_attributes(resource: Any) -> dict[str, Any]:
    """The attributes of an SDK ``Resource`` (the same dict for every span of a provider)."""
    if resource is None:
        return {}
    hit = _RESOURCES.get(id(resource))
    if hit is None or hit[0] is not resource:
        if len(_RESOURCES) >= 64:
            _RESOURCES.clear()
        hit = _RESOURCES[id(resource)] = (resource, plain_attributes(resource.attributes))
    return hit[1]


def plain_attributes(attrs: Any) -> dict[str, Any]:
    """A plain dict of SDK attributes: copied from the dict inside the SDK's ``BoundedAttributes``
    when there is one (iterating that mapping runs Python code per item), else item by item."""
    inner = getattr(attrs, "_dict", None)
    return dict(inner) if isinstance(inner, dict) else dict(attrs or {})


def _from_any_value(value: Mapping[str, Any]) -> Any:
    """The Python value of an OTLP/JSON ``AnyValue``; ``ValueError`` names a field of the wrong JSON type."""
    if "stringValue" in value:  # a lone surrogate (another writer's "\ud800") escaped, as this store writes it
        text = value["stringValue"]
        return text if type(text) is str and text.isascii() else encodable(_str(text, "stringValue"))
    if "intValue" in value:
        return _int(value["intValue"], "intValue")
    if "doubleValue" in value:
        return _double(value["doubleValue"])
    if "boolValue" in value:
        if not isinstance(value["boolValue"], bool):
            raise ValueError(f"boolValue is not a boolean: {str(value['boolValue'])[:40]!r}")
        return value["boolValue"]
    if "arrayValue" in value:
        return [_from_any_value(v) for v in value["arrayValue"].get("values", [])]
    if "kvlistValue" in value:
        return {kv["key"]: _from_any_value(kv.get("value", {})) for kv in value["kvlistValue"].get("values", [])}
    if "bytesValue" in value:
        return _str(value["bytesValue"], "bytesValue")
    return None


def _int(value: Any, field: str) -> int:
    """An OTLP/JSON integer field (a number or a decimal string); ``ValueError`` names the field."""
    try:
        if type(value) is str:  # as OTLP/JSON writes 64-bit integers
            return int(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError
        return int(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{field} is not an integer: {str(value)[:40]!r}") from None


def _double(value: Any) -> float:
    """An OTLP/JSON ``doubleValue``: a number, or a string (``"NaN"``, ``"Infinity"``, a decimal)."""
    try:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TypeError
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"doubleValue is not a number: {str(value)[:40]!r}") from None


def _enum(value: Any, field: str, names: Mapping[str, int]) -> int:
    """An OTLP/JSON enum field: one of the numbers of ``names``, or one of its names (proto3 JSON)."""
    number = value if type(value) is int else names.get(value) if isinstance(value, str) else _int(value, field)
    if number is None or number not in names.values():
        raise ValueError(f"unknown {field} {str(value)[:40]!r} (expected 0-{max(names.values())} "
                         f"or {os.path.commonprefix(list(names))}*)")
    return number


_STATUS_CODES = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}
_SPAN_KINDS = {"SPAN_KIND_UNSPECIFIED": 0, "SPAN_KIND_INTERNAL": 1, "SPAN_KIND_SERVER": 2, "SPAN_KIND_CLIENT": 3,
               "SPAN_KIND_PRODUCER": 4, "SPAN_KIND_CONSUMER": 5}


def _str(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{field} is not a string: {str(value)[:40]!r}")
    return value


def _from_attributes(items: Iterable[Mapping[str, Any]] | None) -> dict[str, Any]:
    out = {}
    for item in items or ():
        value = item.get("value", {})
        text = value.get("stringValue") if type(value) is dict else None  # most values: ASCII text, taken as is
        out[item["key"]] = text if type(text) is str and text.isascii() else _from_any_value(value)
    return out


def _escape_unencodable(error: UnicodeError) -> tuple[str, int]:
    bad = error.object[error.start:error.end]  # type: ignore[attr-defined]
    return "".join(f"\\\\u{ord(c):04x}" for c in bad), error.end  # type: ignore[attr-defined]


codecs.register_error("aegis.json-escape", _escape_unencodable)


def utf8(text: str) -> bytes:
    """UTF-8 of OTLP/JSON text. A lone surrogate (an undecodable byte of ``os.fsdecode``) cannot be
    encoded: it is written as the text ``\\udcxx`` (escaped for JSON), so the line stays valid
    and the trace is kept."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "aegis.json-escape")


_HEX_ID = re.compile("[0-9a-fA-F]{16}(?:[0-9a-fA-F]{16})?")


def _decode_id(value: str | None) -> str | None:
    """Hex id as written by OTLP/JSON; base64 ids (proto3 JSON mapping) are converted."""
    if not value:
        return None
    if _HEX_ID.fullmatch(value):
        return value.lower()
    import base64
    import binascii

    try:
        raw = base64.b64decode(value, validate=True) if isinstance(value, str) else b""
    except binascii.Error:
        raw = b""
    if len(raw) not in (8, 16):
        raise ValueError(f"bad trace/span id {value!r}: expected 16 or 32 hex digits")
    return raw.hex()


def decode_request(body: Mapping[str, Any] | bytes) -> list[SpanRecord]:
    """Span records from one ``ExportTraceServiceRequest`` JSON object, or its JSON text (a stored
    line: see :func:`_decode_typed`).

    Raises ``ValueError`` (or ``KeyError``/``TypeError``) on a structurally invalid body; the
    store turns that into an error naming the file and line.
    """
    if isinstance(body, bytes):
        typed = _decode_typed(body)
        if typed is not None:
            return typed
        from .fastjson import loads

        body = loads(body)
    if not isinstance(body, Mapping):
        raise ValueError(f"a JSON {type(body).__name__}, not an object")
    records: list[SpanRecord] = []
    resource_spans = body["resourceSpans"]
    if not isinstance(resource_spans, list):
        raise ValueError("resourceSpans is not a list")
    for rs in resource_spans:
        resource = _from_attributes(rs.get("resource", {}).get("attributes"))
        for ss in rs.get("scopeSpans", rs.get("instrumentationLibrarySpans", [])):
            scope = ss.get("scope", ss.get("instrumentationLibrary", {})).get("name", "")
            for sp in ss.get("spans", []):
                status = sp.get("status", {})
                records.append(
                    SpanRecord(
                        trace_id=_decode_id(sp["traceId"]) or "",
                        span_id=_decode_id(sp["spanId"]) or "",
                        parent_span_id=_decode_id(sp.get("parentSpanId")),
                        name=encodable(_str(sp["name"], "name")),
                        start_ns=_int(sp.get("startTimeUnixNano", 0), "startTimeUnixNano"),
                        end_ns=_int(sp.get("endTimeUnixNano", 0), "endTimeUnixNano"),
                        attributes=_from_attributes(sp.get("attributes")),
                        events=[
                            {
                                "name": e.get("name", ""),
                                "time_ns": _int(e.get("timeUnixNano", 0), "timeUnixNano"),
                                "attributes": _from_attributes(e.get("attributes")),
                            }
                            for e in sp.get("events", [])
                        ],
                        status=_STATUS_NAME[_enum(status.get("code", 0), "status.code", _STATUS_CODES)],
                        status_message=_str(status.get("message") or "", "status.message"),
                        kind=_enum(sp.get("kind", 1), "kind", _SPAN_KINDS),
                        resource=resource,
                        scope=scope,
                    )
                )
    return records


# The request as structs (msgspec decodes a line straight into them: no dict per attribute). A field
# is typed as :func:`decode_request` takes it without a conversion that could differ or fail;
# anything else (another type, a field it reads in place of these) is read from the dicts as before.


class _AnyValue(msgspec.Struct):
    stringValue: str | UnsetType = UNSET
    intValue: int | str | UnsetType = UNSET
    doubleValue: float | str | UnsetType = UNSET
    boolValue: bool | UnsetType = UNSET
    arrayValue: _ArrayValue | UnsetType = UNSET
    kvlistValue: _KvList | UnsetType = UNSET
    bytesValue: str | UnsetType = UNSET


class _KeyValue(msgspec.Struct):
    key: str
    value: _AnyValue = msgspec.field(default_factory=_AnyValue)


class _ArrayValue(msgspec.Struct):
    values: list[_AnyValue] = []


class _KvList(msgspec.Struct):
    values: list[_KeyValue] = []


class _Event(msgspec.Struct):
    name: Any = ""
    timeUnixNano: int | str = 0
    attributes: list[_KeyValue] | None = None


class _Status(msgspec.Struct):
    code: int | str = 0
    message: str | None = None


class _Span(msgspec.Struct):
    traceId: str
    spanId: str
    name: str
    parentSpanId: str | None = None
    kind: int | str = 1
    startTimeUnixNano: int | str = 0
    endTimeUnixNano: int | str = 0
    attributes: list[_KeyValue] | None = None
    events: list[_Event] = []
    status: _Status = msgspec.field(default_factory=_Status)


class _Scope(msgspec.Struct):
    name: Any = ""


class _ScopeSpans(msgspec.Struct):
    scope: _Scope | UnsetType = UNSET
    spans: list[_Span] = []
    instrumentationLibrary: Any = UNSET


class _Resource(msgspec.Struct):
    attributes: list[_KeyValue] | None = None


class _ResourceSpans(msgspec.Struct):
    resource: _Resource = msgspec.field(default_factory=_Resource)
    scopeSpans: list[_ScopeSpans] | UnsetType = UNSET
    instrumentationLibrarySpans: Any = UNSET


class _Request(msgspec.Struct):
    resourceSpans: list[_ResourceSpans]


_typed = msgspec.json.Decoder(_Request).decode


def _id(value: str | None) -> str | None:
    """As :func:`_decode_id`; lower-case hex (as this store writes ids) taken as it is."""
    if value is not None and len(value) in (16, 32) and not value.strip("0123456789abcdef"):
        return value
    return _decode_id(value)


def _value(v: _AnyValue) -> Any:
    """As :func:`_from_any_value`, of a struct."""
    if v.stringValue is not UNSET:
        return v.stringValue if v.stringValue.isascii() else encodable(v.stringValue)
    if v.intValue is not UNSET:
        return int(v.intValue)
    if v.doubleValue is not UNSET:
        return float(v.doubleValue)
    if v.boolValue is not UNSET:
        return v.boolValue
    if v.arrayValue is not UNSET:
        return [_value(x) for x in v.arrayValue.values]
    if v.kvlistValue is not UNSET:
        return {kv.key: _value(kv.value) for kv in v.kvlistValue.values}
    if v.bytesValue is not UNSET:
        return v.bytesValue
    return None


def _attributes(items: list[_KeyValue] | None) -> dict[str, Any]:
    return {kv.key: text if type(text := kv.value.stringValue) is str and text.isascii() else _value(kv.value)
            for kv in items or ()}


def _decode_typed(data: bytes) -> list[SpanRecord] | None:
    """:func:`decode_request` of a line decoded into structs; None when the line is not as they
    take it (another type, a legacy field, JSON msgspec refuses): read it from dicts."""
    try:
        request = _typed(data)
        records = []
        for rs in request.resourceSpans:
            if rs.scopeSpans is UNSET or rs.instrumentationLibrarySpans is not UNSET:
                return None
            resource = _attributes(rs.resource.attributes)
            for ss in rs.scopeSpans:
                if ss.scope is UNSET or ss.instrumentationLibrary is not UNSET:
                    return None
                scope = ss.scope.name
                for sp in ss.spans:
                    status = sp.status
                    records.append(SpanRecord(
                        trace_id=_id(sp.traceId) or "",
                        span_id=_id(sp.spanId) or "",
                        parent_span_id=_id(sp.parentSpanId),
                        name=encodable(sp.name),
                        start_ns=int(sp.startTimeUnixNano),
                        end_ns=int(sp.endTimeUnixNano),
                        attributes=_attributes(sp.attributes),
                        events=[{"name": e.name, "time_ns": int(e.timeUnixNano), "attributes": _attributes(e.attributes)}
                                for e in sp.events],
                        status=_STATUS_NAME[_enum(status.code, "status.code", _STATUS_CODES)],
                        status_message=status.message or "",
                        kind=_enum(sp.kind, "kind", _SPAN_KINDS),
                        resource=resource,
                        scope=scope,
                    ))
        return records
    except (msgspec.MsgspecError, ValueError, TypeError, RecursionError):
        return None
