"""Exact and counterfactual replay in real use, through real AutoGen teams, CAMEL societies, MetaGPT
teams and LangGraph graphs and the real openai client against the loopback model server (which
counts every live call): long runs (200-300 steps, tools, streamed models) replayed exactly and
forked in the middle, replays beside injected runs at once (threads, one probe for every app and
probes of their own), odd bytes in the recorded and injected content, a store with a torn last line."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from framework_checks import MEGA, ODD, no_hook_errors, store_lines_are_valid
from own_env import INSIDE, importable, run_in_own_env

import aegis_probe
from aegis_probe.capture import semconv as sc
from aegis_probe.apps import AppSpec, Endpoint
from aegis_probe.counterfactual import inject_step, load_recording, replay
from aegis_probe.capture.interception import LLMResponse
from aegis_probe.injection import InjectionPlan, Target
from aegis_probe.modelserver import Reply
from aegis_probe.storage.store import TraceStore

MODEL = "aegis-scripted"
FORK = "FORKED " + ODD  # the substitute of the forked step


@pytest.fixture(autouse=True)
def _quiet_langsmith(monkeypatch):
    for name in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2", "LANGSMITH_API_KEY", "LANGCHAIN_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def _record(spec: AppSpec, server: Any, store: TraceStore, task: str, judge: Any = None) -> tuple[str, Any]:
    """One instrumented run of ``spec`` on ``task`` against ``server``: its trace id and answer."""
    app = spec.build(Endpoint(server.base_url, MODEL, "sk-test"), task=task)
    probe = aegis_probe.instrument(app, store=store, judge=judge)
    answer = spec.run_app(app, task)
    probe.flush()
    probe.uninstrument()
    assert probe.last_trace_id is not None
    return probe.last_trace_id, answer


def _calls(spans: list[Any]) -> dict[Any, tuple[str, Any, Any, Any]]:
    """Every recorded model call of a trace: request and response (text, tool calls, finish reason)."""
    return {key: (c.request, c.response.content, c.response.tool_calls, c.response.finish_reason)
            for key, c in load_recording(spans).items()}


def _stored(store: TraceStore, trace_id: str) -> str:
    return json.dumps([s.__dict__ for s in store.trace(trace_id)], default=str, sort_keys=True)


def replays_exactly(spec: AppSpec, store: TraceStore, trace_id: str, answer: Any, server: Any) -> Any:
    """An exact replay pointed at the live ``server``: the app's answer and every recorded model
    call equal the recorded run's, every call answered from the recording, none reaching the server."""
    before, original = len(server.requests), store.trace(trace_id)
    result = replay(trace_id, spec, store=store, endpoint=Endpoint(server.base_url, MODEL, "sk-test"))
    assert result.exact, result.divergence or result.error
    assert len(server.requests) == before and result.live_calls == 0
    assert result.replayed_calls == len(load_recording(original))
    assert result.answer == answer
    replayed = store.trace(result.trajectory.trace_id)
    assert _calls(replayed) == _calls(original)
    assert [(s.agent, s.output) for s in result.trajectory.steps] == [(s.agent, s.output) for s in result.original.steps]
    return result


def forks_at(spec: AppSpec, store: TraceStore, trace_id: str, step: int, server: Any) -> Any:
    """A counterfactual replay substituting step ``step``: the steps before it replayed (equal, no
    live call), the step carrying :data:`FORK`, every later model call live (each one a request of
    ``server``), the fork a trace of its own and the recorded run's stored trace unchanged."""
    before, stored = len(server.requests), _stored(store, trace_id)
    result = replay(trace_id, spec, store=store, until_step=step, substitute=FORK,
                    endpoint=Endpoint(server.base_url, MODEL, "sk-test"))
    assert result.divergence is None and result.error is None, result.divergence or result.error
    original, fork = result.original, result.trajectory
    assert [(s.agent, s.output) for s in fork.steps[:step]] == [(s.agent, s.output) for s in original.steps[:step]]
    assert fork.steps[step].agent == original.steps[step].agent and fork.steps[step].output == FORK
    assert result.replayed_calls == sum(1 for c in load_recording(store.trace(trace_id)).values() if c.step_index < step)
    live = server.requests[before:]
    assert result.live_calls == len(live) > 0
    assert sum(len(s.llm_calls) for s in fork.steps[step + 1:]) + len(fork.steps[step].llm_calls) - 1 == len(live)
    root = next(s for s in store.trace(fork.trace_id) if s.parent_span_id is None)
    assert fork.trace_id != trace_id and root.attributes[sc.REPLAY_OF] == trace_id
    assert root.attributes[sc.REPLAY_UNTIL_STEP] == step
    assert _stored(store, trace_id) == stored
    return result


# -- long runs ----------------------------------------------------------------------------------

def _streamed_talk(base_url: str, turns: int) -> Any:
    """alice and bob (LangGraph model nodes on a checkpointer) taking ``turns`` turns, each node's
    ``ChatOpenAI`` streaming its reply; each sends its system prompt and the last 6 messages."""
    from langchain_core.messages import SystemMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, MessagesState, StateGraph
    from test_realuse_langgraph import _llm

    llm = _llm(base_url, streaming=True)

    def speaker(name: str) -> Any:
        def node(state: Any) -> dict[str, Any]:
            reply = llm.invoke([SystemMessage(f"You are {name}."), *state["messages"][-6:]])
            reply.name = name
            return {"messages": [reply]}

        return node

    graph = StateGraph(MessagesState)
    for name, other in (("alice", "bob"), ("bob", "alice")):
        graph.add_node(name, speaker(name))
        graph.add_conditional_edges(name, lambda s, other=other: END if len(s["messages"]) > turns else other)
    graph.add_edge(START, "alice")
    return graph.compile(name="talk", checkpointer=InMemorySaver())


def test_langgraph_120_streamed_steps_replay_exactly_and_fork_with_a_label_of_their_own(model_server, tmp_path):
    """A graph of 120 model-node steps, streamed models, read with ``astream`` (tokens and state);
    then a single-step injection at step 60 keeps its failure labelled on the fork's trace only."""
    pytest.importorskip("langgraph")
    from test_realuse_langgraph import _speaker

    steps, counter = 120, itertools.count()
    server = model_server(lambda body: Reply(content=f"{_speaker(body)} says {next(counter)}"))

    def run_app(app: Any, task: str) -> str:
        async def consume() -> str:
            config = {"recursion_limit": steps + 5, "configurable": {"thread_id": "t"}}
            chunks = [c async for c in app.astream({"messages": [("user", task)]}, config, stream_mode=["messages", "values"])]
            assert sum(kind == "messages" for kind, _ in chunks) >= steps
            return next(v for kind, v in reversed(chunks) if kind == "values")["messages"][-1].content

        return asyncio.run(consume())

    spec = AppSpec(lambda base_url, model, api_key: _streamed_talk(base_url, steps), run_app)
    store = TraceStore(tmp_path / "store")
    judge = lambda task, answer: answer == f"bob says {steps - 1}"  # noqa: E731
    trace_id, answer = _record(spec, server, store, f"count to {steps}", judge)
    assert len(server.requests) == steps and all(r["stream"] for r in server.requests)
    replays_exactly(spec, store, trace_id, answer, server)
    forks_at(spec, store, trace_id, 60, server)
    stored = _stored(store, trace_id)
    injected = inject_step(trace_id, spec, 60, "FM-3.1", endpoint=Endpoint(server.base_url, MODEL, "sk-test"),
                           judge=judge, store=store)
    assert injected.kept and injected.result.trajectory.steps[60].output.startswith("The task is already finished")
    fork = aegis_probe.Trajectory.from_spans(store.trace(injected.result.trajectory.trace_id))
    assert [(f.agent, f.step, f.mode) for f in fork.labels.faults] == [("alice", 60, "FM-3.1")]
    assert fork.labels.faults[0].span_id == fork.steps[60].span_id
    assert _stored(store, trace_id) == stored
    assert aegis_probe.Trajectory.from_spans(store.trace(trace_id)).labels.faults == []
    store_lines_are_valid(tmp_path / "store")


def test_autogen_team_of_80_turns_with_a_tool_and_a_streamed_model_replays_exactly_and_forks(model_server, tmp_path, caplog):
    """A counter whose streamed model calls ``tick`` every turn and a checker, 80 turns."""
    pytest.importorskip("autogen_agentchat")
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import RoundRobinGroupChat
    from autogen_core.tools import FunctionTool
    from test_realuse_autogen import _client, _consume, _said, _speaker

    turns, counter = 80, itertools.count()

    def policy(body: dict[str, Any]) -> Reply:
        n = next(counter)
        return Reply(tool_calls=[("tick", {"n": n})]) if _speaker(body) == "counter" else Reply(content=f"checked {n}")

    def build(base_url: str, model: str, api_key: str) -> Any:
        def tick(n: int) -> str:
            return f"tick {n}"

        client = _client(base_url)
        agents = [AssistantAgent("counter", model_client=client, system_message="You are counter.",
                                 tools=[FunctionTool(tick, name="tick", description="Count one tick.")], model_client_stream=True),
                  AssistantAgent("checker", model_client=client, system_message="You are checker.", model_client_stream=True)]
        return RoundRobinGroupChat(agents, termination_condition=MaxMessageTermination(turns + 1))

    spec = AppSpec(build, lambda app, task: [m.to_text() for m in _said(asyncio.run(_consume(app, task)))])
    server = model_server(policy)
    store = TraceStore(tmp_path / "store")
    trace_id, answer = _record(spec, server, store, f"tick {turns // 2} times")
    assert len(answer) == turns and answer[0] == "tick 0"
    exact = replays_exactly(spec, store, trace_id, answer, server)
    assert [t.result for s in exact.trajectory.steps for t in s.tool_calls][:2] == ["tick 0", "tick 2"]
    fork = forks_at(spec, store, trace_id, 41, server)  # a checker's turn
    assert fork.answer[:41] == answer[:41] and fork.answer[41] == FORK and fork.answer[42] == f"tick {turns}"
    no_hook_errors(caplog.records)


def test_camel_society_of_60_steps_with_tools_replays_exactly_and_forks(model_server, tmp_path, caplog):
    """An Asker and an Adder who calls its ``add`` tool every turn, 30 rounds (60 steps, 90 calls)."""
    pytest.importorskip("camel")
    from test_realuse_camel import _is_asker, _play, _society

    rounds, counter, asked = 30, itertools.count(), itertools.count(1)

    def policy(body: dict[str, Any]) -> Reply:
        if _is_asker(body):
            return Reply(content=f"Asker says {next(asked)}")
        if body["messages"][-1]["role"] == "tool":
            return Reply(content=f"Adder says {body['messages'][-1]['content']}")
        return Reply(tool_calls=[("add", {"a": 1000, "b": next(counter)})])

    spec = AppSpec(lambda base_url, model, api_key, task=None: _society(base_url, task), lambda app, task: _play(app, rounds, False))
    server = model_server(policy)
    store = TraceStore(tmp_path / "store")
    trace_id, answer = _record(spec, server, store, "Count together.")
    assert len(answer) == 2 * rounds and answer[1] == ("Adder", "Adder says 1000")
    replays_exactly(spec, store, trace_id, answer, server)
    fork = forks_at(spec, store, trace_id, 30, server)  # an Asker's turn
    assert fork.answer[:30] == answer[:30] and fork.answer[30] == ("Asker", FORK)
    no_hook_errors(caplog.records)


def test_camel_workforce_whose_subtasks_run_at_once_replays_exactly(model_server, tmp_path, caplog):
    """A workforce of 20 subtasks done side by side by copies of its Adder (each with a tool call),
    rated by the Planner: the copies number their calls, and begin their steps, in whatever order
    they run in, so the replay answers each call with the Adder's recorded call of the same request
    (was: a divergence at the Adder's second call) and takes the same steps begun in another order
    as equal; no call reaches the endpoint."""
    pytest.importorskip("camel")
    from camel.tasks import Task
    from test_realuse_camel import _workforce, _workforce_policy

    subtasks = 20
    spec = AppSpec(lambda base_url, model, api_key: _workforce(base_url),
                   lambda workforce, task: workforce.process_task(Task(content=task, id="0")).result)
    server = model_server(_workforce_policy(subtasks))
    store = TraceStore(tmp_path / "store")
    trace_id, answer = _record(spec, server, store, "Add many numbers.")
    assert answer.count("sum 10") == subtasks and len(server.requests) == 2 + 3 * subtasks
    result = replay(trace_id, spec, store=store, endpoint=Endpoint(server.base_url, MODEL, "sk-test"))
    assert result.exact, result.divergence or result.error
    assert result.answer == answer and result.live_calls == 0 and len(server.requests) == 2 + 3 * subtasks
    assert result.replayed_calls == 2 + 3 * subtasks
    agents = lambda traj: sorted(s.agent for s in traj.steps)  # noqa: E731 (outputs: equal up to the workers' fresh ids)
    assert agents(result.trajectory) == agents(result.original) and len(result.original.steps) == 2 + 2 * subtasks
    no_hook_errors(caplog.records)


def test_metagpt_team_of_150_steps_replays_exactly_and_forks(model_server, tmp_path, caplog, monkeypatch):
    """Ann (two actions), Bob (the model chooses his action) and Cid in a ring, 150 rounds."""
    pytest.importorskip("metagpt")
    monkeypatch.chdir(tmp_path)
    from test_realuse_metagpt import CHOOSE, _run, _team

    from aegis_probe.demos import metagpt as demo

    rounds, counter = 150, itertools.count()

    def policy(body: dict[str, Any]) -> Reply:
        return Reply("1") if CHOOSE in body["messages"][-1]["content"] else Reply(f"{demo._agent(body)} says {next(counter)}")

    def run_app(team: Any, task: str) -> list[str]:
        asyncio.run(_run(team, task, rounds))
        return [m.content for m in team.env.roles["Cid"].rc.memory.get()]

    spec = AppSpec(lambda base_url, model, api_key: _team(base_url), run_app)
    server = model_server(policy)
    store = TraceStore(tmp_path / "store")
    trace_id, answer = _record(spec, server, store, "Count together.")
    replays_exactly(spec, store, trace_id, answer, server)
    fork = forks_at(spec, store, trace_id, 77, server)  # one of Cid's steps (one model call)
    assert fork.trajectory.steps[77].agent == "Cid" and FORK in fork.answer
    no_hook_errors(caplog.records)


# -- at once ------------------------------------------------------------------------------------

def _talk_spec(turns: int) -> AppSpec:
    pytest.importorskip("langgraph")
    from test_realuse_langgraph import _talk

    def run_app(app: Any, task: str) -> list[str]:
        return [m.content for m in app.invoke({"messages": [("user", task)]}, {"recursion_limit": turns + 5})["messages"]]

    return AppSpec(lambda base_url, model, api_key: _talk(base_url, turns, window=turns + 1), run_app)


def _keyed(body: dict[str, Any]) -> Reply:
    """A reply naming the run (its task, ``task of KEY``) and the speaker."""
    key = next(m["content"] for m in body["messages"] if m["role"] == "user").removeprefix("task of ")
    return Reply(content=f"{key} from {body['messages'][0]['content'].removeprefix('You are ').rstrip('.')}")


def test_replays_beside_injected_runs_at_once_stay_apart(model_server, tmp_path):
    """An exact and a counterfactual replay (probes of their own) in threads while two live runs of
    the same graph under one probe go on at once, one injected: the replays make no call but the
    fork's, carry no label, and equal their recording; the injected run alone has the fault."""
    turns = 30
    spec = _talk_spec(turns)
    server = model_server(_keyed)
    store = TraceStore(tmp_path / "store")
    trace_id, answer = _record(spec, server, store, "task of recorded")
    live_store = TraceStore(tmp_path / "live")
    app = spec.build(Endpoint(server.base_url, MODEL, "sk-test"))
    probe = aegis_probe.instrument(app, store=live_store)
    before = len(server.requests)

    def job(kind: str) -> Any:
        if kind == "exact":
            return replay(trace_id, spec, store=store, endpoint=Endpoint(server.base_url, MODEL, "sk-test"))
        if kind == "fork":
            return replay(trace_id, spec, store=store, until_step=15, substitute=FORK,
                          endpoint=Endpoint(server.base_url, MODEL, "sk-test"))
        if kind == "injected":
            with probe.inject(InjectionPlan.single("alice", "FM-3.1", nth=3)):
                return spec.run_app(app, "task of injected")
        return spec.run_app(app, "task of plain")

    with ThreadPoolExecutor(4) as pool:
        exact, fork, injected, plain = pool.map(job, ["exact", "fork", "injected", "plain"])
    assert exact.exact and exact.answer == answer and exact.live_calls == 0
    assert fork.divergence is None and fork.trajectory.steps[15].output == FORK
    keys = [_keyed(r).content.split(" from ")[0] for r in server.requests[before:]]
    assert sorted(set(keys)) == ["injected", "plain", "recorded"] and keys.count("recorded") == fork.live_calls == turns - 16
    for result in (exact, fork):
        assert result.trajectory.labels.faults == [] and all("injected" not in s.output for s in result.trajectory.steps)
    probe.flush()
    labels = {t.task: [(f.agent, f.step) for f in t.labels.faults] for t in aegis_probe.load_trajectories(live_store.path)}
    assert labels == {"task of injected": [("alice", 6)], "task of plain": []}
    assert injected[7] == "The task is already finished. TERMINATE" and "TERMINATE" not in " ".join(plain)


def test_replays_beside_injected_runs_traced_by_one_probe_stay_apart(model_server, tmp_path):
    """AutoGen in trace-every-app mode (one probe for every team, an injection plan in one thread)
    while a recorded run is replayed exactly in another thread: the replay's calls are answered from
    the recording and never injected."""
    pytest.importorskip("autogen_agentchat")
    from test_realuse_autogen import _talk

    from aegis_probe.capture.instrumentor import AegisInstrumentor

    spec = AppSpec(lambda base_url, model, api_key: _talk(base_url, 20),
                   lambda app, task: [m.to_text() for m in asyncio.run(app.run(task=task)).messages])
    server = model_server(_keyed)
    store = TraceStore(tmp_path / "store")
    trace_id, answer = _record(spec, server, store, "task of recorded")
    instrumentor = AegisInstrumentor()
    instrumentor.instrument(store=tmp_path / "live")
    try:
        probe = instrumentor.probe("autogen")
        before = len(server.requests)

        def injected() -> list[str]:
            with probe.inject(InjectionPlan(targets=[Target(agent=a, mode="FM-3.1", nth=n) for a in ("alice", "bob") for n in (0, 5)])):
                return spec.run_app(spec.build(Endpoint(server.base_url, MODEL, "sk-test")), "task of injected")

        with ThreadPoolExecutor(2) as pool:
            live = pool.submit(injected)
            result = pool.submit(replay, trace_id, spec, store=store, endpoint=Endpoint(server.base_url, MODEL, "sk-test")).result()
            said = live.result()
    finally:
        instrumentor.uninstrument()
    assert result.exact and result.answer == answer and result.trajectory.labels.faults == []
    assert said.count("The task is already finished. TERMINATE") == 4  # its four targets
    assert all("recorded" not in str(r["messages"]) for r in server.requests[before:])


def test_a_replay_of_an_injected_run_keeps_its_injected_faults_for_the_steps_it_replayed(model_server, tmp_path):
    """An injected run (alice's 2nd step, step 2, corrupted) replayed exactly, and forked after and
    at the injected step, into the run's own store (a campaign's ``traces/``, blame's default):
    the exact copy and the fork after it replay the faulty action, so they carry the fault (on
    their own step span); the fork at it replaced that action, so it carries none. Unlabelled, a
    copy read as a clean run (no fault, not judged) among the labelled failures."""
    spec = _talk_spec(8)
    server = model_server(_keyed)
    store = TraceStore(tmp_path / "store")
    app = spec.build(Endpoint(server.base_url, MODEL, "sk-test"))
    probe = aegis_probe.instrument(app, store=store)
    with probe.inject(InjectionPlan.single("alice", "FM-3.1", nth=1)):
        answer = spec.run_app(app, "task of injected")
    probe.flush()
    probe.uninstrument()
    original = probe.trajectory()
    assert [(f.agent, f.step) for f in original.labels.faults] == [("alice", 2)]
    exact = replays_exactly(spec, store, original.trace_id, answer, server)
    after = replay(original.trace_id, spec, store=store, until_step=5, substitute=FORK,
                   endpoint=Endpoint(server.base_url, MODEL, "sk-test"))
    at = replay(original.trace_id, spec, store=store, until_step=2, substitute=FORK,
                endpoint=Endpoint(server.base_url, MODEL, "sk-test"))
    for result in (exact, after):
        copy = aegis_probe.Trajectory.from_spans(store.trace(result.trajectory.trace_id))
        assert copy.steps[2].output == original.steps[2].output
        assert [(f.agent, f.step, f.mode, f.span_id) for f in copy.labels.faults] == [
            ("alice", 2, "FM-3.1", copy.steps[2].span_id)] and copy.labels.source == "injection"
    assert aegis_probe.Trajectory.from_spans(store.trace(at.trajectory.trace_id)).labels.faults == []
    assert aegis_probe.Trajectory.from_spans(store.trace(original.trace_id)).labels == original.labels


def test_metagpt_replays_beside_injected_runs_at_once_stay_apart(model_server, tmp_path, monkeypatch):
    """Two exact replays of a MetaGPT team's run and two live runs of other teams (probes of their
    own, each with Bob's second step injected), all at once in threads: the replays equal the
    recording with no label; each live run has its own fault only."""
    pytest.importorskip("metagpt")
    monkeypatch.chdir(tmp_path)
    from test_realuse_metagpt import CHOOSE, _run, _team

    from aegis_probe.demos import metagpt as demo

    def policy(body: dict[str, Any]) -> Reply:
        prompt = body["messages"][-1]["content"]
        return Reply("1") if CHOOSE in prompt else Reply(f"{demo._agent(body)} on {len(prompt)}")

    def run_app(team: Any, task: str) -> list[str]:
        asyncio.run(_run(team, task, 12))
        return [m.content for m in team.env.roles["Cid"].rc.memory.get()]

    spec = AppSpec(lambda base_url, model, api_key: _team(base_url), run_app)
    server = model_server(policy)
    store, live = TraceStore(tmp_path / "store"), TraceStore(tmp_path / "live")
    trace_id, answer = _record(spec, server, store, "the recorded idea")
    before = len(server.requests)

    def job(key: str) -> Any:
        if key.startswith("replay"):
            return replay(trace_id, spec, store=store, endpoint=Endpoint(server.base_url, MODEL, "sk-test"))
        team = spec.build(Endpoint(server.base_url, MODEL, "sk-test"))
        probe = aegis_probe.instrument(team, store=live)
        with probe.inject(InjectionPlan.single("Bob", "FM-3.1", nth=1)) as injector:
            run_app(team, f"the idea of {key}")
        probe.flush()
        return injector.applied

    with ThreadPoolExecutor(4) as pool:
        first, live_a, second, live_b = pool.map(job, ["replay-1", "live-a", "replay-2", "live-b"])
    for result in (first, second):
        assert result.exact and result.answer == answer and result.live_calls == 0, result.divergence or result.error
        assert result.trajectory.labels.faults == []
    assert "the recorded idea" not in json.dumps(server.requests[before:])
    labels = {t.task: [(f.agent, f.step, f.span_id) for f in t.labels.faults] for t in aegis_probe.load_trajectories(live.path)}
    assert labels == {f"the idea of {k}": [(f.agent, f.step, f.span_id) for f in applied]
                      for k, applied in (("live-a", live_a), ("live-b", live_b))}
    assert [(f.agent, f.step) for f in live_a + live_b] == [("Bob", 4)] * 2


# -- odd bytes, torn and missing records ----------------------------------------------------------

class _OddManipulator:
    """An LLM-kind manipulator whose rewrite is :data:`MEGA` (odd bytes, 1 MiB)."""

    kind = "llm"

    def corrupt(self, mode: str, response: LLMResponse, ctx: Any) -> LLMResponse:
        return LLMResponse(content=MEGA, finish_reason="stop")

    def inject(self, mode: str, messages: list[dict[str, Any]], ctx: Any) -> None:
        return None


def test_odd_bytes_recorded_and_injected_replay_exactly(model_server, tmp_path):
    """A run on a task with NUL, bidi and non-BMP text whose replies carry them (one of 1 MiB), and a
    reply an injection rewrote to 1 MiB of them: both replay exactly, byte for byte."""
    turns = 6
    spec = _talk_spec(turns)
    replies = itertools.cycle([ODD, MEGA, "\U0001f600\U00010348 \x00", "plain"])
    server = model_server(lambda body: Reply(content=next(replies)))
    store = TraceStore(tmp_path / "store")
    trace_id, answer = _record(spec, server, store, "task " + ODD)
    assert answer[2] == MEGA
    replays_exactly(spec, store, trace_id, answer, server)

    app = spec.build(Endpoint(server.base_url, MODEL, "sk-test"))
    probe = aegis_probe.instrument(app, store=store)
    with probe.inject(InjectionPlan(targets=[Target(agent="bob", mode="FM-2.3", operator="llm", nth=1)]),
                      manipulators={"llm": _OddManipulator()}):
        injected = spec.run_app(app, "injected " + ODD)
    probe.flush()
    assert injected[4] == MEGA
    traj = probe.trajectory()
    assert [(f.agent, f.step) for f in traj.labels.faults] == [("bob", 3)] and traj.steps[3].output == MEGA
    replays_exactly(spec, store, traj.trace_id, injected, server)
    store_lines_are_valid(tmp_path / "store")


def test_a_run_whose_model_call_failed_replays_to_the_same_failure_and_forks_before_it(model_server, tmp_path):
    """The endpoint fails the 5th call (HTTP 500) and the run ends there with the client's error:
    the run is replayable (was: "no captured content", though it was captured): replayed exactly,
    the app fails at that call with the recorded error and nothing reaches the endpoint; forked at
    step 2, the calls after it, that one too, go live and the run goes to its end."""
    spec = _talk_spec(8)
    calls = itertools.count()

    def policy(body: dict[str, Any]) -> Reply:
        if next(calls) == 4:
            raise RuntimeError("the endpoint is down")
        return _keyed(body)

    server = model_server(policy)
    store = TraceStore(tmp_path / "store")
    app = spec.build(Endpoint(server.base_url, MODEL, "sk-test"))
    probe = aegis_probe.instrument(app, store=store)
    with pytest.raises(Exception, match="the endpoint is down") as failed:
        spec.run_app(app, "task of failing")
    probe.flush()
    probe.uninstrument()
    original = probe.trajectory()
    assert len(original.steps) == 5 and "the endpoint is down" in original.error
    before = len(server.requests)
    result = replay(original.trace_id, spec, store=store, endpoint=Endpoint(server.base_url, MODEL, "sk-test"))
    assert result.divergence is None and len(server.requests) == before and result.live_calls == 0
    assert result.error.startswith("RecordedFailure: call #2 of alice failed when recorded: ")
    assert type(failed.value).__name__ in result.error and "the endpoint is down" in result.error
    assert [(s.agent, s.output) for s in result.trajectory.steps] == [(s.agent, s.output) for s in original.steps]
    fork = forks_at(spec, store, original.trace_id, 2, server)
    assert len(fork.answer) == 9 and fork.answer[-1] == "failing from bob" and fork.error is None


@pytest.mark.skipif(importable("agents.run"), reason=INSIDE)
def test_refusals_replay_in_the_agents_sdks_own_environment():
    run_in_own_env(".venv-openai-agents", "tests/test_realuse_replay.py", "refusal", env={"OPENAI_AGENTS_DISABLE_TRACING": "1"})


@pytest.mark.skipif(not importable("agents.run"), reason="openai-agents is not installed here (it runs in .venv-openai-agents)")
def test_a_refused_run_replays_to_the_same_refusal(tmp_path):
    """An Agents SDK run whose model refuses (``message.refusal``, no content) ends with
    ``ModelRefusalError``; replayed, the recorded refusal reaches the SDK as a refusal again, so the
    replay ends with the same error (was: given back as content, the run's answer)."""
    from test_refusals import REFUSAL, TASK, RefusingServer, build_clerk, run_clerk

    spec = AppSpec(build_clerk, run_clerk)
    store = TraceStore(tmp_path / "store")
    with RefusingServer() as server:
        app = build_clerk(server.base_url, MODEL, "sk-test")
        probe = aegis_probe.instrument(app, store=store)
        with pytest.raises(Exception, match=REFUSAL) as refused:
            run_clerk(app, TASK)
        probe.flush()
        probe.uninstrument()
        result = replay(probe.last_trace_id, spec, store=store, endpoint=Endpoint(server.base_url, MODEL, "sk-test"))
        assert len(server.requests) == 1 and result.replayed_calls == 1 and result.live_calls == 0
    assert result.answer is None and result.error == f"{type(refused.value).__name__}: {refused.value}"


def test_a_store_with_a_torn_last_line_still_replays_and_a_missing_run_is_named(model_server, tmp_path, caplog):
    """A write cut short after the recorded run (a crash mid-line): the run still replays exactly and
    the replay is stored after it; a run not in the store is a ``KeyError`` naming it and the store."""
    spec = _talk_spec(4)
    server = model_server(_keyed)
    store = TraceStore(tmp_path / "store")
    trace_id, answer = _record(spec, server, store, "task of torn")
    with open(store.file, "ab") as fh:
        fh.write(b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "ab')
    replays_exactly(spec, store, trace_id, answer, server)
    assert "partial last line" in caplog.text
    store_lines_are_valid(tmp_path / "store")
    with pytest.raises(KeyError, match=f"no trace matching '{'0' * 32}' in {os.fspath(store.path)}"):
        replay("0" * 32, spec, store=store)
    assert len(store.traces()) == 2
