"""AutoGen adapter: real autogen-agentchat teams through the real openai client on a loopback server."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from typing import Any, Iterator

import openai
import pytest
from autogen_agentchat.agents import AssistantAgent, BaseChatAgent
from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination
from autogen_agentchat.teams import BaseGroupChat, SelectorGroupChat
from autogen_core import InMemoryStore
from autogen_core.models import ChatCompletionClient, CreateResult, RequestUsage
from autogen_core.tools import BaseTool, FunctionTool
from autogen_ext.models.cache import ChatCompletionCache
from autogen_ext.models.openai import OpenAIChatCompletionClient
from autogen_ext.models.replay import ReplayChatCompletionClient
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from opentelemetry.util._once import Once

import aegis_probe
from aegis_probe.capture import semconv as sc
from aegis_probe.demos import autogen as demo
from aegis_probe.demos.task import calculate, message_text
from aegis_probe.modelserver import Reply

API_KEY = "sk-test-key-do-not-leak-1234567890"
SECRET_IN_TASK = "sk-proj-abcdefghijklmnopqrstuvwxyz0123"
MODEL = "aegis-scripted"


# -- helpers ---------------------------------------------------------------------------------------
def spans_by_op(spans: list[ReadableSpan], op: str) -> list[ReadableSpan]:
    return [s for s in spans if s.attributes.get(sc.OPERATION) == op]


def parent_of(span: ReadableSpan, spans: list[ReadableSpan]) -> ReadableSpan | None:
    by_id = {s.context.span_id: s for s in spans}
    return by_id.get(span.parent.span_id) if span.parent else None


def steps_of(spans: list[ReadableSpan]) -> list[ReadableSpan]:
    steps = [s for s in spans_by_op(spans, sc.OP_AGENT) if sc.STEP_INDEX in s.attributes]
    return sorted(steps, key=lambda s: s.start_time)


def all_attribute_text(spans: list[ReadableSpan]) -> str:
    return json.dumps([dict(s.attributes) for s in spans] + [[e.attributes for e in s.events] for s in spans], default=str)


def selector_policy(body: dict[str, Any]) -> Reply:
    """demo.policy, plus SelectorGroupChat's speaker selection: agents in the demo's order."""
    prompt = message_text(body["messages"][0])
    if "select the next role" not in prompt:
        return demo.policy(body)
    history = prompt.split("Only return the role.")[1].split("Read the above conversation")[0]
    spoken = {line.split(":")[0] for line in history.splitlines() if ":" in line}
    return Reply(content=next(a for a in demo.AGENTS if a not in spoken))


def lone_calculator(server_url: str, **client_kwargs: Any) -> AssistantAgent:
    client = OpenAIChatCompletionClient(model=MODEL, base_url=server_url, api_key=API_KEY,
                                        model_info=demo_model_info(), **client_kwargs)
    tool = FunctionTool(calculate, name=demo.TOOL, description="Evaluate an arithmetic expression.")
    return AssistantAgent("calculator", model_client=client, system_message=demo.SYSTEM["calculator"],
                          tools=[tool], reflect_on_tool_use=True)


def demo_model_info() -> Any:
    return demo.build_app("http://127.0.0.1:9/v1", MODEL, API_KEY)._participants[0]._model_client.model_info


def calculator_policy(body: dict[str, Any]) -> Reply:
    """Lone calculator: call the tool, then report the tool's result."""
    last = body["messages"][-1]
    if last.get("role") == "tool":
        return Reply(content=f"The total is {last['content']} coins.")
    return demo.policy(body)


@pytest.fixture
def team(model_server):
    server = model_server(demo.policy)
    return demo.build_app(server.base_url, MODEL, API_KEY)


@pytest.fixture
def global_provider(monkeypatch) -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """A global SDK tracer provider set by 'the user' (restored afterwards)."""
    exp = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exp))
    monkeypatch.setattr(trace, "_TRACER_PROVIDER_SET_ONCE", Once())
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    trace.set_tracer_provider(tp)
    yield tp, exp


# -- span tree -------------------------------------------------------------------------------------
def test_round_robin_span_tree(team, provider, exporter):
    probe = aegis_probe.instrument(team, tracer_provider=provider)
    answer = demo.run_app(team, demo.TASK)
    assert "126" in answer and "TERMINATE" in answer
    spans = exporter.get_finished_spans()
    assert len({s.context.trace_id for s in spans}) == 1
    roots = [s for s in spans if s.parent is None]
    assert [r.name for r in roots] == ["invoke_workflow RoundRobinGroupChat"]
    root = roots[0]
    assert root.attributes[sc.FRAMEWORK] == "autogen" and root.attributes[sc.TASK] == demo.TASK
    steps = steps_of(spans)
    assert [s.name for s in steps] == [f"invoke_agent {a}" for a in demo.AGENTS]
    assert [s.attributes[sc.STEP_INDEX] for s in steps] == [0, 1, 2]
    assert all(parent_of(s, spans) is root for s in steps)
    assert len(spans_by_op(spans, sc.OP_AGENT)) == 3  # autogen-core's own agent spans are not duplicated
    chats = spans_by_op(spans, sc.OP_CHAT)
    assert [parent_of(c, spans).attributes[sc.AGENT_NAME] for c in chats] == list(demo.AGENTS)
    for chat in chats:
        assert chat.name == f"chat {MODEL}"
        assert chat.attributes[sc.PROVIDER] == "openai"
        assert chat.attributes[sc.USAGE_INPUT_TOKENS] > 0 and chat.attributes[sc.USAGE_OUTPUT_TOKENS] > 0
    (tool,) = spans_by_op(spans, sc.OP_TOOL)
    assert tool.name == "execute_tool calculate" and parent_of(tool, spans) is steps[1]
    assert json.loads(tool.attributes[sc.TOOL_CALL_ARGUMENTS]) == {"expression": "(17 + 25) * 3"}
    assert tool.attributes[sc.TOOL_CALL_RESULT] == "126" and tool.attributes[sc.TOOL_CALL_ID].startswith("call_")
    calc_out = json.loads(chats[1].attributes[sc.OUTPUT_MESSAGES])[0]["parts"][0]
    assert calc_out["type"] == "tool_call" and calc_out["id"] == tool.attributes[sc.TOOL_CALL_ID]
    assert probe.last_run.answer == answer


def test_selector_group_chat_traces_selector_calls(model_server, provider, exporter):
    server = model_server(selector_policy)
    agents = demo.build_app(server.base_url, MODEL, API_KEY)._participants
    selector_client = OpenAIChatCompletionClient(model="selector-model", base_url=server.base_url, api_key=API_KEY,
                                                 model_info=demo_model_info())
    team = SelectorGroupChat(agents, model_client=selector_client, model_client_streaming=True,
                             termination_condition=TextMentionTermination("TERMINATE") | MaxMessageTermination(10))
    aegis_probe.instrument(team, tracer_provider=provider)
    assert "126" in demo.run_app(team, demo.TASK)
    spans = exporter.get_finished_spans()
    assert len({s.context.trace_id for s in spans}) == 1
    (root,) = [s for s in spans if s.parent is None]
    assert root.name == "invoke_workflow SelectorGroupChat"
    steps = steps_of(spans)
    assert [s.attributes[sc.AGENT_NAME] for s in steps] == list(demo.AGENTS)
    assert [s.attributes[sc.STEP_INDEX] for s in steps] == [0, 1, 2]
    selector_chats = [c for c in spans_by_op(spans, sc.OP_CHAT) if c.name == "chat selector-model"]
    # Speaker selection adds no turn: under the root, outside every step, named after the manager.
    assert len(selector_chats) == 3
    for chat in selector_chats:
        assert parent_of(chat, spans) is root and sc.STEP_INDEX not in chat.attributes
        assert chat.attributes[sc.AGENT_NAME] == "SelectorGroupChatManager"
        assert chat.attributes[sc.LLM_PURPOSE] == sc.PURPOSE_SPEAKER_SELECTION
        assert chat.attributes[sc.USAGE_INPUT_TOKENS] > 0  # streamed: usage from the final CreateResult
        assert json.loads(chat.attributes[sc.OUTPUT_MESSAGES])[0]["parts"][0]["content"] in demo.AGENTS
    assert len([c for c in spans_by_op(spans, sc.OP_CHAT) if c.name == f"chat {MODEL}"]) == 3
    assert len(spans_by_op(spans, sc.OP_TOOL)) == 1


@pytest.mark.parametrize("entry", ["run", "run_stream"])
def test_lone_assistant_agent_with_tools(model_server, provider, exporter, entry):
    server = model_server(calculator_policy)
    agent = lone_calculator(server.base_url)
    aegis_probe.instrument(agent, tracer_provider=provider)

    async def go() -> Any:
        if entry == "run":
            return await agent.run(task=demo.TASK)
        return [item async for item in agent.run_stream(task=demo.TASK)][-1]

    result = asyncio.run(go())
    assert result.messages[-1].to_text() == "The total is 126 coins."
    spans = exporter.get_finished_spans()
    assert len({s.context.trace_id for s in spans}) == 1
    (root,) = [s for s in spans if s.parent is None]
    assert root.name == "invoke_agent calculator" and sc.STEP_INDEX not in root.attributes
    (step,) = steps_of(spans)
    assert step.attributes[sc.STEP_INDEX] == 0 and parent_of(step, spans) is root
    chats = spans_by_op(spans, sc.OP_CHAT)
    assert len(chats) == 2 and all(parent_of(c, spans) is step for c in chats)
    assert [c.attributes[sc.AGENT_CALL_INDEX] for c in chats] == [0, 1]
    (tool,) = spans_by_op(spans, sc.OP_TOOL)
    assert parent_of(tool, spans) is step and tool.attributes[sc.TOOL_CALL_RESULT] == "126"
    assert len(spans) == 5


def test_lone_agent_step_ends_at_its_response(model_server, provider, exporter, tmp_path):
    """``run`` and ``on_messages`` stop reading the step's stream at its ``Response`` and leave it to the
    garbage collector: the step still ends right there, inside the run, so the stored trace has it."""
    from autogen_agentchat.messages import TextMessage
    from autogen_core import CancellationToken

    server = model_server(calculator_policy)
    agent = lone_calculator(server.base_url)
    probe = aegis_probe.instrument(agent, tracer_provider=provider, store=tmp_path / "store")

    async def go() -> tuple[Any, list[ReadableSpan], list[ReadableSpan]]:
        await agent.run(task=demo.TASK)
        traj, in_run = probe.trajectory(), exporter.get_finished_spans()
        exporter.clear()
        await agent.on_messages([TextMessage(content=demo.TASK, source="user")], CancellationToken())
        return traj, in_run, exporter.get_finished_spans()

    traj, in_run, alone = asyncio.run(go())
    assert [(s.index, s.agent, s.output) for s in traj.steps] == [(0, "calculator", "The total is 126 coins.")]
    (root,) = [s for s in in_run if s.parent is None]
    (step,) = steps_of(in_run)
    assert parent_of(step, in_run) is root and step.end_time <= root.end_time
    assert [s.name for s in alone if s.parent is None] == ["invoke_agent calculator"]  # a step outside any run


def test_other_model_clients_and_cache_wrapper(provider, exporter):
    """Any ChatCompletionClient class is traced; a cache wrapping a client makes one span per call."""
    replies = [CreateResult(finish_reason="stop", content=f"answer {i}", usage=RequestUsage(prompt_tokens=7, completion_tokens=2), cached=False)
               for i in range(2)]
    cached = ChatCompletionCache(ReplayChatCompletionClient(replies), InMemoryStore())
    agent = AssistantAgent("solo", model_client=cached)
    aegis_probe.instrument(agent, tracer_provider=provider)
    asyncio.run(agent.run(task="first"))
    asyncio.run(agent.run(task="second"))
    spans = exporter.get_finished_spans()
    chats = spans_by_op(spans, sc.OP_CHAT)
    assert len(chats) == 2 and len({c.context.trace_id for c in chats}) == 2
    assert all(c.attributes[sc.USAGE_INPUT_TOKENS] == 7 for c in chats)
    assert [json.loads(c.attributes[sc.OUTPUT_MESSAGES])[0]["parts"][0]["content"] for c in chats] == ["answer 0", "answer 1"]


def test_prompt_injection_keeps_the_messages_it_does_not_edit(model_server, tmp_path):
    """A prompt injection edits the text of the message the agent acts on; the request keeps every
    other message as the app made it (the task's image included), and an edited user message its image."""
    import PIL.Image
    from autogen_agentchat.messages import MultiModalMessage
    from autogen_agentchat.teams import RoundRobinGroupChat
    from autogen_core import Image
    from autogen_core.models import ModelFamily, ModelInfo

    from aegis_probe.injection import InjectionPlan, Target

    server = model_server(lambda body: Reply(content="I see a red square; the total is 42."))
    client = OpenAIChatCompletionClient(model=MODEL, base_url=server.base_url, api_key=API_KEY, model_info=ModelInfo(
        vision=True, function_calling=False, json_output=False, family=ModelFamily.UNKNOWN, structured_output=False))
    looker, checker = (AssistantAgent(name, model_client=client, system_message=f"You are the {name}.") for name in ("looker", "checker"))
    task = MultiModalMessage(content=["What is in the image? The total is 42.", Image(PIL.Image.new("RGB", (4, 4), "red"))], source="user")

    def parts(body: dict[str, Any]) -> list[Any]:
        return [[p["type"] for p in m["content"]] if isinstance(m["content"], list) else m["role"] for m in body["messages"]]

    async def injected_request(app: Any, target: str) -> dict[str, Any]:
        probe = aegis_probe.instrument(app, store=tmp_path / target)
        with probe.inject(InjectionPlan(targets=[Target(agent=target, mode="FM-2.6", strategy="prompt_injection")])) as injector:
            await app.run(task=task)
        probe.uninstrument()
        assert len(injector.applied) == 1
        return server.requests[-1]

    async def go() -> list[dict[str, Any]]:  # one event loop: the client is bound to it
        team = RoundRobinGroupChat([looker, checker], termination_condition=MaxMessageTermination(3))
        return [await injected_request(team, "checker"),
                await injected_request(AssistantAgent("solo", model_client=client, system_message="You look."), "solo")]

    in_team, alone = asyncio.run(go())
    assert parts(in_team) == ["system", ["text", "image_url"], "user"]  # was ["system", "user", "user"]: image lost
    assert parts(alone) == ["system", ["text", "image_url"]]
    assert message_text(in_team["messages"][-1]) != "I see a red square; the total is 42."
    assert message_text(alone["messages"][-1]) != "What is in the image? The total is 42."


def test_no_app_message_is_kept_once_the_runs_end(model_server, tmp_path):
    """The adapter's message caches let go of the app's messages once no run is active: an app
    that builds a team per request does not keep every request's conversation alive."""
    import gc
    import weakref

    server = model_server(demo.policy)
    refs: list[weakref.ref] = []
    for _ in range(2):
        team = demo.build_app(server.base_url, MODEL, API_KEY)
        aegis_probe.instrument(team, store=tmp_path / "store")
        assert "126" in demo.run_app(team, demo.TASK)
        refs += [weakref.ref(m) for agent in team._participants for m in agent._model_context._messages]
        del team
    gc.collect()
    assert len(refs) >= 6 and [r for r in refs if r() is not None] == []


# -- content capture and redaction -----------------------------------------------------------------
CONTENT_KEYS = (sc.INPUT_MESSAGES, sc.OUTPUT_MESSAGES, sc.TOOL_CALL_ARGUMENTS, sc.TOOL_CALL_RESULT, sc.TASK)


@pytest.mark.parametrize("how", ["argument", "env"])
def test_content_capture_off(team, provider, exporter, monkeypatch, how):
    if how == "env":
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "false")
        aegis_probe.instrument(team, tracer_provider=provider)
    else:
        aegis_probe.instrument(team, tracer_provider=provider, capture_content=False)
    demo.run_app(team, demo.TASK)
    spans = exporter.get_finished_spans()
    assert len(steps_of(spans)) == 3 and len(spans_by_op(spans, sc.OP_TOOL)) == 1
    assert not [k for s in spans for k in s.attributes if k in CONTENT_KEYS]
    assert all(c.attributes[sc.USAGE_INPUT_TOKENS] > 0 for c in spans_by_op(spans, sc.OP_CHAT))
    assert "17 coins" not in all_attribute_text(spans)


def test_content_capture_on_by_default(team, provider, exporter):
    aegis_probe.instrument(team, tracer_provider=provider)
    demo.run_app(team, demo.TASK)
    spans = exporter.get_finished_spans()
    for key in CONTENT_KEYS:
        assert any(key in s.attributes for s in spans), key


def test_secrets_are_redacted(team, provider, exporter):
    aegis_probe.instrument(team, tracer_provider=provider)
    demo.run_app(team, f"{demo.TASK} (my key is {SECRET_IN_TASK})")
    text = all_attribute_text(exporter.get_finished_spans())
    assert API_KEY not in text and SECRET_IN_TASK not in text
    assert "[REDACTED]" in text and "17 coins" in text


# -- patch lifecycle -------------------------------------------------------------------------------
PATCHED_BASES = (BaseGroupChat, BaseChatAgent, ChatCompletionClient, BaseTool)


def snapshot() -> dict[Any, dict[str, Any]]:
    """Every attribute of every class the adapter may patch, plus autogen modules' globals."""
    from aegis_probe.capture.adapter import subclasses

    snap: dict[Any, dict[str, Any]] = {}
    for base in PATCHED_BASES:
        for cls in subclasses(base):
            snap[cls] = dict(vars(cls))
    for name, module in list(sys.modules.items()):
        if module is not None and name.startswith(("autogen_core", "autogen_agentchat", "autogen_ext")):
            snap[name] = dict(vars(module))
    return snap


def test_uninstrument_restores_every_class_entry(team, provider):
    before = snapshot()
    probe = aegis_probe.instrument(team, tracer_provider=provider)
    during = snapshot()
    changed = [(o, k) for o in before for k in before[o] if during[o].get(k) is not before[o][k]]
    assert (AssistantAgent, "on_messages_stream") in changed and (BaseGroupChat, "run_stream") in changed
    assert (OpenAIChatCompletionClient.__mro__[1], "create") in changed
    probe.uninstrument()
    after = snapshot()
    assert after.keys() == before.keys()
    for owner, entries in before.items():
        assert after[owner].keys() == entries.keys(), owner
        for key, value in entries.items():
            assert after[owner][key] is value, (owner, key)
    assert isinstance(vars(AssistantAgent)["_execute_tool_call"], staticmethod)
    assert isinstance(vars(AssistantAgent)["_call_llm"], classmethod)


def test_instrument_twice_gives_one_span_per_step(team, provider, exporter):
    first = aegis_probe.instrument(team, tracer_provider=provider)
    assert aegis_probe.instrument(team, tracer_provider=provider) is first
    demo.run_app(team, demo.TASK)
    spans = exporter.get_finished_spans()
    assert len(steps_of(spans)) == 3 and len(spans_by_op(spans, sc.OP_AGENT)) == 3
    assert len(spans_by_op(spans, sc.OP_CHAT)) == 3 and len(spans_by_op(spans, sc.OP_TOOL)) == 1


def test_instrument_uninstrument_instrument(team, provider, exporter):
    counts = []

    async def go() -> None:  # one event loop: an autogen team cannot move between loops
        aegis_probe.instrument(team, tracer_provider=provider).uninstrument()
        await team.run(task=demo.TASK)
        counts.append(len(exporter.get_finished_spans()))
        aegis_probe.instrument(team, tracer_provider=provider)
        await team.run(task=demo.TASK)

    asyncio.run(go())
    assert counts == [0]
    spans = exporter.get_finished_spans()
    assert len(spans_by_op(spans, sc.OP_AGENT)) == 3 and len(spans_by_op(spans, sc.OP_CHAT)) == 3
    assert [s.attributes[sc.STEP_INDEX] for s in steps_of(spans)] == [0, 1, 2]


# -- failures --------------------------------------------------------------------------------------
def test_hook_errors_never_reach_the_app(team, provider, exporter, monkeypatch, caplog):
    import aegis_probe.adapters.autogen as adapter_module
    import aegis_probe.capture.interception as interception

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("hook exploded")

    aegis_probe.instrument(team, tracer_provider=provider)
    for module, name in ((adapter_module, "start_step"), (adapter_module, "start_tool"), (interception, "start_llm")):
        monkeypatch.setattr(module, name, boom)
    with caplog.at_level(logging.WARNING, logger="aegis_probe"):
        answer = demo.run_app(team, demo.TASK)
    assert "126" in answer
    assert "hook exploded" in caplog.text
    (root,) = exporter.get_finished_spans()  # the run is still traced, the broken parts are skipped
    assert root.name == "invoke_workflow RoundRobinGroupChat"


def test_app_exception_propagates_and_marks_spans(model_server, provider, exporter):
    def failing(body: dict[str, Any]) -> Reply:
        raise ValueError("model is down")

    server = model_server(failing)
    plain = lone_calculator(server.base_url, max_retries=0)
    with pytest.raises(openai.InternalServerError) as uninstrumented:
        asyncio.run(plain.run(task=demo.TASK))
    agent = lone_calculator(server.base_url, max_retries=0)
    aegis_probe.instrument(agent, tracer_provider=provider)
    with pytest.raises(openai.InternalServerError) as instrumented:
        asyncio.run(agent.run(task=demo.TASK))
    assert str(instrumented.value) == str(uninstrumented.value)
    spans = exporter.get_finished_spans()
    assert {s.name for s in spans} == {"invoke_agent calculator", f"chat {MODEL}"}
    assert len(spans) == 3
    for span in spans:
        assert span.status.status_code is StatusCode.ERROR
        assert span.attributes[sc.ERROR_TYPE] == "InternalServerError"


@pytest.mark.parametrize("capture_content", [True, False])
def test_tool_error_marks_tool_span(model_server, provider, exporter, capture_content):
    server = model_server(calculator_policy)
    agent = lone_calculator(server.base_url)

    def calculate(expression: str) -> str:  # noqa: ARG001 - same schema as the real tool
        raise ZeroDivisionError("division by nothing")

    agent._workbench[0]._tools[0] = FunctionTool(calculate, name=demo.TOOL, description="broken")
    aegis_probe.instrument(agent, tracer_provider=provider, capture_content=capture_content)
    asyncio.run(agent.run(task=demo.TASK))  # autogen turns tool errors into an error result
    (tool,) = spans_by_op(exporter.get_finished_spans(), sc.OP_TOOL)
    assert tool.status.status_code is StatusCode.ERROR and tool.attributes[sc.ERROR_TYPE] == "ZeroDivisionError"
    if capture_content:  # the error result's text describes the failure
        assert "division by nothing" in tool.status.description == tool.attributes[sc.TOOL_CALL_RESULT]
    else:  # the result is content: neither stored nor used as the description
        assert sc.TOOL_CALL_RESULT not in tool.attributes and tool.status.description == "tool call failed"


def test_breaking_out_of_run_stream_logs_no_detach_error(team, provider, exporter, caplog):
    aegis_probe.instrument(team, tracer_provider=provider)

    async def first_agent_message() -> str:
        async for message in team.run_stream(task=demo.TASK):
            if getattr(message, "source", None) == "planner":
                return message.to_text()
        raise AssertionError("planner never spoke")

    with caplog.at_level(logging.DEBUG):
        text = asyncio.run(first_agent_message())
    assert text.startswith("Plan:")
    assert "Failed to detach context" not in caplog.text
    roots = [s for s in exporter.get_finished_spans() if s.parent is None]
    assert [r.name for r in roots] == ["invoke_workflow RoundRobinGroupChat"]  # the run was ended


# -- store and global provider ---------------------------------------------------------------------
def test_store_round_trip(team, provider, exporter, tmp_path):
    store = tmp_path / "store"
    probe = aegis_probe.instrument(team, tracer_provider=provider, store=store)
    answer = demo.run_app(team, demo.TASK)
    probe.set_outcome("126" in answer, answer=answer, expected=demo.EXPECTED)
    (traj,) = aegis_probe.load_trajectories(store)
    spans = exporter.get_finished_spans()
    assert traj.trace_id == format(spans[0].context.trace_id, "032x")
    assert traj.framework == "autogen" and traj.app == "RoundRobinGroupChat" and traj.task == demo.TASK
    assert [(s.index, s.agent) for s in traj.steps] == list(enumerate(demo.AGENTS))
    assert traj.steps[0].input_messages[0].content == demo.TASK
    assert traj.steps[2].output == answer
    (call,) = traj.steps[1].tool_calls
    assert (call.name, json.loads(call.arguments), call.result) == ("calculate", {"expression": "(17 + 25) * 3"}, "126")
    chats = {parent_of(c, spans).attributes[sc.AGENT_NAME]: c for c in spans_by_op(spans, sc.OP_CHAT)}
    for step in traj.steps:
        assert step.usage.input_tokens == chats[step.agent].attributes[sc.USAGE_INPUT_TOKENS]
        assert step.usage.output_tokens == chats[step.agent].attributes[sc.USAGE_OUTPUT_TOKENS]
    assert traj.outcome.success is True and traj.outcome.expected == "126"
    assert traj == probe.trajectory()


def test_global_sdk_provider_gets_no_duplicate_agent_spans(model_server, global_provider, exporter, provider):
    tp, global_exporter = global_provider
    server = model_server(demo.policy)
    plain = demo.build_app(server.base_url, MODEL, API_KEY)
    demo.run_app(plain, demo.TASK)  # uninstrumented: autogen-core's own spans go to the global provider
    native = [s for s in global_exporter.get_finished_spans() if s.name.startswith(("invoke_agent", "execute_tool"))]
    assert len(native) >= 4
    global_exporter.clear()

    team = demo.build_app(server.base_url, MODEL, API_KEY)
    aegis_probe.instrument(team, tracer_provider=provider)
    demo.run_app(team, demo.TASK)
    ours = exporter.get_finished_spans()
    run_trace = ours[0].context.trace_id
    in_run = [s for s in global_exporter.get_finished_spans() if s.context.trace_id == run_trace]
    assert in_run == []
    assert len(spans_by_op(ours, sc.OP_AGENT)) == 3 and len(spans_by_op(ours, sc.OP_TOOL)) == 1


def test_global_provider_as_probe_provider(model_server, global_provider):
    """The user's global provider passed to instrument(): still one agent span per step."""
    tp, global_exporter = global_provider
    server = model_server(demo.policy)
    team = demo.build_app(server.base_url, MODEL, API_KEY)
    aegis_probe.instrument(team, tracer_provider=tp)
    demo.run_app(team, demo.TASK)
    spans = [s for s in global_exporter.get_finished_spans() if not s.name.startswith("create_agent")]
    assert len({s.context.trace_id for s in spans}) == 1
    assert [s.attributes.get(sc.STEP_INDEX) for s in spans_by_op(spans, sc.OP_AGENT)] == [0, 1, 2]
    assert len(spans_by_op(spans, sc.OP_TOOL)) == 1
