"""CAMEL: a model's refusal (``message.refusal``, content null; streamed, ``delta.refusal``) is
recorded as the chat span's output (it was an empty output), and an exact replay gives it back
(CamelCodec reads and writes it: the replayed call's output is the same refusal)."""

from __future__ import annotations

from typing import Any

import pytest

import aegis_probe
from aegis_probe.apps import AppSpec
from aegis_probe.counterfactual import replay
from aegis_probe.storage.store import TraceStore
from test_refusals import REFUSED, TASK, RefusingServer, chat_outputs

pytestmark = pytest.mark.camel
camel = pytest.importorskip("camel.agents")


def _builder(stream: bool) -> Any:
    def build(base_url: str, model: str, api_key: str) -> Any:
        from camel.messages import BaseMessage
        from camel.models import ModelFactory
        from camel.models.stub_model import StubTokenCounter
        from camel.types import ModelPlatformType

        backend = ModelFactory.create(model_platform=ModelPlatformType.OPENAI_COMPATIBLE_MODEL, model_type=model,
                                      url=base_url, api_key=api_key, token_counter=StubTokenCounter(),
                                      model_config_dict={"stream": stream})
        return camel.ChatAgent(BaseMessage.make_assistant_message("Clerk", "You are the clerk."), model=backend)
    return build


def _run(agent: Any, task: str) -> str | None:
    response = agent.step(task)
    return response.msgs[0].content if response.msgs else None


def _recorded_refusal(build: Any, store: TraceStore, stream: bool) -> str:
    """The trace id of a lone agent's step that the model refused, recorded in ``store``."""
    with RefusingServer() as server:
        agent = build(server.base_url, "aegis-scripted", "sk-test")
        probe = aegis_probe.instrument(agent, store=store)
        try:
            assert _run(agent, TASK) is None  # camel itself ignores a refusal: no message
        finally:
            probe.flush()
            probe.uninstrument()
    assert [bool(r.get("stream")) for r in server.requests] == [stream]
    return str(probe.last_trace_id)


@pytest.mark.parametrize("stream", [False, True], ids=["call", "stream"])
def test_a_refusal_is_recorded(stream, tmp_path) -> None:
    store = TraceStore(tmp_path / "store")
    assert chat_outputs(store.trace(_recorded_refusal(_builder(stream), store, stream))) == [REFUSED]


@pytest.mark.parametrize("stream", [False, True], ids=["call", "stream"])
def test_a_refusal_is_replayed(stream, tmp_path) -> None:
    build, store = _builder(stream), TraceStore(tmp_path / "store")
    result = replay(_recorded_refusal(build, store, stream), AppSpec(build, _run), store=store)  # no model behind it now
    assert result.exact and (result.replayed_calls, result.live_calls) == (1, 0), result.divergence or result.error
    assert chat_outputs(store.trace(result.trajectory.trace_id)) == [REFUSED]
