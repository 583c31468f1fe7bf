"""AG2 in real use, through real ``GroupChat``s and two-agent chats and ag2's own openai client
against the loopback model server: a group chat of 120 messages, odd bytes in the model's replies,
tool results and the user's task (NUL, lone surrogates, bytes that are not UTF-8, right-to-left
text and emoji, control characters, a 1 MiB turn), and chats at once in two threads and in two
asyncio tasks.

In the main environment only :func:`test_in_own_environment` runs (ag2 lives in .venv-ag2); it
runs this file there."""

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

HERE = importable("autogen.agentchat")


@pytest.mark.skipif(HERE, reason=INSIDE)
def test_in_own_environment():
    run_in_own_env(".venv-ag2", "tests/test_realuse_ag2.py", "realuse")


needs_ag2 = pytest.mark.skipif(not HERE, reason="ag2 is not installed here (it runs in .venv-ag2)")
if HERE:
    import aegis_probe
    from aegis_probe.modelserver import Reply

STEPS = 120
FILES = "files: " + os.fsdecode(b"caf\xe9-\xff.txt")  # a file name that is not UTF-8, as os.listdir gives it


def _llm_config(base_url: str, stream: bool = False) -> dict[str, Any]:
    entry = {"model": "aegis-scripted", "base_url": base_url, "api_key": "sk-test", "max_retries": 0, "price": [0, 0],
             "stream": stream}
    return {"config_list": [entry], "cache_seed": None}


def _talk(base_url: str, turns: int) -> tuple[Any, Any]:
    """A user and a ``GroupChat`` of alice and bob taking turns (a speaker-selection function), ``turns``
    messages after the user's; returns the user and the manager."""
    from autogen import AssistantAgent, GroupChat, GroupChatManager, UserProxyAgent

    limit = {"max_consecutive_auto_reply": turns + 10}
    user = UserProxyAgent("user", human_input_mode="NEVER", code_execution_config=False, default_auto_reply="", **limit)
    alice, bob = (AssistantAgent(name, system_message=f"You are {name}.", llm_config=_llm_config(base_url), **limit)
                  for name in ("alice", "bob"))
    chat = GroupChat(agents=[user, alice, bob], messages=[], max_round=turns + 1,
                     speaker_selection_method=lambda last, chat: bob if last is alice else alice)
    return user, GroupChatManager(chat, name="talk", llm_config=False, silent=True, **limit)


def _speaker(body: dict[str, Any]) -> str:
    return body["messages"][0]["content"].removeprefix("You are ").rstrip(".")


@needs_ag2
@pytest.mark.parametrize("asynchronous", [False, True], ids=["initiate_chat", "a_initiate_chat"])
def test_a_group_chat_of_120_messages_is_whole(asynchronous, model_server, tmp_path, caplog):
    counter = itertools.count()
    server = model_server(lambda body: Reply(content=f"{_speaker(body)} says {next(counter)}"))
    user, manager = _talk(server.base_url, STEPS)
    probe = aegis_probe.instrument(manager, store=tmp_path / "store")
    start = user.a_initiate_chat if asynchronous else user.initiate_chat
    result = start(manager, message=f"count to {STEPS}", silent=True, summary_method="last_msg")
    result = asyncio.run(result) if asynchronous else result
    said = result.chat_history[1:]
    assert len(said) == STEPS == len(server.requests) and result.summary == f"bob says {STEPS - 1}"
    traj = long_run_is_whole(probe, tmp_path / "store", [m["name"] for m in said], [m["content"] for m in said], STEPS)
    assert traj.task == f"count to {STEPS}" and [s.agent for s in traj.steps[:3]] == ["alice", "bob", "alice"]
    no_hook_errors(caplog.records)


def _pair(base_url: str, stream: bool = False) -> tuple[Any, Any]:
    """A user and a writer whose model (streaming: ``stream``) calls ``list_files`` with lone surrogates
    in its arguments (the tool gets them; the arguments' JSON is ASCII), executed by the user. The
    writer ends the chat on the tool's result (a file name that is not UTF-8), which never goes back
    to the model (the openai client could not send it)."""
    from autogen import AssistantAgent, UserProxyAgent, register_function

    user = UserProxyAgent("user", human_input_mode="NEVER", code_execution_config=False, default_auto_reply="")
    writer = AssistantAgent("writer", system_message="You are the writer.", llm_config=_llm_config(base_url, stream),
                            is_termination_msg=lambda message: bool(message.get("tool_responses")))

    def list_files(pattern: str) -> str:
        return FILES

    register_function(list_files, caller=writer, executor=user, name="list_files", description="List the files.")
    return user, writer


def _chat(user: Any, writer: Any, task: str, asynchronous: bool) -> Any:
    if asynchronous:
        return asyncio.run(user.a_initiate_chat(writer, message=task, silent=True, summary_method="last_msg"))
    return user.initiate_chat(writer, message=task, silent=True, summary_method="last_msg")


@needs_ag2
@pytest.mark.parametrize("asynchronous, stream", [(False, False), (True, False), (False, True)],
                         ids=["sync", "async", "streamed"])
@pytest.mark.parametrize("task, reply", [(ODD, ODD + LONE), (MEGA, MEGA + LONE)], ids=["odd", "1MiB"])
def test_odd_bytes_pass_unchanged_and_are_recorded(task, reply, asynchronous, stream, model_server, tmp_path, caplog):
    """The app's result is the uninstrumented one; the store's line is valid UTF-8 JSON; the
    trajectory holds the texts as they were, lone surrogates escaped (``\\ud800``, as documented)."""
    def policy(body: dict[str, Any]) -> Reply:
        return Reply(content=reply, tool_calls=[("list_files", {"pattern": ODD + LONE})])

    bare = _chat(*_pair(model_server(policy).base_url, stream), task, asynchronous)
    user, writer = _pair(model_server(policy).base_url, stream)  # own server: the same call ids
    probe = aegis_probe.instrument(writer, store=tmp_path / "store",
                                   judge=lambda t, answer: t == task and answer == FILES)
    result = _chat(user, writer, task, asynchronous)
    assert result.chat_history == bare.chat_history and result.summary == FILES
    assert result.chat_history[1]["content"] == reply
    probe.flush()
    store_lines_are_valid(tmp_path / "store")
    traj = probe.trajectory()
    assert traj.task == task and [m.content for m in traj.steps[0].input_messages] == [task]
    assert [s.agent for s in traj.steps] == ["writer", "user"]
    (call,) = traj.steps[0].llm_calls
    assert call.output.startswith(escaped(reply) + "\n[tool_call list_files(")
    (tool,) = traj.steps[1].tool_calls
    assert json.loads(tool.arguments) == {"pattern": ODD + LONE} and tool.result == escaped(FILES)
    assert [s.output for s in traj.steps][1] == escaped(FILES)
    assert traj.outcome.success and traj.outcome.answer == escaped(FILES)
    no_hook_errors(caplog.records)


@needs_ag2
def test_lone_surrogates_in_the_task_fail_the_app_as_uninstrumented(model_server, tmp_path, caplog):
    """The openai client refuses to send a lone surrogate: the app gets that same error, and the
    failed run is stored with its task escaped."""
    server = model_server(lambda body: Reply(content="never"))
    traj = lone_surrogate_task_fails_as_uninstrumented(lambda: _pair(server.base_url), lambda pair: _chat(*pair, LONE, False),
                                                      server, tmp_path / "store", target=lambda pair: pair[1])
    assert [s.agent for s in traj.steps] == ["writer"]
    no_hook_errors(caplog.records)


@needs_ag2
def test_chats_at_once_in_threads_and_tasks_stay_apart(model_server, tmp_path, caplog):
    """One assistant, one probe, a user per chat: two chats in two threads and two in two asyncio
    tasks, all four at once. Each chat's spans and outcome label are its own trace's."""
    from autogen import AssistantAgent, UserProxyAgent

    server = model_server(all_in_flight(4, lambda body: body["messages"][1]["content"].removeprefix("task of "),
                                        lambda key, body: Reply(content=f"{key} says {len(body['messages'])}")))
    assistant = AssistantAgent("assistant", system_message="You help.", llm_config=_llm_config(server.base_url))
    probe = aegis_probe.instrument(assistant, store=tmp_path / "store")
    tasks = {key: f"task of {key}" for key in AT_ONCE}
    users = {key: UserProxyAgent(f"user-{key}", human_input_mode="NEVER", code_execution_config=False,
                                 default_auto_reply="go on") for key in tasks}

    def one(key: str) -> str:
        result = users[key].initiate_chat(assistant, message=tasks[key], silent=True, max_turns=2)
        probe.set_outcome(key.endswith("ok"), answer=key)  # the caller's own run
        assert probe.trajectory().task == tasks[key]
        return str(result.chat_history[-1]["content"])

    async def one_async(key: str) -> str:
        result = await users[key].a_initiate_chat(assistant, message=tasks[key], silent=True, max_turns=2)
        probe.set_outcome(key.endswith("ok"), answer=key)
        return str(result.chat_history[-1]["content"])

    answers = run_at_once(one, one_async)
    assert answers == [f"{key} says 4" for key in tasks]
    probe.flush()
    runs = runs_stay_apart(tmp_path / "store", tasks, {k: k for k in tasks})
    for key, traj in runs.items():
        assert [s.agent for s in traj.steps] == ["assistant", f"user-{key}", "assistant"], key
    no_hook_errors(caplog.records)


@needs_ag2
def test_a_chat_cancelled_beside_another_ends_alone(model_server, tmp_path, caplog):
    """Two ``a_initiate_chat`` with one assistant as two asyncio tasks; the app cancels one mid-call (a
    timeout): it ends cancelled in its own trace, the other is whole."""
    from autogen import AssistantAgent, UserProxyAgent

    policy = SlowOrFast()
    llm_config = _llm_config(model_server(policy).base_url)
    assistant = AssistantAgent("assistant", system_message="You help.", llm_config=llm_config)
    probe = aegis_probe.instrument(assistant, store=tmp_path / "store")

    def chat(task: str) -> Any:
        user = UserProxyAgent(f"user-{task[:4]}", human_input_mode="NEVER", code_execution_config=False,
                              default_auto_reply="more")
        return user.a_initiate_chat(assistant, message=task, silent=True, max_turns=2)

    result = asyncio.run(cancel_one_beside_another(policy, chat))
    assert result.chat_history[-1]["content"] == "done fast"
    cancelled_beside_whole(probe, tmp_path / "store")
    no_hook_errors(caplog.records)


@needs_ag2
def test_a_dropped_chat_leaves_no_memory_behind(model_server, tmp_path):
    """A server-style app: chats of 1 MiB replies, each with an assistant built, instrumented and let
    go. Nothing of them stays allocated (the message caches held the last prompts of 64 conversations)."""
    from autogen import AssistantAgent, UserProxyAgent

    server = model_server(lambda body: Reply(content="y" * (1 << 20) + str(len(body["messages"]))))

    def run() -> None:
        user = UserProxyAgent("user", human_input_mode="NEVER", code_execution_config=False, default_auto_reply="more")
        assistant = AssistantAgent("assistant", system_message="You help.", llm_config=_llm_config(server.base_url))
        probe = aegis_probe.instrument(assistant, store=tmp_path / "store")
        assert len(user.initiate_chat(assistant, message="hi", silent=True, max_turns=4).chat_history) == 8
        probe.flush()
        probe.uninstrument()
        server.requests.clear()

    assert memory_held_after(run) < 1.0
