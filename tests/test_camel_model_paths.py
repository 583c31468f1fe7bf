"""CAMEL model paths beyond camel's own backends: a user's own ``BaseModelBackend`` subclass (one on
the real openai client, one posting with urllib), which ``ChatAgent`` wraps in camel's
``ModelManager`` like any backend: ``chat`` spans, exact replay, injection; against the loopback
model server."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any

import pytest

pytest.importorskip("camel")

from camel.models import BaseModelBackend  # noqa: E402
from camel.models.stub_model import StubTokenCounter  # noqa: E402
from openai.types.chat import ChatCompletion  # noqa: E402

import aegis_probe  # noqa: E402
from aegis_probe.apps import AppSpec  # noqa: E402
from aegis_probe.capture import semconv as sc  # noqa: E402
from aegis_probe.counterfactual import replay  # noqa: E402
from aegis_probe.demos.task import calculate  # noqa: E402
from aegis_probe.storage.store import TraceStore  # noqa: E402
from streamed_turn import ANSWER, ARGS, INJECTED, TASK, AnswerCall, policy  # noqa: E402


class OpenAIClientBackend(BaseModelBackend):
    """A user's backend calling the openai client itself."""

    def __init__(self, model_type: str, url: str, api_key: str) -> None:
        import openai

        super().__init__(model_type, {}, api_key, url)
        self.client = openai.OpenAI(base_url=url, api_key=api_key)
        self.aclient = openai.AsyncOpenAI(base_url=url, api_key=api_key)

    @property
    def token_counter(self) -> Any:
        return StubTokenCounter()

    def _request(self, messages: list[Any], tools: list[dict[str, Any]] | None) -> dict[str, Any]:
        return {"model": str(self.model_type), "messages": messages, **({"tools": tools} if tools else {})}

    def _run(self, messages: list[Any], response_format: Any = None, tools: Any = None) -> ChatCompletion:
        return self.client.chat.completions.create(**self._request(messages, tools))

    async def _arun(self, messages: list[Any], response_format: Any = None, tools: Any = None) -> ChatCompletion:
        return await self.aclient.chat.completions.create(**self._request(messages, tools))


class UrllibBackend(BaseModelBackend):
    """A user's backend posting to a chat-completions endpoint with urllib."""

    def __init__(self, model_type: str, url: str, api_key: str) -> None:
        super().__init__(model_type, {}, api_key, url)

    @property
    def token_counter(self) -> Any:
        return StubTokenCounter()

    def _post(self, messages: list[Any], tools: list[dict[str, Any]] | None) -> ChatCompletion:
        body = {"model": str(self.model_type), "messages": messages, **({"tools": tools} if tools else {})}
        request = urllib.request.Request(f"{self._url}/chat/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json",
                                                  "Authorization": f"Bearer {self._api_key}"})
        with urllib.request.urlopen(request, timeout=10) as reply:
            return ChatCompletion.model_validate(json.load(reply))

    def _run(self, messages: list[Any], response_format: Any = None, tools: Any = None) -> ChatCompletion:
        return self._post(messages, tools)

    async def _arun(self, messages: list[Any], response_format: Any = None, tools: Any = None) -> ChatCompletion:
        return await asyncio.to_thread(self._post, messages, tools)


BACKENDS = {"openai-client": OpenAIClientBackend, "urllib": UrllibBackend}
PROVIDERS = {"openai-client": "openai", "urllib": "urllibbackend"}  # by the class name's prefix, else the name


def own_app(kind: str) -> Any:
    def build_app(base_url: str, model: str = "own-model", api_key: str = "sk-test") -> Any:
        from camel.agents import ChatAgent
        from camel.messages import BaseMessage

        return ChatAgent(BaseMessage.make_assistant_message("Calculator", "You compute."),
                         model=BACKENDS[kind](model, base_url, api_key), tools=[calculate])

    return build_app


def run_step(agent: Any, task: str) -> str:
    return agent.step(task).msgs[0].content


def run_astep(agent: Any, task: str) -> str:
    async def go() -> str:
        return (await agent.astep(task)).msgs[0].content

    return asyncio.run(go())


def chats(exporter: Any) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.attributes.get(sc.OPERATION) == sc.OP_CHAT]


@pytest.mark.parametrize("entry", ["step", "astep"])
@pytest.mark.parametrize("kind", sorted(BACKENDS))
def test_a_users_own_backend_is_traced_replayed_and_injected(kind, entry, model_server, provider, exporter, tmp_path):
    server = model_server(policy)
    store = TraceStore(tmp_path / "store")
    build_app, run_app = own_app(kind), {"step": run_step, "astep": run_astep}[entry]
    agent = build_app(server.base_url)
    probe = aegis_probe.instrument(agent, tracer_provider=provider, store=store)
    assert run_app(agent, TASK) == ANSWER
    probe.flush()
    first, second = chats(exporter)  # one span per request: the backend's own client adds none
    assert len(server.requests) == 2
    for chat in (first, second):
        assert chat.attributes[sc.REQUEST_MODEL] == "own-model" and chat.attributes[sc.SERVER_ADDRESS] == "127.0.0.1"
        assert chat.attributes[sc.PROVIDER] == PROVIDERS[kind]
    (call,) = json.loads(first.attributes[sc.OUTPUT_MESSAGES])[0]["parts"][1:]
    assert (call["name"], json.loads(call["arguments"])) == ("calculate", ARGS)
    assert ANSWER in second.attributes[sc.OUTPUT_MESSAGES] and second.attributes[sc.USAGE_OUTPUT_TOKENS] > 0
    assert json.loads(second.attributes[sc.INPUT_MESSAGES])[-1]["role"] == "tool"
    trace_id = probe.last_trace_id
    probe.uninstrument()

    requests = len(server.requests)
    result = replay(trace_id, AppSpec(build_app, run_app), store=store)
    assert result.exact and result.live_calls == 0 and result.replayed_calls == 2, result.divergence or result.error
    assert len(server.requests) == requests and result.answer == ANSWER

    agent = build_app(server.base_url)
    probe = aegis_probe.instrument(agent, tracer_provider=provider, store=store)
    with probe.intercept(AnswerCall(2)):
        assert run_app(agent, TASK) == INJECTED
    assert agent.memory.get_context()[0][-1]["content"] == INJECTED  # the agent's own memory agrees
    probe.uninstrument()
