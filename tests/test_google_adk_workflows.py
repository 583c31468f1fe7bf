"""Google ADK's ParallelAgent and LoopAgent, and streamed model calls (``RunConfig(streaming_mode=SSE)``),
in .venv-google-adk (run from the main suite by :func:`test_in_own_environment`): a parallel fan-out's
and a loop's turns as steps in the order they started, each run replayed exactly; a streamed run's
replayed or injected answers reaching the app as partial chunks word by word. Real google-adk, its
LiteLlm (LiteLLM streaming from the loopback server) and the demo's model on the real openai client."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
from own_env import INSIDE, importable, run_in_own_env

#: LiteLLM fetches its model price map from GitHub at import unless told to use its own copy.
OFFLINE = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}
HERE = importable("google.adk")


@pytest.mark.skipif(HERE, reason=INSIDE)
def test_in_own_environment():
    run_in_own_env(".venv-google-adk", "tests/test_google_adk_workflows.py", "google_adk_workflows", env=OFFLINE)


needs_adk = pytest.mark.skipif(not HERE, reason="google-adk is not installed here (it runs in .venv-google-adk)")
if HERE:
    os.environ.update(OFFLINE)
    import aegis_probe
    from aegis_probe.apps import AppSpec
    from aegis_probe.capture import semconv as sc
    from aegis_probe.capture.interception import LLMResponse, text_pieces
    from aegis_probe.counterfactual import replay
    from aegis_probe.demos import google_adk as demo
    from aegis_probe.demos.task import EXPRESSION, TASK, final_number, message_text
    from aegis_probe.modelserver import Reply
    from aegis_probe.storage.store import TraceStore
    from framework_checks import ours

SYSTEM = {
    "calculator": "You are the calculator. Evaluate the expression with the calculate tool.",
    "reviewer": "You are the reviewer. Check the calculator's result.",
    "writer": "You are the writer. Say what the task asks.",
}
REVIEWED = "The result 126 checks out."
ANSWER = "The total is 126 coins, as the calculator found."
INJECTED = "An injected answer streamed word by word"


def policy(body: dict[str, Any]) -> Reply:
    """The calculator calls its tool then reports; the reviewer asks for one more round, then exits the
    loop (``exit_loop``); the writer answers in a sentence."""
    messages = body.get("messages", [])
    system = message_text(messages[0]) if messages and messages[0].get("role") == "system" else ""
    last = messages[-1] if messages else {}
    if system.startswith(SYSTEM["calculator"]):
        if last.get("role") == "tool":
            return Reply(content=f"The result is {final_number(message_text(last))}.")
        return Reply(tool_calls=[(demo.TOOL, {"expression": EXPRESSION})])
    if system.startswith(SYSTEM["reviewer"]):
        if last.get("role") == "tool":
            return Reply(content=REVIEWED)
        if any("Once more" in message_text(m) for m in messages):  # its own earlier turn, as ADK shows it
            return Reply(tool_calls=[("exit_loop", {})])
        return Reply(content="Once more, to be sure.")
    if system.startswith(SYSTEM["writer"]):
        return Reply(content=ANSWER)
    return Reply(content="I am no agent of these workflows.")


def _agent(name: str, llm: Any) -> Any:
    from google.adk.agents import LlmAgent
    from google.adk.tools import exit_loop

    tools = {"calculator": [demo.calculate], "reviewer": [exit_loop]}.get(name, [])
    return LlmAgent(name=name, model=llm, instruction=SYSTEM[name], tools=tools, description=f"the {name}")


def parallel(base_url: str, model: str = "aegis-scripted", api_key: str = "sk-test") -> Any:
    from google.adk.agents import ParallelAgent

    llm = demo.OpenAICompatibleLlm(model=model, base_url=base_url, api_key=api_key)
    return ParallelAgent(name="fan_out", sub_agents=[_agent("calculator", llm), _agent("writer", llm)])


def loop(base_url: str, model: str = "aegis-scripted", api_key: str = "sk-test") -> Any:
    from google.adk.agents import LoopAgent

    llm = demo.OpenAICompatibleLlm(model=model, base_url=base_url, api_key=api_key)
    return LoopAgent(name="review_loop", sub_agents=[_agent("calculator", llm), _agent("reviewer", llm)], max_iterations=4)


def streamed_writer(base_url: str, model: str = "aegis-scripted", api_key: str = "sk-test") -> Any:
    from google.adk.agents import SequentialAgent
    from google.adk.models.lite_llm import LiteLlm

    llm = LiteLlm(model=f"openai/{model}", api_base=base_url, api_key=api_key)
    return SequentialAgent(name="streamed_team", sub_agents=[_agent("calculator", llm), _agent("writer", llm)])


async def _events(app: Any, task: str, streamed: bool) -> list[Any]:
    from google.adk.agents.run_config import RunConfig, StreamingMode
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    runner = InMemoryRunner(agent=app, app_name=demo.APP_NAME)
    session = await runner.session_service.create_session(app_name=demo.APP_NAME, user_id="user")
    config = RunConfig(streaming_mode=StreamingMode.SSE if streamed else StreamingMode.NONE)
    message = types.Content(role="user", parts=[types.Part(text=task)])
    events = [e async for e in runner.run_async(user_id="user", session_id=session.id, new_message=message,
                                                run_config=config)]
    await runner.close()
    return events


def _text(event: Any) -> str:
    return "".join(p.text for p in (event.content.parts if event.content else None) or () if p.text)


def run_app(app: Any, task: str) -> str | None:
    """Run ``app`` plainly; its last whole text."""
    texts = [_text(e) for e in asyncio.run(_events(app, task, streamed=False)) if not e.partial and _text(e)]
    return texts[-1] if texts else None


class Pieces:
    """``run_app`` for SSE streaming, keeping the partial texts of each run the app read."""

    def __init__(self) -> None:
        self.runs: list[list[str]] = []

    def __call__(self, app: Any, task: str) -> str | None:
        events = asyncio.run(_events(app, task, streamed=True))
        self.runs.append([_text(e) for e in events if e.partial and _text(e)])
        texts = [_text(e) for e in events if not e.partial and _text(e)]
        return texts[-1] if texts else None


def _steps(spans: list[Any]) -> list[Any]:
    return sorted((s for s in spans if s.attributes.get(sc.STEP_INDEX) is not None), key=lambda s: s.attributes[sc.STEP_INDEX])


def _traced(build: Any, model_server: Any, provider: Any, exporter: Any, tmp_path: Any, run: Any = None):
    server = model_server(policy)
    app = build(server.base_url)
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=TraceStore(tmp_path / "store"))
    answer = (run or run_app)(app, TASK)
    probe.flush()
    return server, probe, ours(exporter), answer


def _replayed_exactly(build: Any, probe: Any, spans: list[Any], tmp_path: Any, run: Any = None) -> None:
    calls = len([s for s in spans if s.attributes.get(sc.OPERATION) == sc.OP_CHAT])
    probe.uninstrument()
    result = replay(probe.last_trace_id, AppSpec(build, run or run_app), store=TraceStore(tmp_path / "store"))
    assert result.exact, result.divergence or result.error
    assert result.replayed_calls == calls and result.live_calls == 0


@needs_adk
def test_google_adk_workflows_parallel_turns_are_steps_in_the_order_they_started(model_server, provider, exporter, tmp_path):
    server, probe, spans, answer = _traced(parallel, model_server, provider, exporter, tmp_path)
    by_id = {s.context.span_id: s for s in spans}
    (root,) = [s for s in spans if s.parent is None]
    steps = _steps(spans)
    assert root.name == "invoke_workflow fan_out" and all(by_id[s.parent.span_id] is root for s in steps)
    assert sorted(s.attributes[sc.AGENT_NAME] for s in steps) == ["calculator", "calculator", "writer"]
    assert [s.start_time for s in steps] == sorted(s.start_time for s in steps), "indices follow the start order"
    first_calculator = next(s for s in steps if s.attributes[sc.AGENT_NAME] == "calculator")
    writer = next(s for s in steps if s.attributes[sc.AGENT_NAME] == "writer")
    assert max(writer.start_time, first_calculator.start_time) < min(writer.end_time, first_calculator.end_time), \
        "the branches ran at once"
    chats = [s for s in spans if s.attributes.get(sc.OPERATION) == sc.OP_CHAT]
    assert all(by_id[c.parent.span_id] in steps for c in chats) and len(chats) == 3
    _replayed_exactly(parallel, probe, spans, tmp_path)


@needs_adk
def test_google_adk_workflows_loop_turns_are_steps_until_exit_loop(model_server, provider, exporter, tmp_path):
    server, probe, spans, answer = _traced(loop, model_server, provider, exporter, tmp_path)
    names = [s.attributes[sc.AGENT_NAME] for s in _steps(spans)]
    assert names == ["calculator", "calculator", "reviewer", "calculator", "calculator", "reviewer"], names
    tools = [s.attributes[sc.TOOL_NAME] for s in sorted(spans, key=lambda s: s.start_time) if s.attributes.get(sc.OPERATION) == sc.OP_TOOL]
    assert tools == [demo.TOOL, demo.TOOL, "exit_loop"]
    (root,) = [s for s in spans if s.parent is None]
    assert root.name == "invoke_workflow review_loop"
    _replayed_exactly(loop, probe, spans, tmp_path)


class AnswerLast:
    """An interceptor answering the last model call (the writer's) with ``INJECTED``."""

    def before(self, call: Any) -> None:
        return None

    def after(self, call: Any, response: LLMResponse) -> LLMResponse:
        if call.agent != "writer":
            return response
        return LLMResponse(content=INJECTED, input_tokens=3, output_tokens=6, finish_reason="stop")


@needs_adk
def test_google_adk_workflows_streamed_answers_replayed_or_injected_reach_the_app_as_partial_chunks(
        model_server, provider, exporter, tmp_path):
    run = Pieces()
    server, probe, spans, answer = _traced(streamed_writer, model_server, provider, exporter, tmp_path, run)
    assert answer == ANSWER
    live = run.runs[-1]
    assert live[-len(text_pieces(ANSWER)):] == text_pieces(ANSWER), "LiteLLM streams the server's words as partial events"
    chats = [s for s in spans if s.attributes.get(sc.OPERATION) == sc.OP_CHAT]
    assert demo.TOOL in chats[0].attributes[sc.OUTPUT_MESSAGES], "the calculator's streamed tool call"
    assert ANSWER in chats[-1].attributes[sc.OUTPUT_MESSAGES], "the span holds the whole streamed answer once"

    requests = len(server.requests)
    _replayed_exactly(streamed_writer, probe, spans, tmp_path, run)
    assert len(server.requests) == requests
    assert run.runs[-1] == live, "the replayed answers reach the app as the live ones did, word by word"

    app = streamed_writer(server.base_url)
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=False)
    with probe.intercept(AnswerLast()):
        assert run(app, TASK) == INJECTED
    assert run.runs[-1] == live[:-len(text_pieces(ANSWER))] + text_pieces(INJECTED), \
        "the writer's live chunks were held back and the injected answer streamed instead"
