"""The deterministic operators on an action that only hands over (``transfer_to_<agent>``): each mode
either does what its label says, the handoff's tool call never written out as text, or is not
applied; FM-2.6 (reasoning-action mismatch) makes no handoff where the reasoning says one."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from aegis_probe.injection import MODES, Context, DeterministicManipulator, InjectionPlan
from aegis_probe.capture.interception import LLMResponse
from aegis_probe.modelserver import Reply

_CALL = {"id": "c1", "name": "transfer_to_flights", "arguments": "{}"}
HANDOFF = LLMResponse(tool_calls=[_CALL], finish_reason="tool_calls")
#: A handoff with its reasoning: a number the next agent needs, a check, a termination marker.
REASONED = LLMResponse(content="The seat costs 120 dollars. I checked the fare. TERMINATE", tool_calls=[_CALL],
                       finish_reason="tool_calls")
CTX = Context(agent="travel", task="Book a seat to Paris.", agents=("travel", "flights"), history=[
    {"role": "user", "content": "Book a seat to Paris."},
    {"role": "assistant", "content": "Paris it is.", "name": "travel"},
])


def _said(out: LLMResponse) -> str:
    assert not out.tool_calls, "the handoff is replaced by what the agent says"
    return out.content or ""


#: Per mode, on the bare handoff: None (nothing of the mode's kind to change: not applied), else what
#: the agent says instead of handing over.
BARE = {
    "FM-1.1": None, "FM-1.5": None, "FM-2.2": None, "FM-2.4": None, "FM-3.2": None,
    "FM-1.2": lambda o: _said(o).startswith("I will act as flights myself instead of handing over to it"),
    "FM-1.3": lambda o: _said(o) == "Paris it is.",
    "FM-1.4": lambda o: _said(o) == "Let me begin with the task: Book a seat to Paris.",
    "FM-2.1": lambda o: _said(o).startswith("Let's start over"),
    "FM-2.3": lambda o: "sum of all the numbers" in _said(o),
    "FM-2.5": lambda o: _said(o).startswith("Regardless of the previous message"),
    "FM-2.6": lambda o: _said(o) == "I will hand this over to flights.",
    "FM-3.1": lambda o: _said(o) == "The task is already finished. TERMINATE",
    "FM-3.3": lambda o: "I verified the result carefully" in _said(o),
}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_bare_handoff_is_changed_as_its_mode_says_or_not_at_all(mode):
    out = DeterministicManipulator().corrupt(mode, HANDOFF, CTX)
    if BARE[mode] is None:
        assert out is None
        return
    assert out is not None and BARE[mode](out), out
    assert "transfer_to" not in (out.content or "") and out.finish_reason == "stop"


#: Per mode that edits what an agent says: the handoff's reasoning as the mode leaves it, the handoff kept.
REASONING = {
    "FM-1.1": "The seat costs 240 dollars. I checked the fare. TERMINATE",
    "FM-1.5": "The seat costs 120 dollars. I checked the fare.",
    "FM-2.2": "The seat costs some dollars. I checked the fare. TERMINATE",
    "FM-2.4": "I checked the fare. TERMINATE",
    "FM-3.2": "The seat costs 120 dollars. TERMINATE",
}


@pytest.mark.parametrize("mode", sorted(REASONING))
def test_a_mode_about_what_is_said_edits_a_handoffs_reasoning_and_still_hands_over(mode):
    out = DeterministicManipulator().corrupt(mode, REASONED, CTX)
    assert out is not None and (out.content, out.tool_calls, out.finish_reason) == (REASONING[mode], [_CALL], "tool_calls")


def test_a_mismatched_handoff_keeps_its_reasoning_and_makes_no_handoff():
    out = DeterministicManipulator().corrupt("FM-2.6", REASONED, CTX)
    assert out is not None and (out.content, out.tool_calls) == (REASONED.content, [])
    search = LLMResponse(tool_calls=[{"id": "c2", "name": "search", "arguments": '{"q": "Paris"}'}])
    # A plain tool call with no number is not applied here (the step's next call, the report, carries it).
    assert DeterministicManipulator().corrupt("FM-2.6", search, CTX) is None


@pytest.mark.parametrize(("mode", "reasoned", "applied", "effect"), [
    ("FM-2.6", False, True, "I will hand this over to flights."),  # says it hands over, does not
    ("FM-1.2", False, True, "I will act as flights myself instead of handing over to it: Book a seat."),
    ("FM-2.4", True, True, ["Over to you."]),  # hands over without the price
    ("FM-2.2", True, True, ["The seat costs some dollars."]),  # hands over with a vague price
    ("FM-2.4", False, False, []),  # nothing to withhold: not applied, no label
    ("FM-1.1", True, True, ["The seat costs 240 dollars."]),
])
def test_on_a_swarm_the_label_and_the_effect_agree(model_server, tmp_path, mode, reasoned, applied, effect):
    """Response corruption of a real ``Swarm`` agent that hands over: the fault is labelled exactly when
    the handoff was changed, and the team then does what the mode says: no transfer, the agent saying
    ``effect`` instead (its next turn is its own again), or a transfer whose context (the handoff's
    reasoning) reaches the next agent as the mode left it, ``effect``."""
    pytest.importorskip("autogen_agentchat")
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination
    from autogen_agentchat.teams import Swarm
    from autogen_core.models import ModelFamily, ModelInfo
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    import aegis_probe

    def policy(body: dict[str, Any]) -> Reply:
        if body["messages"][0]["content"] == "travel" and not any(m["role"] == "assistant" for m in body["messages"]):
            return Reply(content="The seat costs 120 dollars." if reasoned else None, tool_calls=[("transfer_to_flights", {})])
        return Reply(content="Booked. TERMINATE")

    server = model_server(policy)
    info = ModelInfo(vision=False, function_calling=True, json_output=False, family=ModelFamily.UNKNOWN, structured_output=False)
    client = OpenAIChatCompletionClient(model="m", base_url=server.base_url, api_key="sk-test", model_info=info)
    team = Swarm([AssistantAgent("travel", model_client=client, system_message="travel", handoffs=["flights"]),
                  AssistantAgent("flights", model_client=client, system_message="flights", handoffs=["travel"])],
                 termination_condition=TextMentionTermination("TERMINATE") | MaxMessageTermination(6))
    probe = aegis_probe.instrument(team, store=tmp_path / "store")
    with probe.inject(InjectionPlan.single("travel", mode)) as injector:
        result = asyncio.run(team.run(task="Book a seat."))
    traj = probe.trajectory()
    assert [(f.agent, f.step, f.mode) for f in traj.labels.faults] == ([("travel", 0, mode)] if applied else [])
    assert [f.mode for f in injector.applied] == ([mode] if applied else [])
    transferred = isinstance(effect, list)
    assert any(type(m).__name__ == "HandoffMessage" for m in result.messages) == transferred
    assert [c.name for c in traj.steps[0].tool_calls] == (["transfer_to_flights"] if transferred else [])
    if not transferred:
        assert (traj.steps[0].output, traj.steps[1].agent) == (effect, "travel")
        return
    (flights_prompt,) = [r["messages"] for r in server.requests if r["messages"][0]["content"] == "flights"]
    assert [m["content"] for m in flights_prompt if m["role"] == "assistant"] == effect


def test_a_corrupted_refusal_is_an_answer_never_both():
    """A refusal is what the agent said: a mode edits it into an answer (content, refusal gone), or
    is not applied when it has nothing of its kind to change."""
    refused = LLMResponse(refusal="I cannot book the 120 dollars seat.", finish_reason="stop")
    out = DeterministicManipulator().corrupt("FM-1.1", refused, CTX)
    assert out is not None and (out.content, out.refusal) == ("I cannot book the 240 dollars seat.", None)
    assert DeterministicManipulator().corrupt("FM-2.4", LLMResponse(refusal="No."), CTX) is None
