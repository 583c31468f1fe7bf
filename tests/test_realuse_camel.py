"""CAMEL in real use, through real ``RolePlaying`` societies, ``Workforce``s and ``ChatAgent``s with
tools and camel's OpenAI-compatible backend (the real openai client) against the loopback model
server: runs of 300 and 120 agent steps (far past an agent's 8-message window), odd bytes in the model's
replies, tool results and the user's task (NUL, lone surrogates, right-to-left text and emoji, control
characters, a 1 MiB turn), runs at once in two threads and in two asyncio tasks, a run cancelled beside
another, and an app let go."""

from __future__ import annotations

import asyncio
import collections
import gc
import itertools
import json
import os
import re
from typing import Any

import pytest

pytest.importorskip("camel.agents")

import aegis_probe  # noqa: E402
from aegis_probe.capture import semconv as sc  # noqa: E402
from aegis_probe.modelserver import Reply  # noqa: E402
from aegis_probe.storage.store import TraceStore  # noqa: E402
from framework_checks import (  # noqa: E402
    AT_ONCE, LONE, MEGA, ODD, SlowOrFast, all_in_flight, cancel_one_beside_another, cancelled_beside_whole, escaped,
    lone_surrogate_task_fails_as_uninstrumented, long_run_is_whole, memory_held_after, no_hook_errors, runs_stay_apart,
    run_at_once, store_lines_are_valid)

STEPS = 120  # camel copies an agent's whole history every step, so a run's time grows as its square
LONG_STEPS = 300  # the society's step() run: hundreds of steps, as real use has
MODEL = "aegis-scripted"
FILES = "files: " + os.fsdecode(b"caf\xe9-\xff.txt")  # a file name that is not UTF-8, as os.listdir gives it
DONE = "CAMEL_TASK_DONE"


def add(a: int, b: int) -> int:
    """Add two whole numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


def list_files(pattern: str) -> str:
    """List the files whose names match a pattern.

    Args:
        pattern: The pattern.
    """
    return "files: " + pattern


def _backend(base_url: str, stream: bool = False) -> Any:
    from camel.models import ModelFactory
    from camel.models.stub_model import StubTokenCounter
    from camel.types import ModelPlatformType

    return ModelFactory.create(model_platform=ModelPlatformType.OPENAI_COMPATIBLE_MODEL, model_type=MODEL, url=base_url,
                               api_key="sk-test", token_counter=StubTokenCounter(), model_config_dict={"stream": stream})


def _agent(base_url: str, name: str, prompt: str, tools: list | None = None, stream: bool = False) -> Any:
    from camel.agents import ChatAgent
    from camel.messages import BaseMessage

    return ChatAgent(BaseMessage.make_assistant_message(name, prompt), model=_backend(base_url, stream), tools=tools,
                     stream_accumulate=False)


def _society(base_url: str, task: str, window: int | None = 8) -> Any:
    """A ``RolePlaying`` of an Asker and an Adder who has the ``add`` tool; each agent sends the model
    its system prompt and its last ``window`` messages."""
    from camel.societies import RolePlaying
    from camel.toolkits import FunctionTool

    return RolePlaying(assistant_role_name="Adder", user_role_name="Asker", task_prompt=task, with_task_specify=False,
                       model=_backend(base_url), assistant_agent_kwargs={"tools": [FunctionTool(add)], "message_window_size": window},
                       user_agent_kwargs={"message_window_size": window})


def _is_asker(body: dict[str, Any]) -> bool:
    return "you are a Asker" in body["messages"][0]["content"]


def _play(society: Any, rounds: int, asynchronous: bool) -> list[tuple[str, str]]:
    """Play up to ``rounds`` rounds (until the Asker says CAMEL_TASK_DONE); (agent, text) of every step."""
    if asynchronous:
        return asyncio.run(_aplay(society, rounds))
    said: list[tuple[str, str]] = []
    message = society.init_chat()
    for _ in range(rounds):
        assistant, user = society.step(message)
        said.extend([("Asker", user.msg.content), ("Adder", assistant.msg.content)])
        message = assistant.msg
        if DONE in user.msg.content:
            break
    return said


async def _aplay(society: Any, rounds: int) -> list[tuple[str, str]]:
    said: list[tuple[str, str]] = []
    message = await society.ainit_chat()
    for _ in range(rounds):
        assistant, user = await society.astep(message)
        said.extend([("Asker", user.msg.content), ("Adder", assistant.msg.content)])
        message = assistant.msg
        if DONE in user.msg.content:
            break
    return said


@pytest.mark.parametrize("asynchronous, steps", [(False, LONG_STEPS), (True, STEPS)], ids=["step", "astep"])
def test_a_long_society_with_tools_is_whole(asynchronous, steps, model_server, tmp_path, caplog):
    """150 rounds (astep: 60) of a society whose Adder calls its tool every turn; the Asker ends
    it with CAMEL_TASK_DONE, which ends the conversation's run."""
    counter, asked = itertools.count(), itertools.count(1)

    def policy(body: dict[str, Any]) -> Reply:
        if _is_asker(body):
            n = next(asked)
            return Reply(content=DONE if n == steps // 2 else f"Asker says {n}")
        if body["messages"][-1]["role"] == "tool":
            return Reply(content=f"Adder says {body['messages'][-1]['content']}")
        return Reply(tool_calls=[("add", {"a": 1000, "b": next(counter)})])

    server = model_server(policy)
    society = _society(server.base_url, "Count together.")
    probe = aegis_probe.instrument(society, store=tmp_path / "store")
    said = _play(society, steps, asynchronous)
    assert len(said) == steps and said[-2] == ("Asker", DONE) and len(server.requests) == steps // 2 * 3
    traj = long_run_is_whole(probe, tmp_path / "store", [a for a, _ in said], [t for _, t in said], len(server.requests))
    assert traj.task == "Count together."
    adder = [s for s in traj.steps if s.agent == "Adder"]
    assert [t.result for s in adder for t in s.tool_calls] == [str(1000 + i) for i in range(steps // 2)]
    assert all(s.output == f"Adder says {s.tool_calls[0].result}" for s in adder)
    no_hook_errors(caplog.records)


def _workforce_policy(subtasks: int) -> Any:
    """The Planner splits the task into ``subtasks`` additions, the Coordinator assigns them all to
    the Adder, who adds with the tool; the Planner then rates each result."""
    def policy(body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]
        text = str(last.get("content"))
        if last["role"] == "tool":
            return Reply(content=json.dumps({"content": f"sum {last['content']}", "failed": False}))
        if "<tasks>" in text:
            return Reply(content="<tasks>\n" + "".join(f"<task>Add 1000 and {i} with the add tool.</task>\n"
                                                       for i in range(subtasks)) + "</tasks>")
        if "assignee_id" in text:
            worker = re.findall(r"<([0-9a-f\-]{36})>", text)[0]
            assignments = [{"task_id": t, "assignee_id": worker, "dependencies": []}
                           for t in re.findall(r"Task ID: (\S+)", text)]
            return Reply(content=json.dumps({"assignments": assignments}))
        if body.get("tools"):
            return Reply(tool_calls=[("add", {"a": 1000, "b": int(re.findall(r"Add 1000 and (\d+)", text)[-1])})])
        return Reply(content=json.dumps({"reasoning": "Correct.", "quality_score": 95, "issues": []}))

    return policy


def _workforce(base_url: str) -> Any:
    from camel.societies.workforce import Workforce

    workforce = Workforce("Adders", coordinator_agent=_agent(base_url, "Coordinator", "You coordinate."),
                          task_agent=_agent(base_url, "Planner", "You plan."),
                          new_worker_agent=_agent(base_url, "Helper", "You help."))
    workforce.add_single_agent_worker("Adder: adds numbers with the add tool",
                                      worker=_agent(base_url, "Adder", "You add.", tools=[add]))
    return workforce


@pytest.mark.parametrize("entry", ["process_task", "process_task_async"])
def test_a_workforce_of_120_steps_is_whole(entry, model_server, tmp_path, caplog):
    """59 subtasks: the Planner's split, the Coordinator's assignment, then each subtask's worker
    step (with its tool call) and the Planner's rating of it. Subtasks run side by side, so the
    steps' order is the order they started in; every step and call is there once."""
    from camel.tasks import Task

    subtasks = (STEPS - 2) // 2
    server = model_server(_workforce_policy(subtasks))
    workforce = _workforce(server.base_url)
    probe = aegis_probe.instrument(workforce, store=tmp_path / "store")
    task = Task(content="Add many numbers.", id="0")
    result = workforce.process_task(task) if entry == "process_task" else asyncio.run(workforce.process_task_async(task))
    sums = [f"sum {1000 + i}" for i in range(subtasks)]
    assert re.findall(r"sum \d+", result.result) == sums
    probe.flush()
    started = probe.trajectory()
    traj = long_run_is_whole(probe, tmp_path / "store", [s.agent for s in started.steps],
                             [s.output for s in started.steps], len(server.requests))
    assert len(traj.steps) == STEPS and traj.task == "Add many numbers."
    assert collections.Counter(s.agent for s in traj.steps) == {"Planner": subtasks + 1, "Coordinator": 1, "Adder": subtasks}
    assert [s.agent for s in traj.steps[:2]] == ["Planner", "Coordinator"]
    adder = [s for s in traj.steps if s.agent == "Adder"]
    assert sorted(json.loads(s.output)["content"] for s in adder) == sorted(sums)
    assert sorted(t.result for s in adder for t in s.tool_calls) == sorted(str(1000 + i) for i in range(subtasks))
    no_hook_errors(caplog.records)


def _odd_policy(reply: str) -> Any:
    """Call ``list_files`` (odd text in the call's content and arguments), then answer ``reply``."""
    def policy(body: dict[str, Any]) -> Reply:
        if body["messages"][-1]["role"] == "tool":
            return Reply(content=reply)
        return Reply(content=ODD, tool_calls=[("list_files", {"pattern": ODD})])

    return policy


def _step(agent: Any, task: str, mode: str) -> tuple[str, Any]:
    """The agent's answer to ``task`` (streamed: the text the app reads) and what else it returned."""
    if mode == "astep":
        response = asyncio.run(agent.astep(task))
    else:
        response = agent.step(task)
    if mode == "streamed":
        return "".join(m.content for partial in response for m in partial.msgs), None
    return response.msgs[0].content, response.info["tool_calls"]


def _memory(agent: Any) -> list[Any]:
    return agent.chat_history


@pytest.mark.parametrize("mode", ["step", "astep", "streamed"])
@pytest.mark.parametrize("task, reply", [(ODD, ODD + LONE), (MEGA, MEGA + LONE)], ids=["odd", "1MiB"])
def test_odd_bytes_pass_unchanged_and_are_recorded(task, reply, mode, model_server, tmp_path, caplog):
    """A lone agent with a tool: the app's answer, tool calls and memory are the uninstrumented ones;
    the store's line is valid UTF-8 JSON; the trajectory holds the texts as they were, lone
    surrogates escaped (``\\ud800``, as documented)."""
    stream = mode == "streamed"
    bare_agent = _agent(model_server(_odd_policy(reply)).base_url, "Lister", "You list " + ODD, [list_files], stream)
    bare = _step(bare_agent, task, mode)
    agent = _agent(model_server(_odd_policy(reply)).base_url, "Lister", "You list " + ODD, [list_files], stream)
    probe = aegis_probe.instrument(agent, store=tmp_path / "store", judge=lambda t, answer: t == task and answer == bare[0])
    got = _step(agent, task, mode)
    assert got == bare and got[0] == (ODD + reply if stream else reply)
    assert _memory(agent) == _memory(bare_agent)
    probe.flush()
    store_lines_are_valid(tmp_path / "store")
    traj = probe.trajectory()
    assert traj.task == task and [m.content for m in traj.steps[0].input_messages] == [task]
    (step,) = traj.steps
    assert step.agent == "Lister" and step.output == escaped(got[0])
    assert [c.output.split("\n[tool_call")[0] for c in step.llm_calls] == [ODD, escaped(reply)]
    (tool,) = step.tool_calls
    assert json.loads(tool.arguments) == {"pattern": ODD} and tool.result == "files: " + ODD
    assert traj.outcome.success and traj.outcome.answer == escaped(got[0])
    no_hook_errors(caplog.records)


def test_a_society_on_an_odd_task_is_recorded_faithfully(model_server, tmp_path, caplog):
    """A ``RolePlaying`` whose task (in both system prompts) and replies carry odd text: the app's
    conversation is the uninstrumented one and the trajectory holds it as it was."""
    def policy(body: dict[str, Any]) -> Reply:
        if _is_asker(body):
            return Reply(content=f"{DONE} {ODD}" if len(body["messages"]) > 2 else f"Ask {ODD}")
        if body["messages"][-1]["role"] == "tool":
            return Reply(content=f"Sum {body['messages'][-1]['content']} {ODD}")
        return Reply(content=ODD, tool_calls=[("add", {"a": 1, "b": 2})])

    bare = _play(_society(model_server(policy).base_url, ODD, window=None), 3, False)
    society = _society(model_server(policy).base_url, ODD, window=None)
    probe = aegis_probe.instrument(society, store=tmp_path / "store")
    said = _play(society, 3, False)
    assert said == bare and said[-2][1] == f"{DONE} {ODD}"
    probe.flush()
    store_lines_are_valid(tmp_path / "store")
    (traj,) = aegis_probe.load_trajectories(tmp_path / "store")
    assert traj.task == ODD and [(s.agent, s.output) for s in traj.steps] == said
    chat = next(r for r in TraceStore(tmp_path / "store").trace(traj.trace_id) if r.attributes.get(sc.OPERATION) == sc.OP_CHAT)
    system = json.loads(chat.attributes[sc.INPUT_MESSAGES])[0]
    assert system["role"] == "system" and ODD in system["parts"][0]["content"]  # the task, in the Asker's prompt
    no_hook_errors(caplog.records)


def test_lone_surrogates_in_the_task_fail_the_app_as_uninstrumented(model_server, tmp_path, caplog):
    """The openai client refuses to send a lone surrogate: the app gets that same error, and the
    failed run is stored with its task escaped."""
    server = model_server(lambda body: Reply(content="never"))
    traj = lone_surrogate_task_fails_as_uninstrumented(lambda: _agent(server.base_url, "Lister", "You list."),
                                                      lambda agent: agent.step(LONE), server, tmp_path / "store")
    assert [s.agent for s in traj.steps] == ["Lister"]
    no_hook_errors(caplog.records)


def test_societies_at_once_in_threads_and_tasks_stay_apart(model_server, tmp_path, caplog):
    """Four societies with tools, one per run (as a server builds one per request), each
    instrumented into one store: two played in two threads and two in two asyncio tasks, all at
    once. Each run's spans and outcome label are its own trace's."""
    def key_of(body: dict[str, Any]) -> str:
        return re.findall(r"task of (\S+?)\.", body["messages"][0]["content"])[0]

    def reply(key: str, body: dict[str, Any]) -> Reply:
        if _is_asker(body):
            return Reply(content=f"{DONE} {key}" if len(body["messages"]) > 2 else f"{key} asks")
        if body["messages"][-1]["role"] == "tool":
            return Reply(content=f"{key} sums {body['messages'][-1]['content']}")
        return Reply(content=f"{key} adds", tool_calls=[("add", {"a": 1, "b": 2})])

    server = model_server(all_in_flight(4, key_of, reply))
    store = TraceStore(tmp_path / "store")
    tasks = {key: f"task of {key}." for key in AT_ONCE}
    apps = {key: _society(server.base_url, task) for key, task in tasks.items()}
    probes = {key: aegis_probe.instrument(app, store=store) for key, app in apps.items()}

    def one(key: str) -> str:
        said = _play(apps[key], 3, False)
        probes[key].set_outcome(key.endswith("ok"), answer=key)  # the caller's own run
        return said[-1][1]

    async def one_async(key: str) -> str:
        said = await _aplay(apps[key], 3)
        probes[key].set_outcome(key.endswith("ok"), answer=key)
        return said[-1][1]

    answers = run_at_once(one, one_async)
    assert answers == [f"{key} sums 3" for key in AT_ONCE]
    for probe in probes.values():
        probe.flush()
    runs = runs_stay_apart(tmp_path / "store", tasks, {k: k for k in tasks})
    for key, traj in runs.items():
        assert [s.agent for s in traj.steps] == ["Asker", "Adder"] * 2, key
        assert [t.result for s in traj.steps for t in s.tool_calls] == ["3", "3"], key
    no_hook_errors(caplog.records)


def test_workforces_at_once_in_threads_and_tasks_stay_apart(model_server, tmp_path, caplog):
    """Four workforces, one per task, each instrumented into one store: two process their task in two
    threads and two as asyncio tasks, all at once. Each run's spans (its planner's, coordinator's and
    worker's, the worker a clone) and outcome label are its own trace's."""
    from camel.tasks import Task

    def key_of(body: dict[str, Any]) -> str:
        return re.findall("|".join(AT_ONCE), json.dumps(body["messages"]))[0]

    def reply(key: str, body: dict[str, Any]) -> Reply:
        text = str(body["messages"][-1].get("content"))
        if "<tasks>" in text:
            return Reply(content=f"<tasks>\n<task>For {key}: Add 1000 and 1 with the add tool.</task>\n</tasks>")
        if body["messages"][-1]["role"] == "tool":
            return Reply(content=json.dumps({"content": f"{key} sums {body['messages'][-1]['content']}", "failed": False}))
        return _workforce_policy(0)(body)

    server = model_server(all_in_flight(4, key_of, reply))
    store = TraceStore(tmp_path / "store")
    tasks = {key: f"task of {key}." for key in AT_ONCE}
    workforces = {key: _workforce(server.base_url) for key in tasks}
    probes = {key: aegis_probe.instrument(workforce, store=store) for key, workforce in workforces.items()}

    def one(key: str) -> str:
        result = workforces[key].process_task(Task(content=tasks[key], id="0")).result
        probes[key].set_outcome(key.endswith("ok"), answer=key)  # the caller's own run
        return result

    async def one_async(key: str) -> str:
        result = (await workforces[key].process_task_async(Task(content=tasks[key], id="0"))).result
        probes[key].set_outcome(key.endswith("ok"), answer=key)
        return result

    answers = run_at_once(one, one_async)
    assert [re.findall(r"\S+ sums \d+", a) for a in answers] == [[f"{key} sums 1001"] for key in AT_ONCE]
    for probe in probes.values():
        probe.flush()
    traces = store.traces()
    assert len(traces) == len(tasks)
    for spans in traces.values():
        traj = aegis_probe.Trajectory.from_spans(spans)
        (key,) = [k for k, task in tasks.items() if traj.task == task]
        for span in spans:
            assert not any(k in str(span.attributes) for k in AT_ONCE if k != key), (key, span.name)
        assert [s.agent for s in traj.steps] == ["Planner", "Coordinator", "Adder", "Planner"], key
        assert [t.result for s in traj.steps for t in s.tool_calls] == ["1001"], key
        assert (traj.outcome.success, traj.outcome.answer) == (key.endswith("ok"), key)
    no_hook_errors(caplog.records)


def test_an_agent_cancelled_beside_another_ends_alone(model_server, tmp_path, caplog):
    """Two agents' ``astep`` as two asyncio tasks; the app cancels one mid-call (a timeout): it ends
    cancelled in its own trace, the other is whole."""
    policy = SlowOrFast()
    base_url = model_server(policy).base_url
    store = TraceStore(tmp_path / "store")
    probes = []

    def run(task: str) -> Any:
        agent = _agent(base_url, "Helper", "You help.")
        probes.append(aegis_probe.instrument(agent, store=store))
        return agent.astep(task)

    response = asyncio.run(cancel_one_beside_another(policy, run))
    assert response.msgs[0].content == "done fast"
    for probe in probes[1:]:
        probe.flush()
    cancelled_beside_whole(probes[0], tmp_path / "store")
    no_hook_errors(caplog.records)


def test_a_dropped_society_leaves_no_memory_behind(model_server, tmp_path):
    """A server-style app: conversations of 1 MiB replies (and tool calls), each with a society
    built, instrumented and let go. Nothing of them stays allocated."""
    def policy(body: dict[str, Any]) -> Reply:
        if not _is_asker(body) and body["messages"][-1]["role"] != "tool":
            return Reply(tool_calls=[("add", {"a": 1, "b": 2})])
        return Reply(content="y" * (1 << 20) + str(len(body["messages"])))

    server = model_server(policy)

    def run() -> None:
        society = _society(server.base_url, "Count together.", window=None)
        probe = aegis_probe.instrument(society, store=tmp_path / "store")
        with probe.run("Count together."):
            assert len(_play(society, 3, False)) == 6
        probe.flush()
        probe.uninstrument()
        server.requests.clear()

    assert memory_held_after(run) < 1.0


def test_a_society_dropped_mid_conversation_is_stored_and_let_go(model_server, tmp_path, caplog):
    """An app plays a few rounds (no CAMEL_TASK_DONE: a turn limit) and drops the society, without
    ``uninstrument()``: its conversation's run ends then, stored with every step, and nothing of it
    stays allocated (the open run kept its spans, 1 MiB replies, and the message caches)."""
    server = model_server(lambda body: Reply(content="y" * (1 << 20) + str(len(body["messages"]))))

    def play() -> Any:
        society = _society(server.base_url, "Count together.", window=None)
        probe = aegis_probe.instrument(society, store=tmp_path / "store")
        assert len(_play(society, 2, False)) == 4
        return probe  # the society goes with this frame (camel's stack walk may keep a snapshot of its locals)

    def run() -> None:
        probe = play()
        gc.collect()
        probe.flush()  # the writer has written what the run's end handed it
        server.requests.clear()

    assert memory_held_after(run) < 1.0
    trajectories = aegis_probe.load_trajectories(tmp_path / "store")
    assert len(trajectories) == 2
    for traj in trajectories:
        assert traj.task == "Count together." and not traj.error
        assert [s.agent for s in traj.steps] == ["Asker", "Adder"] * 2
        assert traj.steps[-1].output == "y" * (1 << 20) + "4"
    no_hook_errors(caplog.records)


def _left_early(agent: Any, mode: str) -> str:
    """Read a streamed step's first piece, then let the stream go (``left``) or drop it unread."""
    if mode == "astep left":
        async def first() -> str:
            response = await agent.astep("Say many words.")
            async for partial in response:
                return partial.msgs[0].content
            return ""

        text = asyncio.run(first())
    else:
        response = agent.step("Say many words.")
        text = next(iter(response)).msgs[0].content if mode == "step left" else ""
        del response
    gc.collect()
    return text


@pytest.mark.parametrize("mode", ["step left", "astep left", "step unread"])
def test_a_stream_left_before_its_end_ends_its_run_cancelled(mode, model_server, tmp_path, caplog):
    """A streamed step the app stops reading (or never reads) before its end ends its step and its
    run cancelled (ERROR, ``CancelledError``), as in every adapter; what was read is its output."""
    from framework_checks import the_one_run_ended_cancelled

    server = model_server(lambda body: Reply(content="one two three four five six"))
    bare = _left_early(_agent(server.base_url, "Talker", "You talk.", stream=True), mode)
    agent = _agent(server.base_url, "Talker", "You talk.", stream=True)
    probe = aegis_probe.instrument(agent, store=tmp_path / "store")
    assert _left_early(agent, mode) == bare
    trace_id = the_one_run_ended_cancelled(probe, tmp_path / "store")
    (step,) = probe.trajectory(trace_id).steps
    assert step.error and "CancelledError" in step.error and step.output == bare
    no_hook_errors(caplog.records)


def test_streams_left_early_leave_no_memory_behind(model_server, tmp_path):
    """Streamed steps of 1 MiB replies the app stops reading after the first piece: each ends with
    its model call (the call's span and its text before the run's end, which lets go of the message
    caches), and nothing of them stays allocated once the agent is let go."""
    server = model_server(lambda body: Reply(content="y" * (1 << 20)))

    def run() -> None:
        agent = _agent(server.base_url, "Talker", "You talk.", stream=True)
        probe = aegis_probe.instrument(agent, store=tmp_path / "store")
        for _ in range(3):
            assert _left_early(agent, "step left") == "y" * (1 << 20)
        probe.flush()
        probe.uninstrument()
        server.requests.clear()

    assert memory_held_after(run) < 1.0


@pytest.mark.parametrize("mode", ["step", "astep"])
@pytest.mark.parametrize("where", ["tool result", "tool arguments"])
def test_lone_surrogates_in_a_tool_call_fail_the_step_as_uninstrumented(where, mode, model_server, tmp_path, caplog):
    """A tool's result (a file name that is not UTF-8) or the arguments the model gave it (the JSON
    escape ``\\ud800``) hold lone surrogates: camel cannot send the tool call back to the model, so
    the step fails with the error it gets uninstrumented; the failed run is stored with both escaped."""
    def lister(pattern: str) -> str:
        """List the files whose names match a pattern.

        Args:
            pattern: The pattern.
        """
        return FILES

    def policy(body: dict[str, Any]) -> Reply:
        return Reply(tool_calls=[("lister", {"pattern": LONE if where == "tool arguments" else "*"})])

    def ends(agent: Any) -> tuple[Any, str]:
        try:
            return "returned", str(asyncio.run(agent.astep("List them.")) if mode == "astep" else agent.step("List them."))
        except Exception as exc:
            return type(exc), str(exc)

    bare = ends(_agent(model_server(policy).base_url, "Lister", "You list.", [lister]))
    server = model_server(policy)
    agent = _agent(server.base_url, "Lister", "You list.", [lister])
    probe = aegis_probe.instrument(agent, store=tmp_path / "store")
    assert ends(agent) == bare and bare[0] is UnicodeEncodeError and len(server.requests) == 1
    probe.flush()
    store_lines_are_valid(tmp_path / "store")
    traj = probe.trajectory()
    assert traj.error and "UnicodeEncodeError" in traj.error
    (step,) = traj.steps
    (tool,) = step.tool_calls
    assert tool.result == escaped(FILES)
    assert json.loads(tool.arguments) == {"pattern": LONE if where == "tool arguments" else "*"}
    no_hook_errors(caplog.records)
