"""Two inject campaigns into one output directory at once (the command started twice): the second
is refused with one error line, so no run is made twice and no store holds a run twice."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace

import pytest

from aegis_probe import cli
from aegis_probe.apps import AppSpec
from aegis_probe.injection.campaign import LOCK_FILE, RUNS_FILE, run_campaign

pytest.importorskip("autogen_agentchat")

TASK = {"id": "pens", "type": "math", "expected": "126",
        "task": "A shop sells pens at 17 coins and notebooks at 25 coins. What do 3 pens and 3 notebooks cost in total?"}


def test_a_second_campaign_into_the_same_out_is_refused(tmp_path, capsys):
    demo = AppSpec.load("aegis_probe.demos.autogen")
    policy = demo.policy
    assert policy is not None
    release = threading.Event()

    def slow_policy(body):  # the first campaign's model answers once the second has been tried
        release.wait(30)
        return policy(body)

    out = tmp_path / "out"
    first = threading.Thread(target=run_campaign, args=(replace(demo, policy=slow_policy), [TASK], out),
                             kwargs={"plans_per_run": 0, "progress": False})
    first.start()
    try:
        deadline = time.monotonic() + 30
        while not (out / LOCK_FILE).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        tasks = tmp_path / "tasks.jsonl"
        tasks.write_text(json.dumps(TASK) + "\n")
        code = cli.main(["inject", "--app", "aegis_probe.demos.autogen", "--tasks", str(tasks), "--out", str(out),
                         "--plans-per-run", "0", "--no-progress"])
    finally:
        release.set()
        first.join(60)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"error: {out} is in use by another inject campaign" in err, err
    records = [json.loads(line) for line in (out / RUNS_FILE).read_text().splitlines()]
    assert [r["key"] for r in records] == ["pens/baseline"] and records[0]["success"]
    # the directory is free again once the first campaign ended: a resume finds the run done
    assert run_campaign(demo, [TASK], out, plans_per_run=0, progress=False) == []
    assert len((out / RUNS_FILE).read_text().splitlines()) == 1
