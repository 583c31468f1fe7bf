"""AutoGen in real use, through real autogen-agentchat teams and agents and the real openai client
(``OpenAIChatCompletionClient``) against the loopback model server: long runs (round-robin teams of
300 turns, and of 120 streamed and with a streaming model; a team whose agent calls a tool every other
turn; a ``SelectorGroupChat``; a ``Swarm`` of handoffs; Magentic-One orchestrators, one retrying and
re-planning), odd bytes in the model's replies, tool results and the user's task (NUL, lone
surrogates, bytes that are not UTF-8, right-to-left text and emoji, control characters, a 1 MiB
turn), runs at once in two threads and in two asyncio tasks, runs cancelled beside others, and what
stays in memory of teams dropped (also while another run goes on)."""

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

pytest.importorskip("autogen_agentchat")

from autogen_agentchat.agents import AssistantAgent  # noqa: E402
from autogen_agentchat.base import TaskResult  # noqa: E402
from autogen_agentchat.conditions import MaxMessageTermination  # noqa: E402
from autogen_agentchat.messages import BaseChatMessage  # noqa: E402
from autogen_agentchat.teams import MagenticOneGroupChat, RoundRobinGroupChat, SelectorGroupChat, Swarm  # noqa: E402
from autogen_core.tools import FunctionTool  # noqa: E402

import aegis_probe  # noqa: E402
from aegis_probe.capture import semconv as sc  # noqa: E402
from aegis_probe.demos.autogen import model_client  # noqa: E402
from aegis_probe.demos.magentic import FACTS_PROMPT, LEDGER_PROMPT, PLAN_PROMPT, ledger  # noqa: E402
from aegis_probe.modelserver import Reply  # noqa: E402
from aegis_probe.storage.store import TraceStore  # noqa: E402
from aegis_probe.trajectory import load_trajectories  # noqa: E402

STEPS = 120  # autogen sends the whole conversation every turn: a run's time grows as its square
LONG_STEPS = 300  # the plain round-robin run: hundreds of turns, as real use has
MODEL = "aegis-scripted"
FILES = "files: " + os.fsdecode(b"caf\xe9-\xff.txt")  # a file name that is not UTF-8, as os.listdir gives it


def _client(base_url: str) -> Any:
    return model_client(base_url, MODEL, "sk-test")


def _speaker(body: dict[str, Any]) -> str:
    return body["messages"][0]["content"].removeprefix("You are ").rstrip(".")


def _said(result: TaskResult) -> list[BaseChatMessage]:
    """The turns of a run's result: its chat messages after the task."""
    return [m for m in result.messages if isinstance(m, BaseChatMessage)][1:]


def _talk(base_url: str, turns: int, stream: bool = False) -> Any:
    """alice and bob taking turns in a ``RoundRobinGroupChat`` of ``turns`` messages after the task."""
    client = _client(base_url)
    agents = [AssistantAgent(name, model_client=client, system_message=f"You are {name}.", model_client_stream=stream)
              for name in ("alice", "bob")]
    return RoundRobinGroupChat(agents, termination_condition=MaxMessageTermination(turns + 1))


async def _consume(app: Any, task: str) -> TaskResult:
    """``app.run_stream(task=task)`` read to its end, as a UI does; its ``TaskResult``."""
    result = None
    async for item in app.run_stream(task=task):
        result = item
    assert isinstance(result, TaskResult)
    return result


@pytest.mark.parametrize("how, turns", [("run", LONG_STEPS), ("run_stream", STEPS), ("model_stream", STEPS)])
def test_a_long_team_run_is_whole(how, turns, model_server, tmp_path, caplog):
    """alice and bob taking hundreds of turns (run; streamed: 120): one step per turn, in order,
    each holding its model call."""
    counter = itertools.count()
    server = model_server(lambda body: Reply(content=f"{_speaker(body)} says {next(counter)}"))
    app = _talk(server.base_url, turns, stream=how == "model_stream")
    probe = aegis_probe.instrument(app, store=tmp_path / "store", judge=lambda task, answer: answer.endswith(f" {turns - 1}"))
    result = asyncio.run(_consume(app, f"count to {turns}") if how == "run_stream" else app.run(task=f"count to {turns}"))
    said = _said(result)
    assert len(said) == turns == len(server.requests) and said[-1].to_text() == f"bob says {turns - 1}"
    traj = long_run_is_whole(probe, tmp_path / "store", [m.source for m in said], [m.to_text() for m in said], turns)
    assert traj.task == f"count to {turns}" and traj.outcome.success and traj.outcome.answer == f"bob says {turns - 1}"
    no_hook_errors(caplog.records)


def _tool_team(base_url: str, turns: int) -> Any:
    """A counter whose model calls ``tick`` every turn (the tool's result is its turn's message) and a
    checker, taking turns."""
    client = _client(base_url)

    def tick(n: int) -> str:
        return f"tick {n}"

    tool = FunctionTool(tick, name="tick", description="Count one tick.")
    counter = AssistantAgent("counter", model_client=client, system_message="You are counter.", tools=[tool])
    checker = AssistantAgent("checker", model_client=client, system_message="You are checker.")
    return RoundRobinGroupChat([counter, checker], termination_condition=MaxMessageTermination(turns + 1))


def test_a_team_calling_a_tool_every_other_turn_is_whole(model_server, tmp_path, caplog):
    """60 turns of a tool call (the tool's result is the turn's message) between 60 plain turns."""
    counter = itertools.count()

    def policy(body: dict[str, Any]) -> Reply:
        n = next(counter)
        if _speaker(body) == "counter":
            return Reply(tool_calls=[("tick", {"n": n})])
        return Reply(content=f"checked {n}")

    server = model_server(policy)
    app = _tool_team(server.base_url, STEPS)
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    result = asyncio.run(app.run(task=f"tick {STEPS // 2} times"))
    said = _said(result)
    assert len(said) == STEPS == len(server.requests) and said[0].to_text() == "tick 0"
    traj = long_run_is_whole(probe, tmp_path / "store", [m.source for m in said], [m.to_text() for m in said], STEPS)
    ticks = [s for s in traj.steps if s.agent == "counter"]
    assert [t.result for s in ticks for t in s.tool_calls] == [s.output for s in ticks]
    assert [json.loads(t.arguments) for s in ticks[:2] for t in s.tool_calls] == [{"n": 0}, {"n": 2}]
    no_hook_errors(caplog.records)


def test_a_swarm_of_120_handoffs_is_whole(model_server, tmp_path, caplog):
    """alice and bob handing the swarm to each other 120 times; each handoff tool call is under its
    turn's step."""
    turns, counter = STEPS, itertools.count()

    def policy(body: dict[str, Any]) -> Reply:
        me = _speaker(body)
        return Reply(content=f"{me} says {next(counter)}", tool_calls=[(f"transfer_to_{'bob' if me == 'alice' else 'alice'}", {})])

    server = model_server(policy)
    client = _client(server.base_url)
    agents = [AssistantAgent(name, model_client=client, system_message=f"You are {name}.", handoffs=[other])
              for name, other in (("alice", "bob"), ("bob", "alice"))]
    app = Swarm(agents, termination_condition=MaxMessageTermination(turns + 1))
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    said = _said(asyncio.run(app.run(task="hand over")))
    assert len(said) == turns == len(server.requests) and said[-1].source == "bob"
    traj = long_run_is_whole(probe, tmp_path / "store", [m.source for m in said], [m.to_text() for m in said], turns)
    assert [[t.name for t in s.tool_calls] for s in traj.steps[:2]] == [["transfer_to_bob"], ["transfer_to_alice"]]
    assert [len(s.tool_calls) for s in traj.steps] == [1] * turns
    no_hook_errors(caplog.records)


def test_a_selector_team_of_120_turns_is_whole(model_server, tmp_path, caplog):
    """A ``SelectorGroupChat`` whose model picks alice and bob in turn: one step per turn holding its
    agent's model call; the speaker selections are ``chat`` spans of the manager beside the steps."""
    turns, counter = STEPS, itertools.count()

    def policy(body: dict[str, Any]) -> Reply:
        prompt = str(body["messages"][0]["content"])
        if "select the next role" in prompt:
            return Reply(content="bob" if prompt.rstrip().count("alice says") > prompt.count("bob says") else "alice")
        return Reply(content=f"{_speaker(body)} says {next(counter)}")

    server = model_server(policy)
    client = _client(server.base_url)
    agents = [AssistantAgent(name, model_client=client, system_message=f"You are {name}.", description=name)
              for name in ("alice", "bob")]
    app = SelectorGroupChat(agents, model_client=client, termination_condition=MaxMessageTermination(turns + 1),
                            allow_repeated_speaker=True)
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    said = _said(asyncio.run(app.run(task="take turns")))
    assert len(said) == turns and [m.source for m in said[:3]] == ["alice", "bob", "alice"]
    probe.flush()
    store_lines_are_valid(tmp_path / "store")
    spans = TraceStore(tmp_path / "store").trace(probe.last_run.trace_id)
    chats = [s for s in spans if s.attributes.get(sc.OPERATION) == sc.OP_CHAT]
    selections = [s for s in chats if s.attributes.get(sc.LLM_PURPOSE) == sc.PURPOSE_SPEAKER_SELECTION]
    assert (len(chats), len(selections)) == (len(server.requests), len(server.requests) - turns)
    (root,) = [s for s in spans if s.parent_span_id is None]
    assert len(selections) >= turns - 1 and all(s.parent_span_id == root.span_id for s in selections)
    (loaded,) = load_trajectories(tmp_path / "store")
    for traj in (probe.trajectory(), loaded):
        assert [(s.index, s.agent, s.output) for s in traj.steps] == [(i, m.source, m.to_text()) for i, m in enumerate(said)]
        assert [len(s.llm_calls) for s in traj.steps] == [1] * turns
    no_hook_errors(caplog.records)


def _magentic_policy(rounds: int) -> Any:
    """The orchestrator's prompts answered by their text, a ledger naming alice and bob in turn for
    ``rounds`` rounds, then done; the agents answer with who they are and the round."""
    calls = itertools.count()

    def policy(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        last = str(messages[-1].get("content"))
        if LEDGER_PROMPT in last:
            done = sum(m.get("name") in ("alice", "bob") for m in messages)
            speaker = ("alice", "bob")[done % 2]
            return Reply(content=ledger(done=done >= rounds, speaker=speaker, instruction=f"{speaker}, go on ({done})"))
        if FACTS_PROMPT in last:
            return Reply(content="No facts.")
        if PLAN_PROMPT in last:
            return Reply(content="- alice and bob: talk.")
        if messages[0]["role"] == "system" and "You are " in str(messages[0]["content"]):
            return Reply(content=f"{_speaker(body)} answers {next(calls)}")
        return Reply(content="final answer")

    return policy


def _replanning_policy(ledgers: int, stalled: range, retried: set[int]) -> Any:
    """The orchestrator answered by its prompts over ``ledgers`` progress ledgers (counted as asked):
    alice and bob in turn, no progress on the ``stalled`` ones (three in a row make it re-plan: new
    facts, a new plan, a new task ledger), text that is not JSON on the ``retried`` ones (it asks
    again), done on the last."""
    asked, answers = itertools.count(), itertools.count()

    def policy(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        last = str(messages[-1].get("content"))
        if LEDGER_PROMPT in last:
            n = next(asked)
            if n in retried:
                return Reply(content=f"not a ledger ({n})")
            speaker = ("alice", "bob")[n % 2]
            entry = json.loads(ledger(done=n >= ledgers - 1, speaker=speaker, instruction=f"{speaker}, go on ({n})"))
            entry["is_progress_being_made"]["answer"] = n not in stalled
            return Reply(content=json.dumps(entry))
        if FACTS_PROMPT in last or "fact sheet" in last:
            return Reply(content="No facts.")
        if PLAN_PROMPT in last or "new plan" in last:
            return Reply(content="- alice and bob: talk.")
        if messages[0]["role"] == "system":
            return Reply(content=f"{_speaker(body)} answers {next(answers)}")
        return Reply(content="final answer")

    return policy


def _magentic(base_url: str, max_turns: int = 30) -> Any:
    """A ``MagenticOneGroupChat`` of alice and bob (answered by :func:`_magentic_policy`)."""
    client = _client(base_url)
    agents = [AssistantAgent(name, model_client=client, system_message=f"You are {name}.", description=name)
              for name in ("alice", "bob")]
    return MagenticOneGroupChat(agents, model_client=client, max_turns=max_turns)


def test_a_magentic_one_run_of_120_turns_is_whole(model_server, tmp_path, caplog):
    """The orchestrator's task ledger, 59 instructions and its final answer are steps of their own,
    beside alice's and bob's 59 turns."""
    rounds = (STEPS - 2) // 2
    server = model_server(_magentic_policy(rounds))
    app = _magentic(server.base_url, STEPS)
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    result = asyncio.run(app.run(task="talk for a while"))
    said = _said(result)
    assert len(said) == STEPS and said[-1].to_text() == "final answer"
    orch = "MagenticOneOrchestrator"
    assert [m.source for m in said[:4]] == [orch, orch, "alice", orch]
    traj = long_run_is_whole(probe, tmp_path / "store", [m.source for m in said], [m.to_text() for m in said],
                             len(server.requests))
    assert [s.next_speaker for s in traj.steps[1:5]] == ["alice", None, "bob", None]
    no_hook_errors(caplog.records)


def test_a_magentic_one_run_that_retries_and_replans_is_whole(model_server, tmp_path, caplog):
    """Ledgers that are not JSON (the orchestrator asks again) and three stalled ones in a row (it
    re-plans: new facts, new plan, a new task ledger) in a run of 150 progress ledgers: still one step
    per message, each holding the model calls that produced it."""
    server = model_server(_replanning_policy(150, stalled=range(60, 63), retried={10, 100, 101}))
    app = _magentic(server.base_url, 300)
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    said = _said(asyncio.run(app.run(task="talk for a while")))
    assert said[-1].to_text() == "final answer"
    traj = long_run_is_whole(probe, tmp_path / "store", [m.source for m in said], [m.to_text() for m in said],
                             len(server.requests))
    orch = [s for s in traj.steps if s.agent == "MagenticOneOrchestrator"]
    several = [(len(s.llm_calls), s.next_speaker, s.output.strip()[:14].partition(" (")[0]) for s in orch if len(s.llm_calls) > 1]
    assert several == [(2, None, "We are working"),  # facts, plan: the task ledger
                       (2, "bob", "bob, go on"),  # a ledger asked again
                       (3, None, "We are working"),  # the third stalled ledger, new facts, new plan: re-planned
                       (3, "alice", "alice, go on"),  # asked twice again
                       (2, None, "final answer")]  # the last ledger, the final answer
    no_hook_errors(caplog.records)


def _writer(base_url: str, stream: bool = False, reflect: bool = False) -> AssistantAgent:
    """One agent whose model answers with the run's odd text and calls ``list_files``; the tool's
    result (a file name that is not UTF-8) is the run's last message (unless ``reflect``: it never
    goes back to the model, which the openai client could not send)."""
    def list_files(pattern: str) -> str:
        return FILES

    tool = FunctionTool(list_files, name="list_files", description="List the files.")
    return AssistantAgent("writer", model_client=_client(base_url), system_message="You are the writer.", tools=[tool],
                          model_client_stream=stream, reflect_on_tool_use=reflect)


def _texts(result: TaskResult) -> list[tuple[str, str, str]]:
    """What a run's result says: each message's type, source and text (ids and times differ per run)."""
    return [(type(m).__name__, m.source, m.to_text()) for m in result.messages]


@pytest.mark.parametrize("how", ["run", "run_stream", "model_stream"])
@pytest.mark.parametrize("task, reply", [(ODD, ODD + LONE), (MEGA, MEGA + LONE)], ids=["odd", "1MiB"])
def test_odd_bytes_pass_unchanged_and_are_recorded(task, reply, how, model_server, tmp_path, caplog):
    """The app's result is the uninstrumented one; the store's line is valid UTF-8 JSON; the
    trajectory holds the texts as they were, lone surrogates escaped (``\\ud800``, as documented)."""
    answer = Reply(content=reply, tool_calls=[("list_files", {"pattern": ODD + LONE})])

    def run(app: Any) -> TaskResult:
        return asyncio.run(_consume(app, task) if how == "run_stream" else app.run(task=task))

    stream = how == "model_stream"
    bare = run(_writer(model_server(lambda body: answer).base_url, stream))
    app = _writer(model_server(lambda body: answer).base_url, stream)  # own server: the same call ids
    probe = aegis_probe.instrument(app, store=tmp_path / "store", judge=lambda t, answer: t == task and answer == FILES)
    result = run(app)
    assert _texts(result) == _texts(bare) and result.messages[-1].to_text() == FILES
    probe.flush()
    store_lines_are_valid(tmp_path / "store")
    traj = probe.trajectory()
    assert traj.task == task and [m.content for m in traj.steps[0].input_messages] == [task]
    assert [s.agent for s in traj.steps] == ["writer"] and traj.steps[0].output == escaped(FILES)
    (call,) = traj.steps[0].llm_calls
    assert call.output.startswith(escaped(reply) + "\n[tool_call list_files(")
    (tool,) = traj.steps[0].tool_calls
    assert json.loads(tool.arguments) == {"pattern": ODD + LONE} and tool.result == escaped(FILES)
    assert traj.outcome.success and traj.outcome.answer == escaped(FILES)
    no_hook_errors(caplog.records)


def _reflecting_team(base_url: str, stream: bool) -> Any:
    """A looker whose tool's result (odd text) goes back to its model, then a reader: a team of two turns."""
    client = _client(base_url)

    def look(what: str) -> str:
        return f"{what} seen: {ODD}"

    looker = AssistantAgent("looker", model_client=client, system_message="You are looker.", model_client_stream=stream,
                            tools=[FunctionTool(look, name="look", description="Look.")], reflect_on_tool_use=True)
    reader = AssistantAgent("reader", model_client=client, system_message="You are reader.", model_client_stream=stream)
    return RoundRobinGroupChat([looker, reader], termination_condition=MaxMessageTermination(3))


@pytest.mark.parametrize("stream", [False, True], ids=["create", "create_stream"])
@pytest.mark.parametrize("text", [ODD, MEGA], ids=["odd", "1MiB"])
def test_odd_bytes_going_round_a_team_are_faithful(text, stream, model_server, tmp_path, caplog):
    """Odd text in the task, a tool's result and both agents' replies goes back to the model in every
    later prompt: the app's result is the uninstrumented one, the trajectory and the chat spans' prompts
    hold it as it was."""
    def policy(body: dict[str, Any]) -> Reply:
        if _speaker(body) == "looker" and body["messages"][-1]["role"] != "tool":
            return Reply(content=text, tool_calls=[("look", {"what": text})])
        return Reply(content=f"{_speaker(body)}: {text}")

    bare_server, server = model_server(policy), model_server(policy)
    bare = asyncio.run(_reflecting_team(bare_server.base_url, stream).run(task=text))
    app = _reflecting_team(server.base_url, stream)
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    result = asyncio.run(app.run(task=text))
    assert _texts(result) == _texts(bare) and server.requests == bare_server.requests
    probe.flush()
    store_lines_are_valid(tmp_path / "store")
    traj = probe.trajectory()
    assert traj.task == text and [s.agent for s in traj.steps] == ["looker", "reader"]
    assert [s.output for s in traj.steps] == [f"looker: {text}", f"reader: {text}"]
    (tool,) = traj.steps[0].tool_calls
    assert json.loads(tool.arguments) == {"what": text} and tool.result == f"{text} seen: {ODD}"
    chats = [s for s in TraceStore(tmp_path / "store").trace(traj.trace_id) if s.attributes.get(sc.OPERATION) == sc.OP_CHAT]
    assert len(chats) == len(server.requests) == 3
    for chat, request in zip(sorted(chats, key=lambda s: s.start_ns), server.requests):
        recorded = ["".join(p.get("content") or p.get("response") or "" for p in m["parts"])
                    for m in json.loads(chat.attributes[sc.INPUT_MESSAGES])]
        assert recorded == [str(m.get("content") or "") for m in request["messages"]]
    no_hook_errors(caplog.records)


@pytest.mark.parametrize("text", [ODD, MEGA], ids=["odd", "1MiB"])
def test_odd_bytes_through_a_magentic_one_orchestrator_are_faithful(text, model_server, tmp_path, caplog):
    """Odd text in the task, the orchestrator's plan and instructions (inside its JSON ledger) and the
    agents' answers: the app's result is the uninstrumented one; every step's output is the message
    as the app has it, the ledger's next speaker read."""
    def odd(base: Any) -> Any:
        def policy(body: dict[str, Any]) -> Reply:
            reply = base(body)
            if reply.content and reply.content.startswith("{"):  # a ledger: odd text in its instruction
                entry = json.loads(reply.content)
                entry["instruction_or_question"]["answer"] += " " + text
                return Reply(content=json.dumps(entry, ensure_ascii=False))
            return Reply(content=f"{reply.content} {text}")

        return policy

    bare_server, server = model_server(odd(_magentic_policy(2))), model_server(odd(_magentic_policy(2)))
    bare = asyncio.run(_magentic(bare_server.base_url).run(task=text))
    app = _magentic(server.base_url)
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    result = asyncio.run(app.run(task=text))
    assert _texts(result) == _texts(bare) and server.requests == bare_server.requests
    probe.flush()
    store_lines_are_valid(tmp_path / "store")
    traj = probe.trajectory()
    said = _said(result)
    assert traj.task == text and [(s.agent, s.output) for s in traj.steps] == [(m.source, m.to_text()) for m in said]
    orch = "MagenticOneOrchestrator"
    assert [s.next_speaker for s in traj.steps if s.agent == orch] == [None, "alice", "bob", None]
    assert traj.steps[1].output == f"alice, go on (0) {text}"
    no_hook_errors(caplog.records)


def test_lone_surrogates_in_the_task_fail_the_app_as_uninstrumented(model_server, tmp_path, caplog):
    """The openai client refuses to send a lone surrogate: the app gets that same error, and the
    failed run is stored with its task escaped."""
    server = model_server(lambda body: Reply(content="never"))
    traj = lone_surrogate_task_fails_as_uninstrumented(lambda: _writer(server.base_url),
                                                      lambda app: asyncio.run(app.run(task=LONE)), server, tmp_path / "store")
    assert [s.agent for s in traj.steps] == ["writer"]
    no_hook_errors(caplog.records)


def _team_error(app: Any, task: str) -> str:
    """The first line of the error a team's run raises (a team raises its agent's error as a
    ``RuntimeError`` with the agent's traceback after that line)."""
    with pytest.raises(RuntimeError) as caught:
        asyncio.run(app.run(task=task))
    return str(caught.value).splitlines()[0]


def test_lone_surrogates_in_a_reply_fail_the_next_turn_as_uninstrumented(model_server, tmp_path, caplog):
    """alice's reply carries lone surrogates; bob's model call cannot send them: the team fails as
    it would uninstrumented, alice's turn is stored whole (escaped) and bob's failed."""
    policy = lambda body: Reply(content=f"{_speaker(body)}: {LONE}")  # noqa: E731
    bare = _team_error(_talk(model_server(policy).base_url, 2), "talk")
    server = model_server(policy)
    app = _talk(server.base_url, 2)
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    assert _team_error(app, "talk") == bare and bare.startswith("UnicodeEncodeError") and len(server.requests) == 1
    probe.flush()
    store_lines_are_valid(tmp_path / "store")
    traj = probe.trajectory()
    assert [s.agent for s in traj.steps] == ["alice", "bob"] and traj.error
    assert traj.steps[0].output == escaped(f"alice: {LONE}") and traj.steps[1].error
    no_hook_errors(caplog.records)


def _task_key(body: dict[str, Any]) -> str:
    """The run a request belongs to: its task, ``task of KEY``."""
    return next(m["content"] for m in body["messages"] if m["role"] == "user").removeprefix("task of ")


def _pair_reply(key: str, body: dict[str, Any]) -> Reply:
    return Reply(content=f"{key} from {_speaker(body)}")


def test_a_lone_surrogate_tool_result_fails_the_next_call_as_uninstrumented(model_server, tmp_path, caplog):
    """A tool's result holding a file name that is not UTF-8 goes back to the model
    (``reflect_on_tool_use``), which the openai client cannot send: the app gets the same error, the
    tool call is stored with its result escaped and the failed model call under the same step."""
    def run(app: Any) -> str:
        with pytest.raises(UnicodeEncodeError) as caught:
            asyncio.run(app.run(task="list"))
        return str(caught.value)

    policy = lambda body: Reply(tool_calls=[("list_files", {"pattern": "*"})])  # noqa: E731
    bare = run(_writer(model_server(policy).base_url, reflect=True))
    server = model_server(policy)
    app = _writer(server.base_url, reflect=True)
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    assert run(app) == bare and len(server.requests) == 1
    probe.flush()
    store_lines_are_valid(tmp_path / "store")
    traj = probe.trajectory()
    (step,) = traj.steps
    assert [t.result for t in step.tool_calls] == [escaped(FILES)] and len(step.llm_calls) == 2
    assert step.error and traj.error and "UnicodeEncodeError" in traj.error
    no_hook_errors(caplog.records)


def test_runs_at_once_in_threads_and_tasks_stay_apart(model_server, tmp_path, caplog):
    """A server-style app: a team built and instrumented per request, one trace store; two runs in two
    threads and two in two asyncio tasks, all four at once. Each run's spans and outcome label are
    its own trace's."""
    server = model_server(all_in_flight(4, _task_key, _pair_reply))
    tasks = {key: f"task of {key}" for key in AT_ONCE}

    async def one_async(key: str) -> str:
        app = _talk(server.base_url, 2)
        probe = aegis_probe.instrument(app, store=tmp_path / "store")
        result = await app.run(task=tasks[key])
        probe.set_outcome(key.endswith("ok"), answer=key)  # the caller's own run
        assert probe.trajectory().task == tasks[key]
        return result.messages[-1].to_text()

    answers = run_at_once(lambda key: asyncio.run(one_async(key)), one_async)
    assert answers == [f"{key} from bob" for key in tasks]
    aegis_probe.uninstrument()  # flushes every probe
    runs = runs_stay_apart(tmp_path / "store", tasks, {k: k for k in tasks})
    for key, traj in runs.items():
        assert [s.agent for s in traj.steps] == ["alice", "bob"], key
    no_hook_errors(caplog.records)


def _at_once_under_one_probe(store: Any, one_async: Any) -> list[str]:
    """``run_at_once`` of ``one_async(probe, key)`` with every app traced by one probe
    (``AegisInstrumentor``, trace-every-app mode, storing in ``store``; uninstrumented after, which
    flushes it): the runs' answers."""
    from aegis_probe.capture.instrumentor import AegisInstrumentor

    instrumentor = AegisInstrumentor()
    instrumentor.instrument(store=store)
    try:
        probe = instrumentor.probe("autogen")
        assert probe is not None
        return run_at_once(lambda key: asyncio.run(one_async(probe, key)), lambda key: one_async(probe, key))
    finally:
        instrumentor.uninstrument()


def test_runs_at_once_traced_by_one_probe_stay_apart(model_server, tmp_path, caplog):
    """Trace-every-app mode (one probe for all apps): a team built per request, two runs in two
    threads and two in two asyncio tasks, all four at once; each run's spans and outcome label are its
    own trace's."""
    server = model_server(all_in_flight(4, _task_key, _pair_reply))
    tasks = {key: f"task of {key}" for key in AT_ONCE}

    async def one_async(probe: Any, key: str) -> str:
        result = await _talk(server.base_url, 2).run(task=tasks[key])
        probe.set_outcome(key.endswith("ok"), answer=key)  # the caller's own run
        assert probe.trajectory().task == tasks[key]
        return result.messages[-1].to_text()

    answers = _at_once_under_one_probe(tmp_path / "store", one_async)
    assert answers == [f"{key} from bob" for key in tasks]
    for key, traj in runs_stay_apart(tmp_path / "store", tasks, {k: k for k in tasks}).items():
        assert [s.agent for s in traj.steps] == ["alice", "bob"], key
    no_hook_errors(caplog.records)


def test_magentic_one_runs_at_once_stay_apart(model_server, tmp_path, caplog):
    """Four Magentic-One runs at once (two threads, two asyncio tasks), a team per run, one probe
    (trace-every-app): the orchestrator's steps, like the agents', stay in their own run's trace."""
    import re

    policies = {key: _magentic_policy(2) for key in AT_ONCE}

    def reply(key: str, body: dict[str, Any]) -> Reply:
        answer = policies[key](body)
        if answer.content and answer.content.startswith("{"):  # a ledger: the run's key in its instruction
            entry = json.loads(answer.content)
            entry["instruction_or_question"]["answer"] += f" for {key}"
            return Reply(content=json.dumps(entry))
        return Reply(content=f"{answer.content} for {key}")

    server = model_server(all_in_flight(4, lambda body: re.findall(r"task of ([a-z-]+)", json.dumps(body))[0], reply))
    tasks = {key: f"task of {key}" for key in AT_ONCE}

    async def one_async(probe: Any, key: str) -> str:
        result = await _magentic(server.base_url).run(task=tasks[key])
        probe.set_outcome(key.endswith("ok"), answer=key)
        return result.messages[-1].to_text()

    answers = _at_once_under_one_probe(tmp_path / "store", one_async)
    assert answers == [f"final answer for {key}" for key in tasks]
    orch = "MagenticOneOrchestrator"
    for traj in runs_stay_apart(tmp_path / "store", tasks, {k: k for k in tasks}).values():
        assert [s.agent for s in traj.steps] == [orch, orch, "alice", orch, "bob", orch]
    no_hook_errors(caplog.records)


def test_a_run_cancelled_beside_another_ends_alone(model_server, tmp_path, caplog):
    """Two runs of a lone agent as two asyncio tasks, each of its own agent, one probe each, one store;
    the app cancels one mid-call (a timeout): it ends cancelled in its own trace, the other is whole.
    (A team's run, cancelled so, first waits for the model call in flight: autogen's runtime finishes
    the message it handles; see the token test below.)"""
    policy = SlowOrFast()
    server = model_server(policy)
    probes = []

    def run(task: str) -> Any:
        app = AssistantAgent("solo", model_client=_client(server.base_url))
        probes.append(aegis_probe.instrument(app, store=tmp_path / "store"))
        return app.run(task=task)

    result = asyncio.run(cancel_one_beside_another(policy, run))
    assert result.messages[-1].to_text() == "done fast"
    for probe in probes[1:]:
        probe.flush()
    cancelled_beside_whole(probes[0], tmp_path / "store")
    no_hook_errors(caplog.records)


def test_a_team_run_cancelled_by_its_token_ends_cancelled_beside_another(model_server, tmp_path, caplog):
    """autogen's own cancellation (``CancellationToken.cancel()`` while the model call waits) of one
    team's run while another team's run goes on beside it: the app gets the error it gets
    uninstrumented, the run ends cancelled in its own trace, the other is whole."""
    from autogen_core import CancellationToken

    async def cancelled(policy: SlowOrFast, build: Any) -> tuple[str, Any]:
        token = CancellationToken()
        slow = asyncio.ensure_future(build().run(task="slow task", cancellation_token=token))
        fast = await build().run(task="fast task")
        assert await asyncio.to_thread(policy.arrived.wait, 10)
        token.cancel()
        try:
            await slow
        except BaseException as exc:  # what the app gets
            policy.release.set()
            return type(exc).__name__, fast
        raise AssertionError("not cancelled")

    bare_policy, policy = SlowOrFast(), SlowOrFast()
    bare_url, url = model_server(bare_policy).base_url, model_server(policy).base_url
    bare, _ = asyncio.run(cancelled(bare_policy, lambda: _talk(bare_url, 1)))
    probes = []

    def build() -> Any:
        app = _talk(url, 1)
        probes.append(aegis_probe.instrument(app, store=tmp_path / "store"))
        return app

    error, fast = asyncio.run(cancelled(policy, build))
    assert error == bare == "CancelledError" and fast.messages[-1].to_text() == "done fast"
    probes[1].flush()
    cancelled_beside_whole(probes[0], tmp_path / "store")
    store_lines_are_valid(tmp_path / "store")
    (step,) = probes[0].trajectory().steps
    assert step.agent == "alice" and step.error and "CancelledError" in step.error
    no_hook_errors(caplog.records)


def test_a_dropped_team_leaves_no_memory_behind(model_server, tmp_path):
    """A server-style app: runs of 4 turns with 1 MiB replies, each with a team built, instrumented and
    let go. Nothing of them stays allocated."""
    assert memory_held_after(_dropped_team_run(model_server, tmp_path / "store")) < 1.0


def _dropped_team_run(model_server: Any, store: Any) -> Any:
    """A server-style request: a team of 4 turns with 1 MiB replies built, instrumented (storing in
    ``store``), run and let go."""
    server = model_server(lambda body: Reply(content="y" * (1 << 20) + str(len(body["messages"]))))

    def run() -> None:
        app = _talk(server.base_url, 4)
        probe = aegis_probe.instrument(app, store=store)
        assert len(_said(asyncio.run(app.run(task="hi")))) == 4
        probe.flush()
        probe.uninstrument()
        server.requests.clear()

    return run


def _big_messages_alive() -> int:
    """How many autogen model messages of 1 MiB or more are alive (after a collection)."""
    import gc

    from autogen_core.models import AssistantMessage, UserMessage

    gc.collect()
    return sum(1 for o in gc.get_objects()
               if isinstance(o, (AssistantMessage, UserMessage)) and len(o.content) >= 1 << 20)


def test_a_dropped_team_leaves_no_memory_behind_while_another_run_goes_on(model_server, tmp_path):
    """The same server-style app while another team's run stays open all along (a busy server always
    has one): none of the dropped teams' model messages stays alive and nothing of them stays
    allocated (the adapter's message caches, cleared only when no run was open, held the last 4096
    messages and 64 prompts; the core's, the last prompts' JSON)."""
    import threading

    run = _dropped_team_run(model_server, tmp_path / "store")
    policy = SlowOrFast()
    busy = _talk(model_server(policy).base_url, 1)
    busy_probe = aegis_probe.instrument(busy, store=tmp_path / "busy")
    other = threading.Thread(target=lambda: asyncio.run(busy.run(task="slow task")))
    other.start()
    try:
        assert policy.arrived.wait(10)
        held = memory_held_after(run)
        alive = _big_messages_alive()
    finally:
        policy.release.set()
        other.join(10)
    busy_probe.flush()
    assert alive == 0 and held < 1.0


def test_uninstrument_during_a_run_stops_recording_and_keeps_what_began(model_server, tmp_path, caplog):
    """``uninstrument()`` while a team's run is in flight (here from the model server's thread,
    during the fourth call): the app goes on unchanged, and the stored run holds the steps begun
    before it, the one in flight included, and none after."""
    counter = itertools.count()
    probes: list[Any] = []

    def policy(body: dict[str, Any]) -> Reply:
        n = next(counter)
        if n == 3:
            probes[0].uninstrument()
        return Reply(content=f"{_speaker(body)} says {n}")

    server = model_server(policy)
    app = _talk(server.base_url, 8)
    probes.append(aegis_probe.instrument(app, store=tmp_path / "store"))
    result = asyncio.run(app.run(task="count"))
    assert [m.to_text() for m in _said(result)] == [f"{('alice', 'bob')[n % 2]} says {n}" for n in range(8)]
    (traj,) = load_trajectories(tmp_path / "store")
    assert [(s.agent, s.output) for s in traj.steps] == [(("alice", "bob")[n % 2], f"{('alice', 'bob')[n % 2]} says {n}")
                                                          for n in range(4)]
    no_hook_errors(caplog.records)
