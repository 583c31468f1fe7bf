"""Fault injection: plans, the 14 deterministic operators, judges, the LLM manipulator, and
verified campaigns on the real frameworks (example apps on the loopback model server)."""

from __future__ import annotations

import functools
import json
import re
import textwrap
from pathlib import Path

import pytest

import aegis_probe
from aegis_probe.capture import semconv as sc
from aegis_probe.injection import (
    MODES, OPERATORS, Context, DeterministicManipulator, InjectionPlan, LLMManipulator, Target, exact, judge_for,
    numeric, run_with_plan, unit_tests,
)
from aegis_probe.apps import AppSpec, Endpoint
from aegis_probe.injection.campaign import run_campaign
from aegis_probe.injection.operators import TERMINATION_MARKERS, numbers
from aegis_probe.capture.interception import LLMResponse
from aegis_probe.modelserver import Reply
from aegis_probe.trajectory import Fault, load_trajectories

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "injection"
MATH = EXAMPLES / "math_tasks.jsonl"
TASK = "A shop sells pens at 17 coins and notebooks at 25 coins. What do 3 pens and 3 notebooks cost in total?"
API_KEY = "sk-test-key-do-not-leak-1234567890"


# -- plans -----------------------------------------------------------------------------------
def test_plan_validates_modes_and_when():
    with pytest.raises(ValueError, match="unknown failure mode"):
        Target(agent="a", mode="FM-9.9")
    with pytest.raises(ValueError, match="at most one"):
        Target(agent="a", mode="FM-1.1", nth=0, step=2)
    plan = InjectionPlan.single("planner", "FM-3.1", "prompt_injection", step=3)
    assert InjectionPlan.model_validate_json(plan.to_json()) == plan
    with pytest.raises(ValueError, match="cannot be serialised"):
        InjectionPlan(targets=[Target(agent="a", mode="FM-1.1", predicate=lambda call: True)]).to_json()
    assert len(MODES) == 14 and set(OPERATORS) == set(MODES)


# -- deterministic operators ------------------------------------------------------------------
CTX = Context(
    agent="calculator",
    task=TASK,
    history=[
        {"role": "system", "content": "You are the calculator."},
        {"role": "user", "content": TASK},
        {"role": "assistant", "content": "Earlier I computed 42 per pair."},
        {"role": "user", "content": "Plan: the answer is (17 + 25) * 3. Calculator, please evaluate it."},
    ],
    agents=("planner", "calculator", "reviewer"),
)
TEXT = LLMResponse(content="The cost of one pair is 42. So the total is (17 + 25) * 3 = 126. I checked it with the tool. TERMINATE",
                   finish_reason="stop")
CALL = LLMResponse(tool_calls=[{"id": "c1", "name": "calculate", "arguments": '{"expression": "(17 + 25) * 3"}'}],
                   finish_reason="tool_calls")


def _markers(text: str) -> bool:
    return any(m.lower() in text.lower() for m in TERMINATION_MARKERS)


#: What each mode's operator must do to the text response above ("the intended way").
INTENDED = {
    "FM-1.1": lambda o: [float(n) for n in numbers(o.content)] == [2 * float(n) for n in numbers(TEXT.content)],
    "FM-1.2": lambda o: "act as planner" in o.content and numbers(o.content)[-1] == "127" and not o.tool_calls,
    "FM-1.3": lambda o: o.content == CTX.history[-1]["content"],
    "FM-1.4": lambda o: "126" not in o.content and "42" not in o.content and "17" in o.content,
    "FM-1.5": lambda o: not _markers(o.content) and "126" in o.content,
    "FM-2.1": lambda o: o.content.startswith("Let's start over") and TASK in o.content,
    "FM-2.2": lambda o: not numbers(o.content) and "some" in o.content,
    "FM-2.3": lambda o: "48" in o.content and "126" not in o.content,
    "FM-2.4": lambda o: not numbers(o.content) and "checked" in o.content,
    "FM-2.5": lambda o: "Earlier I computed 42 per pair." in o.content and "126" not in o.content,
    "FM-2.6": lambda o: o.content == TEXT.content.replace("126", "127"),
    "FM-3.1": lambda o: o.content.endswith("TERMINATE") and "126" not in o.content,
    "FM-3.2": lambda o: "checked" not in o.content and numbers(o.content)[-1] == "130",
    "FM-3.3": lambda o: "verified" in o.content and "139" in o.content and "126" not in o.content,
}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_each_operator_changes_the_action_as_intended(mode):
    manip = DeterministicManipulator()
    out = manip.corrupt(mode, TEXT, CTX)
    assert out is not None and out.content != TEXT.content
    assert INTENDED[mode](out), out.content
    called = manip.corrupt(mode, CALL, CTX)  # a tool-call action is changed too
    assert called is not None and (called.content, called.tool_calls) != (CALL.content, CALL.tool_calls)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_each_operator_changes_the_input_for_prompt_injection(mode):
    messages = [dict(m) for m in CTX.history]
    out = DeterministicManipulator().inject(mode, messages, CTX)
    assert out is not None and out != CTX.history
    assert messages == CTX.history, "the caller's messages are not edited in place"
    assert out[0] == CTX.history[0], "the system prompt is kept"
    if mode == "FM-1.4":
        assert out == [CTX.history[0], CTX.history[-1]]
    elif mode == "FM-2.1":
        assert out == CTX.history[:2]
    else:
        assert out[:-1] == CTX.history[:-1] and out[-1]["content"] != CTX.history[-1]["content"]


# -- judges ----------------------------------------------------------------------------------
def test_judges():
    assert exact("Paris")(None, "  paris. ").success
    assert not exact("Paris")(None, "Lyon").success
    assert numeric(126)(None, "The total is 126.0 coins").success
    assert numeric("1000", rel_tol=0.01)(None, "about 1,005").success
    assert not numeric(126)(None, "The total is 127").success and not numeric(126)(None, "no number").success
    tests = "assert add(2, 3) == 5\nassert add(-1, 1) == 0"
    assert unit_tests(tests)(None, "Here:\n```python\ndef add(a, b):\n    return a + b\n```").success
    assert not unit_tests(tests)(None, "```python\ndef add(a, b):\n    return a - b\n```").success
    assert not unit_tests("add(1, 2)", timeout=1)(None, "def add(a, b):\n    while True: pass").success
    assert judge_for({"expected": "126"})(None, "126").success
    assert judge_for({"tests": tests})(None, "def add(a, b): return a + b").success
    with pytest.raises(ValueError):
        judge_for({"expected": "x", "judge": "magic"})


def test_task_records_judged_as_written_or_refused_before_any_run(tmp_path):
    """An ``expected`` with its unit ("126 coins", which picks the numeric judge) is read as answers
    are; a record whose judge cannot be built (a ``tolerance`` or ``timeout`` that is no number,
    ``tests`` that are no code, an expected without a number for ``judge: numeric``) is refused when
    the tasks file is read, naming file and record, instead of every one of its runs raising."""
    from aegis_probe.injection.campaign import load_tasks

    judge = judge_for({"expected": "126 coins"})
    assert judge(None, "The total is 126.").success and not judge(None, "The total is 127 coins.").success
    good = {"id": "pens", "task": TASK, "expected": "126 coins"}
    bad = [({"tolerance": "tight"}, "`tolerance` must be a non-negative number, not 'tight'"),
           ({"tolerance": -1}, "`tolerance` must be"),
           ({"judge": "numeric", "expected": "one hundred"}, "holds no number"),
           ({"tests": ["assert f()"], "expected": None}, "`tests` must be a string"),
           ({"tests": "assert f()", "timeout": "10s", "expected": None}, "`timeout` must be"),
           ({"judge": "fuzzy"}, "unknown judge 'fuzzy'")]
    for change, message in bad:
        path = tmp_path / "tasks.jsonl"
        path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "id": "bad", **change}) + "\n")
        with pytest.raises(ValueError, match=re.escape(f"{path}: record 2 (id 'bad'): ") + ".*" + re.escape(message)):
            load_tasks(path)
    path.write_text(json.dumps(good) + "\n")
    assert load_tasks(path) == [good]


# -- LLM manipulator -------------------------------------------------------------------------
def test_llm_manipulator_sends_our_instruction_and_uses_the_rewrite(model_server):
    server = model_server(lambda body: Reply(content="The total is 999."))
    manip = LLMManipulator("manipulator", server.base_url)
    out = manip.corrupt("FM-3.3", TEXT, Context(agent="reviewer", task=TASK, task_type="math"))
    assert out.content == "The total is 999." and not out.tool_calls
    body = server.requests[-1]
    assert body["temperature"] == 0.7 and body["model"] == "manipulator"
    system = body["messages"][0]["content"]
    assert "Verify incorrectly" in system and "arithmetic" in system
    assert TEXT.content in body["messages"][1]["content"]
    injected = manip.inject("FM-2.4", [dict(m) for m in CTX.history], CTX)
    assert injected[-1]["content"] == "The total is 999." and injected[:-1] == CTX.history[:-1]
    assert "Hide important information" in server.requests[-1]["messages"][0]["content"]


# -- on a real framework: AutoGen ------------------------------------------------------------
def _autogen_app(model_server, policy=None):
    pytest.importorskip("autogen_agentchat")
    spec = AppSpec.load(f"{EXAMPLES / 'autogen_math.py'}:build_app")
    server = model_server(policy or spec.policy)
    app = spec.build(Endpoint(server.base_url, "aegis-scripted", API_KEY), task=TASK, temperature=0, seed=0)
    return spec, server, app


def _store_text(path: Path) -> str:
    return "".join(p.read_text() for p in path.rglob("*.jsonl"))


def test_response_corruption_labels_equal_the_applied_plan(model_server, tmp_path):
    spec, _, app = _autogen_app(model_server)
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    plan = InjectionPlan.single("calculator", "FM-2.6", "response_corruption")
    answer, applied = run_with_plan(probe, plan, lambda: spec.run_app(app, TASK))
    probe.flush()
    traj = probe.trajectory()
    assert "168" in answer  # (17 + 25) * 4 instead of * 3
    calc = next(s for s in traj.steps if s.agent == "calculator")
    assert [a.model_dump(include=set(Fault.model_fields)) for a in applied] == [f.model_dump() for f in traj.labels.faults]
    assert traj.labels.faults == [Fault(agent="calculator", step=calc.index, span_id=calc.span_id, mode="FM-2.6",
                                        strategy="response_corruption")]
    assert traj.labels.source == "injection"
    events = [(s.agent, e) for s in traj.steps for e in s.events if e["name"] == sc.EVENT_INJECTION]
    assert len(events) == 1 and events[0][0] == "calculator"
    assert events[0][1]["attributes"]["aegis.injection.mode"] == "FM-2.6"
    assert calc.tool_calls[0].arguments == '{"expression": "(17 + 25) * 4"}'  # the manipulated action is what was traced
    assert probe.interceptors == ()


def test_prompt_injection_changes_the_action_but_not_the_captured_input(model_server, tmp_path):
    spec, server, app = _autogen_app(model_server)
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    with probe.inject(InjectionPlan.single("planner", "FM-1.1", "prompt_injection")) as injector:
        answer = spec.run_app(app, TASK)
    probe.flush()
    assert "504" in answer  # every quantity of the task doubled: (34 + 50) * 6
    assert "34 coins" in json.dumps(server.requests[0]["messages"])  # the model did see the altered input
    traj = probe.trajectory()
    assert traj.steps[0].agent == "planner" and traj.labels.faults[0].step == 0
    assert "(34 + 50) * 6" in traj.steps[0].output
    assert "34 coins" not in _store_text(tmp_path / "store"), "the manipulated input must not be captured"
    assert injector.applied[0].strategy == "prompt_injection"


def test_targets_by_global_step_predicate_and_unreached(model_server, tmp_path):
    plans = [
        InjectionPlan.single("reviewer", "FM-2.6", step=2),
        InjectionPlan(targets=[Target(agent="calculator", mode="FM-2.6", predicate=lambda call: call.call_index == 0)]),
        InjectionPlan.single("reviewer", "FM-3.3", nth=4),  # the reviewer never takes a 5th step
    ]
    results = []
    for plan in plans:  # an autogen team runs once per event loop: one app per run
        spec, _, app = _autogen_app(model_server)
        probe = aegis_probe.instrument(app, store=tmp_path / "store")
        results.append(run_with_plan(probe, plan, functools.partial(spec.run_app, app, TASK)))
        probe.flush()
    assert results[0][1][0].step == 2 and "127" in results[0][0]
    assert results[1][1][0].agent == "calculator" and "168" in results[1][0]
    assert results[2][1] == [] and "126" in results[2][0]
    assert [t.labels.faults == [] for t in load_trajectories(tmp_path / "store")] == [False, False, True]


@pytest.mark.parametrize("strategy", ["response_corruption", "prompt_injection"])
def test_manipulator_instructions_never_reach_the_trace(model_server, tmp_path, strategy):
    spec, _, app = _autogen_app(model_server)
    canary = "CANARY-7f3a-instruction-text"
    rewrites = {"agent output": "Plan: the answer is 40 + 2. Calculator, please evaluate it.",
                "agent input": TASK.replace("17", "10").replace("25", "4")}  # a different question

    def manipulator_model(body):
        return Reply(content=next(v for k, v in rewrites.items() if f"Original {k}" in body["messages"][1]["content"]))

    manip_server = model_server(manipulator_model)
    manip = LLMManipulator("manipulator", manip_server.base_url, instructions={"FM-2.3": f"{canary}: derail the task."})
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    plan = InjectionPlan(targets=[Target(agent="planner", mode="FM-2.3", strategy=strategy, operator="llm")])
    answer, applied = run_with_plan(probe, plan, lambda: spec.run_app(app, TASK), manipulators={"llm": manip})
    probe.flush()
    assert applied[0].operator == "llm" and applied[0].strategy == strategy
    assert canary in json.dumps(manip_server.requests)  # the instruction was used...
    stored = _store_text(tmp_path / "store")
    assert canary not in stored and "derail" not in stored  # ...and never captured
    if strategy == "response_corruption":
        assert "42" in answer and "40 + 2" in stored  # the manipulated action is captured
    else:
        assert "42" in answer and "(10 + 4) * 3" in stored  # the action taken on the altered input is captured
        assert "10 coins" not in stored  # the altered input itself is not


# -- campaigns -------------------------------------------------------------------------------
def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]


def test_campaign_keeps_only_flipped_runs_labelled_and_resumes(tmp_path):
    pytest.importorskip("autogen_agentchat")
    out = tmp_path / "campaign"
    app = f"{EXAMPLES / 'autogen_math.py'}:build_app"
    rows = run_campaign(app, MATH, out, plans_per_run=4, seed=1, progress=False)
    records = _records(out)
    baselines = [r for r in records if r["kind"] == "baseline"]
    injected = [r for r in records if r["kind"] == "injected"]
    assert len(baselines) == 4 and all(b["success"] for b in baselines)
    assert len(injected) == 16 and sum(r["attempted"] for r in rows) == 16
    kept = {t.trace_id: t for t in load_trajectories(out / "traces")}
    assert {r["trace_id"] for r in injected if r["kept"]} == set(kept)
    assert any(not r["flipped"] for r in injected), "this seed has runs that did not flip"
    for r in injected:
        assert r["kept"] == (r["flipped"] and bool(r["applied"]))
        if not r["kept"]:
            continue
        traj = kept[r["trace_id"]]
        assert traj.outcome.success is False
        assert [f.model_dump() for f in traj.labels.faults] == [
            {k: a[k] for k in Fault.model_fields} for a in r["applied"]]
        assert (traj.labels.faults[0].agent, traj.labels.faults[0].mode, traj.labels.faults[0].strategy) == (
            r["agent"], r["mode"], r["strategy"])
        step = traj.steps[traj.labels.faults[0].step]
        assert step.agent == r["agent"] and any(e["name"] == sc.EVENT_INJECTION for e in step.events)
    assert len(load_trajectories(out / "baselines")) == 4

    # resume: nothing is redone; after dropping the last 3 records exactly those are redone, identically
    assert run_campaign(app, MATH, out, plans_per_run=4, seed=1, progress=False) == rows
    assert len(_records(out)) == len(records)
    lines = (out / "runs.jsonl").read_text().splitlines()
    (out / "runs.jsonl").write_text("\n".join(lines[:-3]) + "\n")
    assert run_campaign(app, MATH, out, plans_per_run=4, seed=1, progress=False) == rows
    redone = _records(out)[-3:]
    assert sorted(r["key"] for r in redone) == sorted(r["key"] for r in records[-3:])
    assert {r["key"]: r["answer"] for r in redone} == {r["key"]: r["answer"] for r in records[-3:]}


class _Killed(BaseException):
    """The process killed (kill -9) at a chosen point: nothing after it runs."""


@pytest.mark.parametrize("store", ["traces", "baselines"])
def test_campaign_killed_between_record_and_trace_resumes_with_one_trace_per_record(store, tmp_path, monkeypatch, caplog):
    pytest.importorskip("autogen_agentchat")
    from aegis_probe.injection.campaign import Campaign, read_records
    from aegis_probe.storage.store import TraceStore

    out = tmp_path / "campaign"
    app = f"{EXAMPLES / 'autogen_math.py'}:build_app"
    writes: list[str] = []  # the first stored run's two writes (its record, its trace), in either order

    def step(what: str) -> None:
        writes.append(what)
        if len(writes) == 2:
            raise _Killed(f"killed after the {writes[0]}, before the {what}")

    write, append = Campaign._write, TraceStore.append
    stored = (lambda r: r.get("kept")) if store == "traces" else (lambda r: r.get("success") and r["kind"] == "baseline")
    monkeypatch.setattr(Campaign, "_write", lambda self, rec: (step("record") if stored(rec) else None, write(self, rec))[1])
    monkeypatch.setattr(TraceStore, "append", lambda self, recs: (
        step("trace") if self.path.name == store else None, append(self, recs))[1])
    with pytest.raises(_Killed):
        run_campaign(app, MATH, out, plans_per_run=2, seed=1, progress=False)
    monkeypatch.undo()

    rows = run_campaign(app, MATH, out, plans_per_run=2, seed=1, progress=False)  # resume
    records = read_records(out)
    assert len(records) == 4 * 3 and sum(r["attempted"] for r in rows) == 8
    for name, which in (("traces", lambda r: r.get("kept")), ("baselines", lambda r: r["kind"] == "baseline")):
        ids = [t.trace_id for t in load_trajectories(out / name)]
        assert sorted(ids) == sorted(r["trace_id"] for r in records.values() if which(r)), name  # one trace per record
    assert "its trace was never stored" in caplog.text  # the record came first: its run was redone


def test_campaign_logs_and_skips_failing_runs(tmp_path, caplog):
    pytest.importorskip("autogen_agentchat")
    module = tmp_path / "flaky_app.py"
    module.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(EXAMPLES)!r})
        from autogen_math import AGENTS, build_app, policy, run_app as _run

        def run_app(app, task):
            if "train" in task:
                raise RuntimeError("backend exploded")
            return _run(app, task)
    """))
    out = tmp_path / "campaign"
    run_campaign(f"{module}:build_app", MATH, out, plans_per_run=1, progress=False)
    records = _records(out)
    errors = [r for r in records if "error" in r]
    assert [r["key"] for r in errors] == ["train/baseline"] and "backend exploded" in errors[0]["error"]
    assert "run train/baseline failed" in caplog.text
    assert sum(r.get("kind") == "injected" for r in records) == 3  # the other tasks went on
    run_campaign(f"{module}:build_app", MATH, out, plans_per_run=1, progress=False)
    assert [r["key"] for r in _records(out)[len(records):]] == ["train/baseline"]  # errors are retried on resume


def test_a_hung_run_times_out_and_the_campaign_goes_on(tmp_path, caplog):
    """The model endpoint never answers one task's calls (the client would wait its own 10 min):
    with ``run_timeout`` the run is recorded as timed out, never kept nor labelled, the campaign
    goes on with the other tasks on its one thread, and resuming retries the run."""
    pytest.importorskip("autogen_agentchat")
    import threading
    import time

    from aegis_probe.injection.campaign import Campaign, read_records

    answers = tmp_path / "answer-now"
    module = tmp_path / "hanging_app.py"
    module.write_text(textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        sys.path.insert(0, {str(EXAMPLES)!r})
        from autogen_math import AGENTS, build_app, run_app, policy as _policy

        def policy(body):
            if "train" in str(body["messages"]):
                deadline = time.monotonic() + 60
                while not Path({str(answers)!r}).exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
            return _policy(body)
    """))
    app, out = f"{module}:build_app", tmp_path / "campaign"
    started = time.monotonic()
    rows = run_campaign(app, MATH, out, plans_per_run=1, progress=False, run_timeout=3)
    assert time.monotonic() - started < 40
    records = _records(out)
    (hung,) = [r for r in records if "error" in r]
    assert hung["key"] == "train/baseline" and hung["timed_out"] is True and "RunTimeout" in hung["error"]
    assert sum(r["attempted"] for r in rows) == 3 and not any(r.get("timed_out") for r in records if r is not hung)
    assert "run train/baseline failed: RunTimeout" in caplog.text
    answers.touch()  # the abandoned run ends now; what it made is dropped
    for thread in [t for t in threading.enumerate() if t.name == "aegis-timed-run"]:
        thread.join(30)
    assert _records(out) == records and "train/baseline" not in read_records(out)
    assert {t.task for t in load_trajectories(out / "baselines")} == {
        json.loads(line)["task"] for line in MATH.read_text().splitlines() if "train" not in line}
    run_campaign(app, MATH, out, plans_per_run=1, progress=False, run_timeout=3)  # resume: retried, now answered
    done = read_records(out)
    assert done["train/baseline"]["success"] and "train/plan-0" in done and len(done) == 8
    assert Campaign.__reduce__(Campaign(AppSpec.load(app), [], out, run_timeout=3))[0].keywords["run_timeout"] == 3


def test_inject_command(tmp_path, capsys):
    pytest.importorskip("autogen_agentchat")
    from aegis_probe.cli import main

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(MATH.read_text().splitlines()[0] + "\n")
    rc = main(["inject", "--app", f"{EXAMPLES / 'autogen_math.py'}:build_app", "--tasks", str(tasks),
               "--plans-per-run", "3", "--out", str(tmp_path / "out"), "--no-progress",
               "--modes", "FM-3.3,FM-2.6", "--strategies", "response_corruption"])
    text = capsys.readouterr().out
    assert rc == 0
    assert re.search(r"^total\s+3\s+3\s+\d\s+\d", text, re.M), text
    assert {r["mode"] for r in _records(tmp_path / "out") if r["kind"] == "injected"} <= {"FM-3.3", "FM-2.6"}


def test_code_campaign_judged_by_unit_tests(tmp_path):
    pytest.importorskip("autogen_agentchat")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(next(line for line in (EXAMPLES / "code_tasks.jsonl").read_text().splitlines() if "fizzbuzz" in line))
    out = tmp_path / "campaign"
    rows = run_campaign(f"{EXAMPLES / 'autogen_code.py'}:build_app", tasks, out, plans_per_run=2,
                        modes=("FM-1.1",), strategies=("response_corruption",), progress=False)
    records = _records(out)
    assert records[0]["kind"] == "baseline" and records[0]["success"]  # the reference code passes its tests
    assert rows == [{"mode": "FM-1.1", "strategy": "response_corruption", "attempted": 2, "applied": 2, "flipped": 2, "kept": 2}]
    kept = load_trajectories(out / "traces")
    assert sorted(t.labels.faults[0].agent for t in kept) == ["coder", "reviewer"]
    assert all("% 30 == 0" in t.outcome.answer for t in kept)  # numbers doubled in the handed-in code


@pytest.mark.parametrize("framework", ["camel", "metagpt"])
def test_campaign_on_other_frameworks(framework, tmp_path, monkeypatch):
    pytest.importorskip({"camel": "camel.agents", "metagpt": "metagpt"}[framework])
    monkeypatch.chdir(tmp_path)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("\n".join(MATH.read_text().splitlines()[:2]) + "\n")
    out = tmp_path / "campaign"
    rows = run_campaign(f"{EXAMPLES / f'{framework}_math.py'}:build_app", tasks, out, plans_per_run=4, seed=3,
                        modes=("FM-1.1", "FM-2.6", "FM-3.3"), progress=False)
    records = _records(out)
    assert not [r for r in records if "error" in r]
    assert all(r["success"] for r in records if r["kind"] == "baseline")
    kept = {t.trace_id: t for t in load_trajectories(out / "traces")} if (out / "traces").exists() else {}
    assert sum(r["kept"] for r in rows) == len(kept) > 0
    for r in records:
        if r.get("kept"):
            fault = kept[r["trace_id"]].labels.faults[0]
            assert (fault.agent, fault.mode, fault.strategy, fault.step) == (r["agent"], r["mode"], r["strategy"], r["applied"][0]["step"])
            assert kept[r["trace_id"]].framework == framework
