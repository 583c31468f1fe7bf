"""docs/replay.md, "Making your own app replayable": its worked LangGraph example, command by
command (examples/replayable_langgraph.py, the embedded model server, spectrum then replay)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytest.importorskip("langgraph")
pytest.importorskip("langchain_openai")


def _worked_commands() -> list[str]:
    text = (REPO / "docs" / "replay.md").read_text(encoding="utf-8")
    section = text[text.index("## Making your own app replayable"):]
    block = section[section.index("```bash") + len("```bash"):]
    block = block[: block.index("```")]
    return [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]


def test_the_worked_langgraph_example_runs_as_documented(tmp_path):
    (tmp_path / "examples").symlink_to(REPO / "examples")
    env = {**os.environ, "AEGIS_TRACE_DIR": str(tmp_path / "aegis-traces")}
    commands = _worked_commands()
    assert [c.split()[1] if c.startswith("python examples") else c.split()[3] for c in commands] == [
        "examples/replayable_langgraph.py", "blame", "blame", "traces"]
    trace_id, outputs = None, []
    for command in commands:
        argv = [sys.executable, *command.replace("ID", trace_id or "ID").split()[1:]]
        proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, (command, proc.stdout[-2000:], proc.stderr[-2000:])
        outputs.append(proc.stdout)
        if trace_id is None:
            trace_id = re.search(r"failed run: trace ([0-9a-f]{32})", proc.stdout).group(1)
    _, spectrum, replayed, listed = outputs
    assert "most suspicious: step 0 by solver (ochiai 1.000)" in spectrum, spectrum
    assert re.search(r"runs: [1-9]\d* passed", spectrum), spectrum
    assert "decisive error: step 0 by solver (replays: 1)" in replayed, replayed
    row = next(line for line in listed.splitlines() if line.startswith(trace_id))
    assert row.endswith("blame:spectrum:ochiai solver@0; blame:replay:scan solver@0"), row
    assert any(re.search(rf"\bsuccess\b.*\s{trace_id[:8]}\s", line) for line in listed.splitlines()), listed
