"""LangGraph model paths beyond ``ChatOpenAI``'s plain calls: structured output
(``with_structured_output``, the openai ``response_format``) and a user's own ``BaseChatModel``
class, plain and streamed: ``chat`` spans, exact replay, injection; against the loopback server."""

from __future__ import annotations

import json
import urllib.request
from typing import Any, Iterator

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langgraph.graph import END, START, MessagesState, StateGraph
from pydantic import BaseModel, SecretStr

import aegis_probe
from aegis_probe.apps import AppSpec
from aegis_probe.capture import semconv as sc
from aegis_probe.capture.interception import LLMResponse, text_pieces
from aegis_probe.counterfactual import replay
from aegis_probe.modelserver import Reply
from aegis_probe.storage.store import TraceStore

TASK = "What is 17 + 25?"
ANSWER = "The total is 42 coins."
INJECTED = "An injected answer streamed word by word"


class Total(BaseModel):
    total: int
    unit: str


class Inject:
    """An interceptor answering every model call with ``text``."""

    def __init__(self, text: str) -> None:
        self.text = text

    def before(self, call: Any) -> None:
        return None

    def after(self, call: Any, response: LLMResponse) -> LLMResponse:
        return LLMResponse(content=self.text, input_tokens=3, output_tokens=6, finish_reason="stop")


def chats(exporter: Any) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.attributes.get(sc.OPERATION) == "chat"]


def one_node_graph(call_model: Any) -> Any:
    graph = StateGraph(MessagesState)
    graph.add_node("agent", lambda state: {"messages": [call_model(state["messages"])]})
    graph.add_edge(START, "agent")
    graph.add_edge("agent", END)
    return graph.compile(name="adder")


# -- structured output -------------------------------------------------------------------------
def structured_app(base_url: str, model: str = "gpt-4o-mini", api_key: str = "sk-test") -> Any:
    from langchain_openai import ChatOpenAI

    structured = ChatOpenAI(model=model, base_url=base_url, api_key=SecretStr(api_key), max_retries=0).with_structured_output(Total)
    return one_node_graph(lambda messages: AIMessage(content=structured.invoke(messages).model_dump_json()))


def run_app(graph: Any, task: str) -> str:
    return str(graph.invoke({"messages": [("user", task)]})["messages"][-1].content)


def test_structured_output_is_recorded_replayed_and_injected(model_server, provider, exporter, tmp_path):
    server = model_server(lambda body: Reply(content=json.dumps({"total": 42, "unit": "coins"})))
    store = TraceStore(tmp_path / "store")
    graph = structured_app(server.base_url)
    probe = aegis_probe.instrument(graph, tracer_provider=provider, store=store)
    answer = run_app(graph, TASK)
    probe.flush()
    assert json.loads(answer) == {"total": 42, "unit": "coins"}
    assert server.requests[0]["response_format"]["type"] == "json_schema"
    (chat,) = chats(exporter)
    assert json.loads(json.loads(chat.attributes[sc.OUTPUT_MESSAGES])[0]["parts"][0]["content"]) == {"total": 42, "unit": "coins"}
    trace_id = probe.last_trace_id
    probe.uninstrument()

    result = replay(trace_id, AppSpec(structured_app, run_app), store=store)
    assert result.exact and result.live_calls == 0 and result.answer == answer, result.divergence or result.error

    graph = structured_app(server.base_url)
    probe = aegis_probe.instrument(graph, tracer_provider=provider, store=store)
    with probe.intercept(Inject(json.dumps({"total": 999, "unit": "coins"}))):
        assert json.loads(run_app(graph, TASK)) == {"total": 999, "unit": "coins"}


# -- a user's own BaseChatModel ----------------------------------------------------------------
class UrllibChat(BaseChatModel):
    """A user's own chat model: posts to a chat-completions endpoint with urllib; ``_stream``
    yields the answer's words (so LangChain streams it when asked)."""

    base_url: str
    model: str = "own-model"

    @property
    def _llm_type(self) -> str:
        return "own-urllib"

    def _post(self, messages: list[BaseMessage]) -> dict[str, Any]:
        body = {"model": self.model, "messages": [{"role": "user" if m.type == "human" else "assistant" if m.type == "ai" else m.type,
                                                   "content": m.text} for m in messages]}
        request = urllib.request.Request(self.base_url + "/chat/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as reply:
            return json.load(reply)

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        data = self._post(messages)
        usage = {"input_tokens": data["usage"]["prompt_tokens"], "output_tokens": data["usage"]["completion_tokens"],
                 "total_tokens": data["usage"]["total_tokens"]}
        message = AIMessage(content=data["choices"][0]["message"]["content"], usage_metadata=usage)  # type: ignore[arg-type]
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        message = self._generate(messages).generations[0].message
        for piece in text_pieces(str(message.content)):
            yield ChatGenerationChunk(message=AIMessageChunk(content=piece))
        yield ChatGenerationChunk(message=AIMessageChunk(content="", usage_metadata=message.usage_metadata))  # type: ignore[attr-defined]


def own_app(base_url: str, model: str = "own-model", api_key: str = "sk-test") -> Any:
    llm = UrllibChat(base_url=base_url, model=model)
    return one_node_graph(llm.invoke)


class Streamed:
    """``run_app`` streaming the graph's messages (``stream_mode="messages"``), keeping the chunks' text."""

    def __init__(self) -> None:
        self.runs: list[list[str]] = []

    def __call__(self, graph: Any, task: str) -> str:
        chunks = [m for m, _ in graph.stream({"messages": [("user", task)]}, stream_mode="messages")
                  if isinstance(m, AIMessageChunk)]
        self.runs.append([c.text for c in chunks if c.text])
        return "".join(c.text for c in chunks)


def test_a_users_own_chat_model_is_traced_replayed_and_injected(model_server, provider, exporter, tmp_path):
    server = model_server(lambda body: Reply(content=ANSWER))
    store = TraceStore(tmp_path / "store")
    for streamed in (False, True):
        exporter.clear()
        run = Streamed() if streamed else run_app
        graph = own_app(server.base_url)
        probe = aegis_probe.instrument(graph, tracer_provider=provider, store=store)
        assert run(graph, TASK) == ANSWER
        probe.flush()
        (chat,) = chats(exporter)
        assert chat.attributes[sc.REQUEST_MODEL] == "own-model" and ANSWER in chat.attributes[sc.OUTPUT_MESSAGES]
        assert chat.attributes[sc.USAGE_OUTPUT_TOKENS] == len(ANSWER.split(" "))
        trace_id = probe.last_trace_id
        probe.uninstrument()

        requests = len(server.requests)
        result = replay(trace_id, AppSpec(own_app, run), store=store)
        assert result.exact and result.live_calls == 0 and len(server.requests) == requests, result.divergence or result.error

        graph = own_app(server.base_url)
        probe = aegis_probe.instrument(graph, tracer_provider=provider, store=store)
        with probe.intercept(Inject(INJECTED)):
            assert run(graph, TASK) == INJECTED
        if isinstance(run, Streamed):
            assert run.runs[1] == run.runs[0] == text_pieces(ANSWER), "live and replayed answers streamed alike"
            assert run.runs[2] == text_pieces(INJECTED)
        probe.uninstrument()
