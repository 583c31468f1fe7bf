"""Honest attribution evaluation: one answer per trace, floors fit on training data, the
``benchmark`` command on unseen systems, DCL reading whole traces without agent names, the
long-horizon example team, and quiet long jobs."""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import pytest

from aegis_probe.trajectory import Fault, Labels, Step, Trajectory
from aegis_probe.train import metrics
from aegis_probe.train.answers import Attribution, gold_attribution
from aegis_probe.train.baselines import MostFrequentStep, RandomBaseline, acting_agents, expected_random

pytestmark = pytest.mark.train
REPO = Path(__file__).resolve().parent.parent
CLEAN = ["I checked the numbers and they match the source.", "The value was copied exactly as reported.",
         "Everything is consistent with the previous step.", "I passed the result on unchanged."]
BROKEN = "I changed the reported value from 41 to 14 without any reason and passed it on as correct."


def traj(steps, faults=(), rid="t"):
    return Trajectory(run_id=rid, task="Report the value.", steps=[Step(index=i, agent=a, output=o) for i, (a, o) in enumerate(steps)],
                      labels=Labels(faults=list(faults), source="test"))


def system_runs(names: list[str], n: int, prefix: str, seed: int, turns: int = 8) -> list[Trajectory]:
    """Runs of one 'system' (its own agent names) where one turn, anywhere, corrupts the value."""
    rng = random.Random(seed)
    runs = []
    for i in range(n):
        bad = rng.randrange(turns)
        steps = [(names[k % len(names)], BROKEN if k == bad else rng.choice(CLEAN)) for k in range(turns)]
        runs.append(traj(steps, [Fault(agent=steps[bad][0], step=bad)], rid=f"{prefix}-{i}"))
    return runs


def write_trajs(path: Path, trajs: list[Trajectory]) -> Path:
    from aegis_probe.train.importers.native import write

    return write(trajs, path)


# ---------------------------------------------------------------- eval: one answer, floors

def test_every_metric_scores_one_answer_per_trace():
    golds = [Attribution("A", 1, [("A", "FM-1.1")]), Attribution("B", 2, [("B", None)])]
    # the pairs name other agents than the answer: agent F1 must still judge the answer's agent
    preds = [Attribution("A", 1, [("B", "FM-2.6"), ("A", "FM-1.1"), ("C", None)]), Attribution("C", 0, [("B", None)])]
    report = metrics.evaluate(golds, preds, n_resamples=20)
    assert report["agent_accuracy"] == 0.5
    assert report["agent_f1"]["micro_f1"] == pytest.approx(0.5)
    assert report["pair_f1"]["micro_precision"] == pytest.approx(0.5)  # (A, FM-1.1) right, (C, None) wrong
    assert metrics.one_answer(Attribution(None, 3, [("X", "FM-3.1")])) == Attribution("X", 3, [("X", "FM-3.1")])


def test_intervals_resample_only_the_traces_an_accuracy_is_over():
    """Two traces with a gold step, both answered right, among eight with an agent only: the step
    accuracy is 1 and so is its whole interval (resamples holding neither step-labelled trace
    scored 0 and put the lower bound at 0); the expected random step is over those two only."""
    from aegis_probe.train.benchmark import score_set

    stepped = [traj([("A", "x"), ("B", "y")], [Fault(agent="B", step=1)], rid=f"s{i}") for i in range(2)]
    agent_only = [traj([("A", "x"), ("B", "y")], [Fault(agent="A")], rid=f"a{i}") for i in range(8)]
    test = stepped + agent_only
    golds = [gold_attribution(t) for t in test]
    preds = [Attribution(g.agent, g.step, [(g.agent, None)]) for g in golds]
    report = metrics.evaluate(golds, preds, n_resamples=200)
    assert report["step_accuracy"] == 1.0 and report["step_accuracy_ci"] == (1.0, 1.0)
    part = score_set(test, test, preds, [2] * len(test), n_resamples=200)
    assert part["results"]["DCL (trained on the training sets)"]["step"]["ci95"] == [1.0, 1.0]
    assert part["results"]["expected random (acting agent, step)"]["step"]["value"] == 0.5  # was 0.1: zeros counted


def test_random_pool_is_the_acting_agents_and_floors_fit_on_training():
    t = traj([("user", "task"), ("Planner", "plan"), ("human", "ok"), ("Coder", "code")], [Fault(agent="Coder", step=3)])
    assert acting_agents(t) == ["Planner", "Coder"]
    assert {RandomBaseline(s)(t).agent for s in range(30)} == {"Planner", "Coder"}
    assert expected_random(t, gold_attribution(t)) == (0.5, 0.25)
    train = [traj([("P", "x"), ("Q", "y"), ("R", "z")], [Fault(agent="Q", step=1)], rid=str(i)) for i in range(3)]
    pred = MostFrequentStep(train)(traj([("A", "1"), ("B", "2")]))
    assert (pred.agent, pred.step) == ("B", 1)
    assert MostFrequentStep(train)(traj([("A", "1")])).step == 0  # clipped to the trace


def test_eval_fit_on_labels_oracle_and_judges_need_an_endpoint(tmp_path, capsys):
    from aegis_probe.train.cli import main

    train = write_trajs(tmp_path / "train.jsonl", system_runs(["x", "y"], 6, "tr", 1))
    test = write_trajs(tmp_path / "test.jsonl", system_runs(["x", "y"], 6, "te", 2))
    assert main(["eval", str(test), "--method", "majority", "--fit-on", str(train), "--out-dir", str(tmp_path / "a"),
                 "--bootstrap", "10"]) == 0
    assert f"most frequent agent (fit on {train})" in capsys.readouterr().out
    assert main(["eval", str(test), "--method", "majority-step", "--out-dir", str(tmp_path / "b"), "--bootstrap", "10"]) == 0
    out = capsys.readouterr().out
    assert "most frequent step (oracle: fit on the evaluation set)" in out and "gold steps unreachable (trace cut)" in out
    env = {k: os.environ.pop(k) for k in ("OPENAI_BASE_URL",) if k in os.environ}
    try:
        assert main(["eval", str(test), "--method", "all-at-once", "--out-dir", str(tmp_path / "c")]) == 2
    finally:
        os.environ.update(env)
    err = capsys.readouterr().err.strip().splitlines()
    assert "needs an OpenAI-compatible endpoint: give --base-url" in err[-1] and not any("Traceback" in e for e in err)


# ---------------------------------------------------------------- DCL: whole traces, no names

def test_dcl_example_reads_every_turn_and_hides_agent_names():
    from aegis_probe.train.dcl.examples import example_from_row

    row = {"id": "r", "turns": [{"agent": ["Web_Surfer", "Coder"][i % 2], "text": f"turn {i}; ask Web Surfer and Coder"}
                                for i in range(150)],
           "label_agents": ["Coder"], "label_modes": [], "label_step": 141, "positive": False}
    ex = example_from_row(row, ["FM-1.1"], anonymise_agents=True)
    assert len(ex.turn_texts) == 150 and ex.step == 141 and ex.n_turns == 150
    assert ex.agent_texts == ["agent 1", "agent 2"] and ex.agents == ["Web_Surfer", "Coder"]
    assert ex.turn_texts[1] == "agent 2: turn 1; ask agent 1 and agent 2"
    assert not any("Coder" in t or "Surfer" in t for t in ex.turn_texts)
    assert ex.mode_target is None  # no mode label: the mode head does not learn from this row
    cut = example_from_row(row, ["FM-1.1"], max_turns=64)
    assert cut.step is None and cut.n_turns == 150


def test_benchmark_inputs_with_bad_records(tmp_path, capsys):
    """A malformed JSON line and a line of bytes that are not UTF-8 are skipped, each named (file,
    line) on stderr; a trace without steps stops the command with one line naming file and trace."""
    from aegis_probe.train.benchmark import load_sets
    from aegis_probe.train.cli import main

    good = write_trajs(tmp_path / "good.jsonl", system_runs(["alpha", "beta"], 3, "a", 0)).read_bytes().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\n".join([good[0], b'{"run_id": "x", "steps": [', good[1], b"\xff\xfe{}", good[2]]) + b"\n")
    sets = load_sets([str(bad)])
    assert [t.run_id for t in sets[str(bad)]] == ["a-0", "a-1", "a-2"]
    err = capsys.readouterr().err
    assert f"{bad} [line 2]: invalid JSON" in err and f"{bad} [line 4]: invalid JSON: not UTF-8 text: byte 0xff" in err

    empty = write_trajs(tmp_path / "empty.jsonl", [*system_runs(["alpha", "beta"], 2, "a", 0), traj([], rid="no-steps")])
    assert main(["benchmark", "--train", str(empty), "--test", str(bad), "--out", str(tmp_path / "out")]) == 2
    assert f"error: {empty}: trajectory 'no-steps' has no steps to attribute" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()

    broken = tmp_path / "model"
    broken.mkdir()
    (broken / "dcl_config.json").write_text('{"modes": [')
    test = write_trajs(tmp_path / "test.jsonl", system_runs(["gamma"], 2, "b", 1))
    assert main(["benchmark", "--train", str(bad), "--test", str(test), "--model", str(broken), "--out", str(tmp_path / "out")]) == 2
    assert f"error: {broken / 'dcl_config.json'}: not a DCL model config" in capsys.readouterr().err


def test_benchmark_transfers_to_a_system_with_other_names(tmp_path, capsys):
    """Trained on one system, scored on another with other agent names and longer runs: DCL reads
    the turns (the corrupting one), decodes agent and step as one answer, beats every floor."""
    from aegis_probe.train.cli import main

    train = write_trajs(tmp_path / "train.jsonl", system_runs(["alpha", "beta", "gamma"], 24, "a", 0))
    test = write_trajs(tmp_path / "test.jsonl", system_runs(["Planner", "Coder", "Checker", "Writer"], 16, "b", 1, turns=12))
    out = tmp_path / "bench"
    cache = tmp_path / "emb.safetensors"
    assert main(["benchmark", "--train", str(train), "--test", str(test), "--out", str(out), "--epochs", "12", "--inputs", "text",
                 "--bootstrap", "100", "--embedding-cache", str(cache)]) == 0
    printed = capsys.readouterr().out
    assert "| DCL (trained on the training sets) |" in printed and "oracle: most frequent agent present" in printed
    part = json.loads((out / "benchmark.json").read_text())["tests"][str(test)]
    dcl = part["results"]["DCL (trained on the training sets)"]
    assert part["n"] == 16 and part["unreachable_gold_steps"] == 0 and len(part["predictions"]) == 16
    assert dcl["step"]["value"] >= 0.8 and dcl["agent"]["value"] >= dcl["step"]["value"]
    assert part["results"]["most frequent agent (fit on train)"]["agent"]["value"] == 0.0  # names never seen
    assert part["above_every_floor"] == {"agent": True, "step": True}
    from aegis_probe.train.dcl.attributor import DCLAttributor

    model = DCLAttributor.load(out / "model")
    assert model.load_cache(cache) == 24  # the distinct windows of both sets (5 texts x 4 agents + 4 names)
    model.encoder.encode = None  # everything below is read from the cache: the encoder is not called
    pred = model.predict({"id": "x", "turns": [{"agent": "a", "text": CLEAN[0]}, {"agent": "b", "text": BROKEN}]})
    assert pred["step_agent"] == pred["agent"] and pred["modes"] == [] and pred["top_pair"]["mode"] is None
    assert main(["benchmark", "--train", str(train), "--test", str(train), "--model", str(out / "model"),
                 "--out", str(tmp_path / "again")]) == 2  # a test set must be unseen
    assert "also in the training sets" in capsys.readouterr().err


# ---------------------------------------------------------------- the long-horizon team

@pytest.mark.autogen
def test_longhorizon_team_runs_long_and_a_late_fault_misleads_it(tmp_path):
    pytest.importorskip("autogen_agentchat")
    from aegis_probe.apps import AppSpec, Endpoint
    from aegis_probe.injection.campaign import Campaign, load_tasks
    from aegis_probe.injection.plan import InjectionPlan
    from aegis_probe.modelserver import ModelServer

    spec = AppSpec.load(f"{REPO / 'examples/longhorizon/team.py'}:build_app")
    task = next(t for t in load_tasks(REPO / "examples/longhorizon/tasks.jsonl") if t["id"].endswith("density-3"))
    campaign = Campaign(spec, [task], tmp_path, progress=False)

    with ModelServer(spec.policy) as server:
        endpoint = Endpoint(server.base_url, "scripted", "none")
        clean = campaign.execute(endpoint, task, None)
        steps = clean.trajectory.steps
        assert clean.success and len(steps) >= 15
        assert {s.agent for s in steps} == {"orchestrator", "web_search", "coder"}
        assert {"execute_tool search", "execute_tool run_python"} <= {r.name for r in clean.records}
        late = [s.index for s in steps if s.agent == "web_search"][-1]  # the last search, deep in the run
        faulty = campaign.execute(endpoint, task, InjectionPlan.single("web_search", "FM-2.6", step=late))
    assert not faulty.success and faulty.applied[0]["step"] == late


# ---------------------------------------------------------------- quiet long jobs

def test_stderr_goes_to_the_log_while_progress_stays(tmp_path, capfd):
    from aegis_probe.train.quiet import stderr_to

    with stderr_to(tmp_path / "log.txt") as terminal:
        print("framework chatter", file=sys.stderr)
        os.write(2, b"fd-level traceback\n")
        terminal.write("progress 1/1\n")
    print("after", file=sys.stderr)
    err = capfd.readouterr().err
    assert "progress 1/1" in err and "after" in err and "chatter" not in err and "fd-level" not in err
    assert (tmp_path / "log.txt").read_text() == "framework chatter\nfd-level traceback\n"


def test_benchmark_compares_runs_not_ids_across_data_sets(tmp_path, capsys):
    """Who&When's two subsets both name their files 1.json, 2.json, ...: training on one and testing
    on the other runs (it was refused as 'also in the training sets'); a test set holding a copy of
    a training run under another file name is still refused."""
    from aegis_probe.train.cli import main

    def whowhen_dir(name: str, runs: list[Trajectory]) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        for i, run in enumerate(runs, 1):
            fault = run.labels.faults[0]
            history = [{"content": s.output, "role": s.agent} for s in run.steps]  # Hand-Crafted shape: no name
            (folder / f"{i}.json").write_text(json.dumps({"question": run.task, "history": history, "is_corrected": False,
                                                          "mistake_agent": fault.agent, "mistake_step": str(fault.step)}))
        return folder

    train = whowhen_dir("Algorithm-Generated", system_runs(["alpha", "beta"], 6, "a", 0))
    test = whowhen_dir("Hand-Crafted", system_runs(["Orchestrator", "WebSurfer"], 4, "b", 1))
    options = ["--epochs", "1", "--bootstrap", "10", "--inputs", "features"]
    assert main(["benchmark", "--train", str(train), "--test", str(test), "--out", str(tmp_path / "b"), *options]) == 0
    assert json.loads((tmp_path / "b" / "benchmark.json").read_text())["tests"][str(test)]["n"] == 4
    clean = json.loads((train / "3.json").read_text()) | {"mistake_agent": "", "mistake_step": ""}
    (test / "8.json").write_text(json.dumps(clean))  # a clean run seen in training is not scored: no matter
    assert main(["benchmark", "--train", str(train), "--test", str(test), "--model", str(tmp_path / "b" / "model"),
                 "--out", str(tmp_path / "c"), *options]) == 0
    (test / "9.json").write_bytes((train / "3.json").read_bytes())
    assert main(["benchmark", "--train", str(train), "--test", str(test), "--model", str(tmp_path / "b" / "model"),
                 "--out", str(tmp_path / "d"), *options]) == 2
    assert f"{test}: 1 of its labelled failures are also in the training sets" in capsys.readouterr().err


def test_benchmark_refuses_a_test_set_holding_training_runs_in_another_format(tmp_path, capsys):
    """Captured traces trained on, then exported as Who&When files and given as the test set, are the
    same runs: refused (the runs were compared with their span ids, times and roles, which the
    export does not keep, so the copy was scored as unseen)."""
    from aegis_probe.train.cli import main

    runs = system_runs(["planner", "coder"], 4, "t", 0)
    for run in runs:  # as captured: span ids, times
        run.trace_id = f"{run.run_id}-trace"
        for step in run.steps:
            step.span_id, step.start_ns, step.end_ns = f"{step.index:016x}", 1000 + step.index, 2000 + step.index
    train = write_trajs(tmp_path / "train.jsonl", runs)
    assert main(["export", str(train), "--format", "whowhen", "-o", str(tmp_path / "ww")]) == 0
    assert main(["benchmark", "--train", str(train), "--test", str(tmp_path / "ww"), "--out", str(tmp_path / "b"),
                 "--epochs", "1", "--inputs", "features"]) == 2
    assert f"{tmp_path / 'ww'}: 4 of its labelled failures are also in the training sets" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


def test_benchmark_reads_trail_label_files_and_checks_test_sets_first(tmp_path, capsys):
    """TRAIL ships its labels as separate files: benchmark --labels-dir reads them for TRAIL sources
    (it had no such option: a TRAIL test set was 'no labelled failures'), and a test set without
    labels is refused before any training (it was found only after training the model)."""
    from aegis_probe.train.cli import main

    traces, labels = tmp_path / "trail", tmp_path / "trail-labels"
    traces.mkdir(), labels.mkdir()
    for t in range(2):
        tid = f"{t:032x}"
        steps = [{"trace_id": tid, "span_id": f"s{t}{k}", "span_name": f"Step {k + 1}", "timestamp": f"2025-01-01T00:00:0{k}",
                  "duration": "PT0.5S", "status_code": "Unset", "span_attributes": {"openinference.span.kind": "CHAIN",
                  "output.value": BROKEN if k == t + 1 else CLEAN[k]}, "child_spans": []} for k in range(4)]
        agent = {"trace_id": tid, "span_id": f"a{t}", "span_name": "CodeAgent.run", "timestamp": "2025-01-01T00:00:00",
                 "span_attributes": {"openinference.span.kind": "AGENT"}, "child_spans": steps}
        (traces / f"{tid}.json").write_text(json.dumps({"trace_id": tid, "spans": [agent]}))
        (labels / f"{tid}.json").write_text(json.dumps({"errors": [{"category": "Formatting Errors", "location": f"s{t}{t + 1}",
                                                                    "impact": "HIGH"}]}))
    train = write_trajs(tmp_path / "train.jsonl", system_runs(["alpha", "beta"], 6, "a", 0))
    options = ["--epochs", "1", "--bootstrap", "10", "--inputs", "features"]
    assert main(["benchmark", "--train", str(train), "--test", str(traces), "--out", str(tmp_path / "b"), *options]) == 2
    assert f"error: {traces}: no labelled failures to score" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()  # refused before training
    assert main(["benchmark", "--train", str(train), "--test", str(traces), "--labels-dir", str(labels),
                 "--out", str(tmp_path / "b"), *options]) == 0
    part = json.loads((tmp_path / "b" / "benchmark.json").read_text())["tests"][str(traces)]
    assert part["n"] == 2 and [p["gold_step"] for p in part["predictions"]] == [1, 2]
