"""Anthropic's Messages API through the real ``anthropic`` client, on AutoGen
(``AnthropicChatCompletionClient``) and LangGraph (LangChain's ``ChatAnthropic``), against the
loopback server's ``/v1/messages``: ``chat`` spans with usage (cache reads where the framework
keeps them), exact replay, injection, and streamed answers replayed or injected as chunks."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("anthropic")

import aegis_probe  # noqa: E402
from aegis_probe.apps import AppSpec  # noqa: E402
from aegis_probe.capture import semconv as sc  # noqa: E402
from aegis_probe.capture.interception import LLMResponse, text_pieces  # noqa: E402
from aegis_probe.counterfactual import replay  # noqa: E402
from aegis_probe.demos.task import calculate  # noqa: E402
from aegis_probe.modelserver import Reply  # noqa: E402
from aegis_probe.storage.store import TraceStore  # noqa: E402
from streamed_turn import AutogenStreamed, adder_graph  # noqa: E402

TASK = "What is 17 + 25?"
ANSWER = "The total is 42 coins, as the calculator says."
INJECTED = "An injected answer streamed word by word"
CACHED = 2  #: prompt tokens the server reports read from its cache


def policy(body: dict[str, Any]) -> Reply:
    if body["messages"][-1].get("role") == "tool":
        return Reply(content=ANSWER, cached_tokens=CACHED)
    return Reply(tool_calls=[("calculate", {"expression": "17 + 25"})], cached_tokens=CACHED)


class AnswerLast:
    """An interceptor answering the second model call with ``INJECTED``."""

    def __init__(self) -> None:
        self.seen = 0

    def before(self, call: Any) -> None:
        return None

    def after(self, call: Any, response: LLMResponse) -> LLMResponse:
        self.seen += 1
        if self.seen != 2:
            return response
        return LLMResponse(content=INJECTED, input_tokens=3, output_tokens=6, finish_reason="stop")


def chats(exporter: Any) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.attributes.get(sc.OPERATION) == "chat"]


# -- AutoGen ---------------------------------------------------------------------------------
def autogen_app(stream: bool) -> Any:
    def build_app(base_url: str, model: str = "claude-scripted", api_key: str = "sk-ant-test") -> Any:
        from autogen_agentchat.agents import AssistantAgent
        from autogen_core.models import ModelInfo
        from autogen_core.tools import FunctionTool
        from autogen_ext.models.anthropic import AnthropicChatCompletionClient

        info = ModelInfo(vision=False, function_calling=True, json_output=True, family="claude-3-5-sonnet",
                         structured_output=True)
        client = AnthropicChatCompletionClient(model=model, base_url=base_url.removesuffix("/v1"), api_key=api_key,
                                               model_info=info, max_retries=0)
        tool = FunctionTool(calculate, name="calculate", description="Evaluate an arithmetic expression.")
        return AssistantAgent("calculator", model_client=client, tools=[tool], reflect_on_tool_use=True,
                              model_client_stream=stream, system_message="You add numbers.")

    return build_app



def _sdk_takes_temperature() -> bool:
    import inspect

    from anthropic.resources.messages import AsyncMessages

    return "temperature" in inspect.signature(AsyncMessages.create).parameters


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_autogen_anthropic_client_is_traced_replayed_and_injected(stream, model_server, provider, exporter, tmp_path):
    pytest.importorskip("autogen_ext.models.anthropic")
    if not _sdk_takes_temperature():
        pytest.skip("autogen-ext 0.7.5's AnthropicChatCompletionClient always sends temperature, which this anthropic "
                    "SDK no longer takes (it fails uninstrumented too); passes with anthropic 0.75 on PYTHONPATH")
    server = model_server(policy)
    store = TraceStore(tmp_path / "store")
    build_app, run_app = autogen_app(stream), AutogenStreamed()
    agent = build_app(server.base_url)
    probe = aegis_probe.instrument(agent, tracer_provider=provider, store=store)
    assert run_app(agent, TASK) == ANSWER
    probe.flush()
    spans = chats(exporter)
    assert len(spans) == len(server.requests) == 2
    first, last = spans[0].attributes, spans[1].attributes
    assert (first[sc.PROVIDER], first[sc.REQUEST_MODEL]) == ("anthropic", "claude-scripted")
    assert first[sc.RESPONSE_FINISH_REASONS] == ("tool_calls",) and "calculate" in first[sc.OUTPUT_MESSAGES]
    assert ANSWER in last[sc.OUTPUT_MESSAGES] and last[sc.USAGE_OUTPUT_TOKENS] == len(ANSWER.split(" "))
    assert last[sc.USAGE_INPUT_TOKENS] > 0  # autogen's RequestUsage keeps no cache counts (a named gap)
    live = run_app.runs[-1]
    assert live == (text_pieces(ANSWER) if stream else [])
    trace_id = probe.last_trace_id
    probe.uninstrument()

    result = replay(trace_id, AppSpec(build_app, run_app), store=store)
    assert result.exact and result.live_calls == 0, result.divergence or result.error
    assert result.answer == ANSWER and len(server.requests) == 2 and run_app.runs[-1] == live

    agent = build_app(server.base_url)
    probe = aegis_probe.instrument(agent, tracer_provider=provider, store=store)
    with probe.intercept(AnswerLast()):
        assert run_app(agent, TASK) == INJECTED
    assert run_app.runs[-1] == (text_pieces(INJECTED) if stream else [])


# -- LangGraph (ChatAnthropic) ---------------------------------------------------------------
def langgraph_app(base_url: str, model: str = "claude-scripted", api_key: str = "sk-ant-test") -> Any:
    from langchain_anthropic import ChatAnthropic

    llm = ChatAnthropic(model=model, base_url=base_url.removesuffix("/v1"), api_key=api_key, max_retries=0)  # type: ignore[call-arg]
    return adder_graph(llm)


class GraphRun:
    """``run_app``: the graph invoked, or streamed (``stream_mode="messages"``) keeping its chunks' text."""

    def __init__(self, stream: bool) -> None:
        self.stream, self.runs = stream, []  # type: ignore[var-annotated]

    def __call__(self, graph: Any, task: str) -> str:
        from langchain_core.messages import AIMessageChunk

        if not self.stream:
            self.runs.append([])
            return str(graph.invoke({"messages": [("user", task)]})["messages"][-1].content)
        chunks = [m for m, _ in graph.stream({"messages": [("user", task)]}, stream_mode="messages")
                  if isinstance(m, AIMessageChunk)]
        self.runs.append([c.text for c in chunks if c.text])
        after_calls = max((i for i, c in enumerate(chunks) if c.tool_call_chunks), default=-1) + 1
        return "".join(c.text for c in chunks[after_calls:])


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_chat_anthropic_is_traced_replayed_and_injected(stream, model_server, provider, exporter, tmp_path):
    pytest.importorskip("langchain_anthropic")
    server = model_server(policy)
    store = TraceStore(tmp_path / "store")
    run_app = GraphRun(stream)
    graph = langgraph_app(server.base_url)
    probe = aegis_probe.instrument(graph, tracer_provider=provider, store=store)
    assert run_app(graph, TASK) == ANSWER
    probe.flush()
    spans = chats(exporter)
    assert len(spans) == len(server.requests) == 2
    first, last = spans[0].attributes, spans[1].attributes
    assert (first[sc.PROVIDER], first[sc.REQUEST_MODEL]) == ("anthropic", "claude-scripted")
    assert json.loads(first[sc.OUTPUT_MESSAGES])[0]["parts"][0]["name"] == "calculate"
    assert ANSWER in last[sc.OUTPUT_MESSAGES] and last[sc.USAGE_OUTPUT_TOKENS] == len(ANSWER.split(" "))
    assert last[sc.USAGE_CACHE_READ_INPUT_TOKENS] == CACHED and last[sc.USAGE_INPUT_TOKENS] > CACHED
    live = run_app.runs[-1]
    assert live == (text_pieces(ANSWER) if stream else [])
    trace_id = probe.last_trace_id
    probe.uninstrument()

    result = replay(trace_id, AppSpec(langgraph_app, run_app), store=store)
    assert result.exact and result.live_calls == 0, result.divergence or result.error
    assert result.answer == ANSWER and len(server.requests) == 2 and run_app.runs[-1] == live

    graph = langgraph_app(server.base_url)
    probe = aegis_probe.instrument(graph, tracer_provider=provider, store=store)
    with probe.intercept(AnswerLast()):
        assert run_app(graph, TASK) == INJECTED
    assert run_app.runs[-1] == (text_pieces(INJECTED) if stream else [])
