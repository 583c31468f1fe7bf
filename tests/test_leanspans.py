"""aegis-probe's own tracer provider: lean spans hold exactly what the SDK's spans hold."""

from __future__ import annotations

import enum
import itertools
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk import trace as sdk_trace
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, DEFAULT_ON, ParentBased, Sampler, TraceIdRatioBased
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from aegis_probe.capture.leanspans import LeanSpan, LeanTracer, LeanTracerProvider
from aegis_probe.capture.probe import ProbeSetup
from aegis_probe.storage.store import StoreSpanProcessor, TraceStore


class Model(str, enum.Enum):  # a str subclass, as CAMEL's ModelType
    GPT = "gpt-x"


class Level(enum.IntEnum):
    HIGH = 3


def _scenario(tracer: trace.Tracer) -> None:
    """Every way aegis-probe and an app's code touch a span, plain and odd values alike."""
    root = tracer.start_span("invoke_workflow t", attributes={"a": "x", "n": 1, "f": 1.5, "b": True})
    ctx = trace.set_span_in_context(root)
    odd: dict[Any, Any] = {"list": ["x", "y"], "ints": (1, 2), "bytes": b"raw", "none": None, "": "empty key",
                           "model": Model.GPT, "level": Level.HIGH, "obj": object, "plain": "é 😀 \x00"}
    step = tracer.start_span("invoke_agent a", context=ctx, kind=SpanKind.INTERNAL, attributes=odd,
                             links=[Link(root.get_span_context(), {"why": "retry"})])
    step.set_attribute("a", "first")
    step.set_attribute("n", 2)
    step.set_attribute("a", "again")  # a key set again moves to the end
    step.set_attribute("tuple", ("p", "q"))
    step.set_attribute(7, "bad key")  # type: ignore[arg-type]
    step.set_attributes({"s1": "v", "s2": 3})
    step.set_attributes({"m1": "v", 5: "int key", "m3": [1.0, 2.0]})  # type: ignore[dict-item]
    step.add_event("note", {"k": "v", "l": [True]})
    step.update_name("invoke_agent renamed")
    with pytest.raises(ValueError):
        with trace.use_span(step, end_on_exit=False, record_exception=True, set_status_on_exception=True):
            raise ValueError("boom")
    llm = tracer.start_span("chat m", context=trace.set_span_in_context(step), kind=SpanKind.CLIENT,
                            attributes={"input": "a long prompt"})
    llm.set_attribute("output", "a long answer")
    llm.set_status(Status(StatusCode.OK))
    llm.end()
    step.end()
    step.set_attribute("after", "end")  # ignored on an ended span
    step.end()  # ended twice: a warning, nothing else
    root.set_status(StatusCode.ERROR, "failed")
    root.end()


def _finished(provider: TracerProvider) -> list[Any]:
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _scenario(provider.get_tracer("aegis_probe", "1.0"))
    return list(exporter.get_finished_spans())


def _view(spans: list[Any]) -> list[Any]:
    """What an exporter reads from each span, with ids and times replaced by their order."""
    ids = {span.context.span_id: i for i, span in enumerate(spans)}
    return [(span.name, span.kind, ids.get(span.parent.span_id) if span.parent else None,
             [(key, type(value), value) for key, value in span.attributes.items()], span.dropped_attributes, span.status.status_code,
             span.status.description,
             [(e.name, list(e.attributes.items()), e.timestamp >= span.start_time) for e in span.events],
             [(ids.get(link.context.span_id), list(link.attributes.items())) for link in span.links],
             span.dropped_events, span.dropped_links, dict(span.resource.attributes),
             (span.instrumentation_scope.name, span.instrumentation_scope.version),
             span.context.trace_flags, span.context.trace_id == spans[-1].context.trace_id,
             span.end_time >= span.start_time)
            for span in spans]


@pytest.mark.parametrize("limits", [None, SpanLimits(max_span_attributes=4, max_span_attribute_length=3,
                                                     max_events=0, max_links=0)],
                         ids=["default limits", "tight limits"])
def test_lean_spans_hold_what_sdk_spans_hold(limits: SpanLimits | None) -> None:
    sdk = _finished(TracerProvider(span_limits=limits))
    lean = _finished(LeanTracerProvider(span_limits=limits))
    assert [type(span) for span in lean] == [LeanSpan] * 3
    assert _view(lean) == _view(sdk)
    if limits is None:
        step = dict(lean[1].attributes)
        assert list(step)[-5:] == ["s1", "s2", "m1", "5", "m3"] and "after" not in step
        assert step["model"] is Model.GPT and step["list"] == ("x", "y") and "" not in step


class _Counting(IdGenerator):
    """The same ids for both providers, spread over the ratio sampler's range."""

    def __init__(self) -> None:
        self._next = itertools.count(0x9E3779B97F4A7C15, 0x9E3779B97F4A7C15)

    def generate_span_id(self) -> int:
        return next(self._next) % 2**64 or 1

    def generate_trace_id(self) -> int:
        return next(self._next) % 2**128 or 1


@pytest.mark.parametrize("sampler", [DEFAULT_ON, ALWAYS_ON, ParentBased(ALWAYS_OFF), TraceIdRatioBased(0.5)],
                         ids=["default", "always on", "parent or off", "ratio"])
def test_sampling_decisions_match_the_sdk(sampler: Sampler) -> None:
    state = TraceState([("vendor", "v1")])
    parents = [None] + [trace.NonRecordingSpan(SpanContext(trace_id, 0xABC, is_remote=remote, trace_state=state,
                                                          trace_flags=TraceFlags(flags)))
                        for trace_id in (1, 2**127 + 5) for remote in (False, True) for flags in (0, 1)]

    def decisions(make: type[TracerProvider]) -> list[Any]:
        tracer = make(sampler=sampler, id_generator=_Counting()).get_tracer("t")  # the ratio sampler reads the id
        out = []
        for parent in parents:
            span = tracer.start_span("s", context=trace.set_span_in_context(parent) if parent else None,
                                     attributes={"k": "v"})
            got = span.get_span_context()
            out.append((span.is_recording(), got.trace_flags, got.trace_state,
                        parent is None or got.trace_id == parent.get_span_context().trace_id,
                        dict(getattr(span, "attributes", {}))))
            span.end()
        return out

    lean = decisions(LeanTracerProvider)
    assert lean == decisions(TracerProvider)
    assert len({recording for recording, *_ in lean}) == (1 if sampler is ALWAYS_ON else 2)


def test_store_lines_are_the_same_bytes(tmp_path: Path) -> None:
    lines = []
    for i, make in enumerate((TracerProvider, LeanTracerProvider)):
        store = TraceStore(tmp_path / str(i))
        provider = make()
        provider.add_span_processor(StoreSpanProcessor(store))
        _scenario(provider.get_tracer("aegis_probe", "1.0"))
        store.flush()
        text = next(store.path.glob("*.jsonl")).read_text(encoding="utf-8")
        lines.append(re.sub(r'"(traceId|spanId|parentSpanId|startTimeUnixNano|endTimeUnixNano|timeUnixNano)":"[0-9a-f]+"',
                            r'"\1":"_"', text))
    assert lines[0] == lines[1] and '"invoke_agent renamed"' in lines[0]


def test_spans_from_threads_keep_their_own_attributes() -> None:
    exporter = InMemorySpanExporter()
    provider = LeanTracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")

    def work(n: int) -> None:
        for i in range(200):
            span = tracer.start_span(f"s{n}", attributes={"n": n})
            span.set_attribute("i", i)
            span.end()

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    spans = exporter.get_finished_spans()
    assert len(spans) == 800 and all(span.attributes["n"] == int(span.name[1:]) for span in spans)
    assert sorted(span.attributes["i"] for span in spans if span.name == "s2") == list(range(200))


def test_own_provider_is_lean_and_an_apps_provider_is_not(tmp_path: Path) -> None:
    own = ProbeSetup.resolve(store=tmp_path).provider
    assert isinstance(own, LeanTracerProvider) and type(own.get_tracer("t")) is LeanTracer
    apps = TracerProvider()
    assert ProbeSetup.resolve(tracer_provider=apps).provider.get_tracer("t").__class__ is sdk_trace.Tracer


def test_unknown_sdk_layout_keeps_the_sdks_spans(monkeypatch: pytest.MonkeyPatch) -> None:
    sdk_init = sdk_trace._Span.__init__

    def init_with_a_new_field(self: Any, *args: Any, **kwargs: Any) -> None:
        sdk_init(self, *args, **kwargs)
        self._new_in_a_later_sdk = []

    monkeypatch.setattr(sdk_trace._Span, "__init__", init_with_a_new_field)
    exporter = InMemorySpanExporter()
    provider = LeanTracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    assert type(tracer) is sdk_trace.Tracer
    tracer.start_span("s", attributes={"k": "v"}).end()
    (span,) = exporter.get_finished_spans()
    assert span.attributes["k"] == "v" and not isinstance(span, LeanSpan)


def test_otlp_protobuf_is_the_same() -> None:
    """The OTLP exporters' encoding of lean spans equals that of the SDK's (ids and times aside)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    def encoded(make: type[TracerProvider]) -> Any:
        request = encode_spans(_finished(make()))
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    span.trace_id = span.span_id = span.parent_span_id = b""
                    span.start_time_unix_nano = span.end_time_unix_nano = 0
                    for event in span.events:
                        event.time_unix_nano = 0
                    for link in span.links:
                        link.trace_id = link.span_id = b""
        return request

    lean = encoded(LeanTracerProvider)
    assert lean == encoded(TracerProvider) and len(lean.resource_spans[0].scope_spans[0].spans) == 3


def test_long_traces_from_threads_and_asyncio_store_the_same_bytes(tmp_path: Path) -> None:
    """300-span traces made side by side by threads and asyncio tasks, odd bytes in every value."""
    import asyncio

    odd = "NUL \x00 U+2028 \u2028 surrogate \ud800 BOM \ufeff é 😀 " + "x" * 2000

    def trace_of(tracer: trace.Tracer, n: int) -> None:
        root = tracer.start_span(f"invoke_workflow t{n}", attributes={"n": n})
        ctx = trace.set_span_in_context(root)
        for i in range(300):
            span = tracer.start_span("invoke_agent a", context=ctx, attributes={"i": i, "text": odd[i:]})
            span.set_attribute("out", odd[: i + 1])
            span.end()
        root.end()

    async def tasks(tracer: trace.Tracer) -> None:
        await asyncio.gather(*(asyncio.to_thread(trace_of, tracer, n) for n in (10, 11)),
                             *(asyncio.sleep(0, trace_of(tracer, n)) for n in (12, 13)))

    lines = []
    for i, make in enumerate((TracerProvider, LeanTracerProvider)):
        store = TraceStore(tmp_path / str(i))
        provider = make()
        provider.add_span_processor(StoreSpanProcessor(store))
        tracer = provider.get_tracer("aegis_probe", "1.0")
        threads = [threading.Thread(target=trace_of, args=(tracer, n)) for n in range(4)]
        for thread in threads:
            thread.start()
        asyncio.run(tasks(tracer))
        for thread in threads:
            thread.join()
        store.flush()
        text = next(store.path.glob("*.jsonl")).read_text(encoding="utf-8")
        text = re.sub(r'"service.instance.id","value":\{"stringValue":"[^"]+"', "", text)  # random per provider
        text = re.sub(r'\{"stringValue":"[0-9a-f]{16}"\}', "", text)  # a stored delta's base span id
        lines.append(sorted(re.sub(r'"(traceId|spanId|parentSpanId|startTimeUnixNano|endTimeUnixNano)":"[0-9a-f]+"',
                                   r'"\1":"_"', text).split("\n")[:-1]))
    assert len(lines[1]) == 8 and lines[0] == lines[1] and "\\ud800" in lines[1][0]
