"""The Agents SDK's model calls through its own ``Model`` (issue 29), in .venv-openai-agents: the
SDK's default model (``OpenAIResponsesModel``, the Responses API, set up as users do with
``set_default_openai_client``), its chat-completions model, and a user's own ``Model`` class, each
against the loopback model server speaking that API through the real openai client. Each model
request is one ``chat`` span; exact replay, counterfactual substitution and injection answer
through the seam; a streamed call answered by them reaches the app as Responses stream events.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import pytest
from own_env import INSIDE, importable, run_in_own_env

HERE = importable("agents.run")


@pytest.mark.skipif(HERE, reason=INSIDE)
def test_in_own_environment():
    run_in_own_env(".venv-openai-agents", "tests/test_openai_agents_models.py", "test_openai_agents_models",
                   env={"OPENAI_AGENTS_DISABLE_TRACING": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"})


needs_sdk = pytest.mark.skipif(not HERE, reason="openai-agents is not installed here (it runs in .venv-openai-agents)")
if HERE:
    import aegis_probe
    from aegis_probe.apps import AppSpec
    from aegis_probe.capture import semconv as sc
    from aegis_probe.capture.interception import LLMResponse, ModelCall
    from aegis_probe.counterfactual import replay
    from aegis_probe.demos import openai_agents as demo
    from aegis_probe.storage.store import TraceStore

#: Raw model events the app read in its last streamed run (``run_streamed``).
EVENTS: list[Any] = []


def _agents(model: Any, settings: Any = None) -> Any:
    """The demo's planner -> calculator -> reviewer team on ``model`` (a ``Model``, or a name for the
    default provider), with ``settings`` (``ModelSettings``) if given."""
    from agents import Agent, ModelSettings, function_tool

    tool = function_tool(demo.calculate, name_override=demo.TOOL)
    common: dict[str, Any] = {"model": model, "model_settings": settings or ModelSettings()}
    reviewer = Agent(name="reviewer", instructions=demo.SYSTEM["reviewer"], **common)
    calculator = Agent(name="calculator", instructions=demo.SYSTEM["calculator"], tools=[tool], handoffs=[reviewer],
                       **common)
    return Agent(name="planner", instructions=demo.SYSTEM["planner"], handoffs=[calculator], **common)


def build_default(base_url: str, model: str, api_key: str) -> Any:
    """The team on the SDK's default model: the Responses API through ``set_default_openai_client``."""
    from agents import set_default_openai_api, set_default_openai_client
    from openai import AsyncOpenAI

    set_default_openai_client(AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0), use_for_tracing=False)
    set_default_openai_api("responses")
    return _agents(model)


def build_chat(base_url: str, model: str, api_key: str) -> Any:
    """The team on the SDK's chat-completions model."""
    from agents import OpenAIChatCompletionsModel
    from openai import AsyncOpenAI

    return _agents(OpenAIChatCompletionsModel(model=model, openai_client=AsyncOpenAI(base_url=base_url, api_key=api_key,
                                                                                     max_retries=0)))


def build_litellm(base_url: str, model: str, api_key: str) -> Any:
    """The team on the SDK's ``LitellmModel``: litellm's OpenAI provider (``openai/<model>``) on the
    loopback chat-completions endpoint; ``include_usage`` on, without which it asks no usage of a stream."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm would fetch its price map
    from agents import ModelSettings
    from agents.extensions.models.litellm_model import LitellmModel

    return _agents(LitellmModel(model=f"openai/{model}", base_url=base_url, api_key=api_key),
                   ModelSettings(include_usage=True))


def run_streamed(app: Any, task: str) -> str | None:
    """Run the team streamed, keeping the raw model events the app read in :data:`EVENTS`."""
    from agents import Runner

    async def go() -> Any:
        result = Runner.run_streamed(app, task, max_turns=demo.MAX_TURNS)
        async for event in result.stream_events():
            if event.type == "raw_response_event":
                EVENTS.append(event.data)
        return result.final_output

    EVENTS.clear()
    output = asyncio.run(go())
    return None if output is None else str(output)


def run_plain(app: Any, task: str) -> str | None:
    """The demo's own ``Runner.run`` (looked up when called: the module imports it only where the SDK is)."""
    return demo.run_app(app, task)


RUNS = {"run": run_plain, "streamed": run_streamed}
BUILDS = {"responses": build_default, "chat_completions": build_chat, "litellm": build_litellm}
#: A span's name where it is not the server's model: LiteLLM's model string keeps its provider prefix.
MODEL_NAMES = {"litellm": "chat openai/aegis-scripted"}


@pytest.fixture(autouse=True)
def _default_client_restored():
    """``set_default_openai_client`` is process-wide: put the SDK's defaults back after each test."""
    yield
    if HERE:
        from agents import set_default_openai_api
        from agents.models import _openai_shared

        _openai_shared.set_default_openai_client(None)  # type: ignore[arg-type]
        set_default_openai_api("responses")


def _chats(spans: Any) -> list[Any]:
    return [s for s in spans if s.attributes.get(sc.OPERATION) == sc.OP_CHAT]


def _record(build: Any, run: Any, model_server: Any, store: Any) -> tuple[str, int]:
    """A recorded run of the team built by ``build``: its trace id and how many model requests it made."""
    server = model_server(demo.policy)
    app = build(server.base_url, "aegis-scripted", "sk-test")
    probe = aegis_probe.instrument(app, store=store)
    assert demo.EXPECTED in (run(app, demo.TASK) or "")
    probe.flush()
    probe.uninstrument()
    return str(probe.last_trace_id), len(server.requests)


@needs_sdk
@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("path", BUILDS)
def test_each_model_request_is_one_chat_span(path, run, model_server, provider, exporter, tmp_path):
    """Each model request of the team (4: planner, calculator twice, reviewer) is one ``chat`` span
    under its step, with the GenAI attributes, the request and answer, usage and the tool calls."""
    server = model_server(demo.policy)
    app = BUILDS[path](server.base_url, "aegis-scripted", "sk-test")
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store")
    assert demo.EXPECTED in (RUNS[run](app, demo.TASK) or "")
    probe.flush()
    assert [r.get("stream", False) for r in server.requests] == [run == "streamed"] * 4
    chats = _chats(exporter.get_finished_spans())
    assert len(chats) == len(server.requests) == 4
    for chat in chats:
        attrs = chat.attributes
        assert chat.name == MODEL_NAMES.get(path, "chat aegis-scripted") and attrs[sc.PROVIDER] == "openai"
        assert attrs[sc.SERVER_ADDRESS] == "127.0.0.1" and attrs[sc.USAGE_INPUT_TOKENS] > 0
        assert attrs[sc.USAGE_OUTPUT_TOKENS] > 0
    calculator = json.loads(chats[1].attributes[sc.OUTPUT_MESSAGES])
    assert calculator[0]["finish_reason"] == "tool_calls"
    assert [p["name"] for p in calculator[0]["parts"] if p["type"] == "tool_call"] == [demo.TOOL]
    assert list(chats[3].attributes[sc.RESPONSE_FINISH_REASONS]) == ["stop"]
    assert demo.SYSTEM["planner"] in chats[0].attributes[sc.INPUT_MESSAGES]
    steps = probe.trajectory().steps
    assert [len(s.llm_calls) for s in steps] == [1, 1, 1, 1]
    assert steps[3].llm_calls[0].output.endswith("FINAL ANSWER: 126")


@needs_sdk
@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("path", BUILDS)
def test_exact_replay_answers_every_call(path, run, model_server, tmp_path):
    """With no model behind the app, an exact replay answers every call from the recording; streamed,
    the app reads the answers as the Responses API streams them."""
    store = TraceStore(tmp_path / "store")
    trace_id, requests = _record(BUILDS[path], RUNS[run], model_server, store)
    result = replay(trace_id, AppSpec(BUILDS[path], RUNS[run]), store=store)
    assert result.exact, result.divergence or result.error
    assert (result.replayed_calls, result.live_calls) == (requests, 0)
    assert demo.EXPECTED in (result.answer or "")
    if run == "streamed":
        kinds = [e.type for e in EVENTS]
        assert kinds.count("response.completed") == requests and kinds[-1] == "response.completed"
        assert kinds.count("response.output_text.delta") > requests, "text arrives word by word"
        assert "response.function_call_arguments.delta" in kinds
        assert EVENTS[-1].response.usage.input_tokens > 0, "usage in the last event"


class _Answer:
    """An interceptor answering the reviewer's call (substitution: no model request) and
    rewriting the calculator's tool result (injection into what the model is shown)."""

    def __init__(self) -> None:
        self.seen: list[str | None] = []

    def before(self, call: ModelCall) -> LLMResponse | None:
        if call.agent == "reviewer":
            return LLMResponse(content="Injected. FINAL ANSWER: 7", finish_reason="stop")
        for message in call.messages:
            if message.get("role") == "tool":
                message["content"] = "999"
        return None

    def after(self, call: ModelCall, response: LLMResponse) -> LLMResponse:
        self.seen.append(response.content)
        return response


@needs_sdk
@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("path", BUILDS)
def test_injection_through_the_seam(path, run, model_server, provider, exporter, tmp_path):
    server = model_server(demo.policy)
    app = BUILDS[path](server.base_url, "aegis-scripted", "sk-test")
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store")
    with probe.intercept(_Answer()):
        assert RUNS[run](app, demo.TASK) == "Injected. FINAL ANSWER: 7"
    assert len(server.requests) == 3, "the reviewer's answer made no request"
    told = [m for m in server.requests[2]["messages"] if m["role"] == "tool"]
    assert len(told) == 2 and {m["content"] for m in told} == {"999"}, "the model was shown the injected tool results"
    assert "The result is 999." in _chats(exporter.get_finished_spans())[2].attributes[sc.OUTPUT_MESSAGES]
    if run == "streamed":
        assert [e.delta for e in EVENTS if e.type == "response.output_text.delta"][-3:] == [" FINAL", " ANSWER:", " 7"]


@needs_sdk
@pytest.mark.parametrize("run", RUNS)
def test_counterfactual_substitution_on_the_default_model(run, model_server, tmp_path):
    """``replay(until_step=, substitute=)``: the recorded calls before the step, the substitute at it."""
    store = TraceStore(tmp_path / "store")
    trace_id, _ = _record(build_default, RUNS[run], model_server, store)
    server = model_server(demo.policy)
    from aegis_probe.apps import Endpoint

    result = replay(trace_id, AppSpec(build_default, RUNS[run]), until_step=3,
                    substitute="Substituted. FINAL ANSWER: 5", store=store,
                    endpoint=Endpoint(server.base_url, "aegis-scripted", "sk-test"))
    assert result.answer == "Substituted. FINAL ANSWER: 5" and result.replayed_calls == 3
    assert server.requests == [], "the substitute answered the one live call"


@needs_sdk
@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("path", BUILDS)
def test_structured_output_is_recorded_and_replayed(path, run, model_server, tmp_path):
    """An agent with an ``output_type``: its JSON answer is the chat span's content, and a replay
    gives it back for the SDK to parse into the same object."""
    from agents import Agent
    from agents.models.interface import Model
    from aegis_probe.modelserver import Reply
    from pydantic import BaseModel

    class Total(BaseModel):
        total: int
        unit: str

    def build(base_url: str, model: str, api_key: str) -> Any:
        solver = BUILDS[path](base_url, model, api_key)
        llm = solver.model if isinstance(solver.model, Model) else model
        return Agent(name="solver", instructions="Add it up.", model=llm, output_type=Total)

    def run_it(app: Any, task: str) -> str:
        if run == "run":
            from agents import Runner

            return Runner.run_sync(app, task).final_output.model_dump_json()
        from agents import Runner

        async def go() -> str:
            result = Runner.run_streamed(app, task)
            async for _ in result.stream_events():
                pass
            return result.final_output.model_dump_json()

        return asyncio.run(go())

    server = model_server(lambda body: Reply(content=json.dumps({"total": 126, "unit": "coins"})))
    store = TraceStore(tmp_path / "store")
    app = build(server.base_url, "aegis-scripted", "sk-test")
    probe = aegis_probe.instrument(app, store=store)
    assert json.loads(run_it(app, demo.TASK)) == {"total": 126, "unit": "coins"}
    probe.flush()
    probe.uninstrument()
    result = replay(str(probe.last_trace_id), AppSpec(build, run_it), store=store)
    assert result.exact and result.live_calls == 0, result.divergence or result.error
    assert json.loads(result.answer) == {"total": 126, "unit": "coins"}


def _user_model_class() -> type:
    """A user's own ``Model`` (defined after ``instrument()``): it calls its endpoint's Responses API
    through the openai client itself, as a custom provider would."""
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage

    class ScriptedModel(Model):
        def __init__(self, client: Any, model: str) -> None:
            self.client, self.model = client, model

        def _request(self, instructions: Any, input: Any, tools: Any, handoffs: Any) -> dict[str, Any]:
            specs = [{"type": "function", "name": t.name, "description": t.description,
                      "parameters": t.params_json_schema} for t in tools]
            specs += [{"type": "function", "name": h.tool_name, "description": h.tool_description,
                       "parameters": h.input_json_schema} for h in handoffs]
            return {"model": self.model, "instructions": instructions, "input": input, "tools": specs}

        async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs,
                               tracing, *, previous_response_id=None, conversation_id=None, prompt=None):
            response = await self.client.responses.create(**self._request(system_instructions, input, tools, handoffs))
            usage = Usage(requests=1, input_tokens=response.usage.input_tokens,
                          output_tokens=response.usage.output_tokens, total_tokens=response.usage.total_tokens)
            return ModelResponse(output=response.output, usage=usage, response_id=response.id)

        async def stream_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs,
                                  tracing, *, previous_response_id=None, conversation_id=None, prompt=None):
            stream = await self.client.responses.create(**self._request(system_instructions, input, tools, handoffs),
                                                        stream=True)
            async for event in stream:
                yield event

    return ScriptedModel


@needs_sdk
@pytest.mark.parametrize("run", RUNS)
def test_a_users_own_model_class(run, model_server, provider, exporter, tmp_path):
    """A ``Model`` subclass the user defines after ``instrument()`` is traced (its class patched when
    the run starts), named by its class; its calls replay; uninstrument() restores it."""
    from openai import AsyncOpenAI

    server = model_server(demo.policy)
    holder: dict[str, Any] = {}

    def build(base_url: str, model: str, api_key: str) -> Any:
        return _agents(holder["cls"](AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0), model))

    aegis_probe.instrument(build_chat(server.base_url, "aegis-scripted", "sk-test"), tracer_provider=provider,
                           store=False)  # the patches are in place before the class exists
    holder["cls"] = user_class = _user_model_class()
    original = vars(user_class)["get_response"]
    app = build(server.base_url, "aegis-scripted", "sk-test")
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store")
    assert demo.EXPECTED in (RUNS[run](app, demo.TASK) or "")
    probe.flush()
    chats = _chats(exporter.get_finished_spans())
    assert len(chats) == len(server.requests) == 4
    assert {c.attributes[sc.PROVIDER] for c in chats} == {"scripted"}
    result = replay(str(probe.last_trace_id), AppSpec(build, RUNS[run]), store=TraceStore(tmp_path / "store"))
    assert result.exact and result.live_calls == 0, result.divergence or result.error
    aegis_probe.uninstrument()
    assert vars(user_class)["get_response"] is original


@needs_sdk
def test_a_model_calling_its_parent_makes_one_chat_span(model_server, provider, exporter, tmp_path):
    """A subclass of the SDK's default model whose ``get_response`` calls ``super()``: one span per call."""
    from agents import OpenAIResponsesModel
    from openai import AsyncOpenAI

    class Logged(OpenAIResponsesModel):
        calls = 0

        async def get_response(self, *args: Any, **kwargs: Any) -> Any:
            Logged.calls += 1
            return await super().get_response(*args, **kwargs)

    server = model_server(demo.policy)
    app = _agents(Logged(model="aegis-scripted", openai_client=AsyncOpenAI(base_url=server.base_url, api_key="sk-test")))
    aegis_probe.instrument(app, tracer_provider=provider, store=False)
    assert demo.EXPECTED in (demo.run_app(app, demo.TASK) or "")
    assert Logged.calls == len(server.requests) == len(_chats(exporter.get_finished_spans())) == 4


@needs_sdk
def test_cache_and_reasoning_tokens_are_recorded_and_replayed(model_server, provider, exporter, tmp_path):
    """Usage detail a model reports (cached and cache-written input tokens, reasoning tokens) is on
    its chat span under the GenAI names, and a replay gives it back."""
    from openai import AsyncOpenAI
    from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

    base = _user_model_class()

    class CachingModel(base):  # type: ignore[misc, valid-type]
        async def get_response(self, *args: Any, **kwargs: Any) -> Any:
            response = await super().get_response(*args, **kwargs)
            response.usage.input_tokens_details = InputTokensDetails(cached_tokens=4, cache_write_tokens=2)
            response.usage.output_tokens_details = OutputTokensDetails(reasoning_tokens=3)
            return response

    def build(base_url: str, model: str, api_key: str) -> Any:
        return _agents(CachingModel(AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0), model))

    server = model_server(demo.policy)
    store = TraceStore(tmp_path / "store")
    app = build(server.base_url, "aegis-scripted", "sk-test")
    probe = aegis_probe.instrument(app, store=store)
    demo.run_app(app, demo.TASK)
    probe.flush()
    probe.uninstrument()
    result = replay(str(probe.last_trace_id), AppSpec(build, demo.run_app), store=store)
    assert result.exact, result.divergence or result.error
    for trace_id in (probe.last_trace_id, result.trajectory.trace_id):
        chats = _chats(store.trace(str(trace_id)))
        assert len(chats) == 4
        assert {(c.attributes[sc.USAGE_CACHE_READ_INPUT_TOKENS], c.attributes[sc.USAGE_CACHE_CREATION_INPUT_TOKENS],
                 c.attributes[sc.USAGE_REASONING_OUTPUT_TOKENS]) for c in chats} == {(4, 2, 3)}
