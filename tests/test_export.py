"""Who&When-shaped export: ``python -m aegis_probe.train export --format whowhen``, read back by the
Who&When importer to the same steps, agents and labels."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

import aegis_probe
from aegis_probe.trajectory import Fault, Labels, Outcome, Step, Trajectory
from training.cli import main
from training.exporters import export_whowhen, whowhen_record
from training.importers import whowhen

WHOWHEN = Path("/work/shared/data/whowhen/Algorithm-Generated")


def _same(a: Trajectory, b: Trajectory) -> None:
    assert [(s.index, s.agent, s.output) for s in a.steps] == [(s.index, s.agent, s.output) for s in b.steps]
    assert a.agents == b.agents
    assert [(f.agent, f.step) for f in a.labels.faults[:1]] == [(f.agent, f.step) for f in b.labels.faults]
    assert (a.task, a.outcome.expected) == (b.task, b.outcome.expected)


def test_round_trip_keeps_steps_agents_and_label(tmp_path):
    traj = Trajectory(
        trace_id="ab" * 16, task="What is 2 + 3?",
        steps=[Step(index=0, agent="planner", output="Add them."),
               Step(index=1, agent="manager", next_speaker="solver", output="Solver, add 2 and 3."),
               Step(index=2, agent="solver", output="6")],
        outcome=Outcome(success=False, expected="5"),
        labels=Labels(faults=[Fault(agent="solver", step=2, mode="FM-3.3"), Fault(agent="manager", step=1, reason="wrong ask")]),
    )
    record = whowhen_record(traj)
    assert record["history"][1] == {"name": "manager", "role": "manager (-> solver)", "content": "Solver, add 2 and 3."}
    assert (record["mistake_agent"], record["mistake_step"], record["mistake_reason"]) == ("manager", "1", "wrong ask")
    assert (record["question"], record["ground_truth"], record["is_correct"]) == ("What is 2 + 3?", "5", False)
    (path,) = export_whowhen([traj], tmp_path / "out")
    (back,) = whowhen.load(path).trajectories
    _same(traj.model_copy(update={"labels": Labels(faults=[traj.labels.faults[1]])}), back)


def test_unlabelled_trajectory_has_empty_mistake_fields(tmp_path):
    traj = Trajectory(run_id="r1", steps=[Step(index=0, agent="a", output="x")])
    record = whowhen_record(traj)
    assert (record["mistake_agent"], record["mistake_step"], record["mistake_reason"]) == ("", "", "")
    assert not {"ground_truth", "is_correct"} & set(record)
    (back,) = whowhen.load(export_whowhen([traj], tmp_path)[0]).trajectories
    assert back.labels.faults == [] and [s.agent for s in back.steps] == ["a"]


@pytest.mark.skipif(not WHOWHEN.is_dir(), reason="public Who&When files not present")
def test_public_whowhen_records_survive_import_export_import(tmp_path):
    files = sorted(WHOWHEN.glob("*.json"))[:5]
    for f in files:
        (tmp_path / "in").mkdir(exist_ok=True)
        (tmp_path / "in" / f.name).write_bytes(f.read_bytes())
    first = whowhen.load(tmp_path / "in").trajectories
    assert len(first) == len(files)
    export_whowhen(first, tmp_path / "out")
    again = whowhen.load(tmp_path / "out").trajectories
    by_question = {t.task: t for t in again}
    for a in first:
        _same(a, by_question[a.task])


def test_export_cli_on_a_magentic_trace(model_server, tmp_path, capsys):
    pytest.importorskip("autogen_agentchat")
    from aegis_probe.demos import magentic as demo
    from aegis_probe.demos.task import judge
    from aegis_probe.injection import InjectionPlan, Target

    server = model_server(demo.policy)
    store = tmp_path / "store"
    for plan in (None, InjectionPlan(targets=[Target(agent=demo.ORCHESTRATOR, mode="FM-1.1", nth=1)])):
        app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
        probe = aegis_probe.instrument(app, store=store, judge=judge)
        if plan is None:
            asyncio.run(app.run(task=demo.TASK))
        else:
            with probe.inject(plan):
                asyncio.run(app.run(task=demo.TASK))
        probe.flush()
        probe.uninstrument()
    traces = aegis_probe.load_trajectories(store)
    assert len(traces) == 2

    out = tmp_path / "whowhen"
    assert main(["export", "--format", "whowhen", str(store), "-o", str(out)]) == 0
    assert "wrote 2 Who&When files" in capsys.readouterr().out
    records = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    assert set(records) == {t.trace_id for t in traces}
    clean, injected = (records[t.trace_id] for t in traces)
    orch = demo.ORCHESTRATOR
    assert [h["role"] for h in clean["history"]] == [
        orch, f"{orch} (-> calculator)", "calculator", f"{orch} (-> reviewer)", "reviewer", orch]
    assert clean["is_correct"] is True and clean["mistake_agent"] == clean["mistake_step"] == ""
    assert (injected["mistake_agent"], injected["mistake_step"], injected["is_correct"]) == (orch, "1", False)
    assert injected["question"] == demo.TASK and injected["ground_truth"] == "126"

    back = {t.run_id.rpartition(":")[2]: t for t in whowhen.load(out).trajectories}
    for traj in traces:
        _same(traj, back[traj.trace_id])


def test_export_cli_bad_input_is_one_line_error(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["export", "--format", "whowhen", str(bad), "-o", str(tmp_path / "out")]) != 0
    err = capsys.readouterr().err
    assert "bad.json" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()
