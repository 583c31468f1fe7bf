"""AutoGen apps as other teams write them (real autogen-agentchat, the real openai client on the
loopback model server): conditions the adapter's other tests do not cover."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("autogen_agentchat")

import aegis_probe
from aegis_probe.modelserver import Reply


def _client(server: Any) -> Any:
    from autogen_core.models import ModelFamily, ModelInfo
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    return OpenAIChatCompletionClient(model="m", base_url=server.base_url, api_key="sk-test", model_info=ModelInfo(
        vision=False, function_calling=True, json_output=False, family=ModelFamily.UNKNOWN, structured_output=False))


def _by_system_prompt(body: dict[str, Any]) -> Reply:
    """Each agent answers with its system prompt; the society's summary says so."""
    first = body["messages"][0]
    return Reply(content=f"{first['content']} spoke." if first.get("role") == "system" else "Summary.")


def test_inner_agent_named_like_its_society_has_its_own_step(model_server, tmp_path):
    """A ``SocietyOfMindAgent`` whose inner team has an agent of the same name (apps reuse names such
    as "assistant"): the inner agent's turn is a step of its own, not part of the society's step."""
    from autogen_agentchat.agents import AssistantAgent, SocietyOfMindAgent
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import RoundRobinGroupChat

    client = _client(model_server(_by_system_prompt))
    inner = RoundRobinGroupChat([AssistantAgent("writer", model_client=client, system_message="inner writer"),
                                 AssistantAgent("critic", model_client=client, system_message="critic")],
                                name="inner", termination_condition=MaxMessageTermination(3))
    society = SocietyOfMindAgent("writer", team=inner, model_client=client)
    outer = RoundRobinGroupChat([society, AssistantAgent("editor", model_client=client, system_message="editor")],
                                name="outer", termination_condition=MaxMessageTermination(3))
    probe = aegis_probe.instrument(outer, store=tmp_path / "store")
    asyncio.run(outer.run(task="Write one line."))
    steps = probe.trajectory().steps
    assert [(s.agent, s.path, s.output) for s in steps] == [
        ("writer", ["outer"], "Summary."),
        ("writer", ["outer", "inner"], "inner writer spoke."),
        ("critic", ["outer", "inner"], "critic spoke."),
        ("editor", ["outer"], "editor spoke."),
    ]
    assert [len(s.llm_calls) for s in steps] == [1, 1, 1, 1]
    assert [s.index for s in steps] == [0, 1, 2, 3]


def test_wrapper_agent_of_the_same_name_is_one_step(model_server, tmp_path):
    """``MessageFilterAgent`` wraps an agent of its own name (as autogen's GraphFlow docs do): the
    wrapper's turn is one step holding the inner agent's model call."""
    from autogen_agentchat.agents import AssistantAgent, MessageFilterAgent, MessageFilterConfig, PerSourceFilter
    from autogen_agentchat.teams import DiGraphBuilder, GraphFlow

    client = _client(model_server(_by_system_prompt))
    drafter = AssistantAgent("drafter", model_client=client, system_message="drafter")
    inner = AssistantAgent("checker", model_client=client, system_message="checker")
    checker = MessageFilterAgent(name="checker", wrapped_agent=inner, filter=MessageFilterConfig(
        per_source=[PerSourceFilter(source="drafter", position="last", count=1)]))
    flow = GraphFlow([drafter, checker], graph=DiGraphBuilder().add_node(drafter).add_node(checker).add_edge(drafter, checker).build())
    probe = aegis_probe.instrument(flow, store=tmp_path / "store")
    asyncio.run(flow.run(task="Write one line."))
    steps = probe.trajectory().steps
    assert [(s.index, s.agent, s.output, len(s.llm_calls)) for s in steps] == [
        (0, "drafter", "drafter spoke.", 1), (1, "checker", "checker spoke.", 1)]
