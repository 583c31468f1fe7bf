"""Google ADK in real use, in .venv-google-adk (run from the main suite by :func:`test_in_own_environment`):
a ``SequentialAgent`` desk of a coordinator ``LlmAgent`` that transfers to its ``researcher`` sub-agent
(with a tool), then a writer, on the demo's ``BaseLlm`` (the real openai client against the loopback
model server), as a team would write it. Runs in two threads and two asyncio tasks at once on one
probe stay apart; a run of 200 tool-calling turns after a transfer is one whole trace; odd bytes
pass through unchanged; secrets in the task or a tool's result are never stored; the app's own
exception passes through unchanged, the run recorded failed, and uninstrument restores the originals."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import pytest
from framework_checks import (AT_ONCE, LONE, MEGA, ODD, all_in_flight, escaped, long_run_is_whole, no_hook_errors,
                              run_at_once, runs_stay_apart, store_lines_are_valid)
from own_env import INSIDE, importable, run_in_own_env

#: LiteLLM fetches its model price map from GitHub at import unless told to use its own copy.
OFFLINE = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}
HERE = importable("google.adk")


@pytest.mark.skipif(HERE, reason=INSIDE)
def test_in_own_environment():
    run_in_own_env(".venv-google-adk", "tests/test_realuse_google_adk.py", "realuse_google_adk", env=OFFLINE)


needs_adk = pytest.mark.skipif(not HERE, reason="google-adk is not installed here (it runs in .venv-google-adk)")
if HERE:
    os.environ.update(OFFLINE)
    import aegis_probe
    from aegis_probe.capture import semconv as sc
    from aegis_probe.demos.google_adk import OpenAICompatibleLlm
    from aegis_probe.demos.task import message_text
    from aegis_probe.modelserver import Reply
    from aegis_probe.redact import REDACTED
    from aegis_probe.storage.store import TraceStore

TURNS = 200
APP = "desk_app"
SYSTEM = {
    "coordinator": "You are the coordinator. Hand the question over to the researcher.",
    "researcher": "You are the researcher. Look the question up, then report.",
    "writer": "You are the writer. Write the answer.",
}
#: How ADK shows the writer another agent's turn.
BEGIN, END = "<<<BEGIN_QUOTED_AGENT_CONTENT>>>", "<<<END_QUOTED_AGENT_CONTENT>>>"
GH = "ghp_" + "Zq8Rt5Lm2Np7Xw4Kv9Hb3Jd6Fc1Gs0Ty5Ue"  # GitHub classic token shape
SK = "sk-" + "proj-Qw3Er5Ty7Ui9Op1As3Df5Gh7"  # OpenAI key shape


def _desk(base_url: str, found: Any = None) -> Any:
    """The desk: the coordinator (transferring to its researcher, whose ``lookup`` tool answers
    ``found(query)``), then the writer."""
    from google.adk.agents import LlmAgent, SequentialAgent

    def lookup(query: str) -> str:
        """Look a question up in the archive."""
        return found(query) if found else f"archive entry for {query}"

    llm = OpenAICompatibleLlm(model="aegis-scripted", base_url=base_url, api_key="sk-test")
    researcher = LlmAgent(name="researcher", model=llm, instruction=SYSTEM["researcher"], tools=[lookup],
                          description="Looks questions up in the archive.")
    coordinator = LlmAgent(name="coordinator", model=llm, instruction=SYSTEM["coordinator"], sub_agents=[researcher])
    writer = LlmAgent(name="writer", model=llm, instruction=SYSTEM["writer"])
    return SequentialAgent(name="desk", sub_agents=[coordinator, writer])


def _desk_policy(write: Any = lambda report: f"written: {report}") -> Any:
    """The coordinator transfers; the researcher looks the user's question up and reports what it
    found; the writer writes ``write(report)``."""
    def policy(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        system, last = message_text(messages[0]), messages[-1]
        question = next(message_text(m) for m in messages if m["role"] == "user")
        if system.startswith(SYSTEM["coordinator"]):
            return Reply(content=f"Passing on: {question}", tool_calls=[("transfer_to_agent", {"agent_name": "researcher"})])
        if system.startswith(SYSTEM["researcher"]):
            if last["role"] == "tool":
                return Reply(content=f"found {json.loads(last['content'])['result']}")
            return Reply(tool_calls=[("lookup", {"query": question})])
        quoted = next(message_text(m) for m in reversed(messages) if "found " in message_text(m))  # as ADK quotes it
        return Reply(content=write(quoted.rsplit(f"{BEGIN}\n", 1)[-1].split(f"\n{END}", 1)[0]))

    return policy


async def _ask(runner: Any, task: str) -> str | None:
    """One request on ``runner``, in a session of its own: the last whole text an agent wrote."""
    from google.genai import types

    session = await runner.session_service.create_session(app_name=APP, user_id="user")
    answer = None
    async for event in runner.run_async(user_id="user", session_id=session.id,
                                        new_message=types.Content(role="user", parts=[types.Part(text=task)])):
        if event.content is not None and event.content.role == "model" and not event.partial:
            answer = "\n".join(p.text for p in event.content.parts or () if p.text) or answer
    return answer


def _runner(app: Any) -> Any:
    from google.adk.runners import InMemoryRunner

    return InMemoryRunner(agent=app, app_name=APP)


def _run(app: Any, task: str) -> str | None:
    return asyncio.run(_ask(_runner(app), task))


def _written(probe: Any, store_dir: Any) -> str:
    probe.flush()
    return b"".join(p.read_bytes() for p in store_dir.rglob("*") if p.is_file()).decode()


@needs_adk
def test_runs_in_threads_and_asyncio_tasks_at_once_stay_apart(model_server, tmp_path, caplog):
    """One desk, one probe: two runs in two threads (each its event loop and runner) and two asyncio
    tasks on one runner (a session each), all four at once. Each run's spans, session and outcome
    are its own; every span's parent is in its own run's trace."""
    def key_of(body: dict[str, Any]) -> str:
        return next(k for k in AT_ONCE if k in json.dumps(body["messages"]))

    policy = _desk_policy()
    _run(_desk(model_server(policy).base_url), "warm up")  # imports done: all four reach the model within the barrier's 10 s
    server = model_server(all_in_flight(len(AT_ONCE), key_of, lambda key, body: policy(body)))
    app = _desk(server.base_url)
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    tasks = {key: f"what is {key}" for key in AT_ONCE}
    shared = _runner(app)

    def one(key: str) -> str:
        answer = str(_run(app, tasks[key]))
        probe.set_outcome(key.endswith("ok"), answer=key)  # the caller's own run
        assert probe.trajectory().task == tasks[key]
        return answer

    async def one_async(key: str) -> str:
        answer = str(await _ask(shared, tasks[key]))
        probe.set_outcome(key.endswith("ok"), answer=key)
        return answer

    assert run_at_once(one, one_async) == [f"written: found archive entry for {tasks[k]}" for k in AT_ONCE]
    probe.flush()
    store = TraceStore(tmp_path / "store")
    runs = runs_stay_apart(tmp_path / "store", tasks, {k: k for k in tasks})
    sessions = set()
    for key, traj in runs.items():
        assert [s.agent for s in traj.steps] == ["coordinator", "researcher", "researcher", "writer"], key
        assert [t.name for s in traj.steps for t in s.tool_calls] == ["transfer_to_agent", "lookup"], key
        spans = store.trace(traj.trace_id)
        ids = {s.span_id for s in spans}
        assert len([s for s in spans if s.parent_span_id is None]) == 1
        assert all(s.parent_span_id in ids for s in spans if s.parent_span_id is not None), key
        (session,) = {s.attributes.get(sc.CONVERSATION_ID) for s in spans}
        sessions.add(session)
    assert len(sessions) == len(AT_ONCE)
    no_hook_errors(caplog.records)


def _counter(turns: int) -> Any:
    """A coordinator transferring to a counter that calls ``tick`` ``turns`` times, then answers; both
    on the team's own scripted ``BaseLlm`` (in process: through the openai client the growing
    request's encoding alone would take a minute)."""
    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_response import LlmResponse
    from google.genai import types

    class Scripted(BaseLlm):
        async def generate_content_async(self, llm_request: Any, stream: bool = False) -> Any:
            if str(llm_request.config.system_instruction).startswith(SYSTEM["coordinator"]):
                part = types.Part(function_call=types.FunctionCall(name="transfer_to_agent", args={"agent_name": "counter"}))
            else:
                done = sum(1 for c in llm_request.contents for p in c.parts or () if p.function_response is not None
                           and p.function_response.name == "tick")
                part = types.Part(function_call=types.FunctionCall(id=f"tick-{done}", name="tick", args={"n": done})) \
                    if done < turns else types.Part(text=f"counted {done} ticks")
            yield LlmResponse(content=types.Content(role="model", parts=[part]))

    def tick(n: int) -> str:
        """Count one tick."""
        return f"tick {n}"

    llm = Scripted(model="scripted")
    counter = LlmAgent(name="counter", model=llm, instruction="You count ticks.", tools=[tick])
    return LlmAgent(name="coordinator", model=llm, instruction=SYSTEM["coordinator"], sub_agents=[counter])


@needs_adk
def test_a_run_of_200_turns_after_a_transfer_is_whole(tmp_path, caplog):
    """The coordinator's turn, then 200 of the counter's turns each calling ``tick``, then its answer:
    202 steps, 202 chat spans, 201 tool spans (the transfer, 200 ticks) each under its step."""
    from google.adk.agents.run_config import RunConfig

    app = _counter(TURNS)
    probe = aegis_probe.instrument(app, store=tmp_path / "store")

    async def run() -> str | None:
        from google.genai import types

        runner = _runner(app)
        session = await runner.session_service.create_session(app_name=APP, user_id="user")
        answer = None
        async for event in runner.run_async(user_id="user", session_id=session.id, run_config=RunConfig(max_llm_calls=TURNS + 5),
                                            new_message=types.Content(role="user", parts=[types.Part(text="count")])):
            answer = next((p.text for p in (event.content.parts if event.content else None) or () if p.text), answer)
        return answer

    assert asyncio.run(run()) == f"counted {TURNS} ticks"
    agents = ["coordinator"] + ["counter"] * (TURNS + 1)
    outputs = ['[tool_call transfer_to_agent("{\\"agent_name\\": \\"counter\\"}")]']
    outputs += [f'[tool_call tick("{{\\"n\\": {i}}}")]' for i in range(TURNS)] + [f"counted {TURNS} ticks"]
    traj = long_run_is_whole(probe, tmp_path / "store", agents, outputs, TURNS + 2)
    assert traj.outcome.answer is None and traj.steps[0].next_speaker == "counter"
    spans = TraceStore(tmp_path / "store").trace(traj.trace_id)
    by_id = {s.span_id: s for s in spans}
    tools = [s for s in spans if s.attributes.get(sc.OPERATION) == sc.OP_TOOL]
    assert sorted((s.name, by_id[s.parent_span_id].attributes[sc.STEP_INDEX]) for s in tools) == sorted(
        [("execute_tool transfer_to_agent", 0)] + [("execute_tool tick", i + 1) for i in range(TURNS)])
    assert all(f"tick {by_id[s.parent_span_id].attributes[sc.STEP_INDEX] - 1}" in s.attributes[sc.TOOL_CALL_RESULT]
               for s in tools if s.name == "execute_tool tick")
    no_hook_errors(caplog.records)


@needs_adk
@pytest.mark.parametrize("task", [ODD, MEGA], ids=["odd", "1MiB"])
def test_odd_bytes_pass_unchanged_and_are_recorded(task, model_server, tmp_path, caplog):
    """The odd text as the task, in the tool's result and the researcher's report; lone surrogates
    (what the openai client cannot send on) in the writer's answer, the run's last turn. The app's
    answer is the uninstrumented one; the store is strict UTF-8 JSON with the texts as they were."""
    def found(query: str) -> str:
        return f"{ODD} {query[:40]}"

    server = model_server(_desk_policy(lambda report: ODD + LONE))
    bare = _run(_desk(server.base_url, found), task)
    app = _desk(server.base_url, found)
    probe = aegis_probe.instrument(app, store=tmp_path / "store", judge=lambda t, answer: t == task and answer == bare)
    assert _run(app, task) == bare == ODD + LONE
    probe.flush()
    store_lines_are_valid(tmp_path / "store")
    traj = probe.trajectory()
    assert traj.task == task and traj.outcome.success and traj.outcome.answer == escaped(ODD + LONE)
    assert [s.agent for s in traj.steps] == ["coordinator", "researcher", "researcher", "writer"]
    (lookup,) = traj.steps[1].tool_calls
    assert json.loads(lookup.arguments) == {"query": task} and lookup.result == found(task)
    assert traj.steps[2].output == f"found {found(task)}" and traj.steps[3].output == escaped(ODD + LONE)
    no_hook_errors(caplog.records)


@needs_adk
def test_secrets_in_the_task_and_a_tool_result_are_never_stored(model_server, tmp_path, caplog):
    """The user pastes a key into the task; the tool's result holds a token. The desk answers as it
    would uninstrumented; neither secret is in any stored byte, the redaction marker is."""
    server = model_server(_desk_policy())
    app = _desk(server.base_url, lambda query: f"token {GH} revoked for {query}")
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    answer = str(_run(app, f"why does my key {SK} fail"))
    assert SK in answer and GH in answer, "the app itself sees the secrets"
    written = _written(probe, tmp_path / "store")
    assert SK[3:] not in written and GH[4:] not in written
    assert REDACTED in written and "revoked for" in written
    no_hook_errors(caplog.records)


class Halted(RuntimeError):
    """The app's own error: its tool refusing."""


@needs_adk
def test_the_apps_exception_passes_through_and_the_run_is_failed(model_server, tmp_path, caplog):
    """The researcher's tool raises the app's own exception (carrying a secret): the app gets that very
    exception, as uninstrumented; the run is stored failed with its steps so far, the secret
    redacted; uninstrument restores every original."""
    from google.adk.flows.llm_flows.base_llm_flow import BaseLlmFlow
    from google.adk.runners import Runner
    from google.adk.tools.base_tool import BaseTool
    from google.adk.tools.function_tool import FunctionTool

    error = Halted(f"archive closed for {SK}")

    def refuse(query: str) -> str:
        raise error

    server = model_server(_desk_policy())
    with pytest.raises(Halted) as bare:
        _run(_desk(server.base_url, refuse), "what is up")
    assert bare.value is error
    originals = {(c, n): vars(c)[n] for c, n in [(Runner, "run_async"), (BaseLlmFlow, "_run_one_step_async"),
                                                (OpenAICompatibleLlm, "generate_content_async"),
                                                (FunctionTool, "run_async"), (BaseTool, "run_async")] if n in vars(c)}
    app = _desk(server.base_url, refuse)
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    with pytest.raises(Halted) as raised:
        _run(app, "what is up")
    assert raised.value is error and str(error).count(SK) == 1
    written = _written(probe, tmp_path / "store")
    traj = probe.trajectory()
    assert traj.error == f"Halted: archive closed for {REDACTED}"
    assert [s.agent for s in traj.steps] == ["coordinator", "researcher"]
    (root,) = [s for s in TraceStore(tmp_path / "store").trace(traj.trace_id) if s.parent_span_id is None]
    assert (root.status, root.attributes[sc.ERROR_TYPE]) == ("ERROR", "Halted")
    assert "archive closed" in written and SK[3:] not in written
    probe.uninstrument()
    assert len(originals) >= 4 and all(vars(c)[n] is saved for (c, n), saved in originals.items())
    no_hook_errors(caplog.records)
