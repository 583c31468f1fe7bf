"""The store writer's direct OTLP/JSON encoding and its delta hints."""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

from aegis_probe.capture import semconv as sc
from aegis_probe.storage import delta as store_delta
from aegis_probe.storage.otlp_encode import encode_span, sdk_span_json
from aegis_probe.storage.otlp_json import SpanRecord
from aegis_probe.storage.store import StoreSpanProcessor, TraceStore


def _any_value(value: Any) -> dict[str, Any]:
    """OTLP/JSON ``AnyValue`` built as objects: the reference the direct encoder must equal."""
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, (list, tuple)):
        return {"arrayValue": {"values": [_any_value(v) for v in value]}}
    return {"stringValue": value}


def _reference(span: ReadableSpan) -> str:
    kvs = lambda attrs: [{"key": k, "value": _any_value(v)} for k, v in (attrs or {}).items()]  # noqa: E731
    obj: dict[str, Any] = {
        "traceId": format(span.context.trace_id, "032x"), "spanId": format(span.context.span_id, "016x"),
        "name": span.name, "kind": span.kind.value + 1,
        "startTimeUnixNano": str(span.start_time), "endTimeUnixNano": str(span.end_time),
        "attributes": kvs(span.attributes), "status": {"code": span.status.status_code.value},
    }
    if span.status.description:
        obj["status"]["message"] = span.status.description
    if span.parent:
        obj["parentSpanId"] = format(span.parent.span_id, "016x")
    if span.events:
        obj["events"] = [{"timeUnixNano": str(e.timestamp), "name": e.name, "attributes": kvs(e.attributes)}
                         for e in span.events]
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _spans() -> list[ReadableSpan]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    root = tracer.start_span("invoke_workflow t", attributes={"n": 1, "f": 0.5, "b": True})
    ctx = set_span_in_context(root)
    long_text = "[" + ", ".join(f'{{"m": "message {i} é ü 😀 \\"q\\" \\n"}}' for i in range(30)) + "]"
    values: list[Any] = [1, True, 1.0, "1", False, 0, (1,), (True,), ("1",), (1.0,), (), ("a", "b\n\"c\"\\")]
    for i, value in enumerate(values):
        span = tracer.start_span("step", context=ctx, kind=SpanKind.CLIENT if i % 2 else SpanKind.INTERNAL,
                                 attributes={"x": value, "k\"ey é": "v\x00\x1f\x7f\u2028\t", sc.AGENT_NAME: "a"})
        span.end()
    failed = tracer.start_span("tool", context=ctx, attributes={sc.INPUT_MESSAGES: long_text, "big": 10**20, "neg": -3})
    failed.add_event("exception", {"exception.type": "ValueError", "exception.message": "bad\nthing", "n": 2})
    failed.add_event("plain")
    failed.set_status(Status(StatusCode.ERROR, 'boom "x"'))
    failed.end()
    root.set_status(Status(StatusCode.OK))
    root.end()
    provider.shutdown()
    return list(exporter.get_finished_spans())


def test_direct_encoding_is_the_json_of_the_otlp_objects():
    """Every attribute type, escapes, events and statuses: the same text as json.dumps of the
    objects, from the SDK span and from its record alike; values that compare equal across types
    (1, True, 1.0) never share a cached encoding."""
    spans = _spans()
    for _ in range(2):  # the second time from the encoder's tables
        for span in spans:
            want = _reference(span)
            assert sdk_span_json(span, format(span.context.trace_id, "032x")) == want
            assert encode_span(SpanRecord.from_readable(span)) == want
    values = [json.loads(sdk_span_json(s, ""))["attributes"][0]["value"] for s in spans if s.name == "step"]
    assert values[:4] == [{"intValue": "1"}, {"boolValue": True}, {"doubleValue": 1.0}, {"stringValue": "1"}]


@pytest.mark.parametrize("hinted", [True, False])
def test_a_prompt_built_from_the_last_is_stored_as_delta_without_comparing(tmp_path, monkeypatch, hinted):
    """The producer says how a prompt extends the last one: the writer takes that length and does
    not compare the two (a wrong hint, naming another base object, is not trusted)."""
    compared = []
    real = store_delta.common_prefix
    monkeypatch.setattr(store_delta, "common_prefix", lambda a, b: compared.append(1) or real(a, b))
    store = TraceStore(tmp_path / "s")
    provider = TracerProvider()
    provider.add_span_processor(StoreSpanProcessor(store))  # a store in the process: hints are kept
    first = "[" + ", ".join(f'"message {i}"' for i in range(40)) + "]"
    second = first[:-1] + ', "message 40"]'
    store_delta.note_extension(second, first if hinted else "".join(first), len(first) - 1)
    tracer = provider.get_tracer("t")
    root = tracer.start_span("invoke_workflow t")
    ids = []
    for prompt in (first, second):
        span = tracer.start_span("chat m", context=set_span_in_context(root),
                                 attributes={sc.AGENT_NAME: "a", sc.INPUT_MESSAGES: prompt})
        ids.append(format(span.get_span_context().span_id, "016x"))
        span.end()
    root.end()
    provider.shutdown()
    assert len(compared) == (0 if hinted else 1)
    raw = store.file.read_text()
    assert raw.count("message 39") == 1 and store_delta.DELTA_PREFIX in raw, "the second prompt is a delta"
    got = {s.span_id: s.attributes.get(sc.INPUT_MESSAGES) for s in store.trace(format(root.get_span_context().trace_id, "032x"))}
    assert [got[i] for i in ids] == [first, second]


def test_common_prefix_is_the_longest_or_all_but_the_closing_character():
    """The shared length of a delta, on strings that grew at the end, inside their closing
    characters, anywhere, or not at all (random, seeded)."""
    import random

    def spec(a: str, b: str) -> int:
        if len(b) >= len(a) > 1 and b.startswith(a[:-1]):
            return len(a) - 1
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n

    rng = random.Random(7)
    text = lambda lo, hi: "".join(rng.choice('ab"}]\n') for _ in range(rng.randint(lo, hi)))  # noqa: E731
    for _ in range(3000):
        a = text(0, 70)
        cut = rng.randint(0, len(a))
        for b in (a[:-1] + text(0, 8) + a[-1:], a[:cut] + text(0, 12) + a[cut:][-rng.randint(0, 6):], a + text(0, 4),
                  a, text(0, 70), a[:cut]):
            assert store_delta.common_prefix(a, b) == spec(a, b), (a, b)
            assert store_delta.common_prefix(b, a) == spec(b, a), (b, a)
    grown = "m" * 50_000 + '"}]}]'
    assert store_delta.common_prefix(grown, grown[:-5] + 'new"}]}]') == 50_000
