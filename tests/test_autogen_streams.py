"""AutoGen's ``create_stream``: a replayed, substituted or injected answer reaches the app as a
stream, text deltas word by word and then the ``CreateResult`` with the tool calls and the usage
(as autogen's own clients stream), through the real ``OpenAIChatCompletionClient`` and
``AssistantAgent(model_client_stream=True)`` against the loopback model server."""

from __future__ import annotations


from autogen_agentchat.agents import AssistantAgent
from autogen_core.models import ModelInfo
from autogen_core.tools import FunctionTool
from autogen_ext.models.openai import OpenAIChatCompletionClient

import aegis_probe
from aegis_probe.apps import AppSpec
from aegis_probe.capture import semconv as sc
from aegis_probe.capture.interception import LLMResponse, text_pieces
from aegis_probe.counterfactual import replay
from aegis_probe.demos.task import calculate
from aegis_probe.storage.store import TraceStore
from streamed_turn import ANSWER, INJECTED, TASK, THOUGHT, AnswerCall, AutogenStreamed, policy

def build_app(base_url: str, model: str = "gpt-4o-mini", api_key: str = "sk-test") -> AssistantAgent:
    info = ModelInfo(vision=False, function_calling=True, json_output=True, family="gpt-4o", structured_output=True)
    client = OpenAIChatCompletionClient(model=model, base_url=base_url, api_key=api_key, model_info=info,
                                        include_usage=True)
    tool = FunctionTool(calculate, name="calculate", description="Evaluate an arithmetic expression.")
    return AssistantAgent("calculator", model_client=client, tools=[tool], reflect_on_tool_use=True,
                          model_client_stream=True, system_message="You add numbers.")



def test_streamed_answers_replayed_or_injected_reach_the_app_as_text_deltas(model_server, provider, exporter, tmp_path):
    server = model_server(policy)
    store = TraceStore(tmp_path / "store")
    run_app = AutogenStreamed()
    agent = build_app(server.base_url)
    probe = aegis_probe.instrument(agent, tracer_provider=provider, store=store)
    assert run_app(agent, TASK) == ANSWER
    probe.flush()
    live = run_app.runs[-1]
    assert live == text_pieces(THOUGHT) + text_pieces(ANSWER), "the server streams word by word"
    chats = [s for s in exporter.get_finished_spans() if s.attributes.get(sc.OPERATION) == "chat"]
    assert len(chats) == 2 and all(c.attributes[sc.USAGE_INPUT_TOKENS] > 0 for c in chats)
    trace_id = probe.last_trace_id
    probe.uninstrument()

    requests = len(server.requests)
    result = replay(trace_id, AppSpec(build_app, run_app), store=store)
    assert result.exact and result.live_calls == 0, result.divergence or result.error
    assert result.answer == ANSWER and len(server.requests) == requests
    assert run_app.runs[-1] == live, "the replayed answers are streamed as the live ones were"

    substituted = replay(trace_id, AppSpec(build_app, run_app), store=store, until_step=0,
                         substitute=LLMResponse(content="Substituted at once."))
    assert substituted.answer == "Substituted at once."
    assert run_app.runs[-1] == ["Substituted", " at", " once."]

    agent = build_app(server.base_url)
    probe = aegis_probe.instrument(agent, tracer_provider=provider, store=store)
    with probe.intercept(AnswerCall(2)):  # the reflection
        answer = run_app(agent, TASK)
    assert answer == INJECTED
    assert run_app.runs[-1] == text_pieces(THOUGHT) + text_pieces(INJECTED), \
        "the live chunks of the replaced answer were held back and the injected one streamed instead"
