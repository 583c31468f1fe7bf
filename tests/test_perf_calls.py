"""Per-step work of the span path, counted in Python calls (deterministic, not timed).

Each test runs the real path (aegis-probe's own provider, the store's processor, an app's
processors) and counts the Python functions it enters with ``sys.setprofile``; the behaviour the
calls used to give is checked beside the count.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from aegis_probe.leanspans import LeanSpan, LeanTracerProvider
from aegis_probe.store import StoreSpanProcessor, TraceStore


def _calls(work: Callable[[], Any]) -> Counter[str]:
    """The Python functions ``work()`` enters (``file:function``), counted."""
    entered: Counter[str] = Counter()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            entered[f"{Path(frame.f_code.co_filename).name}:{frame.f_code.co_name}"] += 1

    sys.setprofile(profile)
    try:
        work()
    finally:
        sys.setprofile(None)
    return entered


class _Watching(SpanProcessor):
    """An app's processor whose start and ending hooks do something."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.seen.append(("start", span.name))

    def _on_ending(self, span: Any) -> None:
        self.seen.append(("ending", span.name))


def test_lean_spans_skip_empty_processor_hooks(tmp_path: Path) -> None:
    """Starting and ending a lean span calls the processors' hooks that do something (an app's
    processor added after the first span too), and none of the empty ones (the store's, the SDK's
    simple and batch processors' ``on_start`` / ``_on_ending``); no Python call of its own but
    ``start_span``, ``_new_span`` and ``end``."""
    provider = LeanTracerProvider()
    store, exporter = TraceStore(tmp_path / "s"), InMemorySpanExporter()
    provider.add_span_processor(StoreSpanProcessor(store))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    batch = BatchSpanProcessor(InMemorySpanExporter())
    provider.add_span_processor(batch)
    tracer = provider.get_tracer("aegis_probe")
    root = tracer.start_span("root", attributes={"n": 1})
    ctx = trace.set_span_in_context(root)

    def span() -> None:
        tracer.start_span("child", context=ctx, attributes={"a": "x", "b": 2, "c": 1.5, "d": True}).end()

    span()  # first use: imports, caches
    calls = _calls(span)
    assert not [name for name in calls if name.endswith((":on_start", ":_on_ending"))], calls
    assert calls["leanspans.py:start_span"] == calls["leanspans.py:end"] == 1
    assert sum(n for name, n in calls.items() if name.startswith("leanspans.py:")) <= 3, calls  # and _new_span
    watching = _Watching()
    provider.add_span_processor(watching)
    tracer.start_span("late", context=ctx).end()
    root.end()
    assert watching.seen == [("start", "late"), ("ending", "late"), ("ending", "root")]
    assert [s.name for s in exporter.get_finished_spans()] == ["child", "child", "late", "root"]
    assert all(type(s) is LeanSpan for s in exporter.get_finished_spans())
    store.flush()
    assert [len(spans) for spans in store.traces().values()] == [4]
    provider.shutdown()
