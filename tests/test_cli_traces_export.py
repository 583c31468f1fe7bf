"""``traces export``: stored traces (amendments merged) as OTLP/JSON lines to a file or standard
output, read back the same; sent to a real OTLP receiver (Arize Phoenix) with the OTLP/HTTP
exporter; one ``error:`` line for an unknown trace, an empty store, a bad or silent endpoint."""

from __future__ import annotations

import json
import socket
import uuid

import pytest
from opentelemetry.sdk.trace import TracerProvider

from aegis_probe import cli
from aegis_probe.capture import semconv as sc
from aegis_probe.storage.store import TraceStore
from aegis_probe.trajectory import Trajectory, load_trajectories
from toyrun import make_probe, run_script, sample_steps


@pytest.fixture
def store(tmp_path) -> TraceStore:
    """A store of two toy runs; the first one's outcome reported after it ended (an amendment)."""
    store = TraceStore(tmp_path / "store")
    probe = make_probe(TracerProvider(), store)
    first = run_script(probe, "add six sevens", sample_steps("a"), answer="42")
    run_script(probe, "add two twos", sample_steps("b"), answer="4", outcome=True)
    probe.set_outcome(False, answer="41", trace_id=first.trace_id)
    probe.flush()
    return store


def _stored(store: TraceStore) -> dict[str, Trajectory]:
    return {t.trace_id: t for t in map(Trajectory.from_spans, store.traces().values())}


def _export(*argv: str) -> int:
    return cli.main(["traces", "export", *argv])


def test_one_trace_to_stdout_and_all_to_a_file_read_back_the_same(store, tmp_path, capsys):
    stored = _stored(store)
    first = next(t for t in stored.values() if t.task == "add six sevens")
    assert first.outcome.success is False, "the amendment is in the store"

    assert _export(first.trace_id[:8], "--dir", str(store.path)) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.count("\n") == 1
    assert json.loads(out)["resourceSpans"], "one OTLP/JSON export request"
    (tmp_path / "one.jsonl").write_text(out)
    [back] = load_trajectories(tmp_path / "one.jsonl")
    assert back == first

    target = tmp_path / "exported" / "all.jsonl"
    assert _export("--all", "--dir", str(store.path), "--out", str(target)) == 0
    assert capsys.readouterr().out == f"2 traces ({sum(len(t) for t in store.traces().values())} spans) written to {target}\n"
    assert len(target.read_text().splitlines()) == 2, "one line per trace: the amendment merged in"
    assert {t.trace_id: t for t in load_trajectories(target)} == stored
    assert [p.name for p in target.parent.iterdir()] == ["all.jsonl"]


@pytest.mark.parametrize("argv, message", [
    (["ffff"], "no trace matching 'ffff' in {store}"),
    (["--all", "--dir", "{empty}"], "no traces in {empty}"),
    (["--all", "--otlp-endpoint", "localhost:4318"], "--otlp-endpoint 'localhost:4318': give the collector's http(s):// URL"),
    (["--all", "--otlp-endpoint", "http://127.0.0.1:{closed}", "--timeout", "1"],
     "could not send the spans to http://127.0.0.1:{closed}/v1/traces: nothing answers at 127.0.0.1:{closed} (Connection refused)"),
    (["--all", "--timeout", "0"], "--timeout must be > 0 seconds and at most a year (31536000), not 0.0"),
    (["--all", "--out", "{store}/more.jsonl"], "is in the trace store"),
], ids=["unknown-id", "empty-store", "not-a-url", "nothing-listens", "timeout-0", "out-in-store"])
def test_errors_are_one_line(store, tmp_path, capsys, argv, message):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]  # free once closed: nothing listens there
    names = {"store": store.path, "empty": tmp_path / "empty", "closed": closed}
    (tmp_path / "empty").mkdir()
    argv = [a.format(**names) for a in argv]
    if "--dir" not in argv:
        argv += ["--dir", str(store.path)]
    before = sorted(p.name for p in store.path.iterdir())
    assert _export(*argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("error: ") and message.format(**names) in err, err
    assert sorted(p.name for p in store.path.iterdir()) == before


def test_both_an_id_and_all_is_a_usage_error(store, capsys):
    with pytest.raises(SystemExit) as exit_:
        _export("ffff", "--all", "--dir", str(store.path))
    assert exit_.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


@pytest.mark.phoenix
def test_sent_to_a_real_otlp_receiver_as_stored(phoenix, store, tmp_path, capsys):
    """Every span of every trace reaches Phoenix with its ids, parent, name and attributes,
    the outcome amended after the run included."""
    project = f"aegis-export-{uuid.uuid4().hex[:8]}"
    records = [r for spans in store.traces().values() for r in spans]
    for rec in records:  # Phoenix files spans under the project their resource names
        rec.resource["openinference.project.name"] = project
    moved = TraceStore(tmp_path / "to-send")
    moved.append(records)
    moved.flush()

    assert _export("--all", "--dir", str(moved.path), "--otlp-endpoint", phoenix.base) == 0
    assert capsys.readouterr().err == f"2 traces ({len(records)} spans) sent to {phoenix.base}/v1/traces\n"
    remote = phoenix.spans(project, len(records))
    assert {(s["context"]["trace_id"], s["context"]["span_id"], s["name"], s["parent_id"]) for s in remote} == \
        {(r.trace_id, r.span_id, r.name, r.parent_span_id) for r in records}
    attrs = {s["context"]["span_id"]: s["attributes"] for s in remote}
    for rec in records:  # Phoenix adds keys of its own; ours are all there, unchanged
        assert {k: attrs[rec.span_id].get(k) for k in rec.attributes} == rec.attributes, rec.name
    roots = {r.attributes.get(sc.TASK): r for r in records if r.parent_span_id is None}
    assert attrs[roots["add six sevens"].span_id][sc.OUTCOME_SUCCESS] is False
