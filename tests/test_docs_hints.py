"""The command lines ``demo`` prints for what to do next run as printed (from the repository root,
as README.md says): ``traces show`` found no trace when the demo wrote to ``--trace-dir``."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from aegis_probe import cli

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.autogen
@pytest.mark.parametrize("own_dir", [True, False])
def test_the_next_commands_the_demo_prints_run_as_printed(own_dir, tmp_path, capsys, monkeypatch):
    pytest.importorskip("autogen_agentchat")
    monkeypatch.chdir(ROOT)
    store = tmp_path / "elsewhere"
    if not own_dir:  # the default store: $AEGIS_TRACE_DIR (set for every test)
        monkeypatch.setenv("AEGIS_TRACE_DIR", str(store))
    assert cli.main(["demo", "--inject", "FM-2.6", *(["--trace-dir", str(store)] if own_dir else [])]) == 0
    out = capsys.readouterr().out
    show = re.search(r"\(python -m aegis_probe (traces show [^)]+)\)", out)
    blame = re.search(r"^blame it: python -m aegis_probe (blame .+)$", out, re.M)
    assert show and blame, out
    assert cli.main(shlex.split(show.group(1))) == 0
    assert "fault    agent=calculator step=1 mode=FM-2.6" in capsys.readouterr().out
    assert cli.main([*shlex.split(blame.group(1)), "--no-progress"]) == 0
    assert "decisive error: step 1 by calculator" in capsys.readouterr().out


def test_traces_ls_on_a_campaign_folder_points_at_its_stores_without_a_warning(tmp_path, capsys, caplog):
    """README's campaign is read with ``traces ls --dir inject-out/traces``; ``--dir inject-out``
    warned that runs.jsonl is no trace record before pointing at traces/ and baselines/."""
    campaign = tmp_path / "inject-out"
    for store in ("traces", "baselines"):
        (campaign / store).mkdir(parents=True)
        (campaign / store / "spans.jsonl").write_text("")
    (campaign / "runs.jsonl").write_text('{"task_id": "t1", "kind": "baseline", "success": true}\n')
    assert cli.main(["traces", "ls", "--dir", str(campaign)]) == 0
    out, err = capsys.readouterr()
    assert out == f"no traces in {campaign} (its folders baselines, traces are trace stores: give one of them)\n"
    assert err == "" and not caplog.records, caplog.text
