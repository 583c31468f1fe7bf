"""README.md's rule for progress bars, for every command that draws one: a bar on a terminal only;
a log or a pipe gets the summary lines (``import`` did so; ``build``, ``blame`` and ``inject``
wrote their bars' carriage-return updates into logs and pipes)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from aegis_probe import cli
from aegis_probe.train import cli as train_cli

ROOT = Path(__file__).resolve().parents[1]


def _terminal(monkeypatch: pytest.MonkeyPatch, yes: bool) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: yes)  # the captured stream says what a terminal would


@pytest.mark.parametrize("terminal", [False, True])
def test_build_draws_its_bar_on_a_terminal_only(terminal, tmp_path, capsys, monkeypatch):
    traj = {"id": "t1", "task": "What is 1 + 1?", "steps": [{"index": 0, "agent": "a", "output": "2"}],
            "outcome": {"success": False}, "labels": {"primary": {"faults": [{"agent": "a", "step": 0}]}}}
    src = tmp_path / "trajectories.jsonl"
    src.write_text(json.dumps(traj) + "\n")
    _terminal(monkeypatch, terminal)
    assert train_cli.main(["build", "dcl", str(src), "--format", "trajectories", "-o", str(tmp_path / "rows.jsonl")]) == 0
    assert ("build dcl:" in capsys.readouterr().err) is terminal


@pytest.mark.autogen
def test_inject_and_blame_draw_their_bars_on_a_terminal_only(tmp_path, capsys, monkeypatch):
    pytest.importorskip("autogen_agentchat")
    store = tmp_path / "store"
    assert cli.main(["demo", "--inject", "FM-2.6", "--trace-dir", str(store)]) == 0
    trace = capsys.readouterr().out.split("traces show ")[1].split()[0]
    blame = ["blame", "--trace", trace, "--dir", str(store), "--app", "aegis_probe.demos.autogen",
             "--fixer", str(ROOT / "examples" / "fixers.py") + ":recompute"]
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text((ROOT / "examples" / "injection" / "math_tasks.jsonl").read_text().splitlines()[0] + "\n")
    for terminal in (False, True):
        _terminal(monkeypatch, terminal)
        assert cli.main(blame) == 0
        assert ("replays:" in capsys.readouterr().err) is terminal
        inject = ["inject", "--app", "aegis_probe.demos.autogen:build_app", "--tasks", str(tasks),
                  "--plans-per-run", "1", "--out", str(tmp_path / f"campaign-{terminal}")]
        assert cli.main(inject) == 0
        assert ("injection runs:" in capsys.readouterr().err) is terminal
