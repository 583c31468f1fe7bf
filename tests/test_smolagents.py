"""smolagents adapter beyond the shared conformance and replay suites (which run its demo too): a
managed agent's steps nested under its manager's call, streamed runs and streamed model output
(recorded and replayed), planning steps, the final answer asked for when max_steps ran out, a
CodeAgent whose generated code calls a tool through the Python executor, a user's own Model class
defined after instrument(), tool and model errors, uninstrument, blame, an injection campaign and
trace-every-app mode; real smolagents and the real openai client against the loopback model server."""

from __future__ import annotations


import pytest

pytest.importorskip("smolagents")

import aegis_probe  # noqa: E402
from aegis_probe.apps import AppSpec  # noqa: E402
from aegis_probe.capture import semconv as sc  # noqa: E402
from aegis_probe.counterfactual import replay  # noqa: E402
from aegis_probe.demos import smolagents as demo  # noqa: E402
from aegis_probe.modelserver import Reply  # noqa: E402
from aegis_probe.storage.store import TraceStore  # noqa: E402
from framework_checks import (  # noqa: E402
    agents_traced_without_instrument, blame_finds_planted_step, campaign_keeps_labelled_failures,
    model_error_as_uninstrumented, ours, raising_tool_policy, uninstrument_restores_originals)

WRONG = "(17 + 25) * 2"


def _instrumented(model_server, provider, tmp_path, policy=demo.policy, build=demo.build_app):
    server = model_server(policy)
    app = build(server.base_url, "aegis-scripted", "sk-test")
    return app, aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store")


def _steps(spans):
    return sorted((s for s in spans if s.attributes.get(sc.STEP_INDEX) is not None), key=lambda s: s.attributes[sc.STEP_INDEX])


def _chats(spans):
    return [s for s in spans if s.attributes.get(sc.OPERATION) == sc.OP_CHAT]


def _streaming_app(base_url: str, model: str, api_key: str):
    """The demo app with streamed model output (``stream_outputs``: ``Model.generate_stream``)."""
    app = demo.build_app(base_url, model, api_key)
    app.stream_outputs = app.managed_agents[demo.WORKER].stream_outputs = True
    return app


def _run_streamed(app, task: str) -> str:
    """``run(stream=True)``: the app reads the steps as they are made; the last is the final answer."""
    from smolagents.memory import FinalAnswerStep

    last = [item for item in app.run(task, stream=True) if isinstance(item, FinalAnswerStep)][-1]
    return str(last.output)


def test_managed_agent_steps_nest_under_the_managers_call(model_server, provider, exporter, tmp_path):
    app, probe = _instrumented(model_server, provider, tmp_path)
    assert demo.run_app(app, demo.TASK) == "FINAL ANSWER: 126"
    probe.flush()
    spans = ours(exporter)
    by_id = {s.context.span_id: s for s in spans}
    steps = _steps(spans)
    assert [s.attributes[sc.AGENT_NAME] for s in steps] == ["planner", "calculator", "calculator", "planner"]
    (root,) = [s for s in spans if s.parent is None]
    assert root.name == "invoke_workflow planner" and root.attributes[sc.FRAMEWORK] == "smolagents"
    delegate = next(s for s in spans if s.name == f"execute_tool {demo.WORKER}")
    assert by_id[delegate.parent.span_id] is steps[0]
    assert [by_id[s.parent.span_id].name for s in steps] == [root.name, delegate.name, delegate.name, root.name]
    assert [list(s.attributes.get(sc.AGENT_PATH) or ()) for s in steps] == [[], ["planner"], ["planner"], []]
    assert steps[1].attributes[sc.GRAPH_NODE_PARENT_ID] == "planner"
    calculate = next(s for s in spans if s.name == f"execute_tool {demo.TOOL}")
    assert by_id[calculate.parent.span_id] is steps[1] and calculate.attributes[sc.TOOL_CALL_RESULT] == "126"
    finals = [by_id[s.parent.span_id] for s in spans if s.name == "execute_tool final_answer"]
    assert finals == [steps[2], steps[3]]
    chats = _chats(spans)
    assert [by_id[c.parent.span_id] for c in chats] == steps
    assert all(c.attributes[sc.PROVIDER] == "openai" and c.attributes[sc.SERVER_ADDRESS] == "127.0.0.1" for c in chats)
    assert all(c.attributes[sc.USAGE_INPUT_TOKENS] > 0 for c in chats)
    traj = probe.trajectory()
    assert traj.task == demo.TASK
    assert "Evaluate (17 + 25) * 3" in str(traj.steps[1].input_messages)
    assert "Observation:" in str(traj.steps[3].input_messages) and "Observation:" not in str(traj.steps[0].input_messages)
    assert "FINAL ANSWER: 126" in str(traj.steps[3].model_dump())


def test_streamed_run_and_output_are_recorded_and_replayed_exactly(model_server, provider, exporter, tmp_path):
    app, probe = _instrumented(model_server, provider, tmp_path, build=_streaming_app)
    assert _run_streamed(app, demo.TASK) == "FINAL ANSWER: 126"
    probe.flush()
    spans = ours(exporter)
    steps = _steps(spans)
    assert [s.attributes[sc.AGENT_NAME] for s in steps] == ["planner", "calculator", "calculator", "planner"]
    chats = _chats(spans)
    assert len(chats) == 4 and all(s.status.status_code.name != "ERROR" for s in chats)
    assert "FINAL ANSWER: 126" in chats[-1].attributes[sc.OUTPUT_MESSAGES]
    (root,) = [s for s in spans if s.parent is None]
    assert root.end_time >= max(s.end_time for s in steps), "the run lasts while the app reads its steps"
    probe.uninstrument()
    # No model behind the app now: every streamed answer comes from the recording, as chunks.
    result = replay(probe.last_trace_id, AppSpec(_streaming_app, _run_streamed), store=TraceStore(tmp_path / "store"))
    assert result.exact, result.divergence or result.error
    assert result.replayed_calls == 4 and result.live_calls == 0


def test_planning_steps_and_the_max_steps_answer_are_steps(model_server, provider, exporter, tmp_path):
    """planning_interval: a PlanningStep is a step of its own; max_steps running out: the final
    answer the agent is asked for (provide_final_answer) is one too: no model call outside a step."""
    def policy(body):
        if "facts" in str(body["messages"][-1]).lower() or "plan" in str(body["messages"][-1]).lower()[:400]:
            return Reply(content="1. Ask the calculator.\n<end_plan>")
        if body.get("tools"):  # an action step: never done
            return Reply(tool_calls=[(demo.TOOL, {"expression": "1 + 1"})])
        return Reply(content="FINAL ANSWER: 2")  # provide_final_answer asks without tools

    from smolagents import ToolCallingAgent

    server = model_server(policy)
    app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
    solo = ToolCallingAgent(tools=list(app.managed_agents[demo.WORKER].tools.values()), model=app.model, name="solo",
                            planning_interval=5, max_steps=2, verbosity_level=-1)
    probe = aegis_probe.instrument(solo, tracer_provider=provider, store=False)
    assert solo.run("add one and one") == "FINAL ANSWER: 2"
    probe.flush()
    spans = ours(exporter)
    by_id = {s.context.span_id: s for s in spans}
    steps = _steps(spans)
    assert len(steps) == 4, [s.name for s in steps]  # plan, two actions, the final answer
    chats = _chats(spans)
    assert len(chats) == len(server.requests) == 4
    assert [by_id[c.parent.span_id] for c in chats] == steps
    assert "Ask the calculator" in steps[0].attributes[sc.OUTPUT_MESSAGES]
    assert "FINAL ANSWER: 2" in steps[3].attributes[sc.OUTPUT_MESSAGES]


CODE = 'Thought: I compute it.\n<code>\nresult = calculate(expression="(17 + 25) * 3")\nfinal_answer(f"FINAL ANSWER: {result}")\n</code>'


def test_code_agent_tool_calls_from_generated_code_are_tool_spans(model_server, provider, exporter, tmp_path):
    """A CodeAgent runs the scripted model's fixed code locally; the tool it calls is an execute_tool span."""
    from smolagents import CodeAgent

    server = model_server(lambda body: Reply(content=CODE))
    calculator = demo.build_app(server.base_url, "aegis-scripted", "sk-test").managed_agents[demo.WORKER]
    coder = CodeAgent(tools=list(calculator.tools.values()), model=calculator.model, name="coder", verbosity_level=-1)
    probe = aegis_probe.instrument(coder, tracer_provider=provider, store=False)
    assert coder.run("What is (17 + 25) * 3?") == "FINAL ANSWER: 126"
    probe.flush()
    spans = ours(exporter)
    by_id = {s.context.span_id: s for s in spans}
    (step,) = _steps(spans)
    tool = next(s for s in spans if s.name == f"execute_tool {demo.TOOL}")
    assert by_id[tool.parent.span_id] is step and tool.attributes[sc.TOOL_CALL_RESULT] == "126"
    assert "(17 + 25) * 3" in tool.attributes[sc.TOOL_CALL_ARGUMENTS]
    assert "<code>" in step.attributes[sc.OUTPUT_MESSAGES]


def test_a_model_class_defined_after_instrument_is_a_chat_span(provider, exporter):
    from smolagents import ToolCallingAgent
    from smolagents.models import ChatMessage, ChatMessageToolCall, ChatMessageToolCallFunction, MessageRole, Model

    probe = aegis_probe.instrument(ToolCallingAgent(tools=[], model=Model(model_id="none")), tracer_provider=provider, store=False)

    class Echo(Model):  # defined after instrument(): patched when a run starts
        def generate(self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kwargs):
            call = ChatMessageToolCall(function=ChatMessageToolCallFunction(name="final_answer", arguments={"answer": f"echo {len(messages)}"}),
                                       id="call_1", type="function")
            return ChatMessage(role=MessageRole.ASSISTANT, content=None, tool_calls=[call])

    original = Echo.__dict__["generate"]
    agent = ToolCallingAgent(tools=[], model=Echo(model_id="echo-1"), name="echoer", verbosity_level=-1)
    aegis_probe.instrument(agent, tracer_provider=provider, store=False)
    assert agent.run("hi") == "echo 2"
    probe.flush()
    chats = _chats(ours(exporter))
    assert [(c.name, c.attributes[sc.AGENT_NAME], c.attributes[sc.PROVIDER]) for c in chats] == [("chat echo-1", "echoer", "smolagents")]
    assert '"final_answer"' in chats[0].attributes[sc.OUTPUT_MESSAGES]
    assert Echo.__dict__["generate"] is not original
    aegis_probe.uninstrument()
    assert Echo.__dict__["generate"] is original


def test_tool_error_fails_its_spans_and_the_app_goes_on_as_uninstrumented(model_server, provider, exporter, tmp_path):
    """smolagents hands a tool's error back to the model as an observation: the run goes on, unchanged."""
    server = model_server(raising_tool_policy(demo))
    bare = demo.run_app(demo.build_app(server.base_url, "aegis-scripted", "sk-test"), demo.TASK)
    app, probe = _instrumented(model_server, provider, tmp_path, raising_tool_policy(demo))
    assert demo.run_app(app, demo.TASK) == bare
    probe.flush()
    spans = ours(exporter)
    failed = [s for s in spans if s.status.status_code.name == "ERROR"]
    assert {"execute_tool calculate", "invoke_agent calculator"} <= {s.name for s in failed}
    assert all(s.status.status_code.name != "ERROR" for s in spans if s.parent is None)


def test_model_error_reaches_the_app_as_uninstrumented(provider, exporter, tmp_path):
    spans = model_error_as_uninstrumented(demo, provider, exporter)
    assert {"chat aegis-scripted", "invoke_agent planner", "invoke_workflow planner"} <= {
        s.name for s in spans if s.status.status_code.name == "ERROR"}


def test_uninstrument_restores_every_original(model_server, provider, tmp_path):
    from smolagents import CodeAgent, OpenAIServerModel, ToolCallingAgent
    from smolagents.agents import MultiStepAgent
    from smolagents.models import LiteLLMModel, Model, TransformersModel
    from smolagents.tools import Tool

    names = [(MultiStepAgent, "run"), (MultiStepAgent, "__call__"), (MultiStepAgent, "_generate_planning_step"),
             (MultiStepAgent, "provide_final_answer"), (ToolCallingAgent, "_step_stream"), (CodeAgent, "_step_stream"),
             (Model, "generate"), (OpenAIServerModel, "generate"), (OpenAIServerModel, "generate_stream"),
             (LiteLLMModel, "generate"), (TransformersModel, "generate_stream"), (Tool, "__call__")]
    uninstrument_restores_originals(names, lambda: _instrumented(model_server, provider, tmp_path))


def _planted(body):
    """The demo policy, except the calculator evaluates the wrong expression (step 1)."""
    reply = demo.policy(body)
    if reply.tool_calls and reply.tool_calls[0][0] == demo.TOOL:
        return Reply(tool_calls=[(demo.TOOL, {"expression": WRONG})])
    return reply


def test_blame_finds_planted_step(model_server, tmp_path):
    blame_finds_planted_step(demo, model_server, tmp_path, _planted)


def test_campaign_keeps_labelled_failures(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    campaign_keeps_labelled_failures("smolagents_math.py", demo, tmp_path)


def test_trace_every_app_mode_traces_an_agent_imported_after_it(tmp_path):
    """AegisInstrumentor before the app imports smolagents: its run is traced without instrument()."""
    assert agents_traced_without_instrument("smolagents", tmp_path) == "['planner', 'calculator', 'calculator', 'planner']"
