"""``blame --method judge|spectrum``: a failed run diagnosed without a fixer, or without the app,
on the real AutoGen demo team, its scripted model and a scripted judge model on 127.0.0.1."""

from __future__ import annotations

import re

import pytest

import aegis_probe
from aegis_probe.apps import AppSpec, Endpoint
from aegis_probe.cli import main
from aegis_probe.diagnosis.judges import StepByStepJudge
from aegis_probe.diagnosis.spectrum import FORMULAS, ActionKeys, action_key, localize, spectrum
from aegis_probe.modelserver import Reply
from aegis_probe.report.html import render_report
from aegis_probe.storage.store import TraceStore
from aegis_probe.trajectory import Outcome, Step, ToolCall, Trajectory

demo = pytest.importorskip("aegis_probe.demos.autogen")
from aegis_probe.demos.task import judge  # noqa: E402

WRONG = "(17 + 25) * 2"


def _erring(every: int):
    """The demo's model, except the calculator's tool call evaluates WRONG on every ``every``-th call
    (its 0th, ``every``-th, ...; 1: always)."""
    calls = iter(range(10**6))

    def policy(body):
        reply = demo.policy(body)
        if reply.tool_calls and next(calls) % every == 0:
            return Reply(tool_calls=[(name, {"expression": WRONG}) for name, _ in reply.tool_calls])
        return reply

    return policy


def _failed_run(model_server, store: TraceStore) -> str:
    server = model_server(_erring(1))
    app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
    probe = aegis_probe.instrument(app, store=store, judge=judge)
    demo.run_app(app, demo.TASK)
    probe.flush()
    probe.uninstrument()
    failed = Trajectory.from_spans(store.trace(probe.last_trace_id))
    assert failed.outcome.success is False and [s.agent for s in failed.steps] == ["planner", "calculator", "reviewer"]
    return probe.last_trace_id


def fix(traj: Trajectory, t: int) -> str:
    """The fixer of the verification: the right calculation, the right report; the plan was right."""
    return {"calculator": "(17 + 25) * 3 = 126", "reviewer": "The total is 126 coins. TERMINATE"}.get(
        traj.steps[t].agent, traj.steps[t].output)


def _judge_model(body) -> Reply:
    """A scripted Who&When judge: blames the reviewer first, the calculator second."""
    prompt = body["messages"][-1]["content"]
    if "up to 2 lines" in prompt:
        return Reply(content="The reviewer reported a wrong total; the calculator computed it.\nreviewer|2\ncalculator|1")
    return Reply(content="The reviewer reported a wrong total.\nreviewer|2")


def test_judge_needs_no_app_and_labels_its_own_set(model_server, tmp_path, capsys):
    store = TraceStore(tmp_path / "store")
    trace_id = _failed_run(model_server, store)
    judge_server = model_server(_judge_model)

    assert main(["blame", "--trace", trace_id[:10], "--dir", str(store.path), "--method", "judge",
                 "--base-url", judge_server.base_url, "--model", "judge"]) == 0
    assert "judged: step 2 by reviewer (1 calls); label blame:judge:all-at-once" in capsys.readouterr().out
    prompt = judge_server.requests[-1]["messages"][-1]["content"]
    assert demo.TASK in prompt and "Step 1 - calculator" in prompt
    labelled = Trajectory.from_spans(store.trace(trace_id))
    assert labelled.labels.sets[-1].source == "blame:judge:all-at-once"
    assert [(f.agent, f.step) for f in labelled.labels.of("blame:judge")] == [("reviewer", 2)]


def test_verify_replays_the_judges_candidates_and_the_earliest_flip_wins(model_server, tmp_path, capsys):
    store = TraceStore(tmp_path / "store")
    trace_id = _failed_run(model_server, store)
    judge_server = model_server(_judge_model)

    assert main(["blame", "--trace", trace_id, "--dir", str(store.path), "--method", "judge", "--verify",
                 "--top-k", "2", "--base-url", judge_server.base_url, "--app", "aegis_probe.demos.autogen",
                 "--fixer", f"{__file__}:fix", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "candidate 1: step 2 by reviewer" in out and "candidate 2: step 1 by calculator" in out
    assert "decisive error: step 1 by calculator (replays: 1)" in out, out
    labels = Trajectory.from_spans(store.trace(trace_id)).labels
    # The judge's own verdict and the replay's decision are two label sets; neither overwrites the other.
    assert [(s.source, [(f.agent, f.step) for f in s.faults]) for s in labels.sets] == [
        ("blame:judge:all-at-once", [("reviewer", 2)]), ("blame:judge+replay:all-at-once", [("calculator", 1)])]
    html = render_report(Trajectory.from_spans(store.trace(trace_id)))  # the report shows both, by source
    assert "<td>blame:judge:all-at-once</td>" in html and "<td>blame:judge+replay:all-at-once</td>" in html

    # traces ls: each run's labels, and the replay marked as a replay of the original.
    assert main(["traces", "--dir", str(store.path), "ls"]) == 0
    rows = capsys.readouterr().out.splitlines()
    original = next(r for r in rows if r.startswith(trace_id))
    assert "blame:judge:all-at-once reviewer@2; blame:judge+replay:all-at-once calculator@1" in original
    replayed = [r for r in rows if re.search(rf"\s{trace_id[:8]}\s", r)]
    assert len(replayed) == 1 and "success" in replayed[0]
    assert main(["traces", "--dir", str(store.path), "show", replayed[0].split()[0]]) == 0
    assert f"replay   of trace {trace_id}" in capsys.readouterr().out


def test_step_by_step_judge_walks_to_its_candidates(model_server, tmp_path):
    store = TraceStore(tmp_path / "store")
    failed = Trajectory.from_spans(store.trace(_failed_run(model_server, store)))
    server = model_server(lambda body: Reply(content="yes" if "Is step 1 " in body["messages"][-1]["content"] else "no"))
    judge_ = StepByStepJudge(base_url=server.base_url, model="judge")
    assert [(c.agent, c.step) for c in judge_.candidates(failed, 2)] == [("calculator", 1)]
    assert judge_.calls == 3  # it asked about every step, looking for a second candidate


def _step(i: int, agent: str, output: str = "", call: str | None = None) -> Step:
    return Step(index=i, agent=agent, output=output,
                tool_calls=[ToolCall(name="calculate", arguments=call)] if call else [])


def _run(success: bool, expression: str) -> Trajectory:
    total = "126" if success else "84"
    return Trajectory(steps=[_step(0, "planner", "Plan: (17+25)*3"), _step(1, "calculator", call=f'{{"expression": "{expression}"}}'),
                             _step(2, "reviewer", f"The answer is {total}.")], outcome=Outcome(success=success))


def test_spectrum_scores_and_the_earliest_of_equally_suspicious_steps():
    target = _run(False, WRONG)
    runs = [_run(True, "(17 + 25) * 3"), _run(True, "(17+25) *  3"), _run(False, WRONG)]
    assert action_key(runs[0].steps[1]) == action_key(runs[1].steps[1]) == 'calculator -> calculate({"expression":"(17+25)*3"})'
    report = localize(target, runs, "ochiai")
    assert (report.step, report.agent, report.passed, report.failed) == (1, "calculator", 2, 2)
    scores = {e.key: (e.ef, e.ep, round(e.score, 3)) for e in report.ranking}
    assert scores["planner: plan: (17+25)*3"] == (2, 2, round(2 / (2 * 4) ** 0.5, 3))
    assert scores['calculator -> calculate({"expression":"(17+25)*2"})'] == (2, 0, 1.0)
    assert scores["reviewer: the answer is 84."] == (2, 0, 1.0)  # ties the wrong call: the earlier step wins
    assert FORMULAS["tarantula"](2, 2, 2, 2) == 0.5 and FORMULAS["dstar"](2, 2, 2, 2) == 2.0
    assert localize(target, [_run(False, WRONG)]).why_not.startswith("no passing run")


def _paraphrased(success: bool, opener: str) -> Trajectory:
    """A run whose planner words its plan its own way (as a sampled model does); the calculator follows the plan."""
    factor = "3" if success else "2"
    return Trajectory(steps=[_step(0, "planner", f"{opener}Plan: compute (17 + 25) * {factor}, then report it."),
                             _step(1, "calculator", call=f'{{"expression": "(17 + 25) * {factor}"}}'),
                             _step(2, "reviewer", f"The answer is {126 if success else 84}.")],
                      outcome=Outcome(success=success))


def test_similar_actions_make_paraphrases_of_one_message_one_event():
    keys = ActionKeys("similar")
    same = [keys(_step(0, "planner", text)) for text in ("Plan: compute (17 + 25) * 3 and report the total.",
                                                           "Sure. Plan: compute (17+25) * 3 and report the total!",
                                                           "OK, the plan: compute (17 + 25) * 3 and report the total, thanks.")]
    assert len(set(same)) == 1 and same[0] == "planner: plan: compute (17 + 25) * 3 and report the total."  # the leader
    assert keys(_step(1, "planner", "Sure. Plan: compute (17 + 25) * 2 and report the total.")) != same[0]  # other numbers
    assert keys(_step(2, "reviewer", "Plan: compute (17 + 25) * 3.")) != same[0]  # another agent: another event
    assert keys(_step(3, "planner", "I cannot turn this task into arithmetic (17 + 25) * 3.")) != same[0]  # other words
    call = _step(4, "calculator", call='{"expression": "(17 + 25) * 3"}')
    assert keys(call) == ActionKeys("exact")(call) == action_key(call)  # tool calls stay keyed by tool and arguments

    openers = ["", "Sure. ", "Okay. ", "Right, ", "Understood. ", "Fine. "]
    target = _paraphrased(False, "Hmm. ")
    runs = [_paraphrased(i % 2 == 0, opener) for i, opener in enumerate(openers)]
    exact, similar = localize(target, runs, actions="exact"), localize(target, runs, actions="similar")
    # Exact keys: every worded plan is an event of one run, so the wrong plan looks no more suspicious
    # than any one-off text and the calculator's repeated wrong call (its effect) is blamed.
    assert (exact.step, exact.agent) == (1, "calculator")
    assert (similar.step, similar.agent, similar.actions) == (0, "planner", "similar")
    plan = next(e for e in similar.ranking if e.agent == "planner" and e.score == similar.score)
    assert (plan.ef, plan.ep) == (4, 0)
    with pytest.raises(ValueError, match="unknown action keying"):
        localize(target, runs, actions="fuzzy")


def test_spectrum_reruns_the_app_live_and_finds_the_planted_step(model_server, tmp_path):
    from aegis_probe.executors import ThreadExecutor

    store = TraceStore(tmp_path / "store")
    trace_id = _failed_run(model_server, store)
    live = model_server(_erring(2))  # every other run errs at the calculator
    report = spectrum(trace_id, AppSpec(demo.build_app, demo.run_app), judge=judge, store=store,
                      endpoint=Endpoint(live.base_url, "aegis-scripted", "sk-test"), runs=6,
                      executor=ThreadExecutor(2))
    assert (report.passed, report.failed, report.errors) == (3, 4, [])
    assert (report.step, report.agent) == (1, "calculator")
    assert report.model_calls == 6 * 3 and len(store.traces()) == 1, "the re-runs stay out of the store"


def test_spectrum_cli_with_the_apps_own_sampled_model(model_server, tmp_path, capsys):
    store = TraceStore(tmp_path / "store")
    trace_id = _failed_run(model_server, store)
    app = tmp_path / "flaky_app.py"
    app.write_text("from aegis_probe.demos.autogen import AGENTS, build_app, run_app  # noqa: F401\n"
                   "from aegis_probe.demos.task import judge  # noqa: F401\n"
                   "from test_diagnosis import _erring\n\npolicy = _erring(2)\n", encoding="utf-8")
    assert main(["blame", "--trace", trace_id, "--dir", str(store.path), "--method", "spectrum", "--app", str(app),
                 "--runs", "4", "--formula", "dstar", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "runs: 2 passed, 3 failed" in out and "most suspicious: step 1 by calculator (dstar" in out, out
    assert Trajectory.from_spans(store.trace(trace_id)).labels.sets[-1].source == "blame:spectrum:dstar"


def test_each_method_says_what_it_needs(capsys):
    for argv, need in ((["--method", "spectrum"], "--method spectrum needs --app"),
                       (["--method", "judge"], "--method judge needs --base-url"),
                       (["--method", "judge", "--verify", "--app", "aegis_probe.demos.autogen"], "needs a fixer"),
                       (["--app", "aegis_probe.demos.autogen"], "--method replay needs a fixer")):
        assert main(["blame", "--trace", "x", *argv]) == 2
        assert need in capsys.readouterr().err
