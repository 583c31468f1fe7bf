"""CrewAI in real use, through real crews and CrewAI's native OpenAI provider (the real openai
client) against the loopback model server: a crew of 120 tasks, odd bytes in the model's replies,
tool results and the user's task (NUL, lone surrogates, bytes that are not UTF-8, right-to-left
text and emoji, control characters, a 1 MiB turn), and kickoffs at once in two threads and in two
asyncio tasks.

In the main environment only :func:`test_in_own_environment` runs (crewai lives in .venv-crewai);
it runs this file there, CrewAI's telemetry, tracing and version check off."""

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

#: CrewAI 1.15's opt-outs (never OTEL_SDK_DISABLED: it would switch off aegis-probe's SDK too).
TELEMETRY_OFF = {"CREWAI_DISABLE_TELEMETRY": "true", "CREWAI_TRACING_ENABLED": "false",
                 "CREWAI_DISABLE_VERSION_CHECK": "true"}
HERE = importable("crewai")


@pytest.mark.skipif(HERE, reason=INSIDE)
def test_in_own_environment(tmp_path):
    """CrewAI keeps kickoff outputs and keys under the user's data dir: a temporary one here."""
    run_in_own_env(".venv-crewai", "tests/test_realuse_crewai.py", "realuse",
                   env={**TELEMETRY_OFF, "XDG_DATA_HOME": str(tmp_path)})


needs_crewai = pytest.mark.skipif(not HERE, reason="crewai is not installed here (it runs in .venv-crewai)")
if HERE:
    os.environ.update(TELEMETRY_OFF)
    import aegis_probe
    from aegis_probe.modelserver import Reply

STEPS = 120
FILES = "files: " + os.fsdecode(b"caf\xe9-\xff.txt")  # a file name that is not UTF-8, as os.listdir gives it


def _llm(base_url: str, stream: bool = False) -> Any:
    from crewai import LLM

    return LLM(model="openai/aegis-scripted", base_url=base_url, api_key="sk-test", max_retries=0, stream=stream)


def _agent(role: str, base_url: str, stream: bool = False, **options: Any) -> Any:
    from crewai import Agent

    return Agent(role=role, goal="Do the task", backstory=f"You are {role}'s voice.", llm=_llm(base_url, stream),
                 allow_delegation=False, max_iter=3, **options)


def _speaker(body: dict[str, Any]) -> str:
    return body["messages"][0]["content"].split()[2].rstrip(".")  # CrewAI's system message: "You are ROLE. ..."


@needs_crewai
@pytest.mark.parametrize("asynchronous", [False, True], ids=["kickoff", "akickoff"])
def test_a_crew_of_120_tasks_is_whole(asynchronous, model_server, tmp_path, caplog):
    from crewai import Crew, Task

    counter = itertools.count()
    server = model_server(lambda body: Reply(content=f"{_speaker(body)} says {next(counter)}"))
    agents = [_agent("alice", server.base_url), _agent("bob", server.base_url)]
    tasks = [Task(description=f"Say line {i}.", expected_output="One line", agent=agents[i % 2]) for i in range(STEPS)]
    crew = Crew(name="talk", agents=agents, tasks=tasks)
    probe = aegis_probe.instrument(crew, store=tmp_path / "store")
    output = asyncio.run(crew.akickoff()) if asynchronous else crew.kickoff()
    said = [t.raw for t in output.tasks_output]
    assert len(said) == STEPS == len(server.requests) and output.raw == f"bob says {STEPS - 1}"
    traj = long_run_is_whole(probe, tmp_path / "store", [t.agent for t in output.tasks_output], said, STEPS)
    assert [s.agent for s in traj.steps[:3]] == ["alice", "bob", "alice"] and traj.task == "Say line 0."
    no_hook_errors(caplog.records)


def _crew(base_url: str, stream: bool = False) -> Any:
    """A lister whose model calls ``list_files`` (lone surrogates in its arguments, as JSON escapes),
    the tool's result (a file name that is not UTF-8) its task's answer as it is
    (``result_as_answer``); then a writer (given no context: the openai client could not send that
    name) whose model answers with the run's odd text, the crew's output."""
    from crewai import Crew, Task
    from crewai.tools import tool

    @tool("list_files", result_as_answer=True)
    def list_files(pattern: str) -> str:
        """List the files matching ``pattern``."""
        return FILES

    lister, writer = _agent("lister", base_url, stream, tools=[list_files]), _agent("writer", base_url, stream)
    tasks = [Task(description="List the files about {task}", expected_output="The files", agent=lister),
             Task(description="Write about {task}", expected_output="A text", agent=writer, context=[])]
    return Crew(name="odd", agents=[lister, writer], tasks=tasks)


def _kickoff(crew: Any, task: str, asynchronous: bool) -> Any:
    return asyncio.run(crew.akickoff(inputs={"task": task})) if asynchronous else crew.kickoff(inputs={"task": task})


@needs_crewai
@pytest.mark.parametrize("asynchronous, stream", [(False, False), (True, False), (False, True)],
                         ids=["kickoff", "akickoff", "streamed"])
@pytest.mark.parametrize("task, reply", [(ODD, ODD + LONE), (MEGA, MEGA + LONE)], ids=["odd", "1MiB"])
def test_odd_bytes_pass_unchanged_and_are_recorded(task, reply, asynchronous, stream, model_server, tmp_path, caplog):
    """The app's result is the uninstrumented one; the store's line is valid UTF-8 JSON; the
    trajectory holds the texts as they were, lone surrogates escaped (``\\ud800``, as documented)."""
    def policy(body: dict[str, Any]) -> Reply:
        if _speaker(body) == "lister":
            return Reply(tool_calls=[("list_files", {"pattern": ODD + LONE})])
        return Reply(content=reply)

    server = model_server(policy)
    bare = _kickoff(_crew(server.base_url, stream), task, asynchronous)
    crew = _crew(server.base_url, stream)
    probe = aegis_probe.instrument(crew, store=tmp_path / "store", judge=lambda t, answer: t == task and answer == reply)
    output = _kickoff(crew, task, asynchronous)
    assert [t.raw for t in output.tasks_output] == [t.raw for t in bare.tasks_output] == [FILES, reply]
    probe.flush()
    store_lines_are_valid(tmp_path / "store")
    traj = probe.trajectory()
    assert traj.task == task and [s.agent for s in traj.steps] == ["lister", "writer"]
    assert traj.steps[1].input_messages[0].content.startswith(f"Write about {task}")
    (tool,) = traj.steps[0].tool_calls
    assert json.loads(tool.arguments) == {"pattern": ODD + LONE} and tool.result == escaped(FILES)
    assert [s.output for s in traj.steps] == [escaped(FILES), escaped(reply)]
    assert traj.steps[1].llm_calls[0].output == escaped(reply)
    assert traj.outcome.success and traj.outcome.answer == escaped(reply)
    no_hook_errors(caplog.records)


@needs_crewai
def test_lone_surrogates_in_the_task_fail_the_app_as_uninstrumented(model_server, tmp_path, caplog):
    """The openai client refuses to send a lone surrogate: the app gets that same error, and the
    failed run is stored with its task escaped."""
    server = model_server(lambda body: Reply(content="never"))
    traj = lone_surrogate_task_fails_as_uninstrumented(lambda: _crew(server.base_url),
                                                      lambda crew: _kickoff(crew, LONE, False), server, tmp_path / "store")
    assert traj.steps[0].agent == "lister"
    no_hook_errors(caplog.records)


@needs_crewai
def test_kickoffs_at_once_in_threads_and_tasks_stay_apart(model_server, tmp_path, caplog):
    """One crew, one probe, a copy of the crew per request (as ``kickoff_for_each`` makes): two kickoffs
    in two threads and two ``akickoff`` in two asyncio tasks, all four at once. Each run's spans and
    outcome label are its own trace's."""
    from crewai import Crew, Task

    server = model_server(all_in_flight(
        4, lambda body: json.dumps(body["messages"], ensure_ascii=False).split("task of ")[1].split(".")[0],
        lambda key, body: Reply(content=f"{key} from {_speaker(body)}")))
    agents = [_agent("alice", server.base_url), _agent("bob", server.base_url)]
    crew = Crew(name="pair", agents=agents, tasks=[
        Task(description="Start on {task}.", expected_output="A line", agent=agents[0]),
        Task(description="Finish {task}.", expected_output="A line", agent=agents[1])])
    probe = aegis_probe.instrument(crew, store=tmp_path / "store")
    tasks = {key: f"task of {key}" for key in AT_ONCE}

    def one(key: str) -> str:
        output = crew.copy().kickoff(inputs={"task": tasks[key]})
        probe.set_outcome(key.endswith("ok"), answer=key)  # the caller's own run
        assert probe.trajectory().task == tasks[key]
        return str(output.raw)

    async def one_async(key: str) -> str:
        output = await crew.copy().akickoff(inputs={"task": tasks[key]})
        probe.set_outcome(key.endswith("ok"), answer=key)
        return str(output.raw)

    answers = run_at_once(one, one_async)
    assert answers == [f"{key} from bob" for key in tasks]
    probe.flush()
    runs = runs_stay_apart(tmp_path / "store", tasks, {k: k for k in tasks})
    for key, traj in runs.items():
        assert [s.agent for s in traj.steps] == ["alice", "bob"], key
    no_hook_errors(caplog.records)


@needs_crewai
def test_a_kickoff_cancelled_beside_another_ends_alone(model_server, tmp_path, caplog):
    """Two ``akickoff`` of copies of one crew as two asyncio tasks; the app cancels one mid-call (a
    timeout): it ends cancelled in its own trace, the other is whole."""
    from crewai import Crew, Task

    policy = SlowOrFast()
    solo = _agent("solo", model_server(policy).base_url)
    task = Task(description="Do the {task}.", expected_output="A line", agent=solo)
    crew = Crew(name="solo", agents=[solo], tasks=[task])
    probe = aegis_probe.instrument(crew, store=tmp_path / "store")
    output = asyncio.run(cancel_one_beside_another(policy, lambda task: crew.copy().akickoff(inputs={"task": task})))
    assert output.raw == "done fast"
    cancelled_beside_whole(probe, tmp_path / "store")
    no_hook_errors(caplog.records)


@needs_crewai
def test_a_dropped_crew_leaves_no_memory_behind(model_server, tmp_path):
    """A server-style app: crews of 6 tasks with 1 MiB replies, each built, instrumented and let go.
    Nothing of them stays allocated (the seam's prompt cache held the last prompts)."""
    from crewai import Crew, Task

    server = model_server(lambda body: Reply(content="y" * (1 << 20)))

    def run() -> None:
        agents = [_agent("alice", server.base_url), _agent("bob", server.base_url)]
        tasks = [Task(description=f"Say line {i}.", expected_output="One line", agent=agents[i % 2], context=[])
                 for i in range(6)]
        crew = Crew(name="talk", agents=agents, tasks=tasks)
        probe = aegis_probe.instrument(crew, store=tmp_path / "store")
        assert len(crew.kickoff().tasks_output) == 6
        probe.flush()
        probe.uninstrument()
        server.requests.clear()

    assert memory_held_after(run) < 1.0


@needs_crewai
def test_kickoff_inputs_json_cannot_hold_are_a_recorded_run(model_server, tmp_path, caplog):
    """Inputs with a key JSON cannot have (a tuple) and a value holding itself: the app gets what it
    gets uninstrumented, and the run is recorded with those inputs as its task (a hook error and no
    run before)."""
    from crewai import Crew, Task

    server = model_server(lambda body: Reply(content=f"{_speaker(body)} done"))

    def kickoff() -> Any:
        agent = _agent("alice", server.base_url)
        crew = Crew(name="odd inputs", agents=[agent], tasks=[Task(description="Say it.", expected_output="A line",
                                                                     agent=agent)])
        loop: dict[Any, Any] = {("a", 1): "tuple key"}
        loop["self"] = loop
        return crew, lambda: crew.kickoff(inputs={"first": loop, "second": "two"})

    _, bare = kickoff()
    try:
        expected: Any = bare().raw
    except Exception as exc:  # noqa: BLE001  (whatever CrewAI does with such inputs, the app gets it)
        expected = type(exc)
    crew, run = kickoff()
    probe = aegis_probe.instrument(crew, store=tmp_path / "store")
    try:
        got: Any = run().raw
    except Exception as exc:  # noqa: BLE001
        got = type(exc)
    assert got == expected
    probe.flush()
    traj = probe.trajectory()
    assert traj.task == '{"first": {"(\'a\', 1)": "tuple key", "self": "{...}"}, "second": "two"}'
    no_hook_errors(caplog.records)
