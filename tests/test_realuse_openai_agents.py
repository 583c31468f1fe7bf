"""OpenAI Agents SDK in real use, through the real ``Runner`` and the real openai client
(``OpenAIChatCompletionsModel`` on ``AsyncOpenAI``) against the loopback model server: a run of 300
agent turns, odd bytes in the model's replies, tool results and the user's task (NUL, lone
surrogates, bytes that are not UTF-8, right-to-left text and emoji, control characters, a 1 MiB
turn), and runs at once in two threads and in two asyncio tasks.

In the main environment only :func:`test_in_own_environment` runs (the SDK lives in
.venv-openai-agents); it runs this file there."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from typing import Any

import pytest
from framework_checks import (AT_ONCE, LONE, MEGA, ODD, SlowOrFast, all_in_flight, cancel_one_beside_another,
                              cancelled_beside_whole, escaped, lone_surrogate_task_fails_as_uninstrumented,
                              long_run_is_whole, memory_held_after, no_hook_errors, runs_stay_apart, run_at_once,
                              store_lines_are_valid)
from own_env import INSIDE, importable, run_in_own_env

HERE = importable("agents.run")


@pytest.mark.skipif(HERE, reason=INSIDE)
def test_in_own_environment():
    run_in_own_env(".venv-openai-agents", "tests/test_realuse_openai_agents.py", "realuse",
                   env={"OPENAI_AGENTS_DISABLE_TRACING": "1"})


needs_sdk = pytest.mark.skipif(not HERE, reason="openai-agents is not installed here (it runs in .venv-openai-agents)")
if HERE:
    import aegis_probe
    from aegis_probe.capture import semconv as sc
    from aegis_probe.modelserver import Reply

STEPS = 300
FILES = "files: " + os.fsdecode(b"caf\xe9-\xff.txt")  # a file name that is not UTF-8, as os.listdir gives it


@pytest.fixture(autouse=True)
def _sdk_tracing_off():
    """Uninstrumented runs would send the SDK's traces to OpenAI: off."""
    if HERE:
        from agents import set_tracing_disabled

        set_tracing_disabled(True)


def _model(base_url: str) -> Any:
    from agents import OpenAIChatCompletionsModel
    from openai import AsyncOpenAI

    return OpenAIChatCompletionsModel(model="aegis-scripted",
                                      openai_client=AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0))


def _pair(base_url: str, window: int = 4) -> Any:
    """alice and bob handing the conversation to each other; a handoff passes on the run's input and
    the last ``window`` items before it (a trimmed history)."""
    from agents import Agent, handoff

    def trim(data: Any) -> Any:
        return data.clone(pre_handoff_items=data.pre_handoff_items[-window:])

    model = _model(base_url)
    alice = Agent(name="alice", instructions="You are alice.", model=model)
    bob = Agent(name="bob", instructions="You are bob.", model=model, handoffs=[handoff(alice, input_filter=trim)])
    alice.handoffs = [handoff(bob, input_filter=trim)]
    return alice


def _speaker(body: dict[str, Any]) -> str:
    return body["messages"][0]["content"].removeprefix("You are ").rstrip(".")


def _talk_policy(turns: int) -> Any:
    """Each reply says who speaks and hands over to the other, until the ``turns``-th, the final output."""
    counter = itertools.count()

    def policy(body: dict[str, Any]) -> Reply:
        me, n = _speaker(body), next(counter)
        if n + 1 >= turns:
            return Reply(content=f"{me} ends at {n}")
        return Reply(content=f"{me} says {n}", tool_calls=[(f"transfer_to_{'bob' if me == 'alice' else 'alice'}", {})])

    return policy


@needs_sdk
@pytest.mark.parametrize("streamed", [False, True], ids=["run_sync", "run_streamed"])
def test_a_run_of_300_turns_is_whole(streamed, model_server, tmp_path, caplog):
    from agents import Runner

    server = model_server(_talk_policy(STEPS))
    app = _pair(server.base_url)
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    if streamed:
        async def consume() -> Any:
            result = Runner.run_streamed(app, "count to 300", max_turns=STEPS + 5)
            async for _ in result.stream_events():
                pass
            return result

        result = asyncio.run(consume())
    else:
        result = Runner.run_sync(app, "count to 300", max_turns=STEPS + 5)
    assert result.final_output == f"bob ends at {STEPS - 1}" and len(server.requests) == STEPS
    agents = ["alice", "bob"] * (STEPS // 2)
    other = {"alice": "bob", "bob": "alice"}
    handoff = '\n[tool_call transfer_to_{0}("{{}}")]\n[tool_result {{"assistant": "{0}"}}]'  # the turn's handoff
    outputs = [f"{a} says {i}" + handoff.format(other[a]) for i, a in enumerate(agents)]
    outputs[-1] = f"bob ends at {STEPS - 1}"
    traj = long_run_is_whole(probe, tmp_path / "store", agents, outputs, STEPS)
    assert traj.task == "count to 300" and traj.outcome.answer is None
    no_hook_errors(caplog.records)


def _writer(base_url: str) -> Any:
    """One agent whose model answers with the run's odd text and calls ``list_files``; the tool's
    result (a file name that is not UTF-8) is the final output (``stop_on_first_tool``: it never goes
    back to the model, which the openai client could not send)."""
    from agents import Agent, function_tool

    @function_tool
    def list_files(pattern: str) -> str:
        """List the files matching ``pattern``."""
        return FILES

    return Agent(name="writer", instructions="You are the writer.", model=_model(base_url), tools=[list_files],
                 tool_use_behavior="stop_on_first_tool")


async def _run(app: Any, task: str, streamed: bool) -> Any:
    from agents import Runner

    if not streamed:
        return (await Runner.run(app, task)).final_output
    result = Runner.run_streamed(app, task)
    async for _ in result.stream_events():
        pass
    return result.final_output


@needs_sdk
@pytest.mark.parametrize("streamed", [False, True], ids=["run", "streamed"])
@pytest.mark.parametrize("task, reply", [(ODD, ODD + LONE), (MEGA, MEGA + LONE)], ids=["odd", "1MiB"])
def test_odd_bytes_pass_unchanged_and_are_recorded(task, reply, streamed, model_server, tmp_path, caplog):
    """The app's result is the uninstrumented one; the store's line is valid UTF-8 JSON; the
    trajectory holds the texts as they were, lone surrogates escaped (``\\ud800``, as documented)."""
    # no lone surrogate in the arguments: the SDK's tool-call fingerprint fails on them, uninstrumented too
    answer = Reply(content=reply, tool_calls=[("list_files", {"pattern": ODD})])
    server = model_server(lambda body: answer)
    bare = asyncio.run(_run(_writer(server.base_url), task, streamed))
    app = _writer(server.base_url)
    probe = aegis_probe.instrument(app, store=tmp_path / "store", judge=lambda t, answer: t == task and answer == FILES)
    assert asyncio.run(_run(app, task, streamed)) == bare == FILES
    probe.flush()
    store_lines_are_valid(tmp_path / "store")
    traj = probe.trajectory()
    assert traj.task == task and [m.content for m in traj.steps[0].input_messages] == [task]
    assert [s.agent for s in traj.steps] == ["writer"]
    (call,) = traj.steps[0].llm_calls
    assert call.output.startswith(escaped(reply) + "\n[tool_call list_files(")
    (tool,) = traj.steps[0].tool_calls
    assert json.loads(tool.arguments) == {"pattern": ODD} and tool.result == escaped(FILES)
    assert traj.outcome.success and traj.outcome.answer == escaped(FILES)
    no_hook_errors(caplog.records)


@needs_sdk
def test_lone_surrogates_in_the_task_fail_the_app_as_uninstrumented(model_server, tmp_path, caplog):
    """The openai client refuses to send a lone surrogate: the app gets that same error, and the
    failed run is stored with its task escaped."""
    from agents import Runner

    server = model_server(lambda body: Reply(content="never"))
    traj = lone_surrogate_task_fails_as_uninstrumented(lambda: _writer(server.base_url), lambda app: Runner.run_sync(app, LONE),
                                                      server, tmp_path / "store")
    assert [s.agent for s in traj.steps] == ["writer"]
    no_hook_errors(caplog.records)


def _task_key(body: dict[str, Any]) -> str:
    """The run a request belongs to: its task, ``task of KEY``."""
    return next(m["content"] for m in body["messages"] if m["role"] == "user").removeprefix("task of ")


def _hand_over(key: str, body: dict[str, Any]) -> Reply:
    """alice hands the run over to bob, who ends it."""
    if _speaker(body) == "alice":
        return Reply(content=f"{key} from alice", tool_calls=[("transfer_to_bob", {})])
    return Reply(content=f"{key} from bob")


@needs_sdk
def test_runs_at_once_in_threads_and_tasks_stay_apart(model_server, tmp_path, caplog):
    """One team, one probe: two ``run_sync`` runs in two threads and two ``Runner.run`` in two asyncio
    tasks, all four at once, each in its own session. Each run's spans, conversation id and outcome label are its own."""
    from agents import RunConfig, Runner, SQLiteSession

    server = model_server(all_in_flight(4, _task_key, _hand_over))
    app = _pair(server.base_url)
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    tasks = {key: f"task of {key}" for key in AT_ONCE}

    def one(key: str) -> str:
        # an AsyncOpenAI client serves one event loop: each thread's run_sync gets a model of its own
        result = Runner.run_sync(app, tasks[key], session=SQLiteSession(key),
                                 run_config=RunConfig(model=_model(server.base_url)))
        probe.set_outcome(key.endswith("ok"), answer=key)  # the caller's own run
        assert probe.trajectory().task == tasks[key]
        return str(result.final_output)

    async def one_async(key: str) -> str:
        result = await Runner.run(app, tasks[key], session=SQLiteSession(key))
        probe.set_outcome(key.endswith("ok"), answer=key)
        return str(result.final_output)

    answers = run_at_once(one, one_async)
    assert answers == [f"{key} from bob" for key in tasks]
    probe.flush()
    runs = runs_stay_apart(tmp_path / "store", tasks, {k: k for k in tasks})
    store = aegis_probe.storage.store.TraceStore(tmp_path / "store")
    for key, traj in runs.items():
        assert [s.agent for s in traj.steps] == ["alice", "bob"]
        assert {s.attributes.get(sc.CONVERSATION_ID) for s in store.trace(traj.trace_id)} == {key}
    no_hook_errors(caplog.records)


@needs_sdk
def test_a_run_cancelled_beside_another_ends_alone(model_server, tmp_path, caplog):
    """Two ``Runner.run`` of one agent as two asyncio tasks; the app cancels one mid-call (a timeout):
    it ends cancelled in its own trace, the other is whole."""
    from agents import Agent, Runner

    policy = SlowOrFast()
    app = Agent(name="solo", instructions="You are solo.", model=_model(model_server(policy).base_url))
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    result = asyncio.run(cancel_one_beside_another(policy, lambda task: Runner.run(app, task)))
    assert result.final_output == "done fast"
    cancelled_beside_whole(probe, tmp_path / "store")
    no_hook_errors(caplog.records)


@needs_sdk
def test_a_task_of_several_parts_is_read_as_the_model_gets_it(model_server, tmp_path, caplog):
    """A user input of several parts (two texts and an image, Responses format): the run's task and the
    step's input are its texts one per line and the image as ``[input_image]``, as the chat span reads
    the same prompt (the texts were glued together and the image left out)."""
    from agents import Runner

    server = model_server(lambda body: Reply(content="seen"))
    app = _writer(server.base_url)
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    image = "data:image/png;base64,iVBORw0KGgo="
    task = [{"role": "user", "content": [{"type": "input_text", "text": "Compare these."},
                                         {"type": "input_text", "text": f"First: {ODD}"},
                                         {"type": "input_image", "image_url": image, "detail": "auto"}]}]
    assert Runner.run_sync(app, task).final_output == "seen"
    probe.flush()
    traj = probe.trajectory()
    assert traj.task == f"Compare these.\nFirst: {ODD}\n[input_image]"
    assert [m.content for m in traj.steps[0].input_messages] == [traj.task]
    (chat,) = [s for s in aegis_probe.storage.store.TraceStore(tmp_path / "store").trace(traj.trace_id)
               if s.attributes.get(sc.OPERATION) == sc.OP_CHAT]
    prompt = json.loads(chat.attributes[sc.INPUT_MESSAGES])[-1]["parts"][0]["content"]
    assert prompt.split("\n")[:-1] == traj.task.split("\n")[:-1], "the texts as the chat span has them"
    no_hook_errors(caplog.records)


@needs_sdk
def test_a_tool_output_of_several_parts_is_read_by_the_shared_rule(model_server, tmp_path, caplog):
    """A function tool returning a text and an image (``ToolOutputText``, ``ToolOutputImage``): its span's
    result and the next turn's input are the text, then ``[image]``/``[input_image]``, as every
    adapter reads parts (they were a Python repr and ASCII-escaped JSON, each with the image's whole
    data URL)."""
    from agents import Agent, Runner, ToolOutputImage, ToolOutputText, function_tool

    image = "data:image/png;base64," + "iVBORw0KGgo" * 1000

    @function_tool
    def look(city: str) -> list:
        """Look at the weather in ``city``."""
        return [ToolOutputText(text=f"Weather in {city}: {ODD}"), ToolOutputImage(image_url=image)]

    def policy(body: dict[str, Any]) -> Reply:
        return Reply(content="done") if body["messages"][-1]["role"] == "tool" else Reply(tool_calls=[("look", {"city": "Zürich"})])

    app = Agent(name="solo", instructions="You are solo.", model=_model(model_server(policy).base_url),
                tools=[look])
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    assert Runner.run_sync(app, "weather?").final_output == "done"
    probe.flush()
    steps = probe.trajectory().steps
    text = f"Weather in Zürich: {ODD}"
    assert [t.result for t in steps[0].tool_calls] == [f"{text}\n[image]"]
    assert [m.content for m in steps[1].input_messages] == [f"[tool_result {text}\n[input_image]]"]
    assert b"iVBORw0KGgo" not in (tmp_path / "store").joinpath("spans.jsonl").read_bytes()
    no_hook_errors(caplog.records)


@needs_sdk
def test_a_dropped_team_leaves_no_memory_behind(model_server, tmp_path):
    """A server-style app: runs of 8 turns with 1 MiB replies, each with a team built, instrumented and
    let go. Nothing of them stays allocated (the seam's prompt cache held the last prompts)."""
    from agents import Runner

    big, turns = "y" * (1 << 20), {"done": itertools.count()}

    def policy(body: dict[str, Any]) -> Reply:
        if next(turns["done"]) >= 7:
            return Reply(content=big)
        return Reply(content=big, tool_calls=[(f"transfer_to_{'bob' if _speaker(body) == 'alice' else 'alice'}", {})])

    server = model_server(policy)

    def run() -> None:
        turns["done"] = itertools.count()
        app = _pair(server.base_url)
        probe = aegis_probe.instrument(app, store=tmp_path / "store")
        assert Runner.run_sync(app, "talk", max_turns=10).final_output == big
        probe.flush()
        probe.uninstrument()
        server.requests.clear()

    assert memory_held_after(run) < 1.0
