"""AutoGen model paths beyond the OpenAI client: structured output (``output_content_type``, the
client's ``json_output``) and a user's own ``ChatCompletionClient`` class, plain and streamed:
``chat`` spans, exact replay, injection; against the loopback model server."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any, AsyncGenerator, Mapping, Sequence

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.messages import StructuredMessage
from autogen_core.models import ChatCompletionClient, CreateResult, LLMMessage, ModelInfo, RequestUsage
from pydantic import BaseModel

import aegis_probe
from aegis_probe.apps import AppSpec
from aegis_probe.capture import semconv as sc
from aegis_probe.capture.interception import LLMResponse, text_pieces
from aegis_probe.counterfactual import replay
from aegis_probe.modelserver import Reply
from aegis_probe.storage.store import TraceStore
from streamed_turn import AutogenStreamed

TASK = "What is 17 + 25?"
ANSWER = "The total is 42 coins."
INJECTED = "An injected answer streamed word by word"
INFO = ModelInfo(vision=False, function_calling=True, json_output=True, family="gpt-4o", structured_output=True)


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


# -- structured output -------------------------------------------------------------------------
def structured_app(base_url: str, model: str = "gpt-4o-mini", api_key: str = "sk-test") -> AssistantAgent:
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    client = OpenAIChatCompletionClient(model=model, base_url=base_url, api_key=api_key, model_info=INFO)
    return AssistantAgent("adder", model_client=client, output_content_type=Total, system_message="You add numbers.")


def run_structured(agent: AssistantAgent, task: str) -> str:
    result = asyncio.run(agent.run(task=task))
    last = result.messages[-1]
    assert isinstance(last, StructuredMessage) and isinstance(last.content, Total)
    return last.content.model_dump_json()


def test_structured_output_is_recorded_replayed_and_injected(model_server, provider, exporter, tmp_path):
    server = model_server(lambda body: Reply(content=json.dumps({"total": 42, "unit": "coins"})))
    store = TraceStore(tmp_path / "store")
    agent = structured_app(server.base_url)
    probe = aegis_probe.instrument(agent, tracer_provider=provider, store=store)
    answer = run_structured(agent, TASK)
    probe.flush()
    assert json.loads(answer) == {"total": 42, "unit": "coins"}
    assert server.requests[0]["response_format"]["type"] == "json_schema"
    (chat,) = chats(exporter)
    assert json.loads(json.loads(chat.attributes[sc.OUTPUT_MESSAGES])[0]["parts"][0]["content"]) == {"total": 42, "unit": "coins"}
    trace_id = probe.last_trace_id
    probe.uninstrument()

    result = replay(trace_id, AppSpec(structured_app, run_structured), store=store)
    assert result.exact and result.live_calls == 0 and result.answer == answer, result.divergence or result.error

    agent = structured_app(server.base_url)
    probe = aegis_probe.instrument(agent, tracer_provider=provider, store=store)
    with probe.intercept(Inject(json.dumps({"total": 999, "unit": "coins"}))):
        assert json.loads(run_structured(agent, TASK)) == {"total": 999, "unit": "coins"}


# -- a user's own ChatCompletionClient ---------------------------------------------------------
class UrllibClient(ChatCompletionClient):
    """A user's own model client: posts to a chat-completions endpoint with urllib; streams the
    answer's words, then the ``CreateResult``."""

    def __init__(self, base_url: str, model: str) -> None:
        self.base_url, self.model = base_url, model
        self._usage = RequestUsage(prompt_tokens=0, completion_tokens=0)

    def _post(self, messages: Sequence[LLMMessage]) -> dict[str, Any]:
        body = {"model": self.model, "messages": [{"role": "system" if m.type == "SystemMessage" else "user",
                                                   "content": str(m.content)} for m in messages]}
        request = urllib.request.Request(self.base_url + "/chat/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as reply:
            return json.load(reply)

    async def create(self, messages: Sequence[LLMMessage], **kwargs: Any) -> CreateResult:
        data = await asyncio.to_thread(self._post, messages)
        usage = RequestUsage(prompt_tokens=data["usage"]["prompt_tokens"], completion_tokens=data["usage"]["completion_tokens"])
        return CreateResult(finish_reason="stop", content=data["choices"][0]["message"]["content"], usage=usage, cached=False)

    async def create_stream(self, messages: Sequence[LLMMessage], **kwargs: Any) -> AsyncGenerator[str | CreateResult, None]:
        result = await self.create(messages)
        for piece in text_pieces(str(result.content)):
            yield piece
        yield result

    async def close(self) -> None:
        return None

    def actual_usage(self) -> RequestUsage:
        return self._usage

    def total_usage(self) -> RequestUsage:
        return self._usage

    def count_tokens(self, messages: Sequence[LLMMessage], **kwargs: Any) -> int:
        return 0

    def remaining_tokens(self, messages: Sequence[LLMMessage], **kwargs: Any) -> int:
        return 100_000

    @property
    def capabilities(self) -> Any:
        return INFO

    @property
    def model_info(self) -> ModelInfo:
        return INFO

    def dump_component(self) -> Mapping[str, Any]:  # type: ignore[override]
        return {}


def own_app(stream: bool) -> Any:
    def build_app(base_url: str, model: str = "own-model", api_key: str = "sk-test") -> AssistantAgent:
        return AssistantAgent("adder", model_client=UrllibClient(base_url, model), model_client_stream=stream,
                              system_message="You add numbers.")

    return build_app



def test_a_users_own_client_is_traced_replayed_and_injected(model_server, provider, exporter, tmp_path):
    server = model_server(lambda body: Reply(content=ANSWER))
    store = TraceStore(tmp_path / "store")
    for stream in (False, True):
        exporter.clear()
        build_app, run_app = own_app(stream), AutogenStreamed()
        agent = build_app(server.base_url)
        probe = aegis_probe.instrument(agent, tracer_provider=provider, store=store)
        assert run_app(agent, TASK) == ANSWER
        probe.flush()
        (chat,) = chats(exporter)
        assert chat.attributes[sc.REQUEST_MODEL] == "own-model" and ANSWER in chat.attributes[sc.OUTPUT_MESSAGES]
        assert chat.attributes[sc.USAGE_OUTPUT_TOKENS] == len(ANSWER.split(" "))
        assert run_app.runs[-1] == (text_pieces(ANSWER) if stream else [])
        trace_id = probe.last_trace_id
        probe.uninstrument()

        requests = len(server.requests)
        result = replay(trace_id, AppSpec(build_app, run_app), store=store)
        assert result.exact and result.live_calls == 0 and len(server.requests) == requests, result.divergence or result.error
        assert run_app.runs[-1] == run_app.runs[0]

        agent = build_app(server.base_url)
        probe = aegis_probe.instrument(agent, tracer_provider=provider, store=store)
        with probe.intercept(Inject(INJECTED)):
            assert run_app(agent, TASK) == INJECTED
        assert run_app.runs[-1] == (text_pieces(INJECTED) if stream else [])
        probe.uninstrument()
