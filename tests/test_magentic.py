"""Magentic-One and SelectorGroupChat managers: every message the orchestrator adds is a step;
speaker selection is a named ``chat`` span; injection, replay and blame reach orchestrator steps.

A real ``MagenticOneGroupChat`` (two ``AssistantAgent``s, the real ``openai`` client) against the
loopback model server; the scripted model answers the orchestrator's ledger prompts with JSON.
"""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("autogen_agentchat")

import aegis_probe
from aegis_probe.capture import semconv as sc
from aegis_probe.apps import AppSpec, Endpoint
from aegis_probe.counterfactual import blame, replay
from aegis_probe.demos import magentic as demo
from aegis_probe.demos.task import EXPECTED, judge, solve
from aegis_probe.injection import InjectionPlan, Target
from aegis_probe.modelserver import Reply
from aegis_probe.storage.store import TraceStore

ORCH = demo.ORCHESTRATOR
SPEC = AppSpec(demo.build_app, demo.run_app)


def _run(server, store, *, plan: InjectionPlan | None = None, capture_content: bool = True):
    """One instrumented run of the demo team: (TaskResult, probe, applied faults)."""
    from autogen_agentchat.base import TaskResult

    app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
    probe = aegis_probe.instrument(app, store=store, judge=judge, capture_content=capture_content)

    async def run() -> TaskResult:
        return await app.run(task=demo.TASK)

    applied = []
    if plan is None:
        result = asyncio.run(run())
    else:
        with probe.inject(plan) as injector:
            result = asyncio.run(run())
        applied = injector.applied
    probe.flush()
    return result, probe, applied


def _spans(store: TraceStore, trace_id: str):
    return store.trace(trace_id)


def test_every_orchestrator_message_is_a_step(model_server, tmp_path):
    store = TraceStore(tmp_path / "store")
    result, probe, _ = _run(model_server(demo.policy), store)
    traj = probe.trajectory()
    assert traj.outcome.success is True

    from autogen_agentchat.messages import BaseChatMessage

    turns = [m for m in result.messages if isinstance(m, BaseChatMessage) and m.source != "user"]
    assert [(s.agent, s.output) for s in traj.steps] == [(m.source, m.to_text()) for m in turns]
    assert [s.agent for s in traj.steps] == [ORCH, ORCH, "calculator", ORCH, "reviewer", ORCH]
    assert [s.index for s in traj.steps] == list(range(6))

    ledger, to_calc, _, to_reviewer, _, final = traj.steps
    # The model calls that produced each message sit beneath its step: facts + plan, then the ledgers.
    assert [len(s.llm_calls) for s in (ledger, to_calc, to_reviewer, final)] == [2, 1, 1, 2]
    assert "pre-survey" not in ledger.output and "Here is the plan to follow" in ledger.output
    assert (to_calc.next_speaker, to_reviewer.next_speaker) == ("calculator", "reviewer")
    assert ledger.next_speaker is None and final.next_speaker is None
    assert json.loads(to_calc.llm_calls[0].output)["instruction_or_question"]["answer"] == to_calc.output
    # Input: what the orchestrator had seen (the task first, then its thread).
    assert ledger.input_messages[0].content == demo.TASK
    assert [m.name for m in to_reviewer.input_messages] == [ORCH, ORCH, "calculator"]
    assert all(s.path == ["MagenticOneGroupChat"] for s in traj.steps)

    spans = _spans(store, traj.trace_id)
    by_id = {s.span_id: s for s in spans}
    chats = [s for s in spans if s.attributes.get(sc.OPERATION) == sc.OP_CHAT]
    assert chats and all(by_id[c.parent_span_id].attributes.get(sc.OPERATION) == sc.OP_AGENT for c in chats)
    orchestrator_chats = [c for c in chats if c.attributes[sc.AGENT_NAME] == ORCH]
    assert [c.attributes[sc.AGENT_CALL_INDEX] for c in orchestrator_chats] == list(range(6))


def test_content_off_keeps_steps_and_next_speaker(model_server, tmp_path):
    store = TraceStore(tmp_path / "store")
    _, probe, _ = _run(model_server(demo.policy), store, capture_content=False)
    traj = probe.trajectory()
    assert [s.agent for s in traj.steps] == [ORCH, ORCH, "calculator", ORCH, "reviewer", ORCH]
    assert all(s.output == "" and not s.input_messages for s in traj.steps)
    assert [s.next_speaker for s in traj.steps] == [None, "calculator", None, "reviewer", None, None]


def test_a_replan_names_no_next_speaker(model_server, tmp_path):
    """A stalled progress ledger makes the orchestrator re-plan: the new task ledger it adds chose no
    speaker (the stalled ledger's choice was dropped); the instruction after it names its own."""
    ledgers = []

    def stalling(body):
        last = body["messages"][-1].get("content") or ""
        if demo.LEDGER_PROMPT in last and not ledgers:
            ledgers.append(json.loads(demo.ledger(done=False, speaker="reviewer", instruction="Say something.")))
            ledgers[0]["is_progress_being_made"]["answer"] = False
            return Reply(content=json.dumps(ledgers[0]))
        return demo.policy(body)

    from autogen_agentchat.teams import MagenticOneGroupChat

    app = demo.build_app(model_server(stalling).base_url, "aegis-scripted", "sk-test")
    app = MagenticOneGroupChat(app._participants, model_client=app._model_client, max_turns=10, max_stalls=1)
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    asyncio.run(app.run(task=demo.TASK))
    steps = probe.trajectory().steps
    assert [(s.agent, s.next_speaker) for s in steps[:3]] == [(ORCH, None), (ORCH, None), (ORCH, "calculator")]
    assert "Here is the plan to follow" in steps[1].output and len(steps[1].llm_calls) == 3  # ledger, facts, plan
    assert steps[3].agent == "calculator"


def test_a_second_run_plans_from_its_own_task(model_server, tmp_path):
    """The same team run again on a new task: the orchestrator's first step plans from that task (its
    input), not from the thread the first run left behind."""
    app = demo.build_app(model_server(demo.policy).base_url, "aegis-scripted", "sk-test")
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    second = "A shop sells pens at 3 coins and notebooks at 4 coins. What do 2 pens and 2 notebooks cost?"
    firsts = []

    async def twice() -> None:  # one event loop: the team is bound to it
        for task in (demo.TASK, second):
            await app.run(task=task)
            firsts.append(probe.trajectory().steps[0])

    asyncio.run(twice())
    assert [(s.agent, [m.content for m in s.input_messages]) for s in firsts] == [(ORCH, [demo.TASK]), (ORCH, [second])]


def test_orchestrator_failure_fails_its_step_and_passes_through(model_server, tmp_path):
    """A ledger the orchestrator cannot parse ten times: its error reaches the app unchanged."""

    def broken(body):
        last = body["messages"][-1].get("content") or ""
        return Reply(content="not json") if demo.LEDGER_PROMPT in last else demo.policy(body)

    store = TraceStore(tmp_path / "store")
    with pytest.raises(ValueError, match="Failed to parse ledger information"):
        _run(model_server(broken), store)
    traj = aegis_probe.load_trajectories(store)[-1]
    assert [s.agent for s in traj.steps] == [ORCH, ORCH]
    assert traj.steps[1].error and "ValueError" in traj.steps[1].error
    assert len(traj.steps[1].llm_calls) == 10  # every retry under the failed step


def test_injection_targets_the_orchestrator(model_server, tmp_path):
    store = TraceStore(tmp_path / "store")
    plan = InjectionPlan(targets=[Target(agent=ORCH, mode="FM-1.1", nth=1)])  # its 2nd step: the first instruction
    _, probe, applied = _run(model_server(demo.policy), store, plan=plan)
    traj = probe.trajectory()
    assert [(f.agent, f.step) for f in applied] == [(ORCH, 1)]
    step = traj.steps[1]
    assert step.agent == ORCH and any(e["name"] == sc.EVENT_INJECTION for e in step.events)
    assert step.output == "Please evaluate (34 + 50) * 6 with the calculate tool."  # numbers doubled
    assert traj.outcome.success is False and traj.labels.faults[0].agent == ORCH


def test_exact_replay_of_a_magentic_run(model_server, tmp_path):
    store = TraceStore(tmp_path / "store")
    _, probe, _ = _run(model_server(demo.policy), store)
    probe.uninstrument()
    result = replay(probe.last_trace_id, SPEC, store=store)
    assert result.exact, result.divergence or result.error
    assert result.live_calls == 0
    assert [(s.agent, s.output, s.next_speaker) for s in result.trajectory.steps] == [
        (s.agent, s.output, s.next_speaker) for s in result.original.steps
    ]


def test_counterfactual_replay_substitutes_an_instruction(model_server, tmp_path):
    server = model_server(demo.policy)
    store = TraceStore(tmp_path / "store")
    _, probe, _ = _run(server, store)
    probe.uninstrument()
    instruction = "Please evaluate (17 + 25) * 4 with the calculate tool."
    substitute = demo.ledger(done=False, speaker="calculator", instruction=instruction)
    result = replay(probe.last_trace_id, SPEC, until_step=1, substitute=substitute,
                    endpoint=Endpoint(server.base_url, "aegis-scripted", "sk-test"), judge=judge, store=store)
    replayed = result.trajectory
    assert result.error is None and replayed is not None
    assert (replayed.steps[1].agent, replayed.steps[1].output) == (ORCH, instruction)
    assert replayed.steps[2].agent == "calculator" and replayed.steps[2].output == "168"
    assert replayed.outcome.success is False and "168" in (result.answer or "")


def test_blame_finds_the_orchestrator_step(model_server, tmp_path):
    server = model_server(demo.policy)
    store = TraceStore(tmp_path / "store")
    plan = InjectionPlan(targets=[Target(agent=ORCH, mode="FM-1.1", nth=1)])
    _, probe, _ = _run(server, store, plan=plan)
    probe.uninstrument()
    failed = probe.last_trace_id

    def fixer(traj, t):
        """Rewrite an orchestrator instruction to the calculation the task asks for."""
        step = traj.steps[t]
        if step.agent != ORCH or step.next_speaker != "calculator":
            return None
        return demo.ledger(done=False, speaker="calculator",
                           instruction=f"Please evaluate {solve(traj.task)} with the calculate tool.")

    report = blame(failed, SPEC, fixer=fixer, judge=judge, endpoint=Endpoint(server.base_url, "aegis-scripted", "sk-test"),
                   store=store)
    assert (report.step, report.agent) == (1, ORCH)
    assert EXPECTED in (report.evidence.answer or "")
    labelled = aegis_probe.load_trajectories(store)
    original = next(t for t in labelled if t.trace_id == failed)
    # Labels are append-only: the injection stays the primary label; blame's finding is added next to it.
    assert original.labels.source == "injection" and original.labels.faults[0].agent == ORCH
    assert original.labels.sources == ["injection", "blame:replay:scan"]
    assert [(f.agent, f.step) for f in original.labels.of("blame")] == [(ORCH, 1)]


# -- SelectorGroupChat: speaker selection names the manager ---------------------------------------
def test_speaker_selection_names_the_manager(model_server, tmp_path):
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import SelectorGroupChat
    from autogen_core.models import ModelFamily, ModelInfo
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    def policy(body):
        text = " ".join(str(m.get("content")) for m in body["messages"])
        if "select the next role" in text:
            return Reply(content="editor" if "A line." in text else "writer")
        return Reply(content="A line.")

    def build(base_url, model, api_key):
        """Three agents, so that both selections (three, then two candidates) ask the model."""
        client = OpenAIChatCompletionClient(model=model, base_url=base_url, api_key=api_key, model_info=ModelInfo(
            vision=False, function_calling=False, json_output=False, family=ModelFamily.UNKNOWN, structured_output=False))
        agents = [AssistantAgent(name, model_client=client) for name in ("writer", "editor", "critic")]
        return SelectorGroupChat(agents, model_client=client, termination_condition=MaxMessageTermination(3))

    server = model_server(policy)
    team = build(server.base_url, "m", "k")
    store = TraceStore(tmp_path / "store")
    probe = aegis_probe.instrument(team, store=store)
    asyncio.run(team.run(task="Write a line."))
    probe.flush()
    traj = probe.trajectory()
    assert [s.agent for s in traj.steps] == ["writer", "editor"]
    spans = _spans(store, traj.trace_id)
    root = next(s for s in spans if s.parent_span_id is None)
    selection = [s for s in spans if s.attributes.get(sc.LLM_PURPOSE) == sc.PURPOSE_SPEAKER_SELECTION]
    assert len(selection) == 2
    assert all(s.parent_span_id == root.span_id and s.attributes[sc.AGENT_NAME] == "SelectorGroupChatManager"
               for s in selection)
    assert [s.attributes[sc.AGENT_CALL_INDEX] for s in selection] == [0, 1]
    # Speaker selection is recorded under the manager's name, so the run replays exactly.
    probe.uninstrument()

    def run_app(app, task):
        return asyncio.run(app.run(task=task)).messages[-1].to_text()

    result = replay(traj.trace_id, AppSpec(build, run_app), store=store)
    assert result.exact, result.divergence or result.error
