"""AG2's model-call seam: the ``create(params)`` of the model clients ``OpenAIWrapper`` walks
(adapters/ag2_models.py), against the loopback model server through the real ag2 clients.

Runs in .venv-ag2 (ag2 needs openai<3); in the main environment only
:func:`test_in_own_environment` runs, which runs this file there.
"""

from __future__ import annotations

import json
import urllib.request
from types import SimpleNamespace
from typing import Any

import pytest
from own_env import INSIDE, importable, run_in_own_env

HERE = importable("autogen.agentchat")


@pytest.mark.skipif(HERE, reason=INSIDE)
def test_in_own_environment():
    run_in_own_env(".venv-ag2", "tests/test_ag2_models.py", "ag2_models")


needs_ag2 = pytest.mark.skipif(not HERE, reason="ag2 is not installed here (it runs in .venv-ag2)")
if HERE:
    import aegis_probe
    from aegis_probe.apps import AppSpec
    from aegis_probe.capture import semconv as sc
    from aegis_probe.capture.interception import LLMResponse
    from aegis_probe.counterfactual import replay
    from aegis_probe.demos import ag2 as demo
    from aegis_probe.modelserver import Reply
    from aegis_probe.storage.store import TraceStore

TASK = "Say hello in a few words."
ANSWER = "Hello there from the scripted model"
INJECTED = "Injected words reach the app"
CACHED = 3  #: the prompt tokens :class:`ScriptedClient` reports read from a cache


def _chats(exporter) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.attributes.get(sc.OPERATION) == "chat"]


def _hello(body: dict[str, Any]) -> Reply:
    return Reply(content=ANSWER)


class ScriptedClient:
    """A user's own model client (ag2's ``ModelClient`` protocol, registered with
    ``register_model_client``): it posts to the chat-completions endpoint with urllib and answers
    plain namespaces, as ag2's documentation shows."""

    def __init__(self, config: dict[str, Any], **kwargs: Any) -> None:
        self.model, self.base_url = config["model"], kwargs["base_url"]

    def create(self, params: dict[str, Any]) -> Any:
        body = json.dumps({"model": params["model"], "messages": params["messages"]}).encode()
        request = urllib.request.Request(self.base_url + "/chat/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as reply:
            data = json.load(reply)
        choice = data["choices"][0]
        message = SimpleNamespace(content=choice["message"]["content"], tool_calls=None, function_call=None)
        usage = SimpleNamespace(**{k: data["usage"][k] for k in ("prompt_tokens", "completion_tokens")},
                                prompt_tokens_details={"cached_tokens": CACHED}, completion_tokens_details={"reasoning_tokens": 1})
        return SimpleNamespace(id=data["id"], model=data["model"], usage=usage,
                               choices=[SimpleNamespace(message=message, finish_reason=choice["finish_reason"])])

    def message_retrieval(self, response: Any) -> list[str]:
        return [choice.message.content for choice in response.choices]

    def cost(self, response: Any) -> float:
        return 0.0

    @staticmethod
    def get_usage(response: Any) -> dict[str, Any]:
        return {}


def _pair(base_url: str, *, custom: bool = False, stream: bool = False) -> tuple[Any, Any]:
    """A user proxy and an assistant on the endpoint (ag2's OpenAI client, or :class:`ScriptedClient`)."""
    from autogen import AssistantAgent, UserProxyAgent

    entry: dict[str, Any] = {"model": "aegis-scripted", "base_url": base_url, "api_key": "sk-test", "price": [0, 0]}
    if custom:
        entry = {"model": "aegis-scripted", "model_client_cls": "ScriptedClient"}
    if stream:
        entry["stream"] = True
    assistant = AssistantAgent("helper", system_message="You are helpful.",
                               llm_config={"config_list": [entry], "cache_seed": None})
    if custom:
        assistant.register_model_client(ScriptedClient, base_url=base_url)
    user = UserProxyAgent("user", human_input_mode="NEVER", code_execution_config=False, default_auto_reply="go on")
    return user, assistant


def _build(custom: bool = False, stream: bool = False):
    def build_app(base_url: str, model: str, api_key: str) -> Any:
        return _pair(base_url, custom=custom, stream=stream)[1]

    return build_app


def run_app(assistant: Any, task: str) -> str | None:
    """Two turns: the assistant answers twice (two model requests)."""
    from autogen import UserProxyAgent

    user = UserProxyAgent("user", human_input_mode="NEVER", code_execution_config=False, default_auto_reply="go on")
    result = user.initiate_chat(assistant, message=task, max_turns=2, silent=True, summary_method="last_msg")
    return result.summary or None


class Answer:
    """An interceptor answering the ``n``-th model call (0-based) with ``text`` instead of the model's."""

    def __init__(self, n: int, text: str) -> None:
        self.n, self.text, self.seen = n, text, 0

    def before(self, call: Any) -> None:
        return None

    def after(self, call: Any, response: LLMResponse) -> LLMResponse:
        self.seen += 1
        if self.seen - 1 != self.n:
            return response
        return LLMResponse(content=self.text, model=response.model, input_tokens=1, output_tokens=4, finish_reason="stop")


class Events:
    """An ag2 IOStream keeping the ``StreamEvent`` texts the clients send."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def send(self, message: Any) -> None:
        from autogen.events.client_events import StreamEvent

        if isinstance(message, StreamEvent):
            self.texts.append(message.content.content)  # ag2 wraps each event: the event itself inside

    def print(self, *objects: Any, **kwargs: Any) -> None:
        return None

    def input(self, prompt: str = "", *, password: bool = False) -> str:
        return ""


def _streamed(run: Any) -> tuple[Any, list[str]]:
    from autogen.io.base import IOStream

    events = Events()
    with IOStream.set_default(events):  # type: ignore[arg-type]
        return run(), events.texts


@needs_ag2
def test_ag2_models_every_request_of_the_default_client_is_one_chat_span(model_server, provider, exporter, tmp_path):
    server = model_server(demo.policy)
    app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store")
    assert demo.EXPECTED in demo.run_app(app, demo.TASK)
    probe.flush()
    chats = _chats(exporter)
    assert len(chats) == len(server.requests) == 3
    first = chats[0].attributes
    assert (first[sc.PROVIDER], first[sc.REQUEST_MODEL], first[sc.AGENT_NAME]) == ("openai", "aegis-scripted", "planner")
    assert first[sc.USAGE_INPUT_TOKENS] > 0 and first[sc.USAGE_OUTPUT_TOKENS] > 0
    assert first[sc.RESPONSE_ID].startswith("chatcmpl-")
    calls = [c for c in chats if c.attributes[sc.RESPONSE_FINISH_REASONS] == ("tool_calls",)]
    assert [c.attributes[sc.AGENT_NAME] for c in calls] == ["calculator"]
    assert demo.TOOL in calls[0].attributes[sc.OUTPUT_MESSAGES]


@needs_ag2
def test_ag2_models_a_users_model_client_is_traced_replayed_and_injected(model_server, provider, exporter, tmp_path):
    server = model_server(_hello)
    store = TraceStore(tmp_path / "store")
    user, assistant = _pair(server.base_url, custom=True)
    probe = aegis_probe.instrument(assistant, tracer_provider=provider, store=store)
    assert run_app(assistant, TASK) == ANSWER
    probe.flush()
    chats = _chats(exporter)
    assert len(chats) == len(server.requests) == 2
    assert chats[0].attributes[sc.PROVIDER] == "ScriptedClient" and chats[0].attributes[sc.USAGE_OUTPUT_TOKENS] == 6
    assert ANSWER in chats[0].attributes[sc.OUTPUT_MESSAGES]
    assert (chats[0].attributes[sc.USAGE_CACHE_READ_INPUT_TOKENS], chats[0].attributes[sc.USAGE_REASONING_OUTPUT_TOKENS]) == (CACHED, 1)
    trace_id = probe.last_trace_id
    probe.uninstrument()

    # Exact replay: no model behind the app, every answer from the recording.
    result = replay(trace_id, AppSpec(_build(custom=True), run_app), store=store)
    assert result.exact and (result.live_calls, result.replayed_calls) == (0, 2), result.divergence or result.error
    assert len(server.requests) == 2

    # Injection: the second answer replaced, by the user's client's own contract.
    user, assistant = _pair(server.base_url, custom=True)
    probe = aegis_probe.instrument(assistant, tracer_provider=provider, store=store)
    with probe.intercept(Answer(1, INJECTED)):
        assert run_app(assistant, TASK) == INJECTED
    assert assistant.chat_messages[next(iter(assistant.chat_messages))][-1]["content"] == INJECTED


@needs_ag2
def test_ag2_models_a_client_delegating_to_another_is_one_chat_span(model_server, provider, exporter, tmp_path):
    """A user's client wrapping ag2's OpenAI client (whose ``create`` is patched too): one span per request."""
    from autogen.oai.client import OpenAIClient
    from openai import OpenAI

    class Delegating(ScriptedClient):
        def __init__(self, config: dict[str, Any], **kwargs: Any) -> None:
            self.inner = OpenAIClient(OpenAI(base_url=kwargs["base_url"], api_key="sk-test", max_retries=0))

        def create(self, params: dict[str, Any]) -> Any:
            return self.inner.create({k: v for k, v in params.items() if k != "model_client_cls"})

    server = model_server(_hello)
    from autogen import AssistantAgent

    assistant = AssistantAgent("helper", llm_config={"config_list": [{"model": "aegis-scripted", "model_client_cls": "Delegating"}],
                                                     "cache_seed": None})
    assistant.register_model_client(Delegating, base_url=server.base_url)
    probe = aegis_probe.instrument(assistant, tracer_provider=provider, store=tmp_path / "store")
    assert run_app(assistant, TASK) == ANSWER
    probe.flush()
    assert len(_chats(exporter)) == len(server.requests) == 2


@needs_ag2
def test_ag2_models_streamed_answers_replayed_or_injected_reach_the_app_as_text_deltas(model_server, provider, tmp_path):
    server = model_server(_hello)
    store = TraceStore(tmp_path / "store")
    user, assistant = _pair(server.base_url, stream=True)
    probe = aegis_probe.instrument(assistant, tracer_provider=provider, store=store)
    answer, live = _streamed(lambda: run_app(assistant, TASK))
    probe.flush()
    assert answer == ANSWER and "".join(live) == ANSWER * 2
    assert len([t for t in live if t]) == 2 * len(ANSWER.split(" ")), "the server streams word by word"
    trace_id = probe.last_trace_id
    probe.uninstrument()

    result, replayed = _streamed(lambda: replay(trace_id, AppSpec(_build(stream=True), run_app), store=store))
    assert result.exact and result.live_calls == 0, result.divergence or result.error
    assert [t for t in replayed if t] == [t for t in live if t]

    user, assistant = _pair(server.base_url, stream=True)
    probe = aegis_probe.instrument(assistant, tracer_provider=provider, store=store)
    with probe.intercept(Answer(0, INJECTED)):
        answer, injected = _streamed(lambda: run_app(assistant, TASK))
    assert answer == ANSWER
    assert "".join(injected) == INJECTED + ANSWER and injected[:len(INJECTED.split(" "))] == INJECTED.replace(" ", "\0 ").split("\0")


def _anthropic_pair(base_url: str, stream: bool = False) -> Any:
    """An assistant on ag2's Anthropic client (the real ``anthropic`` SDK), at the server's Messages API."""
    from autogen import AssistantAgent

    entry = {"api_type": "anthropic", "model": "claude-scripted", "api_key": "sk-ant-test",
             "base_url": base_url.removesuffix("/v1"), "price": [0, 0], "stream": stream}
    return AssistantAgent("helper", system_message="You are helpful.", llm_config={"config_list": [entry], "cache_seed": None})


def _build_anthropic(stream: bool = False):
    def build_app(base_url: str, model: str, api_key: str) -> Any:
        return _anthropic_pair(base_url, stream=stream)

    return build_app


@needs_ag2
@pytest.mark.filterwarnings("ignore:Cost calculation not available")
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_ag2_models_anthropic_client_is_traced_replayed_and_injected(stream, model_server, provider, exporter, tmp_path):
    pytest.importorskip("anthropic")
    server = model_server(lambda body: Reply(content=ANSWER, cached_tokens=2))
    store = TraceStore(tmp_path / "store")
    assistant = _anthropic_pair(server.base_url, stream=stream)
    probe = aegis_probe.instrument(assistant, tracer_provider=provider, store=store)
    answer, live = _streamed(lambda: run_app(assistant, TASK))
    assert answer == ANSWER
    probe.flush()
    chats = _chats(exporter)
    assert len(chats) == len(server.requests) == 2
    first = chats[0].attributes
    assert (first[sc.PROVIDER], first[sc.REQUEST_MODEL], first[sc.RESPONSE_FINISH_REASONS]) == ("anthropic", "claude-scripted", ("stop",))
    assert ANSWER in first[sc.OUTPUT_MESSAGES] and "Say hello" in first[sc.INPUT_MESSAGES]
    assert first[sc.USAGE_OUTPUT_TOKENS] == len(ANSWER.split(" "))
    trace_id = probe.last_trace_id
    probe.uninstrument()

    result, replayed = _streamed(lambda: replay(trace_id, AppSpec(_build_anthropic(stream), run_app), store=store))
    assert result.exact and (result.live_calls, result.replayed_calls) == (0, 2), result.divergence or result.error
    assert [t for t in replayed if t] == [t for t in live if t] and bool(live) == stream

    assistant = _anthropic_pair(server.base_url, stream=stream)
    probe = aegis_probe.instrument(assistant, tracer_provider=provider, store=store)
    with probe.intercept(Answer(1, INJECTED)):
        answer, injected = _streamed(lambda: run_app(assistant, TASK))
    assert answer == INJECTED and "".join(injected) == (ANSWER + INJECTED if stream else "")
