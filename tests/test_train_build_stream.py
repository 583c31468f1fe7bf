"""``train build`` streams its input: rows are built and written while a trace store is still
being read (memory does not grow with the store), with what it says and writes unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_realuse_store import copies, real_line

from aegis_probe.storage.store import SPANS_FILE, TraceStore
from aegis_probe.train import cli, files


def _store(tmp_path: Path, n: int) -> tuple[Path, list[str]]:
    line, trace_id = real_line(tmp_path, 2)
    path = tmp_path / "store" / SPANS_FILE
    path.parent.mkdir()
    return path.parent, copies(path, line, trace_id, iter(range(1, n + 1)))


@pytest.mark.parametrize("kind", ["dcl", "sft", "grpo"])
def test_build_writes_rows_while_the_store_is_read(tmp_path, monkeypatch, capsys, kind):
    store, ids = _store(tmp_path, 5)
    reads: list[int] = []
    real = TraceStore._records_at
    monkeypatch.setattr(TraceStore, "_records_at", lambda self, e, w: reads.append(1) or real(self, e, w))
    reads_at_row: list[int] = []
    real_write = files.write_rows

    def write_rows(rows, path):
        return real_write((reads_at_row.append(len(reads)) or row for row in rows), path)

    monkeypatch.setattr(files, "write_rows", write_rows)
    out = tmp_path / "rows.jsonl"
    assert cli.main(["build", kind, str(store), "-o", str(out), "--no-progress"]) == 0
    rows = [json.loads(r) for r in out.read_text().splitlines()]
    assert len(rows) == 5 and all(r["id"] for r in rows)
    assert reads_at_row == [1, 2, 3, 4, 5]  # each row written once its trace was read, before the next one
    assert capsys.readouterr().out == f"wrote 5 {kind} rows to {out}\n"


def test_a_record_read_twice_is_built_once(tmp_path, capsys):
    store, _ = _store(tmp_path, 2)
    out = tmp_path / "rows.jsonl"
    assert cli.main(["import", str(store), str(store), "-o", str(tmp_path / "twice.jsonl"), "--no-progress"]) == 0
    with open(tmp_path / "twice.jsonl", "a") as fh:
        fh.write((tmp_path / "twice.jsonl").read_text())
    capsys.readouterr()
    assert cli.main(["build", "dcl", str(tmp_path / "twice.jsonl"), "-o", str(out), "--no-progress"]) == 0
    said = capsys.readouterr()
    assert "2 duplicate records skipped" in said.err and said.out == f"wrote 2 dcl rows to {out}\n"


def test_build_of_nothing_writes_nothing(tmp_path, capsys):
    store, _ = _store(tmp_path, 1)
    out = tmp_path / "rows.jsonl"
    assert cli.main(["build", "sft", str(store), "-o", str(out), "--target", "agent_step", "--no-progress"]) == 2
    assert "no trajectory has an agent and step label for --target agent_step" in capsys.readouterr().err
    assert not out.exists()
