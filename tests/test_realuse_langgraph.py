"""LangGraph in real use, through the real graph runtime and the real openai client (``ChatOpenAI``)
against the loopback model server: a run of 300 node steps, odd bytes in the model's replies and
the user's task (NUL, lone surrogates, bytes that are not UTF-8, right-to-left text and emoji,
control characters, a 1 MiB turn), and runs at once in two threads and in two asyncio tasks."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from typing import Any

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("langchain_openai")

import aegis_probe  # noqa: E402
from aegis_probe.modelserver import Reply  # noqa: E402
from framework_checks import (  # noqa: E402
    AT_ONCE, LONE, MEGA, ODD, SlowOrFast, all_in_flight, cancel_one_beside_another, cancelled_beside_whole, escaped,
    lone_surrogate_task_fails_as_uninstrumented, long_run_is_whole, no_hook_errors, runs_stay_apart, run_at_once,
    store_lines_are_valid)

STEPS = 300
FILES = "files: " + os.fsdecode(b"caf\xe9-\xff.txt")  # a file name that is not UTF-8, as os.listdir gives it


@pytest.fixture(autouse=True)
def _no_langsmith(monkeypatch):
    for name in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2", "LANGSMITH_API_KEY", "LANGCHAIN_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def _llm(base_url: str, streaming: bool = False) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model="aegis-scripted", base_url=base_url, api_key="sk-test", max_retries=0, streaming=streaming)


def _talk(base_url: str, turns: int, window: int = 6, checkpointer: bool = False) -> Any:
    """Two model nodes taking turns, ``turns`` node steps in all; each sends the model its system
    prompt and the last ``window`` messages (a trimmed history)."""
    from langchain_core.messages import SystemMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, MessagesState, StateGraph

    llm = _llm(base_url)

    def speaker(name: str) -> Any:
        def node(state: Any) -> dict[str, Any]:
            reply = llm.invoke([SystemMessage(f"You are {name}."), *state["messages"][-window:]])
            reply.name = name
            return {"messages": [reply]}

        return node

    graph = StateGraph(MessagesState)
    graph.add_node("alice", speaker("alice"))
    graph.add_node("bob", speaker("bob"))
    graph.add_edge(START, "alice")
    graph.add_conditional_edges("alice", lambda s: END if len(s["messages"]) > turns else "bob")
    graph.add_conditional_edges("bob", lambda s: END if len(s["messages"]) > turns else "alice")
    return graph.compile(name="talk", checkpointer=InMemorySaver() if checkpointer else None)


def _speaker(body: dict[str, Any]) -> str:
    return body["messages"][0]["content"].removeprefix("You are ").rstrip(".")


@pytest.mark.parametrize("mode", ["invoke", "astream"])
def test_a_run_of_300_steps_is_whole(mode, model_server, tmp_path):
    """``invoke``, and ``astream`` of the model's tokens and the state (``stream_mode`` messages and
    values) on a checkpointer thread."""
    counter = itertools.count()
    server = model_server(lambda body: Reply(content=f"{_speaker(body)} says {next(counter)}"))
    app = _talk(server.base_url, STEPS, checkpointer=mode == "astream")
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    start = {"messages": [("user", "count to 300")]}
    if mode == "astream":
        async def consume() -> Any:
            config = {"recursion_limit": STEPS + 5, "configurable": {"thread_id": "long"}}
            chunks = [c async for c in app.astream(start, config, stream_mode=["messages", "values"])]
            assert sum(kind == "messages" for kind, _ in chunks) >= STEPS, "the model's tokens as they came"
            return next(value for kind, value in reversed(chunks) if kind == "values")

        state = asyncio.run(consume())
    else:
        state = app.invoke(start, {"recursion_limit": STEPS + 5})
    said = state["messages"][1:]
    assert len(said) == STEPS == len(server.requests)
    traj = long_run_is_whole(probe, tmp_path / "store", [m.name for m in said], [m.content for m in said], STEPS)
    assert [s.agent for s in traj.steps[:3]] == ["alice", "bob", "alice"] and traj.task == "count to 300"
    assert [m.content for m in traj.steps[-1].input_messages] == [said[-2].content], "its input: what it had not seen"


def _odd_app(base_url: str, streaming: bool = False) -> Any:
    """A writer node whose model reply is the run's odd text (streamed: ``streaming``), then a lister
    node (no model) that writes a file name that is not UTF-8."""
    from langchain_core.messages import AIMessage, SystemMessage
    from langgraph.graph import END, START, MessagesState, StateGraph

    llm = _llm(base_url, streaming)

    def writer(state: Any) -> dict[str, Any]:
        reply = llm.invoke([SystemMessage("You are the writer."), *state["messages"]])
        reply.name = "writer"
        return {"messages": [reply]}

    graph = StateGraph(MessagesState)
    graph.add_node("writer", writer)
    graph.add_node("lister", lambda state: {"messages": [AIMessage(FILES, name="lister")]})
    graph.add_edge(START, "writer")
    graph.add_edge("writer", "lister")
    graph.add_edge("lister", END)
    return graph.compile(name="odd")


def _said(state: Any) -> list[tuple[str, Any, Any]]:
    return [(m.type, m.content, m.name) for m in state["messages"]]


@pytest.mark.parametrize("streaming", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("task, reply", [(ODD, ODD + LONE), (MEGA, MEGA + LONE)], ids=["odd", "1MiB"])
def test_odd_bytes_pass_unchanged_and_are_recorded(task, reply, streaming, model_server, tmp_path, caplog):
    """The app's result is the uninstrumented one; the store's line is valid UTF-8 JSON; the trajectory
    holds the texts as they were, lone surrogates escaped (``\\ud800``, as documented)."""
    server = model_server(lambda body: Reply(content=reply))
    bare = _odd_app(server.base_url, streaming).invoke({"messages": [("user", task)]})
    app = _odd_app(server.base_url, streaming)
    probe = aegis_probe.instrument(app, store=tmp_path / "store", judge=lambda t, answer: t == task and answer == FILES)
    state = app.invoke({"messages": [("user", task)]})
    assert _said(state) == _said(bare) and state["messages"][1].content == reply
    probe.flush()
    store_lines_are_valid(tmp_path / "store")
    traj = probe.trajectory()
    assert traj.task == task and [m.content for m in traj.steps[0].input_messages] == [task]
    assert [s.agent for s in traj.steps] == ["writer", "lister"]
    assert [s.output for s in traj.steps] == [escaped(reply), escaped(FILES)]
    assert traj.steps[0].llm_calls[0].output == escaped(reply) and traj.outcome.answer == escaped(FILES)
    assert traj.outcome.success, "the judge got the task and the answer as the app had them"
    no_hook_errors(caplog.records)


def test_lone_surrogates_in_the_task_fail_the_app_as_uninstrumented(model_server, tmp_path, caplog):
    """The openai client refuses to send a lone surrogate: the app gets that same error, and the
    failed run is stored with its task escaped."""
    server = model_server(lambda body: Reply(content="never"))
    traj = lone_surrogate_task_fails_as_uninstrumented(lambda: _odd_app(server.base_url),
                                                      lambda app: app.invoke({"messages": [("user", LONE)]}),
                                                      server, tmp_path / "store")
    assert [s.agent for s in traj.steps] == ["writer"]
    no_hook_errors(caplog.records)


def _task_key(body: dict[str, Any]) -> str:
    """The run a request belongs to: its task, ``task of KEY``."""
    return next(m["content"] for m in body["messages"] if m["role"] == "user").removeprefix("task of ")


def test_runs_at_once_in_threads_and_tasks_stay_apart(model_server, tmp_path, caplog):
    """One graph, one probe: two runs in two threads and two in two asyncio tasks, all four at once,
    each on its own checkpointer thread. Each run's spans, conversation id and outcome label are its
    own trace's."""
    from aegis_probe.capture import semconv as sc

    server = model_server(all_in_flight(
        4, _task_key, lambda key, body: Reply(content=f"{key} says {len(body['messages'])}")))
    app = _talk(server.base_url, 4, checkpointer=True)
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    tasks = {key: f"task of {key}" for key in AT_ONCE}

    def one(key: str) -> str:
        state = app.invoke({"messages": [("user", tasks[key])]}, {"configurable": {"thread_id": key}})
        probe.set_outcome(key.endswith("ok"), answer=key)  # the caller's own run
        assert probe.trajectory().task == tasks[key]
        return str(state["messages"][-1].content)

    async def one_async(key: str) -> str:
        state = await app.ainvoke({"messages": [("user", tasks[key])]}, {"configurable": {"thread_id": key}})
        probe.set_outcome(key.endswith("ok"), answer=key)
        return str(state["messages"][-1].content)

    answers = run_at_once(one, one_async)
    assert [a.split()[0] for a in answers] == list(tasks)
    probe.flush()
    runs = runs_stay_apart(tmp_path / "store", tasks, {k: k for k in tasks})
    store = aegis_probe.storage.store.TraceStore(tmp_path / "store")
    for key, traj in runs.items():
        assert [s.agent for s in traj.steps] == ["alice", "bob", "alice", "bob"]
        assert {s.attributes.get(sc.CONVERSATION_ID) for s in store.trace(traj.trace_id)} == {key}
    no_hook_errors(caplog.records)


def test_a_long_run_keeps_no_message_alive_after_the_app(model_server, tmp_path):
    """A server-style app: a graph run on a checkpointer thread with long messages, then dropped. The
    instrumentation keeps none of its messages (the adapter's caches held up to 4096 of them, and
    each node's last output per thread, whatever their size, after the app and its probe were gone)."""
    import gc
    import weakref

    server = model_server(lambda body: Reply(content="x" * 100_000 + str(len(body["messages"]))))
    refs: list[Any] = []

    def run(instrumented: bool) -> None:
        app = _talk(server.base_url, 20, checkpointer=True)
        probe = aegis_probe.instrument(app, store=tmp_path / "store") if instrumented else None
        state = app.invoke({"messages": [("user", "go")]}, {"configurable": {"thread_id": "user-1"}})
        assert len(state["messages"]) == 21
        refs[:] = [weakref.ref(m) for m in state["messages"]]
        if probe is not None:
            probe.flush()
            probe.uninstrument()

    for instrumented in (False, True):  # uninstrumented first: what the app itself keeps
        run(instrumented)
        gc.collect()
        assert [r for r in refs if r() is not None] == [], f"instrumented={instrumented}"


def test_a_run_cancelled_beside_another_ends_alone(model_server, tmp_path, caplog):
    """Two ``ainvoke`` runs of one graph as two asyncio tasks; the app cancels one mid-call (a
    timeout): it ends cancelled in its own trace, the other is whole."""
    policy = SlowOrFast()
    app = _talk(model_server(policy).base_url, 2)
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    state = asyncio.run(cancel_one_beside_another(policy, lambda task: app.ainvoke({"messages": [("user", task)]})))
    assert state["messages"][-1].content == "done fast"
    cancelled_beside_whole(probe, tmp_path / "store")
    no_hook_errors(caplog.records)


def test_a_state_json_cannot_hold_as_it_is_keeps_every_step(tmp_path, caplog):
    """A graph whose state has no messages and holds what JSON cannot encode as it is (tuple and date
    keys, a dict that holds itself): every node execution is a step, its input the state and its
    output its writes as JSON (a step was lost and its writer's output left empty, each a hook error)."""
    import datetime

    from langgraph.graph import END, START, StateGraph
    from typing_extensions import TypedDict

    class State(TypedDict):
        scores: dict
        note: str

    def scorer(state: State) -> dict[str, Any]:
        looped: dict[str, Any] = {"name": "loop"}
        looped["self"] = looped
        return {"scores": {("alice", 1): 0.5, datetime.date(2026, 12, 1): 0.7, "loop": looped}}

    def judge(state: State) -> dict[str, Any]:
        return {"note": f"best {max(v for v in state['scores'].values() if isinstance(v, float))}"}

    def build() -> Any:
        graph = StateGraph(State)
        graph.add_node("scorer", scorer)
        graph.add_node("judge", judge)
        graph.add_edge(START, "scorer")
        graph.add_edge("scorer", "judge")
        graph.add_edge("judge", END)
        return graph.compile(name="scores")

    bare = build().invoke({"scores": {}, "note": ""})
    app = build()
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    state = app.invoke({"scores": {}, "note": ""})
    assert state["note"] == bare["note"] == "best 0.7"
    probe.flush()
    steps = probe.trajectory().steps
    assert [s.agent for s in steps] == ["scorer", "judge"]
    written = {"scores": {"('alice', 1)": 0.5, "2026-12-01": 0.7, "loop": {"name": "loop", "self": "{...}"}}}
    assert json.loads(steps[0].output) == written, "keys by their text, the dict inside itself as Python shows it"
    assert json.loads(steps[1].input_messages[0].content) == {**written, "note": ""}
    assert steps[1].output == '{"note": "best 0.7"}'
    no_hook_errors(caplog.records)


def test_a_task_of_several_parts_is_read_by_the_shared_rule(model_server, tmp_path, caplog):
    """A user message of several parts (two texts and an image): the run's task, the step's input and
    the chat span's prompt read it as every adapter does, one part per line and the image as
    ``[image_url]`` (the texts were glued together and the image left out)."""
    from langchain_core.messages import HumanMessage

    server = model_server(lambda body: Reply(content="seen"))
    app = _odd_app(server.base_url)
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    parts = [{"type": "text", "text": "Compare these."}, {"type": "text", "text": f"First: {ODD}"},
             {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]
    app.invoke({"messages": [HumanMessage(content=parts)]})
    probe.flush()
    traj = probe.trajectory()
    assert traj.task == f"Compare these.\nFirst: {ODD}\n[image_url]"
    assert [m.content for m in traj.steps[0].input_messages] == [traj.task]
    (chat,) = [s for s in aegis_probe.storage.store.TraceStore(tmp_path / "store").trace(traj.trace_id)
               if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert json.loads(chat.attributes["gen_ai.input.messages"])[-1]["parts"][0]["content"] == traj.task
    no_hook_errors(caplog.records)


def test_reasoning_and_tool_call_parts_are_not_a_message_text(tmp_path, caplog):
    """A node writing a message of reasoning, text and a tool-use part (as Anthropic's and OpenAI's
    reasoning models answer): its step's output is the text alone, as the app reads the answer."""
    from langchain_core.messages import AIMessage
    from langgraph.graph import END, START, MessagesState, StateGraph

    parts = [{"type": "thinking", "thinking": "Let me think."}, {"type": "reasoning", "reasoning": "Hm."},
             {"type": "text", "text": "The answer."}, {"type": "tool_use", "id": "t1", "name": "look", "input": {}}]
    graph = StateGraph(MessagesState)
    graph.add_node("thinker", lambda state: {"messages": [AIMessage(content=parts, name="thinker")]})
    graph.add_edge(START, "thinker")
    graph.add_edge("thinker", END)
    app = graph.compile(name="thinking")
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    app.invoke({"messages": [("user", "think")]})
    probe.flush()
    assert [s.output for s in probe.trajectory().steps] == ["The answer."]
    no_hook_errors(caplog.records)
