"""A campaign whose app leaks an API key (in its exception, in its answer): the key is written
nowhere, neither in runs.jsonl nor in the warning nor in the command's output (threads; Ray in
tests/test_ray.py)."""

from __future__ import annotations

import json
import logging

import pytest

pytest.importorskip("autogen_agentchat")

from aegis_probe.cli import main  # noqa: E402
from leaky_apps import EXAMPLES, KEY, leaky_app  # noqa: E402

LEAKY_APP = leaky_app(raises_on="train", leaks_on="boxes")


def test_a_key_in_an_apps_exception_or_answer_is_written_nowhere(tmp_path, capsys, caplog):
    (tmp_path / "leaky.py").write_text(LEAKY_APP)
    lines = (EXAMPLES / "math_tasks.jsonl").read_text().splitlines()
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("\n".join(t for t in lines if '"train"' in t or '"boxes"' in t) + "\n")
    out = tmp_path / "out"
    with caplog.at_level(logging.WARNING, logger="aegis_probe"):
        main(["inject", "--app", f"{tmp_path / 'leaky.py'}:build_app", "--tasks", str(tasks), "--plans-per-run", "0",
              "--out", str(out), "--no-progress", "--concurrency", "2"])
    records = {r["task_id"]: r for r in map(json.loads, (out / "runs.jsonl").read_text().splitlines())}
    assert records["train"]["error"] == "RuntimeError: upstream refused Authorization: Bearer [REDACTED]"
    assert "run_app" in records["train"]["traceback"] and "[REDACTED]" in records["train"]["traceback"]
    assert "(api_key=[REDACTED]" in records["boxes"]["answer"]
    shown = capsys.readouterr()
    assert "refused Authorization: Bearer [REDACTED]" in shown.out
    assert "[REDACTED]" in caplog.text
    written = "".join(p.read_text() for p in out.rglob("*") if p.is_file())
    assert KEY not in written + shown.out + shown.err + caplog.text
