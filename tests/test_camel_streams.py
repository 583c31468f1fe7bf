"""CAMEL's streamed model calls (``stream=True`` in the model config): a replayed, substituted or
injected answer reaches the app as OpenAI streams one, text deltas word by word, tool-call argument
deltas, the usage in a chunk of its own last; through the real ``ChatAgent`` and camel's
OpenAI-compatible backend against the loopback model server."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("camel")

import aegis_probe  # noqa: E402
from aegis_probe.apps import AppSpec  # noqa: E402
from aegis_probe.capture.interception import LLMResponse, text_pieces  # noqa: E402
from aegis_probe.counterfactual import replay  # noqa: E402
from aegis_probe.demos.task import calculate  # noqa: E402
from aegis_probe.storage.store import TraceStore  # noqa: E402
from streamed_turn import ANSWER, INJECTED, TASK, AnswerCall, policy  # noqa: E402

def build_app(base_url: str, model: str = "aegis-scripted", api_key: str = "sk-test") -> Any:
    from camel.agents import ChatAgent
    from camel.messages import BaseMessage
    from camel.models import ModelFactory
    from camel.models.stub_model import StubTokenCounter
    from camel.types import ModelPlatformType

    backend = ModelFactory.create(model_platform=ModelPlatformType.OPENAI_COMPATIBLE_MODEL, model_type=model,
                                  url=base_url, api_key=api_key, token_counter=StubTokenCounter(),
                                  model_config_dict={"stream": True})
    return ChatAgent(BaseMessage.make_assistant_message("Calculator", "You compute."), model=backend,
                     tools=[calculate], stream_accumulate=False)


class Pieces:
    """``run_app`` keeping the pieces of the step's stream the app read (camel's delta mode)."""

    def __init__(self) -> None:
        self.runs: list[list[str]] = []

    def __call__(self, agent: Any, task: str) -> str:
        pieces = [m.content for partial in agent.step(task) for m in partial.msgs if m.content]
        self.runs.append(pieces)
        return "".join(pieces)


def test_streamed_answers_replayed_or_injected_reach_the_app_as_deltas(model_server, provider, tmp_path):
    server = model_server(policy)
    store = TraceStore(tmp_path / "store")
    run_app = Pieces()
    agent = build_app(server.base_url)
    probe = aegis_probe.instrument(agent, tracer_provider=provider, store=store)
    run_app(agent, TASK)
    probe.flush()
    live = run_app.runs[-1]
    assert live[-len(text_pieces(ANSWER)):] == text_pieces(ANSWER), "the server streams word by word"
    trace_id = probe.last_trace_id
    probe.uninstrument()

    requests = len(server.requests)
    result = replay(trace_id, AppSpec(build_app, run_app), store=store)
    assert result.exact and result.live_calls == 0 and result.replayed_calls == 2, result.divergence or result.error
    assert len(server.requests) == requests
    assert run_app.runs[-1] == live, "the replayed answers are streamed as the live ones were"

    agent = build_app(server.base_url)
    probe = aegis_probe.instrument(agent, tracer_provider=provider, store=store)
    with probe.intercept(AnswerCall(2)):
        run_app(agent, TASK)
    assert run_app.runs[-1] == live[:-len(text_pieces(ANSWER))] + text_pieces(INJECTED), \
        "the live chunks of the replaced answer were held back and the injected one streamed instead"


def test_rebuilt_chunks_are_shaped_as_openais():
    """The chunks a rebuilt answer is streamed as: text and argument deltas, the usage last, alone."""
    from aegis_probe.adapters.camel import CamelCodec

    answer = LLMResponse(content="Two words", tool_calls=[{"id": "call_7", "name": "calculate",
                                                           "arguments": '{"expression": "17 + 25"}'}],
                         input_tokens=5, output_tokens=9, model="scripted", finish_reason="tool_calls")
    chunks = CamelCodec().to_chunks(answer)
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert [d.content for d in deltas if d.content] == ["Two", " words"]
    calls = [d.tool_calls[0] for d in deltas if d.tool_calls]
    assert (calls[0].id, calls[0].function.name, calls[0].function.arguments) == ("call_7", "calculate", "")
    assert [c.function.arguments for c in calls[1:]] == ['{"expression":', ' "17', ' +', ' 25"}']
    assert chunks[-2].choices[0].finish_reason == "tool_calls" and chunks[-2].usage is None
    assert not chunks[-1].choices and chunks[-1].usage.prompt_tokens == 5
    assert CamelCodec().from_chunks(chunks) == answer
