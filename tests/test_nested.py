"""Nested AutoGen teams (a team as a participant, a ``SocietyOfMindAgent``): the inner agents' steps
are steps of the outer run, one trace per outer run, each with its path of teams."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("autogen_agentchat")

import aegis_probe
from aegis_probe.capture import semconv as sc
from aegis_probe.modelserver import Reply
from aegis_probe.storage.store import TraceStore


def _client(server):
    from autogen_core.models import ModelFamily, ModelInfo
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    return OpenAIChatCompletionClient(model="m", base_url=server.base_url, api_key="k", model_info=ModelInfo(
        vision=False, function_calling=False, json_output=False, family=ModelFamily.UNKNOWN, structured_output=False))


def _inner(client):
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import RoundRobinGroupChat

    return RoundRobinGroupChat([AssistantAgent("drafter", model_client=client), AssistantAgent("checker", model_client=client)],
                               name="inner", termination_condition=MaxMessageTermination(3))


def _run(outer, store):
    probe = aegis_probe.instrument(outer, store=store)

    async def twice() -> None:  # one event loop: a team is bound to the loop it first ran on
        await outer.run(task="Write one line.")
        await outer.run(task="Write another line.")

    asyncio.run(twice())
    probe.flush()
    return aegis_probe.load_trajectories(store)


INNER, OUTER = ["outer", "inner"], ["outer"]
PATHS = {"drafter": INNER, "checker": INNER, "reviewer": OUTER, "society": OUTER}


def _check(trajs, store, first_agent, agents):
    """Each outer run: one trace, contiguous steps of ``agents`` starting with ``first_agent``, the
    inner agents under the inner team's path, every model call inside a step."""
    assert len(trajs) == 2  # one trace per outer run
    assert set(trajs[0].agents) == set(agents)  # (a second run of an inner team may add nothing: autogen's own doing)
    for traj in trajs:
        assert traj.steps[0].agent == first_agent
        assert all(s.path == PATHS[s.agent] for s in traj.steps)
        assert [s.index for s in traj.steps] == list(range(len(traj.steps)))
        spans = store.trace(traj.trace_id)
        assert len({s.trace_id for s in spans}) == 1
        assert sum(1 for s in spans if s.parent_span_id is None) == 1
        by_id = {s.span_id: s for s in spans}
        chats = [s for s in spans if s.attributes.get(sc.OPERATION) == sc.OP_CHAT]
        assert chats and all(by_id[c.parent_span_id].attributes.get(sc.OPERATION) == sc.OP_AGENT for c in chats)


def test_team_as_participant(model_server, tmp_path):
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import RoundRobinGroupChat

    client = _client(model_server(lambda body: Reply(content="A line.")))
    outer = RoundRobinGroupChat([_inner(client), AssistantAgent("reviewer", model_client=client)],
                                name="outer", termination_condition=MaxMessageTermination(4))
    store = TraceStore(tmp_path / "store")
    trajs = _run(outer, store)
    _check(trajs, store, "drafter", ["drafter", "checker", "reviewer"])


def test_society_of_mind_agent(model_server, tmp_path):
    from autogen_agentchat.agents import AssistantAgent, SocietyOfMindAgent
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import RoundRobinGroupChat

    client = _client(model_server(lambda body: Reply(content="A line.")))
    som = SocietyOfMindAgent("society", team=_inner(client), model_client=client)
    outer = RoundRobinGroupChat([som, AssistantAgent("reviewer", model_client=client)],
                                name="outer", termination_condition=MaxMessageTermination(3))
    store = TraceStore(tmp_path / "store")
    trajs = _run(outer, store)
    _check(trajs, store, "society", ["society", "drafter", "checker", "reviewer"])
    assert [s.agent for s in trajs[0].steps[:3]] == ["society", "drafter", "checker"]
    # The society's own step holds its summary call; the inner steps sit beneath it.
    society = trajs[0].steps[0]
    assert len(society.llm_calls) == 1
