"""Microsoft Agent Framework adapter beyond the shared conformance and replay suites (which run its
sequential-workflow demo too): the workflow's span tree, streamed workflow and lone-agent runs
(recorded and replayed exactly), a lone agent with a tool, a user's own chat client class defined
after instrument(), Agent Framework's own OpenTelemetry spans kept out, app and model errors,
uninstrument, blame, an injection campaign and trace-every-app mode; the real agent-framework and
the real openai client against the loopback model server."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("agent_framework")
pytest.importorskip("agent_framework_orchestrations")
pytest.importorskip("agent_framework_openai")

import aegis_probe  # noqa: E402
from aegis_probe.apps import AppSpec  # noqa: E402
from aegis_probe.capture import semconv as sc  # noqa: E402
from aegis_probe.counterfactual import replay  # noqa: E402
from aegis_probe.demos import agent_framework as demo  # noqa: E402
from aegis_probe.demos.task import TASK, judge  # noqa: E402
from aegis_probe.modelserver import Reply  # noqa: E402
from aegis_probe.storage.store import TraceStore  # noqa: E402
from framework_checks import (  # noqa: E402
    agents_traced_without_instrument, blame_finds_planted_step, campaign_keeps_labelled_failures,
    model_error_as_uninstrumented, ours, raising_tool_policy, uninstrument_restores_originals)

LONE_SYSTEM = "You are the calculator. Evaluate expressions with the calculate tool."


def _instrumented(model_server, provider, tmp_path, policy=demo.policy):
    server = model_server(policy)
    app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
    return app, aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store")


def _steps(spans):
    return sorted((s for s in spans if s.attributes.get(sc.STEP_INDEX) is not None), key=lambda s: s.attributes[sc.STEP_INDEX])


def _run_streamed(app, task: str) -> str | None:
    async def main() -> str | None:
        stream = app.run(task, stream=True)
        async for _ in stream:
            pass
        outputs = (await stream.get_final_response()).get_outputs()  # the agents' streamed updates
        return "".join(o.text for o in outputs if o.response_id == outputs[-1].response_id)

    return asyncio.run(main())


def _lone_agent(base_url: str, model: str, api_key: str, task: str = TASK):
    from agent_framework import Agent, FunctionTool

    return Agent(demo.client(base_url, model, api_key), LONE_SYSTEM, name="calculator",
                 tools=[FunctionTool(func=demo._calculate, name=demo.TOOL)])


def _run_lone_streamed(agent, task: str) -> str:
    async def main() -> str:
        stream = agent.run(task, stream=True)
        async for _ in stream:
            pass
        return (await stream.get_final_response()).text

    return asyncio.run(main())


def _lone_policy(body):
    messages = body.get("messages", [])
    if messages and messages[-1].get("role") == "tool":
        return Reply(content=f"FINAL ANSWER: {messages[-1]['content']}")
    return Reply(tool_calls=[(demo.TOOL, {"expression": demo.EXPRESSION})])


def test_sequential_workflow_steps_in_order_with_their_calls(model_server, provider, exporter, tmp_path):
    app, probe = _instrumented(model_server, provider, tmp_path)
    assert demo.run_app(app, demo.TASK) == "The calculator's result checks out. FINAL ANSWER: 126"
    probe.flush()
    spans = ours(exporter)
    by_id = {s.context.span_id: s for s in spans}
    steps = _steps(spans)
    assert [s.attributes[sc.AGENT_NAME] for s in steps] == ["planner", "calculator", "reviewer"]
    (root,) = [s for s in spans if s.parent is None]
    assert root.name == "invoke_workflow math-team" and root.attributes[sc.FRAMEWORK] == "agent-framework"
    assert all(by_id[s.parent.span_id] is root for s in steps)
    chats = [s for s in spans if s.attributes.get(sc.OPERATION) == sc.OP_CHAT]
    assert [by_id[c.parent.span_id].attributes[sc.AGENT_NAME] for c in chats] == ["planner", "calculator", "calculator", "reviewer"]
    assert all(c.attributes[sc.PROVIDER] == "openai" and c.attributes[sc.SERVER_ADDRESS] == "127.0.0.1"
               and c.attributes[sc.USAGE_INPUT_TOKENS] > 0 for c in chats)
    (tool,) = [s for s in spans if s.name == f"execute_tool {demo.TOOL}"]
    assert by_id[tool.parent.span_id] is steps[1] and tool.attributes[sc.TOOL_CALL_RESULT] == "126"
    traj = probe.trajectory()
    assert traj.task == demo.TASK and "FINAL ANSWER: 126" in traj.steps[2].output
    assert '"You are the planner.' in chats[0].attributes[sc.INPUT_MESSAGES], "the agent's instructions as the system message"


def test_streamed_workflow_is_recorded_and_replayed_exactly(model_server, provider, exporter, tmp_path):
    app, probe = _instrumented(model_server, provider, tmp_path)
    assert _run_streamed(app, demo.TASK) == "The calculator's result checks out. FINAL ANSWER: 126"
    probe.flush()
    steps = _steps(ours(exporter))
    assert [s.attributes[sc.AGENT_NAME] for s in steps] == ["planner", "calculator", "reviewer"]
    probe.uninstrument()
    result = replay(probe.last_trace_id, AppSpec(demo.build_app, _run_streamed), store=TraceStore(tmp_path / "store"))
    assert result.exact, result.divergence or result.error
    assert result.replayed_calls == 4 and result.live_calls == 0


@pytest.mark.parametrize("streamed", [False, True])
def test_lone_agent_with_a_tool_is_one_run_and_replayed(model_server, provider, exporter, tmp_path, streamed):
    server = model_server(_lone_policy)
    agent = _lone_agent(server.base_url, "aegis-scripted", "sk-test")
    probe = aegis_probe.instrument(agent, tracer_provider=provider, store=tmp_path / "store", judge=judge)
    run = _run_lone_streamed if streamed else (lambda a, t: asyncio.run(a.run(t)).text)
    assert run(agent, "Evaluate (17 + 25) * 3") == "FINAL ANSWER: 126"
    probe.flush()
    spans = ours(exporter)
    by_id = {s.context.span_id: s for s in spans}
    (root,) = [s for s in spans if s.parent is None]
    (step,) = _steps(spans)
    assert root.name == "invoke_workflow calculator" and by_id[step.parent.span_id] is root
    calls = [s for s in spans if s.parent is not None and by_id[s.parent.span_id] is step]
    assert [s.name for s in sorted(calls, key=lambda s: s.start_time)] == [
        "chat aegis-scripted", f"execute_tool {demo.TOOL}", "chat aegis-scripted"]
    outcome = probe.trajectory().outcome
    assert outcome.answer == "FINAL ANSWER: 126" and outcome.success
    probe.uninstrument()
    result = replay(probe.last_trace_id, AppSpec(_lone_agent, run), store=TraceStore(tmp_path / "store"))
    assert result.exact, result.divergence or result.error
    assert result.replayed_calls == 2 and result.live_calls == 0


def test_a_users_own_chat_client_defined_after_instrument_is_a_chat_span(provider, exporter):
    from agent_framework import Agent, BaseChatClient, ChatResponse, Message

    agent_probe = aegis_probe.instrument(Agent(demo.client("http://127.0.0.1:9/v1", "m", "k"), name="unused"),
                                         tracer_provider=provider, store=False)

    class Echo(BaseChatClient):  # defined after instrument(): reached through BaseChatClient.get_response
        async def _inner_get_response(self, *, messages, stream, options, **kwargs):
            return ChatResponse(messages=[Message("assistant", [f"echo {len(messages)}"])], model="echo-1")

    agent = Agent(Echo(), "Echo what you get.", name="echoer")
    aegis_probe.instrument(agent, tracer_provider=provider, store=False)
    assert asyncio.run(agent.run("hi")).text == "echo 1"
    agent_probe.flush()
    (chat,) = [s for s in ours(exporter) if s.attributes.get(sc.OPERATION) == sc.OP_CHAT]
    assert chat.attributes[sc.AGENT_NAME] == "echoer" and chat.attributes[sc.RESPONSE_MODEL] == "echo-1"
    assert '"echo 1"' in chat.attributes[sc.OUTPUT_MESSAGES]


def test_agent_frameworks_own_spans_are_kept_out(tmp_path):
    """On a global SDK provider Agent Framework records its own workflow/agent/chat/tool spans; in an
    instrumented run none of them is recorded, and ours keep one trace."""
    script = textwrap.dedent("""
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        import aegis_probe
        from aegis_probe.demos import agent_framework as demo
        from aegis_probe.modelserver import ModelServer

        theirs = InMemorySpanExporter()
        glob = TracerProvider()
        glob.add_span_processor(SimpleSpanProcessor(theirs))
        trace.set_tracer_provider(glob)
        mine = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(mine))
        with ModelServer(demo.policy) as server:
            demo.run_app(demo.build_app(server.base_url, "aegis-scripted", "sk-test"), demo.TASK)
            before = len(theirs.get_finished_spans())
            app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")  # its workflow.build span: not a run's
            theirs.clear()
            probe = aegis_probe.instrument(app, tracer_provider=provider, store=False)
            demo.run_app(app, demo.TASK)
            probe.flush()
            ours = mine.get_finished_spans()
            print(before, len(theirs.get_finished_spans()), len(ours), len({s.context.trace_id for s in ours}))
            probe.uninstrument()
            demo.run_app(demo.build_app(server.base_url, "aegis-scripted", "sk-test"), demo.TASK)
            print(len(theirs.get_finished_spans()))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    *_, counts, after = proc.stdout.strip().splitlines()
    before, during, spans, traces = map(int, counts.split())
    assert before > 0 and during == 0 and spans == 9 and traces == 1
    assert int(after) == before, "after uninstrument() its spans are recorded again"


def test_tool_error_fails_its_span_and_the_run_goes_on(model_server, provider, exporter, tmp_path):
    app, probe = _instrumented(model_server, provider, tmp_path, raising_tool_policy(demo))
    demo.run_app(app, demo.TASK)  # Agent Framework hands the tool's error to the model
    probe.flush()
    failed = {s.name for s in ours(exporter) if s.status.status_code.name == "ERROR"}
    assert failed == {f"execute_tool {demo.TOOL}"}


def test_model_error_reaches_the_app_as_uninstrumented(provider, exporter):
    spans = model_error_as_uninstrumented(demo, provider, exporter)
    chat = next(s for s in spans if s.attributes.get(sc.OPERATION) == sc.OP_CHAT)
    assert chat.status.status_code.name == "ERROR"
    assert {"invoke_agent planner", "invoke_workflow math-team"} <= {s.name for s in spans if s.status.status_code.name == "ERROR"}


def test_uninstrument_restores_every_original(model_server, provider, tmp_path):
    from agent_framework import Agent, BaseChatClient, FunctionTool, RawAgent, observability
    from agent_framework._workflows._workflow import Workflow

    from agent_framework_orchestrations import AgentBasedGroupChatOrchestrator, StandardMagenticManager

    names = [(Workflow, "run"), (BaseChatClient, "get_response"), (FunctionTool, "invoke"), (observability, "get_tracer"),
             (Agent, "run"), (RawAgent, "run"), (AgentBasedGroupChatOrchestrator, "_invoke_agent"),
             (StandardMagenticManager, "create_progress_ledger")]
    uninstrument_restores_originals(names, lambda: _instrumented(model_server, provider, tmp_path))


def test_blame_finds_planted_step(model_server, tmp_path):
    blame_finds_planted_step(demo, model_server, tmp_path)


def test_campaign_keeps_labelled_failures(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    campaign_keeps_labelled_failures("agent_framework_math.py", demo, tmp_path)


def test_trace_every_app_mode_traces_a_workflow_imported_after_it(tmp_path):
    """AegisInstrumentor before the app imports agent_framework: its run is traced without instrument()."""
    assert agents_traced_without_instrument("agent_framework", tmp_path) == "['planner', 'calculator', 'reviewer']"
