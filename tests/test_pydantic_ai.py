"""Pydantic AI adapter beyond the shared conformance and replay suites (which run its demo too):
a delegate agent's turns nested under the tool call, streamed runs (recorded and replayed), models
of every kind (a user's own Model class defined after instrument()), Pydantic AI's own
instrumentation kept out, app errors, blame, an injection campaign and trace-every-app mode; real
pydantic-ai and the real openai client against the loopback model server."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("pydantic_ai")

import aegis_probe  # noqa: E402
from aegis_probe.apps import AppSpec  # noqa: E402
from aegis_probe.capture import semconv as sc  # noqa: E402
from aegis_probe.counterfactual import replay  # noqa: E402
from aegis_probe.demos import pydantic_ai as demo  # noqa: E402
from aegis_probe.storage.store import TraceStore  # noqa: E402
from framework_checks import (  # noqa: E402
    agents_traced_without_instrument, blame_finds_planted_step, campaign_keeps_labelled_failures,
    model_error_as_uninstrumented, ours, raising_tool_policy, uninstrument_restores_originals)


def _instrumented(model_server, provider, tmp_path, policy=demo.policy):
    server = model_server(policy)
    app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
    return app, aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store")


def _steps(spans):
    return sorted((s for s in spans if s.attributes.get(sc.STEP_INDEX) is not None), key=lambda s: s.attributes[sc.STEP_INDEX])


def _run_streamed(app, task: str) -> str:
    async def main() -> str:
        async with app.run_stream(task) as result:
            return str(await result.get_output())

    return asyncio.run(main())


def test_delegate_turns_are_steps_nested_under_the_tool_call(model_server, provider, exporter, tmp_path):
    app, probe = _instrumented(model_server, provider, tmp_path)
    assert demo.run_app(app, demo.TASK) == "FINAL ANSWER: 126"
    probe.flush()
    spans = ours(exporter)
    by_id = {s.context.span_id: s for s in spans}
    steps = _steps(spans)
    assert [s.attributes[sc.AGENT_NAME] for s in steps] == ["planner", "calculator", "calculator", "planner"]
    (root,) = [s for s in spans if s.parent is None]
    assert root.name == "invoke_workflow planner" and root.attributes[sc.FRAMEWORK] == "pydantic-ai"
    delegate = next(s for s in spans if s.name == f"execute_tool {demo.DELEGATE}")
    assert by_id[delegate.parent.span_id] is steps[0]
    assert [by_id[s.parent.span_id].name for s in steps] == [root.name, delegate.name, delegate.name, root.name]
    calculate = next(s for s in spans if s.name == f"execute_tool {demo.TOOL}")
    assert by_id[calculate.parent.span_id] is steps[1] and calculate.attributes[sc.TOOL_CALL_RESULT] == "126"
    chats = [s for s in spans if s.attributes.get(sc.OPERATION) == sc.OP_CHAT]
    assert [by_id[c.parent.span_id] for c in chats] == steps
    assert all(c.attributes[sc.PROVIDER] == "openai" and c.attributes[sc.SERVER_ADDRESS] == "127.0.0.1" for c in chats)
    traj = probe.trajectory()
    assert traj.task == demo.TASK
    assert "Evaluate (17 + 25) * 3" in str(traj.steps[1].input_messages) and traj.steps[3].output == "FINAL ANSWER: 126"


def test_streamed_run_is_recorded_and_replayed_exactly(model_server, provider, exporter, tmp_path):
    app, probe = _instrumented(model_server, provider, tmp_path)
    assert _run_streamed(app, demo.TASK) == "FINAL ANSWER: 126"
    probe.flush()
    steps = _steps(ours(exporter))
    assert [s.attributes[sc.AGENT_NAME] for s in steps] == ["planner", "calculator", "calculator", "planner"]
    chats = [s for s in ours(exporter) if s.attributes.get(sc.OPERATION) == sc.OP_CHAT]
    assert len(chats) == 4 and all(s.status.status_code.name != "ERROR" for s in chats)
    assert '"FINAL ANSWER: 126"' in chats[-1].attributes[sc.OUTPUT_MESSAGES]
    probe.uninstrument()
    # No model behind the app now: every streamed answer comes from the recording.
    result = replay(probe.last_trace_id, AppSpec(demo.build_app, _run_streamed), store=TraceStore(tmp_path / "store"))
    assert result.exact, result.divergence or result.error
    assert result.replayed_calls == 4 and result.live_calls == 0


def test_every_model_class_is_a_chat_span(model_server, provider, exporter, tmp_path):
    """FunctionModel, and a Model subclass the app defines after instrument(): one chat span each call."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models import Model
    from pydantic_ai.models.function import FunctionModel

    first = Agent(FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart("from a function")])), name="fn")
    probe = aegis_probe.instrument(first, tracer_provider=provider, store=False)
    assert first.run_sync("hi").output == "from a function"

    class Echo(Model):  # defined after instrument(): patched when a run starts
        async def request(self, messages, model_settings, model_request_parameters):
            return ModelResponse(parts=[TextPart(f"echo {len(messages)}")], model_name="echo-1")

        @property
        def model_name(self) -> str:
            return "echo-1"

        @property
        def system(self) -> str:
            return "echo"

    original = Echo.__dict__["request"]
    second = Agent(Echo(), name="echoer")
    aegis_probe.instrument(second, tracer_provider=provider, store=False)
    assert second.run_sync("hi").output == "echo 1"
    probe.flush()
    chats = [s for s in ours(exporter) if s.attributes.get(sc.OPERATION) == sc.OP_CHAT]
    assert [(c.name, c.attributes[sc.AGENT_NAME]) for c in chats] == [("chat function:<lambda>:", "fn"), ("chat echo-1", "echoer")]
    assert chats[1].attributes[sc.PROVIDER] == "echo"
    assert Echo.__dict__["request"] is not original
    aegis_probe.uninstrument()
    assert Echo.__dict__["request"] is original


def test_pydantic_ai_own_instrumentation_is_kept_out(model_server, provider, exporter, tmp_path):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from pydantic_ai.models.instrumented import InstrumentationSettings

    theirs = InMemorySpanExporter()
    their_provider = TracerProvider()
    their_provider.add_span_processor(SimpleSpanProcessor(theirs))
    server = model_server(demo.policy)
    app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
    app.instrument = InstrumentationSettings(tracer_provider=their_provider)
    demo.run_app(app, demo.TASK)
    assert any(s.name.startswith("invoke_agent") for s in theirs.get_finished_spans()), "on by itself"
    theirs.clear()
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=False)
    assert demo.run_app(app, demo.TASK) == "FINAL ANSWER: 126"
    probe.flush()
    assert not theirs.get_finished_spans(), "no span of pydantic-ai's own in an instrumented run"
    spans = ours(exporter)
    by_id = {s.context.span_id: s for s in spans}
    steps = _steps(spans)
    assert len(steps) == 4 and len({s.context.trace_id for s in spans}) == 1
    chats = [s for s in spans if s.attributes.get(sc.OPERATION) == sc.OP_CHAT]
    assert [by_id[c.parent.span_id] for c in chats] == steps, "its silent spans keep our parents"


def test_app_error_passes_through_and_fails_tool_steps_and_run(model_server, provider, exporter, tmp_path):
    app, probe = _instrumented(model_server, provider, tmp_path, raising_tool_policy(demo))
    with pytest.raises(SyntaxError):  # a tool's exception ends a pydantic-ai run: unchanged through us
        demo.run_app(app, demo.TASK)
    probe.flush()
    failed = {s.name for s in ours(exporter) if s.status.status_code.name == "ERROR"}
    assert {"execute_tool calculate", "invoke_agent calculator", f"execute_tool {demo.DELEGATE}",
            "invoke_agent planner", "invoke_workflow planner"} <= failed


def test_model_error_reaches_the_app_as_uninstrumented(provider, exporter, tmp_path):
    spans = model_error_as_uninstrumented(demo, provider, exporter)
    chat = next(s for s in spans if s.attributes.get(sc.OPERATION) == sc.OP_CHAT)
    assert chat.status.status_code.name == "ERROR"


def test_uninstrument_restores_every_original(model_server, provider, tmp_path):
    from pydantic_ai import Agent
    from pydantic_ai._agent_graph import CallToolsNode, ModelRequestNode
    from pydantic_ai.capabilities.instrumentation import Instrumentation
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.tool_manager import ToolManager

    names = [(Agent, "iter"), (ModelRequestNode, "run"), (ModelRequestNode, "stream"), (CallToolsNode, "stream"), (ToolManager, "execute_tool_call"), (Instrumentation, "for_run"),
             (OpenAIChatModel, "request"), (OpenAIChatModel, "request_stream"), (FunctionModel, "request")]
    uninstrument_restores_originals(names, lambda: _instrumented(model_server, provider, tmp_path))


def test_blame_finds_planted_step(model_server, tmp_path):
    blame_finds_planted_step(demo, model_server, tmp_path)


def test_campaign_keeps_labelled_failures(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    campaign_keeps_labelled_failures("pydantic_ai_math.py", demo, tmp_path)


def test_trace_every_app_mode_traces_an_agent_imported_after_it(tmp_path):
    """AegisInstrumentor before the app imports pydantic_ai: its run is traced without instrument()."""
    assert agents_traced_without_instrument("pydantic_ai", tmp_path) == "['planner', 'calculator', 'calculator', 'planner']"
