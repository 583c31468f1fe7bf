"""AutoGen: a prompt that extends the conversation's last one reuses that one's conversion only
while its messages are as they were then; a message of the model context changed in place between
two model calls is recorded as it is now."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core.models import UserMessage
from autogen_core.tools import FunctionTool

import aegis_probe
from aegis_probe.capture import semconv as sc
from aegis_probe.modelserver import Reply
from test_autogen import MODEL, demo_model_info

pytestmark = pytest.mark.autogen


def _policy(body: dict[str, Any]) -> Reply:
    """Call ``credit`` first, then answer."""
    if body["messages"][-1].get("role") == "tool":
        return Reply(content="Credited.")
    return Reply(tool_calls=[("credit", {"who": "alice"})])


def test_a_message_changed_in_place_between_two_calls_is_recorded_as_it_is_now(model_server, provider, exporter) -> None:
    """The task's message, re-attributed in place by a tool (its ``source``), was recorded under
    its old name in the second call's prompt (the first call's conversion, reused)."""
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    server = model_server(_policy)
    client = OpenAIChatCompletionClient(model=MODEL, base_url=server.base_url, api_key="sk-test",
                                        model_info=demo_model_info())

    async def credit(who: str) -> str:
        for m in await agent.model_context.get_messages():
            if isinstance(m, UserMessage):
                m.source = who  # the same message object, changed in place
        return f"credited {who}"

    agent = AssistantAgent("clerk", model_client=client, system_message="You are the clerk.",
                           tools=[FunctionTool(credit, name="credit", description="Credit someone.")],
                           reflect_on_tool_use=True)
    team = RoundRobinGroupChat([agent], max_turns=1)
    probe = aegis_probe.instrument(team, tracer_provider=provider)
    try:
        asyncio.run(team.run(task="Credit the task to Alice."))
    finally:
        probe.uninstrument()
    sent = [m for m in server.requests[-1]["messages"] if m["role"] == "user"]
    assert [m.get("name") for m in sent] == ["alice"]  # what the model got
    chats = sorted((s for s in exporter.get_finished_spans() if s.attributes.get(sc.OPERATION) == sc.OP_CHAT),
                   key=lambda s: s.start_time)
    prompts = [json.loads(s.attributes[sc.INPUT_MESSAGES]) for s in chats]
    assert [[m.get("name") for m in p if m["role"] == "user"] for p in prompts] == [["user"], ["alice"]]
