"""Instrumentation under threads: apps instrumented, run and uninstrumented in parallel threads
(what ``inject --concurrency N`` does) each give one trace of the right steps, leave no wrapper
behind, and a later sequential run is unchanged; a campaign labels the same at any concurrency."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import wrapt
from autogen_agentchat.agents import BaseChatAgent
from autogen_agentchat.teams import BaseGroupChat
from autogen_core.models import ChatCompletionClient
from autogen_core.tools import BaseStreamTool, BaseTool

import aegis_probe
from aegis_probe.capture import semconv as sc
from aegis_probe.capture.adapter import get_adapter, subclasses
from aegis_probe.demos import autogen as demo
from aegis_probe.storage.store import TraceStore

ROOT = Path(__file__).resolve().parents[1]
APPS, THREADS = 24, 8


def _class_dicts() -> dict[type, dict[str, Any]]:
    """The raw ``__dict__`` of every autogen class the adapter may patch."""
    classes = set().union(*(set(subclasses(b)) for b in (BaseGroupChat, BaseChatAgent, ChatCompletionClient, BaseTool, BaseStreamTool)))
    return {cls: dict(vars(cls)) for cls in classes}


def _wrappers_left() -> list[str]:
    return [f"{cls.__qualname__}.{name}" for cls in _class_dicts() for name, value in vars(cls).items()
            if isinstance(value, wrapt.ObjectProxy)]


def _one_run(base_url: str, store: Path) -> str:
    app = demo.build_app(base_url, "aegis-scripted", "sk-test")
    probe = aegis_probe.instrument(app, store=store)
    try:
        demo.run_app(app, demo.TASK)
    finally:
        probe.uninstrument()
    assert probe.last_trace_id is not None
    return probe.last_trace_id


def _steps(store: TraceStore, trace_id: str) -> list[tuple[int, str]]:
    return [(s.index, s.agent) for s in aegis_probe.Trajectory.from_spans(store.trace(trace_id)).steps]


def test_parallel_instrument_run_uninstrument(model_server, tmp_path):
    server = model_server(demo.policy)
    expected = [(0, "planner"), (1, "calculator"), (2, "reviewer")]
    before = _class_dicts()

    with ThreadPoolExecutor(THREADS) as pool:
        trace_ids = list(pool.map(lambda _: _one_run(server.base_url, tmp_path / "parallel"), range(APPS)))

    store = TraceStore(tmp_path / "parallel")
    assert len(set(trace_ids)) == APPS and len(store.traces()) == APPS
    assert [_steps(store, t) for t in trace_ids] == [expected] * APPS
    assert not get_adapter("autogen").installed
    assert _wrappers_left() == []
    after = _class_dicts()
    assert {cls: d for cls, d in after.items() if cls in before} == before, "every __dict__ entry is the original"

    # A later sequential run is unchanged: one trace, the same three steps, one span per step.
    trace_id = _one_run(server.base_url, tmp_path / "sequential")
    sequential = TraceStore(tmp_path / "sequential")
    assert _steps(sequential, trace_id) == expected
    agent_spans = [s for s in sequential.trace(trace_id) if s.attributes.get(sc.OPERATION) == sc.OP_AGENT and s.parent_span_id]
    assert len(agent_spans) == 3
    assert _wrappers_left() == []


def test_patcher_wraps_each_attribute_once_across_threads():
    from aegis_probe.capture.adapter import Patcher

    class Target:
        def method(self) -> int:
            return 1

    original = vars(Target)["method"]
    calls: list[int] = []

    def wrapper(wrapped, instance, args, kwargs):
        calls.append(1)
        return wrapped(*args, **kwargs)

    patcher = Patcher()
    with ThreadPoolExecutor(THREADS) as pool:
        wrapped = list(pool.map(lambda _: patcher.wrap(Target, "method", wrapper), range(64)))
    assert wrapped.count(True) == 1 and len(patcher) == 1
    assert Target().method() == 1 and calls == [1], "one wrapper layer, not one per request"
    patcher.restore()
    assert vars(Target)["method"] is original


def _campaign(out: Path, concurrency: int) -> dict[str, tuple]:
    proc = subprocess.run(
        [sys.executable, "-m", "aegis_probe", "inject", "--app", "examples/injection/autogen_math.py:build_app",
         "--tasks", "examples/injection/math_tasks.jsonl", "--plans-per-run", "3", "--seed", "7",
         "--concurrency", str(concurrency), "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    labels = {}
    for line in (out / "runs.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("kind") == "injected":
            labels[rec["key"]] = tuple((f["agent"], f["step"], f["mode"], f["strategy"]) for f in rec["applied"])
        elif rec.get("kind") == "baseline":
            labels[rec["key"]] = (rec["success"], tuple(sorted(rec["agent_steps"].items())))
    return labels


def test_inject_concurrency_gives_the_same_labels(tmp_path):
    sequential = _campaign(tmp_path / "c1", 1)
    parallel = _campaign(tmp_path / "c8", 8)
    assert any(key.endswith("/plan-0") and value for key, value in sequential.items()), "faults were applied"
    assert parallel == sequential


def test_concurrent_runs_in_one_event_loop_beside_threads(model_server, tmp_path):
    """Teams run concurrently in one event loop (asyncio.gather) while other teams run in threads:
    every run is its own trace with its own three steps, none mixed into another."""
    import asyncio

    server = model_server(demo.policy)
    store_dir = tmp_path / "mixed"
    loop_apps = [demo.build_app(server.base_url, "aegis-scripted", "sk-test") for _ in range(6)]
    probes = [aegis_probe.instrument(app, store=store_dir) for app in loop_apps]

    async def in_loop() -> None:
        results = await asyncio.gather(*(app.run(task=demo.TASK) for app in loop_apps))
        assert all("126" in r.messages[-1].to_text() for r in results)

    try:
        with ThreadPoolExecutor(4) as pool:
            threaded = [pool.submit(_one_run, server.base_url, store_dir) for _ in range(8)]
            asyncio.run(in_loop())
            thread_ids = [f.result() for f in threaded]
    finally:
        for probe in probes:
            probe.uninstrument()

    store = TraceStore(store_dir)
    assert len(store.traces()) == 6 + 8
    expected = [(0, "planner"), (1, "calculator"), (2, "reviewer")]
    assert [_steps(store, t) for t in store.traces()] == [expected] * 14
    assert len(set(thread_ids)) == 8
    assert _wrappers_left() == []
