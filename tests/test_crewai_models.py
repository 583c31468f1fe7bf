"""CrewAI's model-call seam: ``BaseLLM.call``/``acall`` of every model class (adapters/crewai_llm.py),
against the loopback model server through the real CrewAI providers and clients: the native OpenAI
provider (plain, streamed, structured output), a user's own ``BaseLLM`` subclass.

Runs in .venv-crewai; in the main environment only :func:`test_in_own_environment` runs, which
runs this file there.
"""

from __future__ import annotations

import json
import os
import urllib.request
from typing import Any

import pytest
from own_env import INSIDE, importable, run_in_own_env

#: CrewAI 1.15's opt-outs (never OTEL_SDK_DISABLED: it would switch off aegis-probe's SDK too).
TELEMETRY_OFF = {"CREWAI_DISABLE_TELEMETRY": "true", "CREWAI_TRACING_ENABLED": "false",
                 "CREWAI_DISABLE_VERSION_CHECK": "true"}
HERE = importable("crewai")


@pytest.mark.skipif(HERE, reason=INSIDE)
def test_in_own_environment(tmp_path):
    run_in_own_env(".venv-crewai", "tests/test_crewai_models.py", "crewai_models",
                   env={**TELEMETRY_OFF, "XDG_DATA_HOME": str(tmp_path)})


needs_crewai = pytest.mark.skipif(not HERE, reason="crewai is not installed here (it runs in .venv-crewai)")
if HERE:
    os.environ.update(TELEMETRY_OFF)
    import aegis_probe
    from aegis_probe.apps import AppSpec
    from aegis_probe.capture import semconv as sc
    from aegis_probe.capture.interception import LLMResponse
    from aegis_probe.counterfactual import replay
    from aegis_probe.demos import crewai as demo
    from aegis_probe.modelserver import Reply
    from aegis_probe.storage.store import TraceStore

INJECTED = "FINAL ANSWER: 7"


def _chats(exporter) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.attributes.get(sc.OPERATION) == "chat"]


class Answer:
    """An interceptor answering the reviewer's model call with ``response`` instead of the model's."""

    def __init__(self, response: "LLMResponse", agent: str = "reviewer") -> None:
        self.response, self.agent = response, agent

    def before(self, call: Any) -> Any:
        return None

    def after(self, call: Any, response: Any) -> Any:
        return self.response if call.agent == self.agent else response


def _crew(llm: Any, *, stream: bool = False) -> Any:
    """The demo crew (planner, calculator with its tool, reviewer), every agent on ``llm``."""
    from crewai import Crew

    base = demo.build_app("http://127.0.0.1:9/v1", "aegis-scripted", "sk-test")
    for agent in base.agents:
        agent.llm = llm
    return Crew(name="math-crew", agents=base.agents, tasks=base.tasks, stream=stream)


# -- the default path: CrewAI's native OpenAI provider -----------------------------------------------
def _caching(body: dict[str, Any]) -> "Reply":
    """The demo's model, reporting cached prompt tokens and reasoning tokens."""
    reply = demo.policy(body)
    reply.cached_tokens, reply.reasoning_tokens = 2, 1
    return reply


@needs_crewai
def test_crewai_models_every_request_of_the_native_provider_is_one_chat_span(model_server, provider, exporter, tmp_path):
    """The calls go through ``OpenAICompletion.call`` and, under it, the openai client's
    ``with_raw_response``: one span each, none from the client beneath."""
    server = model_server(_caching)
    app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store")
    assert demo.EXPECTED in demo.run_app(app, demo.TASK)
    probe.flush()
    chats = _chats(exporter)
    assert len(chats) == len(server.requests) == 4
    first = chats[0].attributes
    assert (first[sc.PROVIDER], first[sc.REQUEST_MODEL], first[sc.AGENT_NAME]) == ("openai", "aegis-scripted", "planner")
    assert (first[sc.SERVER_ADDRESS], first[sc.RESPONSE_FINISH_REASONS]) == ("127.0.0.1", ("stop",))
    assert first[sc.RESPONSE_ID].startswith("chatcmpl-") and "Plan the arithmetic" in first[sc.INPUT_MESSAGES]
    assert first[sc.USAGE_INPUT_TOKENS] > 2 and first[sc.USAGE_OUTPUT_TOKENS] > 0
    assert (first[sc.USAGE_CACHE_READ_INPUT_TOKENS], first[sc.USAGE_REASONING_OUTPUT_TOKENS]) == (2, 1)
    (call,) = [c for c in chats if c.attributes[sc.RESPONSE_FINISH_REASONS] == ("tool_calls",)]
    assert call.attributes[sc.AGENT_NAME] == "calculator"
    (out,) = json.loads(call.attributes[sc.OUTPUT_MESSAGES])
    (part,) = out["parts"]
    assert (part["type"], part["name"], json.loads(part["arguments"])) == ("tool_call", demo.TOOL, {"expression": demo.EXPRESSION})


@needs_crewai
def test_crewai_models_an_injected_tool_call_reaches_the_tool(model_server, provider, tmp_path):
    """A substituted tool call goes back as the OpenAI-shaped dict CrewAI's executor reads."""
    server = model_server(demo.policy)
    app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store")
    call = LLMResponse(tool_calls=[{"id": "call_x", "name": demo.TOOL, "arguments": json.dumps({"expression": "3 + 4"})}],
                       finish_reason="tool_calls")
    first = {"seen": False}

    class FirstCalculatorCall(Answer):
        def after(self, c: Any, response: Any) -> Any:
            if c.agent == "calculator" and not first["seen"]:
                first["seen"] = True
                return call
            return response

    with probe.intercept(FirstCalculatorCall(call)):
        assert demo.run_app(app, demo.TASK).endswith(": 7")
    (calc,) = [s for s in probe.trajectory().steps if s.agent == "calculator"]
    assert [(t.name, t.result) for t in calc.tool_calls] == [(demo.TOOL, "7")]


@needs_crewai
def test_crewai_models_async_calls_are_chat_spans_and_injectable(model_server, provider, exporter, tmp_path):
    """``akickoff``: the agents call ``OpenAICompletion.acall`` (the async openai client)."""
    import asyncio

    server = model_server(demo.policy)
    app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store")
    assert demo.EXPECTED in asyncio.run(app.akickoff(inputs={"task": demo.TASK})).raw
    probe.flush()
    chats = _chats(exporter)
    assert len(chats) == len(server.requests) == 4
    assert [c.attributes[sc.AGENT_NAME] for c in chats] == ["planner", "calculator", "calculator", "reviewer"]
    assert all(c.attributes[sc.USAGE_OUTPUT_TOKENS] > 0 for c in chats)
    with probe.intercept(Answer(LLMResponse(content=INJECTED))):
        assert asyncio.run(app.akickoff(inputs={"task": demo.TASK})).raw == INJECTED


# -- a user's own model class -------------------------------------------------------------------------
def _loopback_llm_class() -> type:
    """A user's own ``BaseLLM`` (CrewAI's documented way to plug in a provider), defined when called:
    it posts the messages and tools to the chat-completions endpoint with urllib and returns the
    text, or the tool calls for CrewAI's executor to run."""
    from crewai.llms.base_llm import BaseLLM

    class LoopbackLLM(BaseLLM):
        endpoint: str = ""

        def call(self, messages: Any, tools: Any = None, callbacks: Any = None, available_functions: Any = None,
                 from_task: Any = None, from_agent: Any = None, response_model: Any = None) -> Any:
            body: dict[str, Any] = {"model": self.model,
                                    "messages": [{"role": "user", "content": messages}] if isinstance(messages, str) else messages}
            if tools:
                body["tools"] = tools
            request = urllib.request.Request(self.endpoint + "/chat/completions", data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=10) as reply:
                message = json.load(reply)["choices"][0]["message"]
            return message.get("tool_calls") or message["content"]

        def supports_function_calling(self) -> bool:
            return True

    return LoopbackLLM


@needs_crewai
def test_crewai_models_a_users_model_class_is_traced_replayed_substituted_and_injected(model_server, provider, exporter, tmp_path):
    server = model_server(demo.policy)
    store = TraceStore(tmp_path / "store")
    app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=store)
    loopback = _loopback_llm_class()  # defined after instrument(): wrapped when the run starts
    for agent in app.agents:
        agent.llm = loopback(model="loopback-model", endpoint=server.base_url)
    assert demo.EXPECTED in demo.run_app(app, demo.TASK)
    probe.flush()
    chats = _chats(exporter)
    assert len(chats) == len(server.requests) == 4
    assert {c.attributes[sc.REQUEST_MODEL] for c in chats} == {"loopback-model"}
    calls = [json.loads(c.attributes[sc.OUTPUT_MESSAGES])[0]["parts"][0] for c in chats]
    assert [p["type"] for p in calls] == ["text", "tool_call", "text", "text"] and calls[1]["name"] == demo.TOOL
    trace_id = probe.last_trace_id
    probe.uninstrument()

    def build_app(base_url: str, model: str, api_key: str) -> Any:
        return _crew(loopback(model="loopback-model", endpoint=base_url))

    spec = AppSpec(build_app, demo.run_app)
    result = replay(trace_id, spec, store=store)
    assert result.exact and (result.live_calls, result.replayed_calls) == (0, 4), result.divergence or result.error
    assert demo.EXPECTED in (result.answer or "") and len(server.requests) == 4

    result = replay(trace_id, spec, store=store, until_step=2, substitute=INJECTED)  # the reviewer's answer
    assert result.answer == INJECTED and result.live_calls == 0, result.error

    app = build_app(server.base_url, "", "")
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=store)
    with probe.intercept(Answer(LLMResponse(content=INJECTED))):
        assert demo.run_app(app, demo.TASK) == INJECTED
    assert len(server.requests) == 4 + 4, "the reviewer's model was still asked; its answer was replaced"


# -- streaming ------------------------------------------------------------------------------------------
def _streamed_crew(base_url: str, model: str = "aegis-scripted", api_key: str = "sk-test") -> Any:
    from crewai import LLM

    return _crew(LLM(model=f"openai/{model}", base_url=base_url, api_key=api_key, max_retries=0, stream=True), stream=True)


class Chunks:
    """Runs a streaming crew, keeping the chunks the app reads: (agent, text) and (agent, tool, arguments so far)."""

    def __init__(self) -> None:
        self.text: list[tuple[str, str]] = []
        self.tools: list[tuple[str, str, str]] = []

    def run_app(self, app: Any, task: str) -> str | None:
        from crewai.types.streaming import StreamChunkType

        streamed = app.kickoff(inputs={"task": task})
        for chunk in streamed:
            if chunk.chunk_type == StreamChunkType.TOOL_CALL and chunk.tool_call is not None:
                self.tools.append((chunk.agent_role, chunk.tool_call.tool_name, chunk.tool_call.arguments))
            elif chunk.content:
                self.text.append((chunk.agent_role, chunk.content))
        return streamed.result.raw

    def said(self, agent: str) -> list[str]:
        return [t for a, t in self.text if a == agent]


@needs_crewai
def test_crewai_models_streamed_answers_replayed_or_injected_reach_the_app_as_chunks(model_server, provider, tmp_path):
    server = model_server(demo.policy)
    store = TraceStore(tmp_path / "store")
    app = _streamed_crew(server.base_url)
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=store)
    live = Chunks()
    assert demo.EXPECTED in live.run_app(app, demo.TASK)
    probe.flush()
    assert len(live.said("reviewer")) > 3, "the server streams word by word"
    assert live.tools and json.loads(live.tools[-1][2]) == {"expression": demo.EXPRESSION}
    trace_id = probe.last_trace_id
    probe.uninstrument()

    replayed = Chunks()
    result = replay(trace_id, AppSpec(_streamed_crew, replayed.run_app), store=store)
    assert result.exact and result.live_calls == 0, result.divergence or result.error
    assert replayed.text == live.text, "text deltas as the server sent them (word by word)"
    (agent, tool, arguments) = replayed.tools[-1]
    assert (agent, tool, json.loads(arguments)) == ("calculator", demo.TOOL, {"expression": demo.EXPRESSION})
    assert len(replayed.tools) > 1, "argument deltas, each with the arguments so far"

    app = _streamed_crew(server.base_url)
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=store)
    injected = Chunks()
    with probe.intercept(Answer(LLMResponse(content=INJECTED))):
        assert injected.run_app(app, demo.TASK) == INJECTED
    assert injected.said("reviewer") == ["FINAL", " ANSWER:", " 7"], "the model's own chunks held back, the new answer's sent"
    assert injected.said("planner") == live.said("planner")


# -- structured output ----------------------------------------------------------------------------------
def _reporter(base_url: str, model: str = "aegis-scripted", api_key: str = "sk-test") -> Any:
    """One agent, no tools, whose task asks for a pydantic output (CrewAI passes it as ``response_model``:
    the native OpenAI provider calls ``beta.chat.completions.parse``)."""
    from crewai import LLM, Agent, Crew, Task
    from pydantic import BaseModel

    class Result(BaseModel):
        value: int
        note: str

    llm = LLM(model=f"openai/{model}", base_url=base_url, api_key=api_key, max_retries=0)
    agent = Agent(role="reporter", goal="Report the number", backstory="You report numbers.", llm=llm, max_iter=2)
    task = Task(description="Report the number for: {task}", expected_output="The number", agent=agent, output_pydantic=Result)
    return Crew(name="reporting", agents=[agent], tasks=[task])


def _report(body: dict[str, Any]) -> "Reply":
    asked = body.get("response_format") or {}
    assert asked.get("type") == "json_schema", "the provider asks for the pydantic model's schema"
    return Reply(content=json.dumps({"value": 126, "note": "computed"}))


def run_reporter(app: Any, task: str) -> str | None:
    output = app.kickoff(inputs={"task": task})
    return json.dumps(output.pydantic.model_dump())


@needs_crewai
def test_crewai_models_structured_output_is_recorded_replayed_and_injected(model_server, provider, exporter, tmp_path):
    server = model_server(_report)
    store = TraceStore(tmp_path / "store")
    app = _reporter(server.base_url)
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=store)
    assert json.loads(run_reporter(app, demo.TASK) or "") == {"value": 126, "note": "computed"}
    probe.flush()
    (chat,) = _chats(exporter)
    assert len(server.requests) == 1
    (out,) = json.loads(chat.attributes[sc.OUTPUT_MESSAGES])
    assert json.loads(out["parts"][0]["content"]) == {"value": 126, "note": "computed"}
    trace_id = probe.last_trace_id
    probe.uninstrument()

    result = replay(trace_id, AppSpec(_reporter, run_reporter), store=store)
    assert result.exact and result.live_calls == 0, result.divergence or result.error
    assert json.loads(result.answer or "") == {"value": 126, "note": "computed"}

    app = _reporter(server.base_url)
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=store)
    with probe.intercept(Answer(LLMResponse(content=json.dumps({"value": 7, "note": "injected"})), agent="reporter")):
        assert json.loads(run_reporter(app, demo.TASK) or "") == {"value": 7, "note": "injected"}


# -- CrewAI's native Anthropic provider, through the real anthropic client --------------------------------
def _anthropic_crew(base_url: str, model: str = "claude-sonnet-4-5", api_key: str = "sk-ant-test", *,
                    stream: bool = False) -> Any:
    """The demo crew on ``LLM(model="anthropic/...")`` (CrewAI's ``AnthropicCompletion``), the server's
    Messages API at the root of ``base_url`` (the anthropic client adds ``/v1/messages``)."""
    from crewai import LLM

    llm = LLM(model=f"anthropic/{model}", base_url=base_url.rsplit("/v1", 1)[0], api_key=api_key, max_retries=0, stream=stream)
    return _crew(llm, stream=stream)


@needs_crewai
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_crewai_models_the_anthropic_provider_is_traced_replayed_and_injected(stream, model_server, provider, exporter, tmp_path):
    pytest.importorskip("anthropic")
    server = model_server(_caching)
    store = TraceStore(tmp_path / "store")
    app = _anthropic_crew(server.base_url, stream=stream)
    assert type(app.agents[0].llm).__name__ == "AnthropicCompletion"
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=store)
    live = Chunks()
    assert demo.EXPECTED in (live.run_app(app, demo.TASK) if stream else demo.run_app(app, demo.TASK))
    probe.flush()
    chats = _chats(exporter)
    assert len(chats) == len(server.requests) == 4
    first = chats[0].attributes
    assert (first[sc.PROVIDER], first[sc.REQUEST_MODEL], first[sc.RESPONSE_FINISH_REASONS]) == ("anthropic", "claude-sonnet-4-5", ("end_turn",))
    assert first[sc.USAGE_CACHE_READ_INPUT_TOKENS] == 2 and first[sc.USAGE_INPUT_TOKENS] > 2, "input counts the cache reads"
    (call,) = [c for c in chats if c.attributes[sc.RESPONSE_FINISH_REASONS] == ("tool_use",)]
    (part,) = json.loads(call.attributes[sc.OUTPUT_MESSAGES])[0]["parts"]
    assert (part["name"], json.loads(part["arguments"])) == (demo.TOOL, {"expression": demo.EXPRESSION})
    trace_id = probe.last_trace_id
    probe.uninstrument()

    replayed = Chunks()
    build = lambda url, model, key: _anthropic_crew(url, stream=stream)  # noqa: E731
    result = replay(trace_id, AppSpec(build, replayed.run_app if stream else demo.run_app), store=store)
    assert result.exact and (result.live_calls, result.replayed_calls) == (0, 4), result.divergence or result.error
    assert replayed.text == live.text and len(server.requests) == 4

    app = _anthropic_crew(server.base_url, stream=stream)
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=store)
    injected = Chunks()
    with probe.intercept(Answer(LLMResponse(content=INJECTED))):
        assert (injected.run_app(app, demo.TASK) if stream else demo.run_app(app, demo.TASK)) == INJECTED
    assert injected.said("reviewer") == (["FINAL", " ANSWER:", " 7"] if stream else [])


# -- the LiteLLM fallback (``crewai.LLM`` itself) -----------------------------------------------------------
def _litellm_crew(base_url: str, model: str = "aegis-scripted", api_key: str = "sk-test", *, stream: bool = False) -> Any:
    """The demo's planner and reviewer on ``LLM(..., is_litellm=True)``: CrewAI's own ``LLM`` class,
    calling ``litellm.completion`` (no tools: CrewAI 1.15's LiteLLM path hands a tool call's list to
    the task as its output and fails, instrumented or not)."""
    from crewai import LLM, Crew

    llm = LLM(model=f"openai/{model}", is_litellm=True, base_url=base_url, api_key=api_key, stream=stream)
    base = demo.build_app("http://127.0.0.1:9/v1", model, api_key)
    agents, tasks = [base.agents[0], base.agents[2]], [base.tasks[0], base.tasks[2]]
    for agent in agents:
        agent.llm = llm
    return Crew(name="litellm-crew", agents=agents, tasks=tasks, stream=stream)


@needs_crewai
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_crewai_models_the_litellm_fallback_is_traced_replayed_and_injected(stream, model_server, provider, exporter, tmp_path):
    pytest.importorskip("litellm")
    server = model_server(demo.policy)
    store = TraceStore(tmp_path / "store")
    app = _litellm_crew(server.base_url, stream=stream)
    assert type(app.agents[0].llm).__name__ == "LLM" and app.agents[0].llm.is_litellm
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=store)
    live = Chunks()
    answer = live.run_app(app, demo.TASK) if stream else demo.run_app(app, demo.TASK)
    assert "FINAL ANSWER" in (answer or "")
    probe.flush()
    chats = _chats(exporter)
    assert len(chats) == len(server.requests) == 2
    assert [c.attributes[sc.AGENT_NAME] for c in chats] == ["planner", "reviewer"]
    assert chats[0].attributes[sc.USAGE_OUTPUT_TOKENS] > 0 and "Plan: the answer is" in chats[0].attributes[sc.OUTPUT_MESSAGES]
    trace_id = probe.last_trace_id
    probe.uninstrument()

    replayed = Chunks()
    build = lambda url, model, key: _litellm_crew(url, stream=stream)  # noqa: E731
    result = replay(trace_id, AppSpec(build, replayed.run_app if stream else demo.run_app), store=store)
    assert result.exact and (result.live_calls, result.replayed_calls) == (0, 2), result.divergence or result.error
    assert replayed.text == live.text and len(server.requests) == 2

    app = _litellm_crew(server.base_url, stream=stream)
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=store)
    injected = Chunks()
    with probe.intercept(Answer(LLMResponse(content=INJECTED))):
        assert (injected.run_app(app, demo.TASK) if stream else demo.run_app(app, demo.TASK)) == INJECTED
    assert injected.said("reviewer") == (["FINAL", " ANSWER:", " 7"] if stream else [])


# -- optional provider packages ----------------------------------------------------------------------------
ABSENT = """
import sys
sys.modules.update({"anthropic": None, "litellm": None})  # as if neither package were installed
sys.path.insert(0, "tests")
import aegis_probe
from aegis_probe.demos import crewai as demo
from aegis_probe.modelserver import ModelServer

with ModelServer(demo.policy) as server:
    app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
    probe = aegis_probe.instrument(app, store=sys.argv[1])
    answer = demo.run_app(app, demo.TASK)
    probe.flush()
    print(answer, len(probe.trajectory().steps), sum(len(s.llm_calls) for s in probe.trajectory().steps))
"""


@needs_crewai
def test_crewai_models_a_crew_runs_traced_without_the_optional_provider_packages(tmp_path):
    """The seam imports no provider package: with ``anthropic`` and ``litellm`` unimportable the
    demo crew (native OpenAI provider) runs, and its four model calls are recorded."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", ABSENT, str(tmp_path / "store")], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **TELEMETRY_OFF, "XDG_DATA_HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-2:] == ["3", "4"] and demo.EXPECTED in proc.stdout
