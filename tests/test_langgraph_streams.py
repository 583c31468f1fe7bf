"""LangGraph's streamed model calls (``stream_mode="messages"``, ``astream_events``): a replayed,
substituted or injected answer reaches the app as chunks, text deltas word by word, each tool
call's argument deltas, the usage in the last chunk, and the live chunks of an answer an
interceptor replaces are never seen; through the real ``ChatOpenAI`` against the loopback server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from langchain_core.messages import AIMessageChunk
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

import aegis_probe
from aegis_probe.apps import AppSpec
from aegis_probe.capture.interception import LLMResponse, text_pieces
from aegis_probe.counterfactual import replay
from aegis_probe.storage.store import TraceStore
from streamed_turn import ANSWER, ARGS, INJECTED, TASK, THOUGHT, AnswerCall, adder_graph, policy

def build_app(base_url: str, model: str = "gpt-4o-mini", api_key: str = "sk-test") -> Any:
    return adder_graph(ChatOpenAI(model=model, base_url=base_url, api_key=SecretStr(api_key), max_retries=0,
                                  stream_usage=True))


class Chunks:
    """``run_app`` keeping the model's chunks the app saw (``stream_mode="messages"``), one list per run."""

    def __init__(self) -> None:
        self.runs: list[list[AIMessageChunk]] = []

    def __call__(self, graph: Any, task: str) -> str:
        chunks: list[AIMessageChunk] = []
        self.runs.append(chunks)
        for message, _meta in graph.stream({"messages": [("user", task)]}, stream_mode="messages"):
            if isinstance(message, AIMessageChunk):
                chunks.append(message)
            elif getattr(message, "type", None) == "ai":
                raise AssertionError(f"a whole model message reached the message stream: {message!r}")
        after_calls = max((i for i, c in enumerate(chunks) if c.tool_call_chunks), default=-1) + 1
        return "".join(str(c.content) for c in chunks[after_calls:])  # the final answer's text


def texts(chunks: list[AIMessageChunk]) -> list[str]:
    return [str(c.content) for c in chunks if c.content]


def test_streamed_answers_replayed_or_injected_reach_the_app_as_chunks(model_server, provider, tmp_path):
    server = model_server(policy)
    store = TraceStore(tmp_path / "store")
    run_app = Chunks()
    graph = build_app(server.base_url)
    probe = aegis_probe.instrument(graph, tracer_provider=provider, store=store)
    assert run_app(graph, TASK) == ANSWER
    probe.flush()
    live = run_app.runs[-1]
    assert texts(live) == text_pieces(THOUGHT) + text_pieces(ANSWER), "the server streams word by word"
    trace_id = probe.last_trace_id
    probe.uninstrument()

    requests = len(server.requests)
    result = replay(trace_id, AppSpec(build_app, run_app), store=store)
    assert result.exact and result.live_calls == 0, result.divergence or result.error
    assert len(server.requests) == requests
    replayed = run_app.runs[-1]
    assert texts(replayed) == texts(live), "the replayed answers are streamed as the live ones were"
    calls = [c for c in replayed if c.tool_call_chunks]
    assert calls[0].tool_call_chunks[0]["name"] == "calculate" and len(calls) > 2
    assert json.loads("".join(c.tool_call_chunks[0]["args"] for c in calls)) == ARGS, "argument deltas"
    lasts = [c for c in replayed if c.chunk_position == "last"]
    assert len(lasts) == 2 and all(c.usage_metadata and c.usage_metadata["input_tokens"] > 0 for c in lasts), \
        "each answer's usage comes in its last chunk"
    first_answer = replayed[:replayed.index(lasts[0]) + 1]
    whole = first_answer[0]
    for chunk in first_answer[1:]:
        whole = whole + chunk
    assert whole.content == THOUGHT
    assert whole.tool_calls == [{"name": "calculate", "args": ARGS, "id": whole.tool_calls[0]["id"], "type": "tool_call"}]

    substituted = replay(trace_id, AppSpec(build_app, run_app), store=store, until_step=0,
                         substitute=LLMResponse(content="Substituted at once."))
    assert substituted.answer == "Substituted at once."
    assert texts(run_app.runs[-1]) == ["Substituted", " at", " once."]

    graph = build_app(server.base_url)
    probe = aegis_probe.instrument(graph, tracer_provider=provider, store=store)
    with probe.intercept(AnswerCall(2)):
        answer = run_app(graph, TASK)
    assert answer == INJECTED
    assert texts(run_app.runs[-1]) == text_pieces(THOUGHT) + text_pieces(INJECTED), \
        "the live chunks of the replaced answer were held back and the injected one streamed instead"


def test_astream_events_get_the_replayed_chunks(model_server, provider, tmp_path):
    server = model_server(policy)
    store = TraceStore(tmp_path / "store")
    graph = build_app(server.base_url)

    async def events(graph: Any) -> list[str]:
        return [str(e["data"]["chunk"].content) async for e in graph.astream_events({"messages": [("user", TASK)]})
                if e["event"] == "on_chat_model_stream" and e["data"]["chunk"].content]

    probe = aegis_probe.instrument(graph, tracer_provider=provider, store=store)
    live = asyncio.run(events(graph))
    probe.flush()
    assert live == text_pieces(THOUGHT) + text_pieces(ANSWER)
    probe.uninstrument()

    seen: list[list[str]] = []

    def run_app(graph: Any, task: str) -> str:
        seen.append(asyncio.run(events(graph)))
        return "".join(text_pieces(ANSWER)) if seen[-1][-len(text_pieces(ANSWER)):] == text_pieces(ANSWER) else ""

    result = replay(probe.last_trace_id, AppSpec(build_app, run_app), store=store)
    assert result.exact and result.live_calls == 0, result.divergence or result.error
    assert seen == [live]
