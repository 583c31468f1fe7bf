"""Resuming an inject campaign whose runs.jsonl holds a line that is JSON but no run record (a field
missing or of the wrong type, e.g. edited by hand): one ``error:`` line naming file:line and the
field, exit 2, and nothing already written (records, stores) changed or lost."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aegis_probe import cli
from aegis_probe.injection.campaign import RUNS_FILE, read_records

pytest.importorskip("autogen_agentchat")

TASK = {"id": "pens", "type": "math", "expected": "126",
        "task": "A shop sells pens at 17 coins and notebooks at 25 coins. What do 3 pens and 3 notebooks cost in total?"}


def _inject(tmp_path: Path) -> int:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(TASK) + "\n")
    return cli.main(["inject", "--app", "aegis_probe.demos.autogen", "--tasks", str(tasks), "--out", str(tmp_path / "out"),
                     "--plans-per-run", "1", "--no-progress"])


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> Path:
    """A finished campaign (a successful baseline and one injected run): its folder."""
    root = tmp_path_factory.mktemp("campaign")
    assert _inject(root) == 0
    return root


def _edited(campaign: Path, tmp_path: Path, line: int, edit: Any) -> Path:
    """A copy of the campaign with record ``line`` (1-based) of runs.jsonl passed through ``edit``."""
    out = tmp_path / "out"
    for name, data in _files(campaign / "out").items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
    lines = (out / RUNS_FILE).read_text().splitlines()
    lines[line - 1] = json.dumps(edit(json.loads(lines[line - 1])))
    (out / RUNS_FILE).write_text("\n".join(lines) + "\n")
    return out


def _without(field: str) -> Any:
    return lambda rec: {k: v for k, v in rec.items() if k != field}


def _with(**fields: Any) -> Any:
    return lambda rec: {**rec, **fields}


@pytest.mark.parametrize("line, edit, message", [
    (1, _without("success"), "run record 'pens/baseline' lacks field `success` (true or false)"),
    (1, _without("agent_steps"), "run record 'pens/baseline' lacks field `agent_steps`"),
    (1, _with(success="false"), "run record 'pens/baseline': field `success` is \"false\", not true or false"),
    (1, _with(agent_steps=["planner"]), "field `agent_steps` is [\"planner\"], not an object of agent: step count"),
    (1, _with(trace_id=None), "run record 'pens/baseline': field `trace_id` is null, not a string: its trace is stored"),
    (2, _without("mode"), "run record 'pens/plan-0' lacks field `mode` (a string)"),
    (2, _with(kept="yes"), "run record 'pens/plan-0': field `kept` is \"yes\", not true or false"),
    (2, _with(applied={"agent": "calculator"}), "field `applied` is {\"agent\": \"calculator\"}, not a list of objects"),
    (2, _without("key"), "run record without its `key` (a string)"),
    (2, _without("kind"), "run record 'pens/plan-0' lacks field `kind` (\"baseline\" or \"injected\")"),
    (2, lambda rec: [rec], "expected a run record (a JSON object), got list"),
], ids=["no-success", "no-agent-steps", "success-str", "steps-list", "stored-no-trace-id", "no-mode", "kept-str",
        "applied-dict", "no-key", "no-kind", "a-list"])
def test_resume_over_a_record_lacking_a_field_is_one_error_line(campaign, tmp_path, capsys, line, edit, message):
    out = _edited(campaign, tmp_path, line, edit)
    before = _files(out)
    capsys.readouterr()
    assert _inject(tmp_path) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {out / RUNS_FILE}:{line}: ") and err.count("\n") == 1, err
    assert message in err and err.rstrip().endswith("(correct or delete that line to resume)"), err
    assert _files(out) == before, "nothing written, nothing lost"


def test_a_line_cut_short_by_a_crash_is_still_skipped_and_redone(campaign, tmp_path, caplog):
    """What a crash mid-write leaves (a record's first bytes) is no JSON: skipped with a warning, as before."""
    out = _edited(campaign, tmp_path, 2, lambda rec: rec)
    data = (out / RUNS_FILE).read_bytes()
    (out / RUNS_FILE).write_bytes(data[:-40])  # the injected run's record cut short
    assert list(read_records(out)) == ["pens/baseline"]
    assert f"{RUNS_FILE}:2: unreadable run record skipped" in caplog.text


def test_a_record_the_disk_has_no_room_for_is_taken_back_and_the_file_named(campaign, tmp_path):
    """Resuming with a task added while the disk fills up (a file size limit just past runs.jsonl):
    the new run's record, cut short midway, is taken back (runs.jsonl as it was) and the error
    line names runs.jsonl (it named no file, and left half a record behind)."""
    import resource
    import signal
    import subprocess
    import sys

    out = _edited(campaign, tmp_path, 1, lambda rec: rec)
    before = (out / RUNS_FILE).read_bytes()
    train = {"id": "train", "type": "math", "expected": "180", "task": "A train travels 84 km in the first hour "
             "and 96 km in the second hour. How many km does it travel in total?"}
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(TASK) + "\n" + json.dumps(train) + "\n")

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (len(before) + 40, len(before) + 40))

    done = subprocess.run([sys.executable, "-m", "aegis_probe", "inject", "--app", "aegis_probe.demos.autogen", "--tasks",
                           str(tasks), "--out", str(out), "--plans-per-run", "1", "--no-progress"],
                          capture_output=True, text=True, timeout=300, preexec_fn=limit)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [f"error: [Errno 27] File too large: '{out / RUNS_FILE}'"], done.stderr
    assert (out / RUNS_FILE).read_bytes() == before
