"""``gen_ai.response.finish_reasons`` of autogen model calls: the values every other adapter records
(the OpenAI ones), not autogen's own names, and a replay hands the app autogen's names back."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Sequence

import pytest

pytest.importorskip("autogen_agentchat")

from autogen_agentchat.agents import AssistantAgent, BaseChatAgent
from autogen_agentchat.base import Response
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.messages import BaseChatMessage, TextMessage
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core import CancellationToken, FunctionCall
from autogen_core.models import ChatCompletionClient, CreateResult, ModelFamily, ModelInfo, RequestUsage, UserMessage
from autogen_ext.models.openai import OpenAIChatCompletionClient
from autogen_ext.models.replay import ReplayChatCompletionClient

import aegis_probe
from aegis_probe.capture import semconv as sc
from aegis_probe.apps import AppSpec
from aegis_probe.counterfactual import replay
from aegis_probe.modelserver import Reply
from aegis_probe.storage.store import TraceStore

MODEL = "aegis-scripted"


def _tool_policy(body: dict[str, Any]) -> Reply:
    """Call the agent's tool once, then answer with its result."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return Reply(content=f"The total is {last['content']}.")
    return Reply(tool_calls=[(body["tools"][0]["function"]["name"], {"expression": "(17 + 25) * 3"})])


def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression."""
    return "126" if expression == "(17 + 25) * 3" else "?"


def _finish_reasons(store: TraceStore) -> list[tuple[list[str] | None, str | None]]:
    """Each chat span's ``gen_ai.response.finish_reasons`` and its output message's ``finish_reason``, in order."""
    (trace_id,) = store.traces()
    chats = sorted((r for r in store.trace(trace_id) if r.attributes.get(sc.OPERATION) == sc.OP_CHAT), key=lambda r: r.start_ns)
    out = []
    for chat in chats:
        reasons = chat.attributes.get(sc.RESPONSE_FINISH_REASONS)
        (message,) = json.loads(chat.attributes[sc.OUTPUT_MESSAGES])
        out.append((list(reasons) if reasons is not None else None, message.get("finish_reason")))
    return out


@pytest.mark.parametrize("streamed", [False, True])
def test_a_tool_call_answer_has_the_finish_reason_camel_records(model_server, tmp_path, streamed):
    """The same model answering a tool call, then text, to an autogen agent (streamed or not) and a
    camel agent: both traces say ``tool_calls`` then ``stop`` (autogen's ``CreateResult`` says
    ``function_calls``)."""
    pytest.importorskip("camel.agents")
    from camel.agents import ChatAgent
    from camel.messages import BaseMessage
    from camel.models import ModelFactory
    from camel.models.stub_model import StubTokenCounter
    from camel.toolkits import FunctionTool
    from camel.types import ModelPlatformType

    server = model_server(_tool_policy)
    info = ModelInfo(vision=False, function_calling=True, json_output=False, family=ModelFamily.UNKNOWN, structured_output=False)
    client = OpenAIChatCompletionClient(model=MODEL, base_url=server.base_url, api_key="sk-test", model_info=info)
    autogen_agent = AssistantAgent("calculator", model_client=client, tools=[calculate], reflect_on_tool_use=True,
                                   model_client_stream=streamed)
    probe = aegis_probe.instrument(autogen_agent, store=tmp_path / "autogen")
    assert asyncio.run(autogen_agent.run(task="What is (17 + 25) * 3?")).messages[-1].to_text() == "The total is 126."
    probe.flush()
    probe.uninstrument()

    backend = ModelFactory.create(model_platform=ModelPlatformType.OPENAI_COMPATIBLE_MODEL, model_type=MODEL,
                                  url=server.base_url, api_key="sk-test", token_counter=StubTokenCounter())
    camel_agent = ChatAgent(BaseMessage.make_assistant_message("calculator", "You calculate."), model=backend,
                            tools=[FunctionTool(calculate)])
    probe = aegis_probe.instrument(camel_agent, store=tmp_path / "camel")
    assert camel_agent.step("What is (17 + 25) * 3?").msgs[0].content == "The total is 126."
    probe.flush()

    expected = [(["tool_calls"], "tool_calls"), (["stop"], "stop")]
    assert _finish_reasons(TraceStore(tmp_path / "camel")) == expected
    assert _finish_reasons(TraceStore(tmp_path / "autogen")) == expected


_USAGE = RequestUsage(prompt_tokens=3, completion_tokens=2)
#: One model answer per autogen finish reason, and what the trace says of each.
_ANSWERS: list[tuple[CreateResult, list[str] | None]] = [
    (CreateResult(finish_reason="stop", content="done", usage=_USAGE, cached=False), ["stop"]),
    (CreateResult(finish_reason="length", content="cut sh", usage=_USAGE, cached=False), ["length"]),
    (CreateResult(finish_reason="content_filter", content="", usage=_USAGE, cached=False), ["content_filter"]),
    (CreateResult(finish_reason="function_calls", content=[FunctionCall(id="c1", name="look", arguments="{}")],
                  usage=_USAGE, cached=False), ["tool_calls"]),
    (CreateResult(finish_reason="unknown", content="who knows", usage=_USAGE, cached=False), None),
]


class _Reporter(BaseChatAgent):
    """Asks its model once per turn and says which finish reason it got (an app reading it)."""

    def __init__(self, client: ChatCompletionClient) -> None:
        super().__init__("reporter", "reports the model's finish reason")
        self._model_client, self._prompt = client, ""

    @property
    def produced_message_types(self) -> Sequence[type[BaseChatMessage]]:
        return (TextMessage,)

    async def on_messages(self, messages: Sequence[BaseChatMessage], cancellation_token: CancellationToken) -> Response:
        if messages:
            self._prompt = messages[-1].to_text()
        result = await self._model_client.create([UserMessage(content=self._prompt, source="user")])
        self._prompt = result.finish_reason
        return Response(chat_message=TextMessage(content=result.finish_reason, source=self.name))

    async def on_reset(self, cancellation_token: CancellationToken) -> None:
        return None


def _reporting_team(answers: list[CreateResult]) -> RoundRobinGroupChat:
    return RoundRobinGroupChat([_Reporter(ReplayChatCompletionClient(answers))], termination_condition=MaxMessageTermination(6))


def _run(team: Any, task: str) -> str:
    return " ".join(m.to_text() for m in asyncio.run(team.run(task=task)).messages[1:])


def test_each_autogen_finish_reason_is_recorded_as_the_others_and_replayed_as_it_was(tmp_path):
    """stop, length and content_filter are recorded as they are, ``function_calls`` as ``tool_calls``,
    ``unknown`` (no reason given) as none; replaying the trace gives the app autogen's own reasons again."""
    store = TraceStore(tmp_path / "store")
    team = _reporting_team([answer for answer, _ in _ANSWERS])
    probe = aegis_probe.instrument(team, store=store)
    seen = _run(team, "Go.")
    probe.flush()
    probe.uninstrument()
    assert seen == "stop length content_filter function_calls unknown"
    assert _finish_reasons(store) == [(reasons, reasons[0] if reasons else None) for _, reasons in _ANSWERS]

    live = [CreateResult(finish_reason="stop", content="live", usage=_USAGE, cached=False)] * len(_ANSWERS)
    result = replay(probe.last_trace_id, AppSpec(lambda *_: _reporting_team(live), _run), store=store)
    assert (result.exact, result.replayed_calls, result.live_calls) == (True, len(_ANSWERS), 0)
    assert result.answer == seen
