"""Fault injection in real use, through real LangGraph graphs and AutoGen teams and the real openai
client against the loopback model server: runs at once in two threads and two asyncio tasks under
one probe (one app, or every app traced by one instrumentor), each run with a plan of its own or
none, and two plans applied to one run. A run gets only its own plan, its label names only its own
faults, and ``run_with_plan`` returns the faults of the caller's run."""

from __future__ import annotations

from typing import Any

import pytest
from framework_checks import AT_ONCE, all_in_flight, no_hook_errors, run_at_once

import aegis_probe
from aegis_probe.injection import InjectionPlan, run_with_plan
from aegis_probe.modelserver import Reply
from aegis_probe.storage.store import TraceStore
from aegis_probe.trajectory import load_trajectories

#: What the FM-3.1 operator (terminate early) makes of an agent's action.
EARLY = "The task is already finished. TERMINATE"
#: Per run of :data:`AT_ONCE`: its plan's (agent, that agent's n-th step), or None: no plan.
PLANS: dict[str, tuple[str, int] | None] = {
    "thread-a-ok": ("alice", 0), "thread-b-no": None, "async-c-ok": ("bob", 1), "async-d-no": ("alice", 1)}
TURNS = 4


def _plan(key: str) -> InjectionPlan | None:
    target = PLANS[key]
    return None if target is None else InjectionPlan.single(target[0], "FM-3.1", nth=target[1])


def _injected_step(key: str) -> int | None:
    """The global step index the run's plan hits (alice and bob take turns, alice first)."""
    target = PLANS[key]
    return None if target is None else 2 * target[1] + (target[0] == "bob")


def _task_key(body: dict[str, Any]) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "user").removeprefix("task of ")


def _reply(key: str, body: dict[str, Any]) -> Reply:
    return Reply(content=f"{key} from {body['messages'][0]['content'].removeprefix('You are ').rstrip('.')}")


def _with_own_plan(probe: Any, key: str, run: Any) -> tuple[Any, list[Any]]:
    """``run()`` under the run's own plan (``run_with_plan``), or bare; its result and applied faults."""
    plan = _plan(key)
    return (run(), []) if plan is None else run_with_plan(probe, plan, run)


async def _with_own_plan_async(probe: Any, key: str, run: Any) -> tuple[Any, list[Any]]:
    plan = _plan(key)
    if plan is None:
        return await run(), []
    with probe.inject(plan) as injector:
        result = await run()
    return result, injector.applied


def _each_run_got_its_own_plan(store_dir: Any, applied: dict[str, list[Any]]) -> None:
    """Every run's trace: its own plan's fault as its label (none without a plan), the faulty action
    at that step only, the faults ``run_with_plan``/``injector.applied`` gave its caller."""
    runs = {t.task.removeprefix("task of "): t for t in load_trajectories(store_dir)}
    assert set(runs) == set(AT_ONCE)
    for key, traj in runs.items():
        step = _injected_step(key)
        assert [(f.agent, f.step, f.mode) for f in traj.labels.faults] == (
            [] if step is None else [(PLANS[key][0], step, "FM-3.1")]), key  # type: ignore[index]
        assert [s.index for s in traj.steps if s.output == EARLY] == ([] if step is None else [step]), key
        assert all(key in s.output for s in traj.steps if s.output != EARLY), key
        assert [(f.agent, f.step, f.span_id) for f in applied[key]] == [
            (f.agent, f.step, f.span_id) for f in traj.labels.faults], key


def _graph(base_url: str) -> Any:
    """alice and bob (LangGraph model nodes, ``ChatOpenAI``) taking :data:`TURNS` turns."""
    pytest.importorskip("langgraph")
    from test_realuse_langgraph import _talk

    return _talk(base_url, TURNS)


def test_langgraph_runs_at_once_under_one_probe_get_only_their_own_plans(model_server, tmp_path, caplog, monkeypatch):
    """One compiled graph, one probe, four runs at once (two threads, two asyncio tasks), three
    of them each inside its own ``probe.inject``: another run's plan never lands in a run."""
    for name in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2"):
        monkeypatch.delenv(name, raising=False)
    server = model_server(all_in_flight(4, _task_key, _reply))
    app = _graph(server.base_url)
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    applied: dict[str, list[Any]] = {}
    config = {"recursion_limit": TURNS + 5}

    def one(key: str) -> str:
        state, applied[key] = _with_own_plan(probe, key, lambda: app.invoke({"messages": [("user", f"task of {key}")]}, config))
        return state["messages"][-1].content

    async def one_async(key: str) -> str:
        state, applied[key] = await _with_own_plan_async(
            probe, key, lambda: app.ainvoke({"messages": [("user", f"task of {key}")]}, config))
        return state["messages"][-1].content

    run_at_once(one, one_async)
    probe.flush()
    _each_run_got_its_own_plan(tmp_path / "store", applied)
    assert probe.interceptors == ()
    no_hook_errors(caplog.records)


def test_autogen_runs_at_once_traced_by_one_probe_get_only_their_own_plans(model_server, tmp_path, caplog):
    """Trace-every-app mode (one probe for every team), a team per run, four runs at once: each
    run's plan (or none) is its own."""
    pytest.importorskip("autogen_agentchat")
    from test_realuse_autogen import _at_once_under_one_probe, _talk

    server = model_server(all_in_flight(4, _task_key, _reply))
    applied: dict[str, list[Any]] = {}

    async def one_async(probe: Any, key: str) -> str:
        result, applied[key] = await _with_own_plan_async(probe, key, lambda: _talk(server.base_url, TURNS).run(task=f"task of {key}"))
        return result.messages[-1].to_text()

    _at_once_under_one_probe(tmp_path / "store", one_async)
    _each_run_got_its_own_plan(tmp_path / "store", applied)
    no_hook_errors(caplog.records)


def test_two_plans_on_one_run_are_both_in_its_label(model_server, tmp_path, monkeypatch):
    """Two ``probe.inject`` blocks around one run (a campaign's plan inside a user's): the run's
    label holds both injectors' faults, not the last one's alone."""
    for name in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2"):
        monkeypatch.delenv(name, raising=False)
    server = model_server(lambda body: _reply("solo", body))
    app = _graph(server.base_url)
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    with probe.inject(InjectionPlan.single("alice", "FM-3.1", nth=0)) as outer, \
            probe.inject(InjectionPlan.single("bob", "FM-3.1", nth=1)) as inner:
        app.invoke({"messages": [("user", "task of solo")]}, {"recursion_limit": TURNS + 5})
    probe.flush()
    (traj,) = load_trajectories(TraceStore(tmp_path / "store").path)
    assert [(f.agent, f.step) for f in traj.labels.faults] == [("alice", 0), ("bob", 3)]
    assert [s.index for s in traj.steps if s.output == EARLY] == [0, 3]
    assert [(f.agent, f.step) for f in outer.applied + inner.applied] == [("alice", 0), ("bob", 3)]


def test_an_inject_block_leaves_the_callers_context_as_it_found_it(model_server, tmp_path, monkeypatch):
    """After ``with probe.inject(plan)`` the caller's OpenTelemetry context is the one it had before
    (nothing left attached), and a run made after the block is not injected."""
    from opentelemetry import context as otel_context

    for name in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2"):
        monkeypatch.delenv(name, raising=False)
    server = model_server(lambda body: _reply("after", body))
    app = _graph(server.base_url)
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    before = otel_context.get_current()
    with probe.inject(InjectionPlan.single("alice", "FM-3.1", nth=0)):
        assert otel_context.get_current() is not before
    assert otel_context.get_current() is before
    app.invoke({"messages": [("user", "task of after")]}, {"recursion_limit": TURNS + 5})
    probe.flush()
    (traj,) = load_trajectories(TraceStore(tmp_path / "store").path)
    assert traj.labels.faults == [] and EARLY not in [s.output for s in traj.steps]
