"""Record, exact replay and decisive-error search, on the real frameworks."""

from __future__ import annotations

import importlib

import pytest

import aegis_probe
from aegis_probe.capture import semconv as sc
from aegis_probe.apps import AppSpec, Endpoint
from aegis_probe.counterfactual import blame, load_recording, replay
from aegis_probe.demos import FRAMEWORKS, demo_module
from aegis_probe.demos.task import judge
from aegis_probe.modelserver import Reply
from aegis_probe.storage.store import TraceStore
from aegis_probe.train.builders import is_positive


def _demo(framework: str):
    try:
        return importlib.import_module(demo_module(framework))
    except ImportError as exc:  # pragma: no cover - depends on installed extras
        pytest.skip(f"{framework} demo not importable: {exc}")


def _record(demo, policy, model_server, store: TraceStore) -> str:
    server = model_server(policy)
    app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
    probe = aegis_probe.instrument(app, store=store, judge=judge)
    demo.run_app(app, demo.TASK)
    probe.flush()
    probe.uninstrument()
    return probe.last_trace_id


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_exact_replay_equals_original(framework, model_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    demo = _demo(framework)
    store = TraceStore(tmp_path / "store")
    trace_id = _record(demo, demo.policy, model_server, store)
    recording = load_recording(store.trace(trace_id))
    assert recording, "every LLM call is recorded"
    # No model behind the app now: every answer must come from the recording.
    result = replay(trace_id, AppSpec(demo.build_app, demo.run_app), store=store)
    assert result.exact, result.divergence or result.error
    assert result.live_calls == 0 and result.replayed_calls == len(recording)
    original, replayed = result.original, result.trajectory
    assert replayed is not None and replayed.trace_id != original.trace_id
    assert [s.model_dump(include={"index", "agent", "output", "input_messages"}) for s in replayed.steps] == [
        s.model_dump(include={"index", "agent", "output", "input_messages"}) for s in original.steps
    ]
    assert [[t.model_dump(include={"name", "arguments", "result"}) for t in s.tool_calls] for s in replayed.steps] == [
        [t.model_dump(include={"name", "arguments", "result"}) for t in s.tool_calls] for s in original.steps
    ]
    root = next(s for s in store.trace(replayed.trace_id) if s.parent_span_id is None)
    assert root.attributes[sc.REPLAY_OF] == original.trace_id


def test_divergence_is_reported_with_first_step(model_server, tmp_path):
    demo = _demo("autogen")
    store = TraceStore(tmp_path / "store")
    trace_id = _record(demo, demo.policy, model_server, store)

    def reordered(base_url: str, model: str, api_key: str):
        team = demo.build_app(base_url, model, api_key)
        team._participants.reverse()  # reviewer now speaks first: its request cannot match
        team._participant_names.reverse()
        return team

    result = replay(trace_id, AppSpec(reordered, demo.run_app), store=store)
    assert not result.exact
    assert "step 0" in result.divergence



def test_fresh_values_match_only_under_one_consistent_renaming():
    """UUIDs and timestamps an app draws afresh match their recording one to one: a replay that
    names two recorded workers by one id, or one by two, or changes other text, still diverges;
    the recorded answer comes back with the replay's ids."""
    import uuid

    from aegis_probe.counterfactual.fresh_ids import FreshIds
    from aegis_probe.capture.interception import LLMResponse

    a, b, c, x, y, z = (str(uuid.uuid4()) for _ in range(6))
    ids = FreshIds()
    assert ids.match(f"workers <{a}> <{b}> at 2026-01-02 10:00:00.5", f"workers <{x}> <{y}> at 2026-12-01 11:29:08.830956")
    assert not ids.match(f"<{a}> then <{c}>", f"<{y}> then <{z}>")  # a is x in this replay
    assert not ids.match(f"<{c}> and <{c}>", f"<{z}> and <{x}>")  # x is a's already
    assert not ids.match(f"<{a}>: total 126", f"<{x}>: total 127")
    assert ids.match("meeting on 2024-05-01", "meeting on 2024-05-01") and not ids.match("on 2024-05-01", "on 2024-05-02")
    recorded = LLMResponse(content=f'{{"assignee_id": "{a}"}}', tool_calls=[{"id": "t1", "name": "assign", "arguments": {"to": [b, c]}}])
    answer = ids.response(recorded)
    assert answer.content == f'{{"assignee_id": "{x}"}}' and answer.tool_calls[0]["arguments"] == {"to": [y, c]}
    assert ids.to_recorded(answer.content) == recorded.content


def test_replayed_answers_reach_threads_in_the_recorded_order(monkeypatch):
    """Two calls in flight at once, the second one's answer recorded first: replayed in threads,
    the first call's answer waits for it; a call waited for that never comes is given up on."""
    import threading
    import time

    from aegis_probe.counterfactual import order as order_module
    from aegis_probe.counterfactual.order import RecordedOrder
    from aegis_probe.counterfactual.recording import RecordedCall
    from aegis_probe.capture.interception import LLMResponse

    def call(agent: str, start: int, end: int) -> RecordedCall:
        return RecordedCall(agent, 0, None, "[]", LLMResponse(content=agent), start, end)

    recording = {("left", 0): call("left", 0, 300), ("right", 0): call("right", 10, 20), ("join", 0): call("join", 400, 500)}
    order, handed = RecordedOrder(recording), []

    def answer(agent: str, delay: float) -> None:
        time.sleep(delay)
        order.hand_over((agent, 0))
        handed.append(agent)

    threads = [threading.Thread(target=answer, args=args) for args in (("left", 0), ("right", 0.2))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    order.hand_over(("join", 0))  # recorded after both: nothing to wait for
    assert handed == ["right", "left"]

    monkeypatch.setattr(order_module, "GIVE_UP_S", 0.2)
    started = time.monotonic()
    RecordedOrder(recording).hand_over(("left", 0))  # "right" is never made
    assert 0.2 <= time.monotonic() - started < 2


def _stamping_team(base_url: str, model: str, api_key: str, stamper_calls_model: bool = False):
    """writer -> stamper -> finisher; the stamper answers without a model call unless told to."""
    import autogen_agentchat.agents as agents
    from autogen_agentchat.base import Response
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.messages import TextMessage
    from autogen_agentchat.teams import RoundRobinGroupChat
    from autogen_core.models import ModelFamily, ModelInfo
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    class Stamper(agents.BaseChatAgent):
        @property
        def produced_message_types(self):
            return (TextMessage,)

        async def on_messages(self, messages, cancellation_token):
            return Response(chat_message=TextMessage(content="stamped: unchecked", source=self.name))

        async def on_reset(self, cancellation_token):
            return None

    info = ModelInfo(vision=False, function_calling=True, json_output=False, family=ModelFamily.UNKNOWN, structured_output=False)
    client = OpenAIChatCompletionClient(model=model, base_url=base_url, api_key=api_key, model_info=info)
    stamper = (agents.AssistantAgent("stamper", model_client=client, system_message="stamper") if stamper_calls_model
               else Stamper("stamper", "stamps"))
    return RoundRobinGroupChat([agents.AssistantAgent("writer", model_client=client, system_message="writer"), stamper,
                                agents.AssistantAgent("finisher", model_client=client, system_message="finisher")],
                               termination_condition=MaxMessageTermination(4))


def _stamping_policy(body) -> Reply:
    system, text = body["messages"][0]["content"], str(body["messages"])
    if system == "writer":
        return Reply(content="The total is 3 * 42.")
    if system == "stamper":
        return Reply(content="stamped: unchecked")
    return Reply(content="FINAL: 126" if "stamped: 3 * 42 checked" in text else "FINAL: 125")


def test_a_step_without_a_model_call_is_never_substituted(model_server, tmp_path):
    """A step that made no model call (a custom agent answering by itself) has no answer to
    substitute: replay refuses it, as a step the run does not have, instead of running the rest
    live with the substitute unused; blame does not ask the fixer about it nor spend a replay on
    it; and a replay whose app no longer calls the model at that step (its code changed since the
    recording) reports that the substitute went unused."""
    pytest.importorskip("autogen_agentchat")
    import asyncio

    from aegis_probe.apps import Endpoint
    from aegis_probe.injection import numeric

    def run(team, task: str) -> str:
        return asyncio.run(team.run(task=task)).messages[-1].to_text()

    server = model_server(_stamping_policy)
    endpoint, judge, store = Endpoint(server.base_url, "m", "sk-test"), numeric(126), TraceStore(tmp_path / "store")
    fix = "stamped: 3 * 42 checked"
    traces = {}
    for calls in (False, True):
        team = _stamping_team(server.base_url, "m", "sk-test", stamper_calls_model=calls)
        probe = aegis_probe.instrument(team, store=store, judge=judge)
        assert run(team, "What is 3 * 42?") == "FINAL: 125"
        probe.flush()
        probe.uninstrument()
        traces[calls] = probe.last_trace_id
    spec = AppSpec(_stamping_team, run)
    with pytest.raises(ValueError, match=r"step 1 \(stamper\) made no model call"):
        replay(traces[False], spec, until_step=1, substitute=fix, endpoint=endpoint, store=store)
    with pytest.raises(ValueError, match=r"until_step 3 is not a step of the run \(steps 0..2\)"):
        replay(traces[False], spec, until_step=3, substitute=fix, endpoint=endpoint, store=store)
    asked: list[int] = []
    report = blame(traces[False], spec, fixer=lambda traj, t: asked.append(t) or (fix if t else None), judge=judge,
                   endpoint=endpoint, store=store)
    assert asked == [0, 2] and [a.step for a in report.attempts] == [2] and not report.found
    changed = replay(traces[True], spec, until_step=1, substitute=fix, endpoint=endpoint, store=store)
    assert changed.divergence == "step 1: the replay made no model call there, so the substitute was never used"
    assert not changed.exact


def test_divergence_the_app_swallows_is_still_reported(model_server, tmp_path, monkeypatch):
    """MetaGPT's ``Team.run`` swallows a role's exception: the replayer's own record of its first
    divergence says where the replay left the recording, not the step comparison afterwards."""
    monkeypatch.chdir(tmp_path)  # metagpt writes logs/ and workspace/ into the cwd
    demo = _demo("metagpt")
    store = TraceStore(tmp_path / "store")
    trace_id = _record(demo, demo.policy, model_server, store)

    async def reworded(self, history):  # the Calculator's action asks in other words: its request cannot match
        return await self._aask(f"Evaluate what this asks for:\n{demo._history(history)}")

    monkeypatch.setattr(demo.Calculate, "run", reworded)
    result = replay(trace_id, AppSpec(demo.build_app, demo.run_app), store=store)
    assert result.error is None, "Team.run swallowed the divergence: the app raised nothing"
    assert result.divergence == "replay diverged at step 1 (Calculator): request of call #0 differs from the recording"
    assert result.replayed_calls == 1 and result.live_calls == 0  # the Planner's call came from the recording
    assert result.trajectory is not None and not result.exact
    # A partial, unjudged, unlabelled run: its trajectory says it is a replay, so the training
    # builders do not take it for a clean run.
    partial = result.trajectory
    assert not partial.labels.faults and partial.outcome.success is not True
    assert partial.metadata == {"replay_of": trace_id} and not is_positive(partial)
    assert is_positive(result.original) and "replay_of" not in result.original.metadata


WRONG = "(17 + 25) * 2"

#: What the calculating agent's first model call should have answered, per framework: autogen's
#: and camel's calculators answer in text, metagpt's Calculate action asks the model for the
#: expression it then evaluates.
CORRECTION = {
    "autogen": "(17 + 25) * 3 = 126",
    "camel": "Solution: 3 pens and 3 notebooks cost 126 coins. Next request.",
    "metagpt": "(17 + 25) * 3",
}
CALCULATOR = {"autogen": "calculator", "camel": "Calculator", "metagpt": "Calculator"}
REVIEWER = {"autogen": ("reviewer", "The total is 126 coins. TERMINATE"),
            "metagpt": ("Reviewer", "The calculation is correct. FINAL ANSWER: 126")}


def _planted_failure(demo):
    """The demo policy, except the calculating agent evaluates the wrong expression (step 1)."""

    def policy(body):
        reply = demo.policy(body)
        if reply.tool_calls:
            return Reply(tool_calls=[(name, {"expression": WRONG}) for name, _ in reply.tool_calls])
        if reply.content == demo.EXPRESSION:  # metagpt's Calculator answers with the bare expression
            return Reply(content=WRONG)
        return reply

    return policy


def _fixer_for(framework):
    def fix(traj, t):
        agent = traj.steps[t].agent
        if agent == CALCULATOR[framework]:
            return CORRECTION[framework]
        if framework in REVIEWER and agent == REVIEWER[framework][0]:
            return REVIEWER[framework][1]
        return traj.steps[t].output  # the plan / the customer's request is right: nothing to correct

    return fix


_fixer = _fixer_for("autogen")  # also used by test_blame_cli through --fixer test_replay:_fixer


@pytest.mark.parametrize(("framework", "search"), [
    ("autogen", "scan"), ("autogen", "bisect"), ("camel", "scan"), ("metagpt", "scan"), ("metagpt", "bisect"),
])
def test_blame_finds_planted_step(framework, search, model_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    demo = _demo(framework)
    store = TraceStore(tmp_path / "store")
    policy = _planted_failure(demo)
    trace_id = _record(demo, policy, model_server, store)
    failed = aegis_probe.Trajectory.from_spans(store.trace(trace_id))
    assert failed.outcome.success is False and failed.steps[1].agent == CALCULATOR[framework]

    live = model_server(policy)
    report = blame(trace_id, AppSpec(demo.build_app, demo.run_app), fixer=_fixer_for(framework), judge=judge,
                   endpoint=Endpoint(live.base_url, "aegis-scripted", "sk-test"), search=search, store=store)
    assert report.found and report.step == 1 and report.agent == CALCULATOR[framework]
    assert report.evidence.success and "126" in report.evidence.answer
    labelled = aegis_probe.Trajectory.from_spans(store.trace(trace_id))
    assert [(f.agent, f.step) for f in labelled.labels.faults] == [(CALCULATOR[framework], 1)]
    assert labelled.labels.source == f"blame:replay:{search}"
    assert any(e["name"] == sc.EVENT_BLAME for e in labelled.steps[1].events)


def test_blame_refuses_a_successful_run(model_server, tmp_path):
    demo = _demo("autogen")
    store = TraceStore(tmp_path / "store")
    trace_id = _record(demo, demo.policy, model_server, store)
    with pytest.raises(ValueError, match="needs a failed run"):
        blame(trace_id, AppSpec(demo.build_app, demo.run_app), fixer=_fixer, judge=judge,
              endpoint=Endpoint("http://127.0.0.1:9/v1", "m", "k"), store=store)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_blame_budget_exhaustion_gives_partial_report(framework, model_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    demo = _demo(framework)
    store = TraceStore(tmp_path / "store")
    policy = _planted_failure(demo)
    trace_id = _record(demo, policy, model_server, store)
    live = model_server(policy)

    def always_rewrite(traj, t):
        return f"rewritten step {t}"

    report = blame(trace_id, AppSpec(demo.build_app, demo.run_app), fixer=always_rewrite, judge=judge,
                   endpoint=Endpoint(live.base_url, "aegis-scripted", "sk-test"), max_replays=1, store=store)
    assert not report.found
    assert report.exhausted == "max_replays=1"
    assert len(report.attempts) == 1 and report.attempts[0].step == 0 and report.attempts[0].success is False
    assert aegis_probe.Trajectory.from_spans(store.trace(trace_id)).labels.faults == []


def test_blame_cli(model_server, tmp_path):
    import os
    import subprocess
    import sys

    demo = _demo("autogen")
    store = TraceStore(tmp_path / "store")
    trace_id = _record(demo, _planted_failure(demo), model_server, store)
    env = {**os.environ, "PYTHONPATH": os.path.dirname(__file__)}
    proc = subprocess.run(
        [sys.executable, "-m", "aegis_probe", "blame", "--trace", trace_id[:10], "--app", "aegis_probe.demos.autogen",
         "--fixer", "test_replay:_fixer", "--dir", str(store.path)],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "decisive error: step 1 by calculator" in proc.stdout
    labelled = aegis_probe.Trajectory.from_spans(store.trace(trace_id))
    assert labelled.labels.faults[0].step == 1


def test_single_step_injection_keeps_only_flipping_runs(model_server, tmp_path):
    from aegis_probe.counterfactual import inject_step

    demo = _demo("autogen")
    store = TraceStore(tmp_path / "store")
    trace_id = _record(demo, demo.policy, model_server, store)
    live = model_server(demo.policy)
    endpoint = Endpoint(live.base_url, "aegis-scripted", "sk-test")
    spec = AppSpec(demo.build_app, demo.run_app)

    # The calculator's tool call gets mismatched arguments: the total is wrong, the run fails.
    flipped = inject_step(trace_id, spec, 1, "FM-2.6", endpoint=endpoint, judge=judge, store=store)
    assert flipped.kept and flipped.result.trajectory.outcome.success is False
    labelled = aegis_probe.Trajectory.from_spans(store.trace(flipped.result.trajectory.trace_id))
    assert [(f.agent, f.step, f.mode, f.strategy) for f in labelled.labels.faults] == [
        ("calculator", 1, "FM-2.6", "response_corruption")]
    assert labelled.steps[0].output == flipped.result.original.steps[0].output, "the prefix is the recording"

    # The planner's numbers withheld: the scripted calculator still computes the right total.
    recovered = inject_step(trace_id, spec, 0, "FM-2.4", endpoint=endpoint, judge=judge, store=store)
    assert not recovered.kept and recovered.result.trajectory.outcome.success is True
    assert recovered.result.trajectory.steps[0].output != recovered.result.original.steps[0].output


def test_analyzer_fixer_asks_an_llm_without_the_answer_unless_allowed(model_server, tmp_path):
    from aegis_probe.counterfactual import AnalyzerFixer

    demo = _demo("autogen")
    store = TraceStore(tmp_path / "store")
    trace_id = _record(demo, _planted_failure(demo), model_server, store)
    failed = aegis_probe.Trajectory.from_spans(store.trace(trace_id))
    analyzer = model_server(lambda body: Reply(content="  (17 + 25) * 3 = 126  "))

    fix = AnalyzerFixer(analyzer.base_url, "analyzer", "sk-test")(failed, 1)
    assert fix == "(17 + 25) * 3 = 126"
    prompt = analyzer.requests[-1]["messages"][-1]["content"]
    assert failed.task in prompt and "Step 1 - calculator: 84" in prompt and "step 1 (agent calculator)" in prompt
    assert "expected answer" not in prompt

    AnalyzerFixer(analyzer.base_url, "analyzer", "sk-test", show_expected=True)(failed, 1)
    assert "The expected answer is '126'" in analyzer.requests[-1]["messages"][-1]["content"]
