"""AutoGen apps written as other teams write them, of kinds the adapter's other tests do not run:
custom speaker selection, parallel tools with reflection, code execution and a human in the loop,
agents and teams as tools, runs repeated and reset, a lone agent called through ``on_messages``
(autogen's own, one implementing only that, a ``MessageFilterAgent``),
handoffs, a run refused while another is in flight, names in any script, secrets in tool results
and model errors. Real autogen-agentchat and its OpenAI client against the loopback model server."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from pathlib import Path
from typing import Any

import pytest
from framework_checks import no_hook_errors
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

pytest.importorskip("autogen_agentchat")

from autogen_agentchat.agents import AssistantAgent, BaseChatAgent, CodeExecutorAgent, UserProxyAgent  # noqa: E402
from autogen_agentchat.base import Response  # noqa: E402
from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination  # noqa: E402
from autogen_agentchat.messages import TextMessage  # noqa: E402
from autogen_agentchat.teams import RoundRobinGroupChat, SelectorGroupChat, Swarm  # noqa: E402
from autogen_core import CancellationToken, SingleThreadedAgentRuntime  # noqa: E402
from autogen_core.models import ChatCompletionClient, CreateResult, ModelFamily, ModelInfo, RequestUsage  # noqa: E402
from autogen_ext.models.openai import OpenAIChatCompletionClient  # noqa: E402

import aegis_probe  # noqa: E402
from aegis_probe.capture import semconv as sc  # noqa: E402
from aegis_probe.modelserver import Reply  # noqa: E402

SECRET = "sk-proj-Zx9Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0LmNb"


def _info(**extra: Any) -> ModelInfo:
    return ModelInfo(vision=False, function_calling=True, json_output=False, family=ModelFamily.UNKNOWN,
                     structured_output=False, **extra)  # type: ignore[typeddict-item]


def _client(server: Any, **kwargs: Any) -> OpenAIChatCompletionClient:
    return OpenAIChatCompletionClient(model="m", base_url=server.base_url, api_key="sk-test", model_info=_info(), **kwargs)


def _by_system_prompt(body: dict[str, Any]) -> Reply:
    return Reply(content=f"{body['messages'][0]['content']} answers")


def _tracing(app: Any, tmp_path: Path, **kwargs: Any) -> tuple[Any, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store", **kwargs), exporter


def _steps(spans: tuple[ReadableSpan, ...]) -> list[ReadableSpan]:
    return sorted((s for s in spans if sc.STEP_INDEX in (s.attributes or {})), key=lambda s: str((s.attributes or {})[sc.STEP_INDEX]).zfill(9))


def _children(span: ReadableSpan, spans: tuple[ReadableSpan, ...], op: str) -> list[ReadableSpan]:
    kids = [s for s in spans if s.parent is not None and s.parent.span_id == span.context.span_id]
    return sorted((s for s in kids if (s.attributes or {}).get(sc.OPERATION) == op), key=lambda s: s.start_time or 0)


def _everything(probe: Any, spans: tuple[ReadableSpan, ...], store: Path) -> str:
    """Every attribute, event and status of ``spans`` and every byte ``probe`` stored, as text."""
    probe.flush()
    parts = [json.dumps([dict(s.attributes or {}), [dict(e.attributes or {}) for e in s.events], s.status.description],
                        default=str) for s in spans]
    parts += [p.read_text(errors="replace") for p in store.rglob("*") if p.is_file()]
    return "\n".join(parts)


def _aegis_log(caplog: Any) -> str:
    return "\n".join(r.getMessage() + str(r.exc_info or "") for r in caplog.records if r.name.startswith("aegis_probe"))


def test_selector_func_and_candidate_func_pick_speakers_the_model_does_not(model_server, tmp_path, caplog):
    """``selector_func`` picks the first speaker and then defers to the model (returns None): only the
    model's choices are ``speaker_selection`` calls, under the root; a ``candidate_func`` leaving one
    candidate needs no model call at all. Every turn is a step of the agent that spoke."""

    def policy(body: dict[str, Any]) -> Reply:
        system = body["messages"][0]["content"]
        return Reply(content="critic") if "select the next role" in system else Reply(content=f"{system} answers")

    client = _client(model_server(policy))
    writer = AssistantAgent("writer", model_client=client, system_message="writer")
    critic = AssistantAgent("critic", model_client=client, system_message="critic")
    picked = []

    def selector(messages: Any) -> str | None:
        picked.append(messages[-1].source)
        return "writer" if messages[-1].source == "user" else None

    team = SelectorGroupChat([writer, critic], model_client=client, selector_func=selector, allow_repeated_speaker=True,
                             termination_condition=MaxMessageTermination(4))
    probe, exporter = _tracing(team, tmp_path)
    asyncio.run(team.run(task="Write."))
    spans = exporter.get_finished_spans()
    (root,) = [s for s in spans if s.parent is None]
    assert [s.attributes[sc.AGENT_NAME] for s in _steps(spans)] == ["writer", "critic", "critic"]
    selections = _children(root, spans, sc.OP_CHAT)
    assert len(selections) == 2 == picked.count("writer") + picked.count("critic")
    assert {(s.attributes[sc.AGENT_NAME], s.attributes[sc.LLM_PURPOSE]) for s in selections} == {
        ("SelectorGroupChatManager", sc.PURPOSE_SPEAKER_SELECTION)}
    assert [len(_children(s, spans, sc.OP_CHAT)) for s in _steps(spans)] == [1, 1, 1]
    probe.uninstrument()

    client = _client(model_server(policy))  # (an openai client is bound to the event loop it first ran in)
    alternate = SelectorGroupChat([AssistantAgent("writer", model_client=client, system_message="writer"),
                                   AssistantAgent("critic", model_client=client, system_message="critic")],
                                  model_client=client, termination_condition=MaxMessageTermination(4),
                                  candidate_func=lambda msgs: ["critic"] if msgs[-1].source == "writer" else ["writer"])
    probe, exporter = _tracing(alternate, tmp_path)
    asyncio.run(alternate.run(task="Write."))
    spans = exporter.get_finished_spans()
    assert [s.attributes[sc.AGENT_NAME] for s in _steps(spans)] == ["writer", "critic", "writer"]
    assert all(s.attributes.get(sc.LLM_PURPOSE) is None for s in spans)
    no_hook_errors(caplog.records)


def _tools_policy(body: dict[str, Any]) -> Reply:
    """Three tool calls at once, then a summary of their results (the reflection)."""
    messages = body["messages"]
    if messages[-1].get("role") == "tool":
        return Reply(content="Summary: " + " | ".join(str(m["content"]) for m in messages if m.get("role") == "tool"))
    if body.get("tools"):
        return Reply(tool_calls=[("weather", {"city": "Oslo"}), ("vault", {"key": "db"}), ("broken", {})])
    return Reply(content="Noted.")


def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def vault(key: str) -> str:
    """A stored secret."""
    return f"password for {key} is {SECRET}"


def broken() -> str:
    """A tool whose backend rejects its key."""
    raise PermissionError(f"auth failed for key {SECRET}")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("reflect", [True, False])
def test_parallel_tool_calls_and_reflection_stay_in_their_step_and_secrets_never_show(model_server, tmp_path, caplog,
                                                                                     stream, reflect):
    """An agent calling three tools at once (one returns a key, one fails naming it), reflecting on
    the results or not, its model streamed or not: one step holding its model calls and the three
    ``execute_tool`` spans; the key is in no span, event, status, stored trace or aegis log line."""
    caplog.set_level(logging.DEBUG, logger="aegis_probe")
    client = _client(model_server(_tools_policy))
    helper = AssistantAgent("helper", model_client=client, system_message="helper", tools=[weather, vault, broken],
                            reflect_on_tool_use=reflect, model_client_stream=stream)
    team = RoundRobinGroupChat([helper, AssistantAgent("other", model_client=client, system_message="other")],
                               termination_condition=MaxMessageTermination(3))
    probe, exporter = _tracing(team, tmp_path)

    async def consume() -> list[Any]:
        return [item async for item in team.run_stream(task="Check.")]

    items = asyncio.run(consume())
    assert SECRET in str(items)  # the app itself sees its tool's results unchanged
    spans = exporter.get_finished_spans()
    first, second = _steps(spans)
    assert (first.attributes[sc.AGENT_NAME], second.attributes[sc.AGENT_NAME]) == ("helper", "other")
    tools = _children(first, spans, sc.OP_TOOL)
    assert sorted(t.attributes[sc.TOOL_NAME] for t in tools) == ["broken", "vault", "weather"]
    status = {t.attributes[sc.TOOL_NAME]: t.status.status_code for t in tools}
    assert status == {"weather": StatusCode.UNSET, "vault": StatusCode.UNSET, "broken": StatusCode.ERROR}
    assert len(_children(first, spans, sc.OP_CHAT)) == (2 if reflect else 1)
    assert len(_children(second, spans, sc.OP_CHAT)) == 1 and not _children(second, spans, sc.OP_TOOL)
    steps = probe.trajectory().steps
    assert steps[0].output.startswith("Summary: sunny in Oslo" if reflect else "sunny in Oslo")
    assert "password for db is" in steps[0].output and "auth failed for key" in steps[0].output
    everything = _everything(probe, spans, tmp_path / "store")
    assert "sk-proj-" not in everything and SECRET not in _aegis_log(caplog)
    no_hook_errors(caplog.records)


def test_code_executor_and_a_human_in_the_loop_are_steps(model_server, tmp_path, caplog):
    """A coder, a ``CodeExecutorAgent`` running its code locally (no docker) and a ``UserProxyAgent``
    whose ``input_func`` answers: each turn a step of its own; only the coder's holds a model call,
    the executor's output is the code's, the human's the input it gave."""
    from autogen_ext.code_executors.local import LocalCommandLineCodeExecutor

    def policy(body: dict[str, Any]) -> Reply:
        return Reply(content="```python\nprint(6 * 7)\n```")

    asked = []

    def human(prompt: str) -> str:
        asked.append(prompt)
        return "APPROVE"

    client = _client(model_server(policy))
    with pytest.warns(UserWarning):  # autogen warns that local code execution is unsafe
        executor = CodeExecutorAgent("executor", code_executor=LocalCommandLineCodeExecutor(work_dir=tmp_path / "code"))
    team = RoundRobinGroupChat([AssistantAgent("coder", model_client=client, system_message="coder"), executor,
                                UserProxyAgent("human", input_func=human)],
                               termination_condition=TextMentionTermination("APPROVE"))
    probe, exporter = _tracing(team, tmp_path, judge=lambda task, answer: answer == "APPROVE")
    asyncio.run(team.run(task="Compute 6 * 7."))
    spans = exporter.get_finished_spans()
    traj = probe.trajectory()
    assert [(s.agent, s.output.strip()) for s in traj.steps] == [
        ("coder", "```python\nprint(6 * 7)\n```"), ("executor", "42"), ("human", "APPROVE")]
    assert [len(s.llm_calls) for s in traj.steps] == [1, 0, 0] and len(asked) == 1
    assert [m.content.strip() for m in traj.steps[2].input_messages] == [
        "Compute 6 * 7.", "```python\nprint(6 * 7)\n```", "42"]  # its first turn: all it had not seen
    assert traj.outcome.success is True and traj.outcome.answer == "APPROVE"
    (root,) = [s for s in spans if s.parent is None]
    assert root.attributes[sc.OUTCOME_SUCCESS] is True
    no_hook_errors(caplog.records)


def test_agents_and_teams_as_tools_run_their_steps_inside_the_tool_call(model_server, tmp_path, caplog):
    """``AgentTool`` and ``TeamTool``: the inner agent's and inner team's turns are steps of the
    caller's run, each under the ``execute_tool`` span of the call that ran them, the inner team's
    with its name in their path."""
    from autogen_agentchat.tools import AgentTool, TeamTool

    def policy(body: dict[str, Any]) -> Reply:
        messages, system = body["messages"], body["messages"][0]["content"]
        if body.get("tools") and messages[-1].get("role") != "tool":
            return Reply(tool_calls=[(body["tools"][0]["function"]["name"], {"task": "Sub-question."})])
        return Reply(content=f"{system} answers")

    client = _client(model_server(policy))
    researcher = AssistantAgent("researcher", model_client=client, system_message="researcher", description="Researches.")
    inner = RoundRobinGroupChat([AssistantAgent("drafter", model_client=client, system_message="drafter"),
                                 AssistantAgent("checker", model_client=client, system_message="checker")],
                                name="desk", description="A writing desk.", termination_condition=MaxMessageTermination(3))
    team = RoundRobinGroupChat(
        [AssistantAgent("boss", model_client=client, system_message="boss", tools=[AgentTool(researcher)]),
         AssistantAgent("editor", model_client=client, system_message="editor", tools=[TeamTool(inner, name="desk", description="desk")])],
        name="office", termination_condition=MaxMessageTermination(2))
    probe, exporter = _tracing(team, tmp_path)

    async def two_runs() -> None:
        await team.run(task="Report.")
        await team.run(task="Edit.")  # the editor's turn

    asyncio.run(two_runs())
    spans = exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}
    for caller, tool, inner_agents in (("boss", "researcher", ["researcher"]), ("editor", "desk", ["drafter", "checker"])):
        (step,) = [s for s in _steps(spans) if s.attributes[sc.AGENT_NAME] == caller]
        (call,) = _children(step, spans, sc.OP_TOOL)
        assert call.attributes[sc.TOOL_NAME] == tool
        nested = [s for s in _steps(spans) if s.parent is not None and by_id.get(s.parent.span_id) is call]
        assert [s.attributes[sc.AGENT_NAME] for s in nested] == inner_agents
        assert all(s.context.trace_id == step.context.trace_id and len(_children(s, spans, sc.OP_CHAT)) == 1 for s in nested)
    desk = [s for s in probe.trajectory().steps]
    assert [(s.index, s.agent, s.path) for s in desk] == [
        (0, "editor", ["office"]), (1, "drafter", ["office", "desk"]), (2, "checker", ["office", "desk"])]
    no_hook_errors(caplog.records)


def test_a_team_run_again_and_reset_makes_one_trace_per_run(model_server, tmp_path, caplog):
    """A team run, run again (it continues the conversation), reset and run once more: three traces,
    each with its own task, steps from index 0, its input what that run's agents saw, and its
    outcome judged on its own answer."""
    client = _client(model_server(_by_system_prompt))
    team = RoundRobinGroupChat([AssistantAgent("writer", model_client=client, system_message="writer"),
                                AssistantAgent("critic", model_client=client, system_message="critic")],
                               termination_condition=MaxMessageTermination(3))
    judged = []
    probe, _ = _tracing(team, tmp_path, judge=lambda task, answer: judged.append((task, answer)) or True)

    async def three() -> list[str]:
        ids = []
        for task, reset in (("one", False), ("two", False), ("three", True)):
            if reset:
                await team.reset()
            await team.run(task=task)
            ids.append(probe.last_trace_id)
        return ids

    ids = asyncio.run(three())
    assert len(set(ids)) == 3
    runs = [probe.trajectory(trace_id) for trace_id in ids]
    assert [(r.task, [(s.index, s.agent) for s in r.steps]) for r in runs] == [
        ("one", [(0, "writer"), (1, "critic")]), ("two", [(0, "writer"), (1, "critic")]),
        ("three", [(0, "writer"), (1, "critic")])]
    assert [m.content for m in runs[1].steps[0].input_messages] == ["critic answers", "two"]  # what it had not seen
    assert [m.content for m in runs[2].steps[0].input_messages] == ["three"]  # reset: a fresh conversation
    assert judged == [("one", "critic answers"), ("two", "critic answers"), ("three", "critic answers")]
    assert all(r.outcome.success for r in runs)
    no_hook_errors(caplog.records)


def test_a_lone_agent_called_through_on_messages_is_a_run(model_server, tmp_path, caplog):
    """autogen's tutorials call an agent with ``on_messages`` (or ``on_messages_stream``), not
    ``run``: each call of the instrumented agent is a run of its own (was: a stray span, no run, and
    ``probe.trajectory()`` said no run had happened), its task the messages, its one step holding
    the model and tool calls, its outcome judged on the response."""

    def policy(body: dict[str, Any]) -> Reply:
        if body["messages"][-1].get("role") == "tool":
            return Reply(content="It is " + body["messages"][-1]["content"])
        return Reply(tool_calls=[("weather", {"city": "Rome"})])

    agent = AssistantAgent("assistant", model_client=_client(model_server(policy)), tools=[weather], reflect_on_tool_use=True)
    probe, exporter = _tracing(agent, tmp_path, judge=lambda task, answer: answer == "It is sunny in Rome")

    async def calls() -> list[str]:
        ids = []
        response = await agent.on_messages([TextMessage(content="Weather in Rome?", source="user")], CancellationToken())
        assert response.chat_message.to_text() == "It is sunny in Rome"
        ids.append(probe.last_trace_id)
        async for _ in agent.on_messages_stream([TextMessage(content="And now?", source="user")], CancellationToken()):
            pass
        ids.append(probe.last_trace_id)
        agent.on_messages_stream([TextMessage(content="Never read.", source="user")], CancellationToken())
        return ids

    ids = asyncio.run(calls())
    assert None not in ids and len(set(ids)) == 2
    for trace_id, task in zip(ids, ("Weather in Rome?", "And now?")):
        traj = probe.trajectory(trace_id)
        assert traj.task == task and traj.app == "assistant" and traj.framework == "autogen"
        (step,) = traj.steps
        assert (step.index, step.agent, [t.name for t in step.tool_calls], len(step.llm_calls)) == (0, "assistant", ["weather"], 2)
        assert traj.outcome.success is True
    roots = [s for s in exporter.get_finished_spans() if s.parent is None]
    assert len(roots) == 2  # the stream never read opened no run
    no_hook_errors(caplog.records)


def test_a_lone_agent_failing_in_on_messages_fails_its_run_as_uninstrumented(model_server, tmp_path, caplog):
    """The model fails with an error naming a key: ``on_messages`` raises what it raises without
    instrumentation; the run and its step are ERROR with the key redacted."""
    import openai

    def policy(body: dict[str, Any]) -> Reply:
        raise ValueError(f"invalid api key {SECRET}")

    server = model_server(policy)

    async def ask(agent: AssistantAgent) -> str:
        with pytest.raises(openai.InternalServerError) as raised:
            await agent.on_messages([TextMessage(content="Hi.", source="user")], CancellationToken())
        return str(raised.value)

    plain = asyncio.run(ask(AssistantAgent("assistant", model_client=_client(server, max_retries=0))))
    agent = AssistantAgent("assistant", model_client=_client(server, max_retries=0))
    probe, exporter = _tracing(agent, tmp_path)
    assert asyncio.run(ask(agent)) == plain
    spans = exporter.get_finished_spans()
    assert sorted(s.name for s in spans) == ["chat m", "invoke_agent assistant", "invoke_agent assistant"]
    assert all(s.status.status_code is StatusCode.ERROR for s in spans)
    assert "sk-proj-" not in _everything(probe, spans, tmp_path / "store")
    assert probe.trajectory().steps[0].error is not None
    no_hook_errors(caplog.records)


def test_a_model_error_naming_a_key_fails_the_team_run_without_showing_it(model_server, tmp_path, caplog):
    """The second agent's model fails with a message holding a key: the team raises as without
    instrumentation; the run, that step and its model call are ERROR; the key shows nowhere."""
    caplog.set_level(logging.DEBUG, logger="aegis_probe")

    def policy(body: dict[str, Any]) -> Reply:
        if body["messages"][0]["content"] == "bad":
            raise ValueError(f"invalid api key {SECRET}")
        return Reply(content="fine")

    client = _client(model_server(policy), max_retries=0)
    team = RoundRobinGroupChat([AssistantAgent("good", model_client=client, system_message="good"),
                                AssistantAgent("bad", model_client=client, system_message="bad", model_client_stream=True)],
                               termination_condition=MaxMessageTermination(3))
    probe, exporter = _tracing(team, tmp_path)
    with pytest.raises(RuntimeError, match="invalid api key"):
        asyncio.run(team.run(task="Go."))
    spans = exporter.get_finished_spans()
    (root,) = [s for s in spans if s.parent is None]
    good, bad = _steps(spans)
    assert root.status.status_code is StatusCode.ERROR and bad.status.status_code is StatusCode.ERROR
    assert good.status.status_code is StatusCode.UNSET
    assert [c.status.status_code for c in _children(bad, spans, sc.OP_CHAT)] == [StatusCode.ERROR]
    assert "[REDACTED]" in root.status.description
    assert "sk-proj-" not in _everything(probe, spans, tmp_path / "store") and SECRET not in _aegis_log(caplog)


def test_a_swarm_handoff_names_the_next_speaker(model_server, tmp_path, caplog):
    """A ``Swarm`` agent calls a tool and hands off in one answer: its step holds both tool calls
    and names the agent it handed off to as ``aegis.step.next_speaker`` (as the Agents SDK's
    handoffs do); the last step names none."""

    def policy(body: dict[str, Any]) -> Reply:
        system, last = body["messages"][0]["content"], body["messages"][-1]
        if system == "triage" and last.get("role") != "tool":
            return Reply(tool_calls=[("weather", {"city": "Oslo"}), ("transfer_to_billing", {})])
        return Reply(content="Billed. TERMINATE")

    client = _client(model_server(policy))
    team = Swarm([AssistantAgent("triage", model_client=client, system_message="triage", tools=[weather], handoffs=["billing"]),
                  AssistantAgent("billing", model_client=client, system_message="billing")],
                 termination_condition=TextMentionTermination("TERMINATE"))
    probe, _ = _tracing(team, tmp_path)
    asyncio.run(team.run(task="Bill me."))
    steps = probe.trajectory().steps
    assert [(s.agent, sorted(t.name for t in s.tool_calls), s.next_speaker) for s in steps] == [
        ("triage", ["transfer_to_billing", "weather"], "billing"), ("billing", [], None)]
    no_hook_errors(caplog.records)


def test_a_run_refused_while_one_is_in_flight_leaves_that_one_whole(model_server, tmp_path, caplog):
    """A team on a runtime the app started, run twice at once: autogen refuses the second run
    (ValueError, recorded as a failed run of no steps); the first keeps every step (was: its steps
    after the refusal were stray traces of their own)."""
    client = _client(model_server(_by_system_prompt))

    async def main() -> list[Any]:
        runtime = SingleThreadedAgentRuntime()
        runtime.start()
        team = RoundRobinGroupChat([AssistantAgent("a", model_client=client, system_message="a"),
                                    AssistantAgent("b", model_client=client, system_message="b")],
                                   termination_condition=MaxMessageTermination(4), runtime=runtime)
        probe = _tracing(team, tmp_path)
        started = asyncio.Event()

        async def first() -> Any:
            stream = team.run_stream(task="first")
            items = [await stream.__anext__()]  # the team is running
            started.set()
            return items + [item async for item in stream]

        async def second() -> Any:
            await started.wait()
            return await team.run(task="second")

        results = await asyncio.gather(first(), second(), return_exceptions=True)
        await runtime.stop()
        return [probe, *results]

    (probe, exporter), items, refused = asyncio.run(main())
    assert isinstance(refused, ValueError) and len(items) == 5
    spans = exporter.get_finished_spans()
    assert len({s.context.trace_id for s in spans}) == 2
    by_trace: dict[int, list[ReadableSpan]] = {}
    for s in spans:
        by_trace.setdefault(s.context.trace_id, []).append(s)
    steps = sorted([[s.attributes[sc.AGENT_NAME] for s in _steps(tuple(group))] for group in by_trace.values()], key=len)
    assert steps == [[], ["a", "b", "a"]]
    no_hook_errors(caplog.records)


def test_one_team_from_two_threads_at_once_refuses_one_and_traces_the_other(model_server, tmp_path, caplog):
    """Two threads, each with its own event loop, run one team at once: autogen refuses one run, as
    without instrumentation; the other is a whole trace of its own."""
    in_flight, refused = threading.Event(), threading.Event()

    def policy(body: dict[str, Any]) -> Reply:
        in_flight.set()
        refused.wait(5)  # hold the first run until the second has been refused
        return Reply(content=f"{body['messages'][0]['content']} answers")

    server = model_server(policy)

    def build() -> RoundRobinGroupChat:
        return RoundRobinGroupChat([AssistantAgent("a", model_client=_client(server), system_message="a"),
                                    AssistantAgent("b", model_client=_client(server), system_message="b")],
                                   termination_condition=MaxMessageTermination(3))

    team = build()
    probe, exporter = _tracing(team, tmp_path)
    outcome: dict[str, Any] = {}

    def one(name: str) -> None:
        try:
            outcome[name] = asyncio.run(team.run(task=name))
        except ValueError as exc:
            outcome[name] = exc
            refused.set()

    first = threading.Thread(target=one, args=("first",))
    first.start()
    assert in_flight.wait(5)
    second = threading.Thread(target=one, args=("second",))
    second.start()
    second.join(10)
    first.join(10)
    assert isinstance(outcome["second"], ValueError) and "already running" in str(outcome["second"])
    assert [m.source for m in outcome["first"].messages] == ["user", "a", "b"]
    roots = {s.attributes[sc.RUN_ID]: s for s in exporter.get_finished_spans() if s.parent is None}
    assert sorted(r.status.status_code.name for r in roots.values()) == ["ERROR", "UNSET"]
    (whole,) = [r for r in roots.values() if r.status.status_code is StatusCode.UNSET]
    traj = probe.trajectory(format(whole.context.trace_id, "032x"))
    assert traj.task == "first" and [s.agent for s in traj.steps] == ["a", "b"]
    no_hook_errors(caplog.records)


class _EchoClient(ChatCompletionClient):
    """A model client a team wrote itself (defined after instrumenting): echoes the last message."""

    async def create(self, messages: Any, **kwargs: Any) -> CreateResult:
        return CreateResult(finish_reason="stop", content=f"echo: {messages[-1].content}", cached=False,
                            usage=RequestUsage(prompt_tokens=len(messages), completion_tokens=2))

    async def create_stream(self, messages: Any, **kwargs: Any) -> Any:  # pragma: no cover - not used
        yield await self.create(messages)

    async def close(self) -> None:
        return None

    def actual_usage(self) -> RequestUsage:
        return RequestUsage(prompt_tokens=0, completion_tokens=0)

    total_usage = actual_usage

    def count_tokens(self, messages: Any, **kwargs: Any) -> int:
        return 0

    def remaining_tokens(self, messages: Any, **kwargs: Any) -> int:
        return 1000

    @property
    def capabilities(self) -> Any:
        return _info()

    @property
    def model_info(self) -> ModelInfo:
        return _info()


def test_agents_named_in_any_script_with_a_client_of_the_app_own(tmp_path, caplog):
    """Agents named in Cyrillic, Chinese, accented Latin and Greek (autogen allows any identifier;
    its OpenAI client does not, so the app brings its own client class, defined after instrumenting):
    each turn a step of its agent's name, with the client's call and usage; uninstrument restores the
    client class too."""
    names = ["écrivain", "критик", "写作者", "Ωmega_2"]
    client = _EchoClient()
    team = RoundRobinGroupChat([AssistantAgent(n, model_client=client, system_message=n) for n in names],
                               name="équipe", termination_condition=MaxMessageTermination(5))
    original = dict(vars(_EchoClient))
    probe, exporter = _tracing(team, tmp_path)
    asyncio.run(team.run(task="Écris."))
    traj = probe.trajectory()
    assert traj.app == "équipe"
    assert [(s.agent, s.path, len(s.llm_calls), s.usage.output_tokens) for s in traj.steps] == [
        (n, ["équipe"], 1, 2) for n in names]
    assert [s.name for s in _steps(exporter.get_finished_spans())] == [f"invoke_agent {n}" for n in names]
    probe.uninstrument()
    assert all(vars(_EchoClient)[k] is v for k, v in original.items()) and set(vars(_EchoClient)) == set(original)
    no_hook_errors(caplog.records)


class _Counter(BaseChatAgent):
    """An agent written as autogen's docs show: ``on_messages`` only (no model, no stream of its own)."""

    @property
    def produced_message_types(self) -> Any:
        return (TextMessage,)

    async def on_messages(self, messages: Any, cancellation_token: CancellationToken) -> Response:
        return Response(chat_message=TextMessage(content=f"counted {len(messages)}", source=self.name))

    async def on_reset(self, cancellation_token: CancellationToken) -> None:
        return None


def test_an_agent_implementing_on_messages_only_is_a_step_however_it_is_called(tmp_path, caplog):
    """An agent implementing ``on_messages`` only, instrumented alone and run with ``run`` (which
    calls ``on_messages``, never ``on_messages_stream``: the run had no step), ``run_stream`` or
    ``on_messages``: each a run of one step with the agent's answer, judged on it."""

    async def each_way(agent: _Counter) -> None:
        await agent.run(task="a")
        async for _ in agent.run_stream(task="a"):
            pass
        await agent.on_messages([TextMessage(content="a", source="user")], CancellationToken())

    agent = _Counter("counter", description="Counts.")
    probe, exporter = _tracing(agent, tmp_path, judge=lambda task, answer: answer == "counted 1")
    asyncio.run(each_way(agent))
    roots = [s for s in exporter.get_finished_spans() if s.parent is None]
    assert len(roots) == 3
    for root in roots:
        traj = probe.trajectory(format(root.context.trace_id, "032x"))
        assert [(s.index, s.agent, s.output) for s in traj.steps] == [(0, "counter", "counted 1")]
        assert traj.task == "a" and traj.outcome.success is True
    no_hook_errors(caplog.records)


def test_a_message_filter_agent_alone_is_one_step_of_its_own_name(model_server, tmp_path, caplog):
    """A ``MessageFilterAgent`` instrumented alone: its ``on_messages`` calls its inner agent's
    ``on_messages``, not its own stream. Run or called directly, the run is one step named after
    the wrapper (was: the inner agent's name under ``run``, nothing at all under ``on_messages``),
    its input what the inner agent got, its model call in it."""
    from autogen_agentchat.agents import MessageFilterAgent, MessageFilterConfig, PerSourceFilter

    server = model_server(_by_system_prompt)
    agent = MessageFilterAgent(name="reader", wrapped_agent=AssistantAgent("reader_inner", model_client=_client(server), system_message="reader"),
                               filter=MessageFilterConfig(per_source=[PerSourceFilter(source="user", position="last", count=1)]))
    probe, exporter = _tracing(agent, tmp_path)

    async def both() -> None:
        await agent.run(task=[TextMessage(content="old", source="user"), TextMessage(content="new", source="user")])
        await agent.on_messages([TextMessage(content="older", source="user"), TextMessage(content="newer", source="user")],
                                CancellationToken())

    asyncio.run(both())
    roots = sorted((s for s in exporter.get_finished_spans() if s.parent is None), key=lambda s: s.start_time or 0)
    assert len(roots) == 2
    for root, seen in zip(roots, ("new", "newer")):
        (step,) = probe.trajectory(format(root.context.trace_id, "032x")).steps
        assert (step.agent, [m.content for m in step.input_messages], step.output, len(step.llm_calls)) == (
            "reader", [seen], "reader answers", 1)
    no_hook_errors(caplog.records)


def test_trace_every_app_mode_traces_a_team_on_the_app_own_runtime(model_server, tmp_path, caplog):
    """Zero-code tracing (``AegisInstrumentor``, no ``instrument(app)``) of teams on a runtime the
    app started itself (``runtime=``): each run holds its agents' steps and the selector's model
    call (was: the root alone, the participants' handlers running outside it)."""
    from aegis_probe.capture.instrumentor import AegisInstrumentor

    def policy(body: dict[str, Any]) -> Reply:
        system = body["messages"][0]["content"]
        return Reply(content="b") if "select the next role" in system else Reply(content=f"{system} answers")

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = AegisInstrumentor()
    instrumentor.instrument(tracer_provider=provider, store=tmp_path / "store")
    client = _client(model_server(policy))

    async def main() -> None:
        runtime = SingleThreadedAgentRuntime()
        runtime.start()
        pair = [AssistantAgent("a", model_client=client, system_message="a"), AssistantAgent("b", model_client=client, system_message="b")]
        await RoundRobinGroupChat(pair, termination_condition=MaxMessageTermination(3), runtime=runtime).run(task="one")
        pair = [AssistantAgent("a", model_client=client, system_message="a"), AssistantAgent("b", model_client=client, system_message="b")]
        await SelectorGroupChat(pair, model_client=client, termination_condition=MaxMessageTermination(2), runtime=runtime).run(task="two")
        await runtime.stop()

    try:
        asyncio.run(main())
    finally:
        instrumentor.uninstrument()
    spans = exporter.get_finished_spans()
    roots = sorted((s for s in spans if s.parent is None), key=lambda s: s.start_time or 0)
    assert [r.name for r in roots] == ["invoke_workflow RoundRobinGroupChat", "invoke_workflow SelectorGroupChat"]
    for root, agents in zip(roots, (["a", "b"], ["b"])):
        trace_spans = tuple(s for s in spans if s.context.trace_id == root.context.trace_id)
        assert [s.attributes[sc.AGENT_NAME] for s in _steps(trace_spans)] == agents
    (selection,) = _children(roots[1], spans, sc.OP_CHAT)
    assert selection.attributes[sc.LLM_PURPOSE] == sc.PURPOSE_SPEAKER_SELECTION
    no_hook_errors(caplog.records)
