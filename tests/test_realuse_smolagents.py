"""smolagents in real use, through ``OpenAIServerModel`` (the real openai client) against the loopback
model server: a manager ``ToolCallingAgent`` with a managed ``researcher`` agent and tools, as a team
would write it. Teams run in two threads and two asyncio tasks at once stay apart; a run of 200
turns, each calling two tools in parallel (smolagents' tool threads), is one whole trace; odd bytes
pass through unchanged; secrets in the task or a tool's result are never stored; the app's own
exception passes through unchanged, the run recorded failed, and uninstrument restores the originals."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

pytest.importorskip("smolagents")

import aegis_probe  # noqa: E402
from aegis_probe.capture import semconv as sc  # noqa: E402
from aegis_probe.demos.smolagents import observation  # noqa: E402
from aegis_probe.demos.task import message_text  # noqa: E402
from aegis_probe.modelserver import Reply  # noqa: E402
from aegis_probe.redact import REDACTED  # noqa: E402
from aegis_probe.storage.store import TraceStore  # noqa: E402
from framework_checks import (AT_ONCE, LONE, MEGA, ODD, all_in_flight, escaped, long_run_is_whole,  # noqa: E402
                              no_hook_errors, run_at_once, runs_stay_apart, store_lines_are_valid)

TURNS = 200
MANAGER = "You are the manager. Ask the researcher, then answer."
RESEARCHER = "You are the researcher. Look the question up."
GH = "ghp_" + "Zq8Rt5Lm2Np7Xw4Kv9Hb3Jd6Fc1Gs0Ty5Ue"  # GitHub classic token shape
SK = "sk-" + "proj-Qw3Er5Ty7Ui9Op1As3Df5Gh7"  # OpenAI key shape


def _model(base_url: str) -> Any:
    from smolagents import OpenAIServerModel

    return OpenAIServerModel(model_id="aegis-scripted", api_base=base_url, api_key="sk-test",
                             client_kwargs={"max_retries": 0})


def _team(model: Any, found: Any = None, **manager: Any) -> Any:
    """The manager and its managed researcher, whose ``lookup`` tool answers ``found(query)``."""
    from smolagents import ToolCallingAgent, tool
    from smolagents.monitoring import LogLevel

    @tool
    def lookup(query: str) -> str:
        """Look a question up in the archive.

        Args:
            query: what to look up.
        """
        return found(query) if found else f"archive entry for {query}"

    researcher = ToolCallingAgent(tools=[lookup], model=model, name="researcher", instructions=RESEARCHER,
                                  description="Looks questions up in the archive.", max_steps=3,
                                  verbosity_level=LogLevel.OFF)
    return ToolCallingAgent(tools=[], model=model, name="manager", managed_agents=[researcher], instructions=MANAGER,
                            max_steps=3, verbosity_level=LogLevel.OFF, **manager)


def _system(body: dict[str, Any]) -> str:
    messages = body["messages"]
    return message_text(messages[0]) if messages[0].get("role") == "system" else ""


def _team_policy(answer: Any = lambda seen: f"done: {seen}") -> Any:
    """The manager asks the researcher about the task; the researcher looks it up and reports what it
    found; the manager answers ``answer(report)``."""
    def policy(body: dict[str, Any]) -> Reply:
        seen, task = observation(body["messages"]), message_text(body["messages"][1])
        if MANAGER in _system(body):
            if seen is None:
                return Reply(tool_calls=[("researcher", {"task": task.split("New task:", 1)[-1].strip()})])
            return Reply(tool_calls=[("final_answer", {"answer": answer(seen)})])
        if seen is None:
            return Reply(tool_calls=[("lookup", {"query": task.split("Task:", 1)[-1].split("---")[0].strip()})])
        return Reply(tool_calls=[("final_answer", {"answer": f"found {seen}"})])

    return policy


def _parented_within(spans: list[Any]) -> None:
    """Every span but the one root has its parent in the same trace."""
    ids = {s.span_id for s in spans}
    assert len([s for s in spans if s.parent_span_id is None]) == 1
    assert all(s.parent_span_id in ids for s in spans if s.parent_span_id is not None)


def test_teams_run_in_threads_and_asyncio_tasks_at_once_stay_apart(model_server, tmp_path, caplog):
    """Four teams on one model (a smolagents agent keeps one run's memory: a team per request), each
    instrumented into one store; two run in two threads and two from asyncio tasks
    (``asyncio.to_thread``, smolagents being synchronous), all four at once."""
    def key_of(body: dict[str, Any]) -> str:
        return next(k for k in AT_ONCE if k in json.dumps(body["messages"]))

    policy = _team_policy()
    server = model_server(all_in_flight(len(AT_ONCE), key_of, lambda key, body: policy(body)))
    store = TraceStore(tmp_path / "store")
    model = _model(server.base_url)
    tasks = {key: f"what is {key}" for key in AT_ONCE}
    teams = {key: _team(model) for key in AT_ONCE}
    probes = {key: aegis_probe.instrument(team, store=store) for key, team in teams.items()}

    def one(key: str) -> str:
        answer = str(teams[key].run(tasks[key]))
        probes[key].set_outcome(key.endswith("ok"), answer=key)  # the caller's own run
        assert probes[key].trajectory().task == tasks[key]
        return answer

    async def one_async(key: str) -> str:
        answer = await asyncio.to_thread(lambda: str(teams[key].run(tasks[key])))
        probes[key].set_outcome(key.endswith("ok"), answer=key)
        return answer

    assert run_at_once(one, one_async) == [
        f"done: Here is the final answer from your managed agent 'researcher':\nfound archive entry for {tasks[k]}"
        for k in AT_ONCE]
    for probe in probes.values():
        probe.flush()
    runs = runs_stay_apart(tmp_path / "store", tasks, {k: k for k in tasks})
    for key, traj in runs.items():
        assert [s.agent for s in traj.steps] == ["manager", "researcher", "researcher", "manager"], key
        assert [t.name for s in traj.steps for t in s.tool_calls] == ["researcher", "lookup", "final_answer", "final_answer"]
        _parented_within(store.trace(traj.trace_id))
    no_hook_errors(caplog.records)


def _counter(turns: int) -> Any:
    """A ``ToolCallingAgent`` on the team's own scripted ``Model`` class: each of ``turns`` turns calls
    ``tick`` and ``tock`` at once, then it answers how many turns it counted."""
    from smolagents import ToolCallingAgent, tool
    from smolagents.models import ChatMessage, ChatMessageToolCall, ChatMessageToolCallFunction, MessageRole, Model
    from smolagents.monitoring import LogLevel, TokenUsage

    class Scripted(Model):
        def generate(self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kwargs):
            done = sum(1 for m in messages if getattr(m.role, "value", m.role) == "tool-response")
            wanted = [("tick", {"n": done}), ("tock", {"n": done})] if done < turns else [
                ("final_answer", {"answer": f"counted {done} turns"})]
            calls = [ChatMessageToolCall(function=ChatMessageToolCallFunction(name=name, arguments=arguments),
                                         id=f"call_{done}_{i}", type="function") for i, (name, arguments) in enumerate(wanted)]
            return ChatMessage(role=MessageRole.ASSISTANT, content=None, tool_calls=calls,
                               token_usage=TokenUsage(input_tokens=len(messages), output_tokens=len(calls)))

    @tool
    def tick(n: int) -> str:
        """Count a tick.

        Args:
            n: the tick's number.
        """
        return f"tick {n}"

    @tool
    def tock(n: int) -> str:
        """Count a tock.

        Args:
            n: the tock's number.
        """
        return f"tock {n}"

    return ToolCallingAgent(tools=[tick, tock], model=Scripted(model_id="scripted"), name="counter",
                            max_steps=turns + 1, verbosity_level=LogLevel.OFF)


def test_a_run_of_200_turns_with_parallel_tool_calls_is_whole(tmp_path, caplog):
    """200 turns, each calling ``tick`` and ``tock`` at once (smolagents runs them in its tool threads,
    context copied), then the final answer: 201 steps, 201 chat spans, 401 tool spans each under the
    step that asked for it, nothing dropped. (The team's own ``Model`` class: through the openai client
    smolagents alone takes a minute for 200 turns, its request grown to 800 messages.)"""
    app = _counter(TURNS)
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    assert app.run("count the turns") == f"counted {TURNS} turns"

    def said(*calls: tuple[str, dict[str, Any]]) -> str:
        return "\n".join(f"[tool_call {name}({json.dumps(json.dumps(arguments))})]" for name, arguments in calls)

    outputs = [said(("tick", {"n": i}), ("tock", {"n": i})) for i in range(TURNS)]
    outputs.append(said(("final_answer", {"answer": f"counted {TURNS} turns"})))
    traj = long_run_is_whole(probe, tmp_path / "store", ["counter"] * (TURNS + 1), outputs, TURNS + 1)
    assert [m.content for m in traj.steps[7].input_messages] == ["Observation:\ntick 6\ntock 6"]
    spans = TraceStore(tmp_path / "store").trace(traj.trace_id)
    by_id = {s.span_id: s for s in spans}
    tools = [s for s in spans if s.attributes.get(sc.OPERATION) == sc.OP_TOOL]
    assert len(tools) == 2 * TURNS + 1
    assert sorted((s.name, by_id[s.parent_span_id].attributes[sc.STEP_INDEX]) for s in tools) == sorted(
        [(f"execute_tool {name}", i) for i in range(TURNS) for name in ("tick", "tock")]
        + [("execute_tool final_answer", TURNS)])
    assert all(s.attributes[sc.TOOL_CALL_RESULT].endswith(f" {by_id[s.parent_span_id].attributes[sc.STEP_INDEX]}")
               for s in tools if s.name != "execute_tool final_answer")
    no_hook_errors(caplog.records)


@pytest.mark.parametrize("task", [ODD, MEGA], ids=["odd", "1MiB"])
def test_odd_bytes_pass_unchanged_and_are_recorded(task, model_server, tmp_path, caplog):
    """The odd text as the task, in the tool's result and the researcher's report; lone surrogates
    (what the openai client cannot send back) in the manager's final answer only. The app's answer is
    the uninstrumented one; the store is strict UTF-8 JSON with the texts as they were, escaped."""
    def answer(seen: str) -> str:
        return ODD + LONE

    def run(team: Any) -> str:
        return str(team.run(task))

    server = model_server(_team_policy(answer))
    bare = run(_team(_model(server.base_url), lambda query: f"{ODD} {query[:40]}"))
    team = _team(_model(server.base_url), lambda query: f"{ODD} {query[:40]}")
    probe = aegis_probe.instrument(team, store=tmp_path / "store", judge=lambda t, answer: t == task and answer == bare)
    assert run(team) == bare == ODD + LONE
    probe.flush()
    store_lines_are_valid(tmp_path / "store")
    traj = probe.trajectory()
    assert traj.task == task and traj.outcome.success and traj.outcome.answer == escaped(ODD + LONE)
    assert [s.agent for s in traj.steps] == ["manager", "researcher", "researcher", "manager"]
    (lookup,) = traj.steps[1].tool_calls
    assert lookup.result == f"{ODD} {task[:40]}"
    assert json.loads(lookup.arguments)["query"].startswith(ODD)
    (report,) = traj.steps[2].tool_calls
    assert json.loads(report.arguments)["answer"] == report.result == f"found {ODD} {task[:40]}".strip()
    (final,) = traj.steps[3].tool_calls
    assert final.result == escaped(ODD + LONE) and ODD in traj.steps[3].input_messages[-1].content
    no_hook_errors(caplog.records)


def test_secrets_in_the_task_and_a_tool_result_are_never_stored(model_server, tmp_path, caplog):
    """The user pastes a key into the task; the tool's result holds a token. The team answers as it
    would uninstrumented; neither secret is in any stored byte, the redaction marker is."""
    server = model_server(_team_policy())
    task = f"why does my key {SK} fail"
    team = _team(_model(server.base_url), lambda query: f"token {GH} revoked for {query}")
    probe = aegis_probe.instrument(team, store=tmp_path / "store")
    answer = str(team.run(task))
    assert SK in answer and GH in answer, "the app itself sees the secrets"
    probe.flush()
    written = b"".join(p.read_bytes() for p in (tmp_path / "store").rglob("*") if p.is_file()).decode()
    assert SK[3:] not in written and GH[4:] not in written
    assert REDACTED in written and "revoked for" in written
    no_hook_errors(caplog.records)


class Halted(RuntimeError):
    """The app's own error: its step callback stopping the run."""


def test_the_apps_exception_passes_through_and_the_run_is_failed(model_server, tmp_path, caplog):
    """The manager's step callback raises the app's own exception (carrying a secret) after its first
    step (a managed agent's error is its manager's observation, so the manager's): the app gets that
    very exception; the run is stored failed with its steps so far, the secret redacted;
    uninstrument restores every original."""
    from smolagents import OpenAIServerModel, ToolCallingAgent
    from smolagents.agents import MultiStepAgent
    from smolagents.memory import ActionStep
    from smolagents.tools import Tool

    error = Halted(f"budget exceeded for {SK}")

    def halt(step: Any, agent: Any = None) -> None:
        if isinstance(step, ActionStep) and agent is not None and agent.name == "manager":
            raise error

    server = model_server(_team_policy())
    originals = {(c, n): vars(c)[n] for c, n in [(MultiStepAgent, "run"), (MultiStepAgent, "__call__"),
                                                (ToolCallingAgent, "_step_stream"), (OpenAIServerModel, "generate"),
                                                (Tool, "__call__")]}
    team = _team(_model(server.base_url))
    team.step_callbacks.register(ActionStep, halt)
    probe = aegis_probe.instrument(team, store=tmp_path / "store")
    with pytest.raises(Halted) as raised:
        team.run("what is up")
    assert raised.value is error and str(error).count(SK) == 1
    probe.flush()
    traj = probe.trajectory()
    assert traj.error == f"Halted: budget exceeded for {REDACTED}"
    assert [s.agent for s in traj.steps] == ["manager", "researcher", "researcher"]
    (root,) = [s for s in TraceStore(tmp_path / "store").trace(traj.trace_id) if s.parent_span_id is None]
    assert (root.status, root.attributes[sc.ERROR_TYPE]) == ("ERROR", "Halted")
    written = b"".join(p.read_bytes() for p in (tmp_path / "store").rglob("*") if p.is_file()).decode()
    assert "budget exceeded" in written and SK[3:] not in written
    probe.uninstrument()
    assert all(vars(c)[n] is saved for (c, n), saved in originals.items())
    no_hook_errors(caplog.records)
