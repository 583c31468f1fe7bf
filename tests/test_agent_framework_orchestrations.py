"""Microsoft Agent Framework's concurrent, group-chat, handoff and Magentic orchestrations
(agent-framework-orchestrations) under the adapter: each run's agent turns and its orchestrator's
turns as ordered steps (a group chat's selection and Magentic's progress ledgers naming the next
speaker, a handoff naming its target), and each replayed exactly; the real framework and the real
openai client against the loopback model server, one scripted policy for every agent."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Callable

import pytest

pytest.importorskip("agent_framework")
pytest.importorskip("agent_framework_orchestrations")
pytest.importorskip("agent_framework_openai")

import aegis_probe  # noqa: E402
from aegis_probe.apps import AppSpec  # noqa: E402
from aegis_probe.capture import semconv as sc  # noqa: E402
from aegis_probe.counterfactual import replay  # noqa: E402
from aegis_probe.demos import agent_framework as demo  # noqa: E402
from aegis_probe.demos.magentic import FACTS_PROMPT, FINAL_PROMPT, LEDGER_PROMPT, PLAN_PROMPT, ledger  # noqa: E402
from aegis_probe.demos.task import EXPRESSION, TASK, message_text  # noqa: E402
from aegis_probe.modelserver import Reply  # noqa: E402
from aegis_probe.storage.store import TraceStore  # noqa: E402
from framework_checks import ours  # noqa: E402

SYSTEM = {
    "calculator": "You are the calculator. Evaluate the expression with the calculate tool.",
    "reviewer": "You are the reviewer. State the calculator's result.",
    "manager": "You are the group chat's manager.",
    "magentic": "You are the Magentic manager.",
    "triage": "You are the triage agent. Hand arithmetic over to the calculator.",
}
ANSWER = "FINAL ANSWER: 126"
SELECTION_PROMPT = "Decide what to do next"  # the agent-based group chat orchestrator's request


def _spoke(messages: list[dict[str, Any]]) -> list[str]:
    """The participants whose answers the request shows (by the ``name`` Agent Framework sends)."""
    return [m["name"] for m in messages if m.get("role") == "assistant" and m.get("name") in ("calculator", "reviewer")
            and m.get("content")]


def policy(body: dict[str, Any]) -> Reply:
    """Every agent of the four orchestrations, told apart by its system prompt (the managers by their prompts)."""
    messages = body.get("messages", [])
    system = message_text(messages[0]) if messages and messages[0].get("role") == "system" else ""
    last = message_text(messages[-1]) if messages else ""
    spoke = _spoke(messages)
    if system == SYSTEM["manager"]:
        speaker = None if "reviewer" in spoke else "reviewer" if "calculator" in spoke else "calculator"
        return Reply(content=json.dumps({"terminate": speaker is None, "reason": "the plan's next turn",
                                         "next_speaker": speaker, "final_message": ANSWER if speaker is None else None}))
    if system == SYSTEM["magentic"]:
        if LEDGER_PROMPT in last:
            if "reviewer" in spoke:
                return Reply(content=ledger(done=True, speaker="reviewer", instruction=""))
            if "calculator" in spoke:
                return Reply(content=ledger(done=False, speaker="reviewer", instruction="State the result."))
            return Reply(content=ledger(done=False, speaker="calculator", instruction=f"Evaluate {EXPRESSION}."))
        if FACTS_PROMPT in last:
            return Reply(content="The prices and quantities are given; the total is to derive.")
        if PLAN_PROMPT in last:
            return Reply(content="- calculator: evaluate the total.\n- reviewer: state it.")
        if FINAL_PROMPT in last:
            return Reply(content=f"The total is 126 coins. {ANSWER}")
    if system == SYSTEM["triage"]:
        if messages[-1].get("role") == "tool":
            return Reply(content="Handed over to the calculator.")
        return Reply(tool_calls=[("handoff_to_calculator", {})])
    if system == SYSTEM["calculator"]:
        if messages[-1].get("role") == "tool":
            return Reply(content=f"The result is {message_text(messages[-1])}.")
        return Reply(tool_calls=[(demo.TOOL, {"expression": EXPRESSION})])
    if system == SYSTEM["reviewer"]:
        return Reply(content=ANSWER)
    return Reply(content="I am no agent of these orchestrations.")


def _agents(base_url: str, model: str, api_key: str, *names: str, handoff: bool = False) -> list[Any]:
    from agent_framework import Agent, FunctionTool

    llm = demo.client(base_url, model, api_key)
    return [Agent(llm, SYSTEM[name], name=name, description=f"the {name}",
                  tools=[FunctionTool(func=demo._calculate, name=demo.TOOL)] if name == "calculator" else None,
                  require_per_service_call_history_persistence=handoff)  # handoff workflows require it
            for name in names]


def concurrent(base_url: str, model: str, api_key: str) -> Any:
    from agent_framework.orchestrations import ConcurrentBuilder

    return ConcurrentBuilder(name="fan-out", participants=_agents(base_url, model, api_key, "calculator", "reviewer")).build()


def group_chat(base_url: str, model: str, api_key: str) -> Any:
    from agent_framework.orchestrations import GroupChatBuilder

    calculator, reviewer, manager = _agents(base_url, model, api_key, "calculator", "reviewer", "manager")
    return GroupChatBuilder(name="chat", participants=[calculator, reviewer], orchestrator_agent=manager,
                            max_rounds=6).build()


def handoff(base_url: str, model: str, api_key: str) -> Any:
    from agent_framework.orchestrations import HandoffBuilder

    triage, calculator = _agents(base_url, model, api_key, "triage", "calculator", handoff=True)
    done: Callable[[list[Any]], bool] = lambda conversation: any(  # noqa: E731
        m.author_name == "calculator" and "126" in m.text for m in conversation)
    return (HandoffBuilder(name="desk", participants=[triage, calculator], termination_condition=done)
            .with_start_agent(triage).build())


def magentic(base_url: str, model: str, api_key: str) -> Any:
    from agent_framework.orchestrations import MagenticBuilder

    calculator, reviewer, manager = _agents(base_url, model, api_key, "calculator", "reviewer", "magentic")
    return MagenticBuilder(name="magentic-team", participants=[calculator, reviewer], manager_agent=manager).build()


def run_app(app: Any, task: str) -> str | None:
    outputs = asyncio.run(app.run(task)).get_outputs()
    return outputs[-1].text if outputs else None


def _steps(spans: list[Any]) -> list[Any]:
    return sorted((s for s in spans if s.attributes.get(sc.STEP_INDEX) is not None), key=lambda s: s.attributes[sc.STEP_INDEX])


def _traced(build: Callable[..., Any], model_server: Any, provider: Any, exporter: Any, tmp_path: Any) -> tuple[Any, list[Any], str | None]:
    server = model_server(policy)
    app = build(server.base_url, "aegis-scripted", "sk-test")
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store")
    answer = run_app(app, TASK)
    probe.flush()
    return probe, ours(exporter), answer


def _shape(steps: list[Any]) -> list[tuple[str, str | None]]:
    return [(s.attributes[sc.AGENT_NAME], s.attributes.get(sc.STEP_NEXT_SPEAKER)) for s in steps]


def test_concurrent_agents_are_steps_in_the_order_they_started(model_server, provider, exporter, tmp_path):
    probe, spans, answer = _traced(concurrent, model_server, provider, exporter, tmp_path)
    assert answer is not None and ANSWER in answer
    by_id = {s.context.span_id: s for s in spans}
    (root,) = [s for s in spans if s.parent is None]
    steps = _steps(spans)
    assert root.name == "invoke_workflow fan-out" and all(by_id[s.parent.span_id] is root for s in steps)
    assert [s.attributes[sc.AGENT_NAME] for s in steps] == ["calculator", "reviewer"]
    assert [s.start_time for s in steps] == sorted(s.start_time for s in steps)
    assert steps[1].start_time < steps[0].end_time, "the two agents ran at once"
    chats = [s for s in spans if s.attributes.get(sc.OPERATION) == sc.OP_CHAT]
    assert sorted(by_id[c.parent.span_id].attributes[sc.AGENT_NAME] for c in chats) == ["calculator", "calculator", "reviewer"]


def test_group_chat_selection_is_a_manager_step_naming_the_next_speaker(model_server, provider, exporter, tmp_path):
    probe, spans, answer = _traced(group_chat, model_server, provider, exporter, tmp_path)
    assert answer == ANSWER
    steps = _steps(spans)
    assert _shape(steps) == [("manager", "calculator"), ("calculator", None), ("manager", "reviewer"),
                             ("reviewer", None), ("manager", None)]
    managers = [s for s in steps if s.attributes[sc.AGENT_NAME] == "manager"]
    assert all(s.attributes[sc.LLM_PURPOSE] == sc.PURPOSE_SPEAKER_SELECTION for s in managers)
    assert all(sc.LLM_PURPOSE not in s.attributes for s in steps if s not in managers)
    chats = [s for s in spans if s.attributes.get(sc.OPERATION) == sc.OP_CHAT]
    selecting = [c for c in chats if c.attributes.get(sc.LLM_PURPOSE) == sc.PURPOSE_SPEAKER_SELECTION]
    assert len(selecting) == 3 and {c.attributes[sc.AGENT_NAME] for c in selecting} == {"manager"}
    assert [s.agent for s in probe.trajectory().steps] == ["manager", "calculator", "manager", "reviewer", "manager"]
    assert [s.next_speaker for s in probe.trajectory().steps][:3] == ["calculator", None, "reviewer"]


def test_handoff_names_its_target_as_the_next_speaker(model_server, provider, exporter, tmp_path):
    probe, spans, answer = _traced(handoff, model_server, provider, exporter, tmp_path)
    assert answer == "The result is 126."
    steps = _steps(spans)
    assert _shape(steps) == [("triage", "calculator"), ("calculator", None)]
    assert [s.name for s in spans if s.name.startswith("execute_tool")] == [f"execute_tool {demo.TOOL}"]


def test_magentic_ledger_turns_are_manager_steps_between_the_agents(model_server, provider, exporter, tmp_path):
    probe, spans, answer = _traced(magentic, model_server, provider, exporter, tmp_path)
    assert answer == f"The total is 126 coins. {ANSWER}"
    steps = _steps(spans)
    assert _shape(steps) == [
        ("magentic", None), ("magentic", None),  # the task ledger: facts, then plan
        ("magentic", "calculator"), ("calculator", None),
        ("magentic", "reviewer"), ("reviewer", None),
        ("magentic", None), ("magentic", None),  # the ledger finding the request satisfied, the final answer
    ]
    assert all(sc.LLM_PURPOSE not in s.attributes for s in steps), "Magentic's turns add to the conversation"
    assert '"is_request_satisfied"' in probe.trajectory().steps[2].output


@pytest.mark.parametrize("build", [concurrent, group_chat, handoff, magentic], ids=lambda b: b.__name__)
def test_orchestration_replays_exactly(build, model_server, provider, exporter, tmp_path):
    probe, spans, answer = _traced(build, model_server, provider, exporter, tmp_path)
    calls = len([s for s in spans if s.attributes.get(sc.OPERATION) == sc.OP_CHAT])
    probe.uninstrument()
    result = replay(probe.last_trace_id, AppSpec(build, run_app), store=TraceStore(tmp_path / "store"))
    assert result.exact, result.divergence or result.error
    assert result.replayed_calls == calls and result.live_calls == 0
