"""Per-step work of the span path, counted in Python calls (deterministic, not timed).

Each test runs the real path (aegis-probe's own provider, the store's processor, an app's
processors) and counts the Python functions it enters with ``sys.setprofile``; the behaviour the
calls used to give is checked beside the count.
"""

from __future__ import annotations

import sys
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from aegis_probe.capture.leanspans import LeanSpan, LeanTracerProvider
from aegis_probe.capture.spans import await_in_scope, call_in_scope, start_run, start_step
from aegis_probe.storage.store import StoreSpanProcessor, TraceStore
from toyrun import make_probe


@contextmanager
def _counting() -> Iterator[Counter[str]]:
    """The Python functions entered inside the ``with`` block (``file:function``), counted."""
    entered: Counter[str] = Counter()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            entered[f"{Path(frame.f_code.co_filename).name}:{frame.f_code.co_name}"] += 1

    sys.setprofile(profile)
    try:
        yield entered
    finally:
        sys.setprofile(None)


def _calls(work: Callable[[], Any]) -> Counter[str]:
    """The Python functions ``work()`` enters, counted."""
    with _counting() as entered:
        work()
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


def test_the_store_queues_an_ending_span_in_one_call(tmp_path: Path) -> None:
    """The store's ``on_end`` queues the span without a call of its own (the queue's bound and the
    writer's wake-up inline); the writer writes the trace as before."""
    provider = LeanTracerProvider()
    store = TraceStore(tmp_path / "s")
    provider.add_span_processor(StoreSpanProcessor(store))
    tracer = provider.get_tracer("aegis_probe")
    root = tracer.start_span("root")
    ctx = trace.set_span_in_context(root)
    tracer.start_span("first", context=ctx).end()
    calls = _calls(lambda: tracer.start_span("second", context=ctx, attributes={"k": "v"}).end())
    assert [(name, n) for name, n in calls.items() if name.startswith("writer.py:")] == [("writer.py:on_end", 1)]
    root.end()
    (spans,) = store.traces().values()
    assert sorted(s.name for s in spans) == ["first", "root", "second"]
    assert next(s for s in spans if s.name == "second").attributes == {"k": "v"}
    provider.shutdown()


def test_a_step_in_scope_costs_few_calls(tmp_path: Path) -> None:
    """An agent step opened, run in its scope and finished with its output: the step span holds
    its input and output as before, in 13 Python calls of the span path or fewer, 8 of them in
    ``spans`` (the scope's attach, detach and finish inline, no base-class constructor, the
    parent's recording state read directly; content encoding and redaction aside)."""
    provider = LeanTracerProvider()
    probe = make_probe(provider, TraceStore(tmp_path / "s"))
    run = start_run(probe, "app", framework="toy", task="t")
    token = run.attach()

    def step(n: int) -> None:
        scope = start_step(probe, "worker", run=run, input_messages=lambda: [{"role": "user", "content": f"hi {n}"}])
        call_in_scope(scope, lambda: f"answer {n}", lambda out: scope.finish([{"role": "assistant", "content": out}]), "step")

    step(0)
    calls = _calls(lambda: step(1))
    run.detach(token)
    run.finish()
    probe.store.flush()
    (spans,) = probe.store.traces().values()
    steps = [s for s in spans if s.name == "invoke_agent worker"]
    assert [s.attributes["aegis.step.index"] for s in steps] == [0, 1]
    assert '"content": "hi 1"' in steps[1].attributes["gen_ai.input.messages"].replace('":"', '": "')
    assert "answer 1" in steps[1].attributes["gen_ai.output.messages"]
    for hook in ("spans.py:attach", "spans.py:detach", "spans.py:_finish", "spans.py:records_content",
                 "spans.py:content", "spans.py:next_step_index"):
        assert hook not in calls, calls
    assert calls["spans.py:__init__"] == 1, calls  # StepScope's; not _Scope's too
    own = {name: n for name, n in calls.items() if name.split(":")[0] in ("spans.py", "leanspans.py", "writer.py")}
    assert sum(n for name, n in own.items() if name.startswith("spans.py:")) <= 8, own
    assert sum(own.values()) <= 13, own  # content encoding and redaction aside
    provider.shutdown()


def test_an_async_step_in_scope_costs_few_calls(tmp_path: Path) -> None:
    """The async twin: ``await_in_scope`` attaches, detaches and finishes inline."""
    import asyncio

    provider = LeanTracerProvider()
    probe = make_probe(provider, TraceStore(tmp_path / "s"), capture_content=False)
    run = start_run(probe, "app", framework="toy", task=None)

    async def answer() -> str:
        return "done"

    async def step() -> str:
        scope = start_step(probe, "worker", run=run)
        return await await_in_scope(scope, answer, lambda out: scope.finish(), "step")

    async def main() -> Counter[str]:
        token = run.attach()
        try:
            await step()
            with _counting() as entered:
                assert await step() == "done"
            return entered
        finally:
            run.detach(token)

    calls = asyncio.run(main())
    run.finish()
    assert not [hook for hook in ("spans.py:attach", "spans.py:detach", "spans.py:_finish") if hook in calls], calls
    probe.store.flush()
    (spans,) = probe.store.traces().values()
    assert sorted(s.name for s in spans) == ["invoke_agent worker"] * 2 + ["invoke_workflow app"]
    provider.shutdown()


def _benchmark_apps() -> Any:
    """``benchmarks/apps.py``: the apps with a zero-latency model in process (real frameworks)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "apps.py"
    spec = importlib.util.spec_from_file_location("aegis_benchmark_apps", path)
    assert spec is not None and spec.loader is not None
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # (its dataclass looks it up)
    spec.loader.exec_module(module)
    return module


#: The modules of the span path: scopes, lean spans, the store's processor and writer.
_SPAN_PATH = ("spans.py", "leanspans.py", "writer.py", "otlp_encode.py", "delta.py")
#: Python calls per agent step into the span path and the adapter, on the app's thread, in the
#: default configuration (``instrument(app)``: lean spans, the store; its writer thread not counted).
_STEP_CALLS = {"metagpt": 77, "camel": 71,  # camel: +1 since its prompts are remembered per run (current_run)
               "langgraph": 84,  # 93 before its prompts were converted incrementally (40 steps)
               "openai-agents": 143}  # 186 before issue 32's second Agents SDK cut
#: An adapter's modules, where not ``{framework}.py`` alone.
_ADAPTER_MODULES = {"openai-agents": ("openai_agents.py", "openai_agents_items.py", "openai_agents_model.py")}
#: Agent steps per run where 10 would not show a cost growing with the conversation.
_STEPS = {"langgraph": 40}


@pytest.mark.parametrize("framework", sorted(_STEP_CALLS))
def test_aegis_calls_per_agent_step(framework: str, tmp_path: Path) -> None:
    """A real MetaGPT team, CAMEL society, LangGraph graph and Agents SDK pair (run in its own venv) of
    ``benchmarks/apps.py``, 10 agent
    steps (``_STEPS``): the trace
    holds every step, and the span path and the adapter are entered at most ``_STEP_CALLS`` times per
    step (content encoding, redaction and the model-call seam aside)."""
    pytest.importorskip({"metagpt": "metagpt", "camel": "camel", "langgraph": "langgraph", "openai-agents": "agents"}[framework])
    import aegis_probe

    app = _benchmark_apps().APPS[framework]()
    steps = _STEPS.get(framework, 10)

    def run() -> Any:
        target = app.build(steps)
        probe = aegis_probe.instrument(target, store=tmp_path / "store")
        try:
            app.play(target, probe, steps)
            assert probe.store.flush()
        finally:
            probe.uninstrument()
        return probe

    run()  # first use: imports, caches
    mine = (str(Path(aegis_probe.__file__).parent), str(Path(__file__).resolve().parents[1] / "adapters"))
    entered: Counter[str] = Counter()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(mine):
            entered[f"{Path(frame.f_code.co_filename).name}:{frame.f_code.co_name}"] += 1

    sys.setprofile(profile)
    try:
        probe = run()
    finally:
        sys.setprofile(None)
    trajectory = probe.trajectory()
    assert len(trajectory.steps) == steps
    modules = _SPAN_PATH + _ADAPTER_MODULES.get(framework, (f"{framework}.py",))
    per_step = sum(n for name, n in entered.items() if name.split(":")[0] in modules) / steps
    assert per_step <= _STEP_CALLS[framework], entered
