"""Resuming an inject campaign after the tasks file changed (real-use sweep): a run made for the
old version of a task is redone, or refused when its trace is already stored."""

from __future__ import annotations

import json
import os

import pytest

from aegis_probe import cli
from aegis_probe.injection.campaign import RUNS_FILE

pytest.importorskip("autogen_agentchat")

TASK = {"id": "pens", "type": "math", "expected": "999",  # wrong: the team answers 126
        "task": "A shop sells pens at 17 coins and notebooks at 25 coins. What do 3 pens and 3 notebooks cost in total?"}


def _inject(tmp_path, task: dict) -> int:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(task) + "\n")
    return cli.main(["inject", "--app", "aegis_probe.demos.autogen", "--tasks", str(tasks), "--out", str(tmp_path / "out"),
                     "--plans-per-run", "1", "--no-progress"])


def test_a_corrected_task_is_run_again_and_a_stored_one_is_refused(tmp_path, capsys):
    assert _inject(tmp_path, TASK) == 1  # no baseline succeeded
    assert "(expected '999')" in capsys.readouterr().out
    # The expected answer corrected: the failed baseline is redone, not kept as 'wrong answer
    # ... (expected '126')' with nothing injected.
    assert _inject(tmp_path, dict(TASK, expected="126")) == 0
    out = capsys.readouterr().out
    assert "baselines: 1 attempted, 1 succeeded" in out and "wrong answer" not in out, out
    records = [json.loads(line) for line in (tmp_path / "out" / RUNS_FILE).read_text().splitlines()]
    assert [r["key"] for r in records] == ["pens/baseline", "pens/baseline", "pens/plan-0"]
    # Changed again after its runs were stored: refused, nothing run or written.
    before = (tmp_path / "out" / RUNS_FILE).read_bytes()
    assert _inject(tmp_path, dict(TASK, expected="126", task=TASK["task"].replace("3 notebooks", "4 notebooks"))) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "task 'pens' changed since run pens/baseline was made and stored" in err, err
    assert (tmp_path / "out" / RUNS_FILE).read_bytes() == before


def test_records_and_stores_stay_in_out_when_the_app_changes_directory(tmp_path, monkeypatch):
    """A relative --out is the directory named at the start: an app that moves the process to a
    scratch directory (and does not come back) had the campaign's records written there."""
    from dataclasses import replace

    from aegis_probe.apps import AppSpec
    from aegis_probe.injection.campaign import run_campaign

    demo = AppSpec.load("aegis_probe.demos.autogen")
    scratch = tmp_path / "scratch"
    scratch.mkdir()

    def run_in_scratch(app, task):
        os.chdir(scratch)
        return demo.run_app(app, task)

    monkeypatch.chdir(tmp_path)
    run_campaign(replace(demo, run_app=run_in_scratch), [dict(TASK, expected="126")], "out", plans_per_run=1, progress=False)
    assert not (scratch / "out").exists()
    keys = [json.loads(line)["key"] for line in (tmp_path / "out" / RUNS_FILE).read_text().splitlines()]
    assert keys == ["pens/baseline", "pens/plan-0"]
