"""The store's line index (aegis_probe.storage.index): written by the store writer with each line,
built from the file for old stores and other writers, and read by traces ls/show and train import
so that they answer without reading the whole store."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from test_realuse_store import copies, real_line

from aegis_probe.cli import main
from aegis_probe.storage import index
from aegis_probe.storage.store import SPANS_FILE, TraceStore
from aegis_probe.trajectory import Trajectory


def _store(tmp_path: Path, n: int) -> tuple[TraceStore, bytes, list[str]]:
    line, trace_id = real_line(tmp_path, 2)
    path = tmp_path / "store" / SPANS_FILE
    path.parent.mkdir()
    ids = copies(path, line, trace_id, iter(range(1, n + 1)))
    return TraceStore(path.parent), line.replace(trace_id, ids[0].encode()), ids


def test_an_old_store_is_indexed_on_first_read_then_extended_by_the_writer(tmp_path):
    store, line, ids = _store(tmp_path, 5)
    idx = index.index_path(store.file)
    assert not idx.exists()
    assert len(store.trace(ids[2])) > 3  # indexed from the file by this read
    entries = list(index.entries(idx))
    assert [e.line for e in entries] == [1, 2, 3, 4, 5] and [list(e.traces) for e in entries] == [[i] for i in ids]
    assert all(e.offset + e.size == f.offset for e, f in zip(entries, entries[1:]))
    store.write_line(line.decode().replace(ids[0], "f" * 32))  # the writer adds the entry itself
    last = list(index.entries(idx))[-1]
    assert last.line == 6 and list(last.traces) == ["f" * 32] and last.clock >= entries[-1].clock
    assert store.file.read_bytes()[last.offset:last.offset + last.size] == line.replace(ids[0].encode(), b"f" * 32) + b"\n"


def test_ls_reads_only_the_index_tail_and_the_traces_it_lists(tmp_path, capsys, monkeypatch):
    store, _, ids = _store(tmp_path, 40)
    store.trace(ids[0])  # index built
    decoded: list[int] = []
    real = TraceStore._records_at

    def counting(self, entries, wanted):
        entries = list(entries)
        decoded.append(len(entries))
        return real(self, entries, wanted)

    monkeypatch.setattr(TraceStore, "_records_at", counting)
    assert main(["traces", "ls", "--limit", "3", "--dir", str(store.path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 4 and decoded == [3]  # the header and the 3 newest, each decoded alone
    every = {t: Trajectory.from_spans(s).start_ns for t, s in TraceStore(store.path).traces().items()}
    listed = [every[row.split()[0]] for row in out[1:]]
    assert listed == sorted(every.values(), reverse=True)[:3]


def test_train_import_streams_a_store_trace_by_trace(tmp_path, monkeypatch):
    store, _, ids = _store(tmp_path, 6)
    with open(store.file, "a") as fh:
        fh.write('{"resourceSpans": "nope"}\n')
    store.amend(ids[1], attributes={"aegis.label.source": "test"})
    held: list[int] = []
    real = TraceStore._records_at
    monkeypatch.setattr(TraceStore, "_records_at", lambda self, e, w: held.append(1) or real(self, e, w))
    from aegis_probe.train import cli

    out = tmp_path / "all.jsonl"
    assert cli.main(["import", str(store.path), "-o", str(out), "--errors", str(tmp_path / "e.json"), "--no-progress"]) == 0
    rows = [json.loads(r) for r in out.read_text().splitlines()]
    assert sorted(r["trace_id"] for r in rows) == sorted(ids) and len(held) == 6  # one read per trace
    assert json.loads((tmp_path / "e.json").read_text())[0]["record"] == "line 7"


def test_a_bad_line_is_warned_about_with_its_file_and_line(tmp_path, caplog):
    store, _, ids = _store(tmp_path, 2)
    with open(store.file, "a") as fh:
        fh.write("not json\n")
    caplog.set_level(logging.WARNING)
    assert [s.trace_id for s in store.trace(ids[1])][0] == ids[1]
    assert f"{store.file}:3: not an OTLP/JSON trace record" in caplog.text
