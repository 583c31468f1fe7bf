"""The trace store and its readers at scale and under concurrent use, on real AutoGen runs
(``benchmarks/apps.py``: a ``RoundRobinGroupChat`` on a zero-latency model in process).

Stores of thousands of traces are made by appending a real run's encoded line with new trace ids
(the point there is size); everything about what the writer writes (threads and processes at once,
a kill -9, a file size limit, a removed directory) comes from real instrumented runs.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

pytest.importorskip("autogen_agentchat")

import aegis_probe  # noqa: E402
from aegis_probe.storage import store as store_module  # noqa: E402
from aegis_probe.cli import main  # noqa: E402
from aegis_probe.report.html import write_report  # noqa: E402
from aegis_probe.storage.store import SPANS_FILE, TraceStore  # noqa: E402
from aegis_probe.trajectory import Trajectory, load_trajectories  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.apps import MODEL_CALL_HOOKS, TASK, autogen_app  # noqa: E402

APP = autogen_app()
_TRACE_ID = re.compile(rb'"traceId":"([0-9a-f]{32})"')


def run_team(store: Path | TraceStore, steps: int, task: str = TASK) -> aegis_probe.Probe:
    """One real AutoGen run of ``steps`` agent steps traced into ``store`` (its probe uninstrumented)."""
    team = APP.build(steps)
    probe = aegis_probe.instrument(team, store=store)
    try:
        result = asyncio.run(team.run(task=task))
        assert len(result.messages) == steps + 1
        assert probe.store is not None and probe.store.flush()
    finally:
        probe.uninstrument()
    return probe


def real_line(tmp_path: Path, steps: int) -> tuple[bytes, bytes]:
    """The stored line of one real run of ``steps`` steps, and its trace id."""
    run_team(tmp_path / "one", steps)
    line = (tmp_path / "one" / SPANS_FILE).read_bytes()
    assert line.count(b"\n") == 1
    match = _TRACE_ID.search(line)
    assert match is not None
    return line.rstrip(b"\n"), match.group(1)


def copies(path: Path, line: bytes, trace_id: bytes, ids: Iterator[int]) -> list[str]:
    """Append ``line`` once per id of ``ids``, as the trace ``%032x`` of it; the ids written."""
    written = []
    with open(path, "ab") as fh:
        for n in ids:
            new = b"%032x" % n
            fh.write(line.replace(trace_id, new) + b"\n")
            written.append(new.decode())
    return written


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the store's decoded lines (export requests) while the test runs."""
    counts = [0]
    real = store_module.decode_request

    def counting(body: Any) -> Any:
        counts[0] += 1
        return real(body)

    monkeypatch.setattr(store_module, "decode_request", counting)
    return counts


def peak_mib(read: Callable[[], Any]) -> tuple[Any, float]:
    """What ``read()`` returns, and the most memory (MiB) it held at once."""
    tracemalloc.start()
    try:
        out = read()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return out, peak / 2**20


# -- thousands of traces, one long run --------------------------------------------------------
def test_one_trace_of_thousands_is_read_without_reading_the_store_whole(tmp_path, decoded, capsys):
    """2000 real traces (each a 6-step run): one trace, by ``TraceStore.trace``, ``traces show``,
    ``report`` (of a stored id, or of the store's directory ``--trace ID``) and
    ``probe.trajectory()``, decodes one line and holds far less than the store
    (it held the whole file twice, read at once and split); ``traces ls`` and
    ``load_trajectories`` still see every trace."""
    line, trace_id = real_line(tmp_path, 6)
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    rng = random.Random(5)
    ids = copies(store_dir / SPANS_FILE, line, trace_id, (rng.getrandbits(128) for _ in range(2000)))
    probe = run_team(store_dir, 6)  # the probe's own run, after 2000 others
    size_mib = (store_dir / SPANS_FILE).stat().st_size / 2**20
    assert size_mib > 10
    store = TraceStore(store_dir)

    decoded[0] = 0
    spans, peak = peak_mib(lambda: store.trace(ids[1500][:12]))
    assert decoded[0] == 1 and len(spans) == line.count(b'"spanId"') and peak < size_mib / 10

    decoded[0] = 0
    traj, peak = peak_mib(probe.trajectory)
    assert decoded[0] == 1 and len(traj.steps) == 6 and peak < size_mib / 10

    capsys.readouterr()
    decoded[0] = 0
    code, peak = peak_mib(lambda: main(["traces", "--dir", str(store_dir), "show", ids[7][:9]]))
    assert code == 0 and decoded[0] == 1 and peak < size_mib / 10
    assert ids[7] in capsys.readouterr().out

    decoded[0] = 0
    out = tmp_path / "r.html"
    code, peak = peak_mib(lambda: main(["report", ids[-1][:10], "--dir", str(store_dir), "--out", str(out)]))
    assert code == 0 and decoded[0] == 1 and peak < size_mib / 10
    assert f"report of trace {ids[-1]} (6 steps)" in capsys.readouterr().out
    decoded[0] = 0
    code, peak = peak_mib(lambda: main(["report", str(store_dir), "--trace", ids[3][:8], "--out", str(out)]))
    assert code == 0 and decoded[0] == 1 and peak < size_mib / 10  # built every trace: 6x the store
    assert f"report of trace {ids[3]} (6 steps)" in capsys.readouterr().out

    code, peak = peak_mib(lambda: main(["traces", "--dir", str(store_dir), "ls", "--limit", "0"]))
    assert code == 0 and peak < 2.75 * size_mib  # the store's records (~2x), not also every trajectory (3.5x)
    listed = capsys.readouterr().out.splitlines()[1:]
    assert len(listed) == 2001 and listed[0].startswith(traj.trace_id)  # newest first: the probe's run
    trajectories = load_trajectories(store_dir)
    assert len(trajectories) == 2001 and {len(t.steps) for t in trajectories} == {6}


def test_a_1000_step_run_reads_shows_and_reports_whole(tmp_path, decoded, capsys):
    """A real 1000-step run stored beside other runs: ``probe.trajectory()``, ``traces show`` and
    ``report`` see all 1000 steps; the report stays about a megabyte (docs/report.md: 0.97 MB for
    500 steps); reading another trace decodes none of the long run's line."""
    store_dir = tmp_path / "store"
    small = run_team(store_dir, 2).trajectory()
    probe = run_team(store_dir, 1000)
    traj = probe.trajectory()
    assert len(traj.steps) == 1000 and [s.index for s in traj.steps] == list(range(1000))
    assert traj.steps[-1].output == "reply number 1000, all good"

    decoded[0] = 0
    assert len(Trajectory.from_spans(TraceStore(store_dir).trace(small.trace_id or "")).steps) == 2
    assert decoded[0] == 1

    capsys.readouterr()
    assert main(["traces", "--dir", str(store_dir), "show", (traj.trace_id or "")[:12]]) == 0
    shown = capsys.readouterr().out
    assert "reply number 1000, all good" in shown and shown.count("reply number") >= 1000
    out = tmp_path / "long.html"
    assert main(["report", (traj.trace_id or "")[:12], "--dir", str(store_dir), "--out", str(out)]) == 0
    html = out.read_text(encoding="utf-8")
    assert html.count('<details class="step') == 1000 and "reply number 1000, all good" in html
    assert out.stat().st_size < 2_000_000


@pytest.mark.parametrize("argv", [["traces", "show", "\udcff\udcfe"], ["report", "{dir}", "--trace", "ab\udcff"],
                                  ["traces", "show", "\ud800"]])
def test_a_trace_id_argument_with_undecodable_bytes_matches_no_trace(argv, tmp_path, capsys):
    """A trace id argument holding bytes that are not UTF-8 (lone surrogates, as Python decodes
    them) is a trace no store holds: 'no trace matching', not a UTF-8 codec error."""
    run_team(tmp_path / "store", 2)
    argv = [arg.format(dir=tmp_path / "store") for arg in argv]
    assert main([*argv[:1], *(["--dir", str(tmp_path / "store")] if argv[0] == "traces" else []), *argv[1:]]) == 2
    err = capsys.readouterr().err
    assert "no trace matching" in err and "codec" not in err


# -- writers in processes and threads, a reader at the same time ------------------------------
_LOOP = """
import asyncio, sys
sys.path.insert(0, sys.argv[1])
from benchmarks.apps import TASK, autogen_app
import aegis_probe
team = autogen_app().build(3)
probe = aegis_probe.instrument(team, store=sys.argv[2])
asyncio.run(team.run(task=TASK + " " + "x" * (1 << 20)))
assert probe.store.flush()
line = probe.store.file.read_text().rstrip("\\n")
print(len(line) + 1, flush=True)
n, count = 0, int(sys.argv[3]) if len(sys.argv) > 3 else 0
while n < count or not count:  # the same real line again and again, as new traces
    n += 1
    probe.store.write_line(line.replace(probe.last_run.trace_id, "%032x" % n))
"""


_WRITER = """
import asyncio, sys, threading
sys.path.insert(0, sys.argv[1])
from benchmarks.apps import TASK, autogen_app
import aegis_probe
store, threads, runs, steps, big = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
app = autogen_app()
task = TASK + " " + "x" * big
teams = [[app.build(steps) for _ in range(runs)] for _ in range(threads)]
probes = [[aegis_probe.instrument(team, store=store) for team in row] for row in teams]

def play(row):
    for team in row:
        assert len(asyncio.run(team.run(task=task)).messages) == steps + 1

workers = [threading.Thread(target=play, args=(row,)) for row in teams]
for w in workers:
    w.start()
for w in workers:
    w.join()
assert probes[0][0].store.flush()
print(" ".join(p.last_run.trace_id for row in probes for p in row))
"""


def test_writers_in_processes_and_threads_while_a_reader_lists_and_shows(tmp_path, caplog):
    """Three processes of two threads each append real runs (one process's with 256 KiB
    prompts), and a fourth appends a real run's 5 MB line as 30 new traces, while this process
    lists and shows traces: every trace read is whole (all its steps), no line being written is
    read as data or warned about, and in the end every run is stored."""
    store_dir = tmp_path / "store"
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    steps, runs = 4, 6
    writers = [subprocess.Popen([sys.executable, str(script), str(ROOT), str(store_dir), "2", str(runs), str(steps), str(big)],
                                stdout=subprocess.PIPE, text=True)
               for big in (0, 0, 1 << 18)]
    (tmp_path / "loop.py").write_text(_LOOP)
    lines = subprocess.Popen([sys.executable, str(tmp_path / "loop.py"), str(ROOT), str(store_dir), "30"], stdout=subprocess.DEVNULL)
    store = TraceStore(store_dir)
    reads = 0
    caplog.set_level(logging.DEBUG, logger="aegis_probe")
    while any(w.poll() is None for w in [*writers, lines]) or reads < 3:
        if not store.file.exists():
            continue
        listed = store.traces()
        for trace_id, spans in listed.items():
            traj = Trajectory.from_spans(spans)
            assert len(traj.steps) == (3 if len(traj.task or "") > 1 << 20 else steps), trace_id
        if listed:
            shown = list(listed)[reads % len(listed)]
            assert Trajectory.from_spans(store.trace(shown)) == Trajectory.from_spans(listed[shown])
        reads += 1
    written = set()
    for w in writers:
        out, _ = w.communicate()
        assert w.returncode == 0
        written.update(out.split())
    assert lines.wait() == 0 and len(written) == 3 * 2 * runs
    assert len(set(store.traces()) - written) == 31  # the fourth process's run and its 30 copies
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.records
    lines = store.file.read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(json.loads(raw) for raw in lines[:-1])


def test_a_line_finished_while_the_reader_is_at_it_is_not_read_as_two_bad_lines(tmp_path, monkeypatch, caplog):
    """A reader reaches the end of the file in the middle of a line another writer is writing, and
    the writer finishes it (and appends another) before the reader reads on: the reader stops at the
    end it saw (that line is being written, not an error), never reading the line's rest as a line
    of its own (two bad lines warned about before)."""
    line, trace_id = real_line(tmp_path, 2)
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    path = store_dir / SPANS_FILE
    copies(path, line, trace_id, iter([1]))
    second = line.replace(trace_id, b"%032x" % 2)
    with open(path, "ab") as fh:
        fh.write(second[: len(second) // 2])
    writer = os.open(path, os.O_WRONLY | os.O_APPEND)
    fcntl.flock(writer, fcntl.LOCK_EX)  # as TraceStore._write holds it while its line is written
    real_reason, finished = store_module._reason, []

    def writer_finishes(exc: BaseException) -> str:  # the reader has just found the cut line
        if not finished:
            finished.append(True)
            os.write(writer, second[len(second) // 2:] + b"\n" + line.replace(trace_id, b"%032x" % 3) + b"\n")
            fcntl.flock(writer, fcntl.LOCK_UN)
        return real_reason(exc)

    monkeypatch.setattr(store_module, "_reason", writer_finishes)
    caplog.set_level(logging.DEBUG, logger="aegis_probe")
    try:
        first = store_module.merge_records(store_module.read_span_file(path))
    finally:
        os.close(writer)
    assert list(first) == ["%032x" % 1]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.records
    assert any("being written" in r.getMessage() for r in caplog.records)
    assert sorted(TraceStore(store_dir).traces()) == ["%032x" % n for n in (1, 2, 3)]


# -- a kill -9, a file size limit, a removed directory ----------------------------------------
def test_kill_9_mid_write_loses_at_most_the_trace_in_flight(tmp_path, caplog):
    """A process appending real 1 MiB-prompt traces is killed (SIGKILL) while a line is half
    written: every whole line's trace is read whole, the torn line is skipped with a warning, and
    the next append drops it (docs: 'a partial last line left by a crash is dropped before the next
    append'), after which the store reads clean."""
    store_dir = tmp_path / "store"
    script = tmp_path / "loop.py"
    script.write_text(_LOOP)
    child = subprocess.Popen([sys.executable, str(script), str(ROOT), str(store_dir)], stdout=subprocess.PIPE, text=True)
    path = store_dir / SPANS_FILE
    try:
        assert child.stdout is not None
        line_size = int(child.stdout.readline())  # the first run's line and its newline
        while (size := path.stat().st_size) < 4 * line_size or size % line_size == 0:
            assert child.poll() is None  # not yet three more lines, or between two lines
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    whole = path.stat().st_size // line_size
    caplog.set_level(logging.WARNING, logger="aegis_probe")
    store = TraceStore(store_dir)
    stored = store.traces()
    assert len(stored) == whole and all(len(Trajectory.from_spans(spans).steps) == 3 for spans in stored.values())
    torn = path.stat().st_size % line_size != 0
    assert torn == any("truncated last line" in r.getMessage() for r in caplog.records)
    after = run_team(store_dir, 2).trajectory()
    assert torn == any("dropping a partial last line" in r.getMessage() for r in caplog.records)
    caplog.clear()
    assert set(store.traces()) == set(stored) | {after.trace_id}
    assert not caplog.records
    assert all(json.loads(raw) for raw in path.read_bytes().split(b"\n")[:-1])


_LIMITED = """
import asyncio, json, os, resource, sys
sys.path.insert(0, sys.argv[1])
from benchmarks.apps import TASK, autogen_app
import aegis_probe
store = sys.argv[2]
app = autogen_app()
path = os.path.join(store, "spans.jsonl")
results = []
for n in range(4):
    if n == 1:  # room for one more run like the first, and half of another
        size = os.path.getsize(path)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + (size - int(sys.argv[3])) * 3 // 2, resource.RLIM_INFINITY))
    team = app.build(3)
    probe = aegis_probe.instrument(team, store=store)
    result = asyncio.run(team.run(task=TASK + " " + "x" * 4096))
    probe.store.flush()
    try:
        probe.trajectory()
        results.append([probe.last_run.trace_id, len(result.messages), "stored"])
    except KeyError as exc:
        results.append([probe.last_run.trace_id, len(result.messages), str(exc)])
print(json.dumps(results))
"""


def test_a_file_size_limit_mid_run_loses_only_the_runs_that_did_not_fit(tmp_path, caplog):
    """A process under ``RLIMIT_FSIZE`` (a full disk) stores runs until the limit: the app's runs
    all finish, a run that did not fit says why it is missing, the runs before it are read whole,
    and once the limit is gone the next append repairs the cut line."""
    store_dir = tmp_path / "store"
    first = run_team(store_dir, 3).trajectory()
    line_size = (store_dir / SPANS_FILE).stat().st_size
    script = tmp_path / "limited.py"
    script.write_text(_LIMITED)
    done = subprocess.run([sys.executable, str(script), str(ROOT), str(store_dir), str(line_size)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert [n for _, n, _ in results] == [4] * 4  # the app's runs all finished
    assert [why for _, _, why in results[:2]] == ["stored"] * 2
    assert all("the last write to it failed" in why and "too large" in why for _, _, why in results[2:]), results
    assert "could not write" in done.stderr
    store = TraceStore(store_dir)
    kept = {first.trace_id, results[0][0], results[1][0]}
    assert set(store.traces()) == kept
    after = run_team(store_dir, 2).trajectory()
    caplog.clear()
    assert set(store.traces()) == kept | {after.trace_id}
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_store_directory_removed_or_replaced_by_a_file_mid_run(tmp_path, caplog):
    """The store's directory removed during a run: the run's trace is written to it anew; replaced
    by a file during a run: the app's run finishes, the failure is logged and named by
    ``probe.trajectory()``, and a later run in a directory again is stored."""
    store_dir = tmp_path / "store"
    run_team(store_dir, 2)

    def remove() -> None:
        shutil.rmtree(store_dir, ignore_errors=True)

    MODEL_CALL_HOOKS.append(remove)
    try:
        removed = run_team(store_dir, 3)
    finally:
        MODEL_CALL_HOOKS.remove(remove)
    assert list(TraceStore(store_dir).traces()) == [removed.trajectory().trace_id]

    def replace() -> None:
        if store_dir.is_dir():
            shutil.rmtree(store_dir)
            store_dir.write_text("not a directory")

    MODEL_CALL_HOOKS.append(replace)
    try:
        failed = run_team(store_dir, 3)
    finally:
        MODEL_CALL_HOOKS.remove(replace)
    assert any("could not write" in r.getMessage() for r in caplog.records)
    with pytest.raises(KeyError, match="the last write to it failed: NotADirectoryError"):
        failed.trajectory()
    store_dir.unlink()
    later = run_team(store_dir, 2)
    assert len(later.trajectory().steps) == 2


# -- the HTML report of odd content ------------------------------------------------------------
def test_report_of_a_run_with_odd_bytes_and_1_mib_content(tmp_path):
    """A real run whose task holds NUL, a bidi override, a lone surrogate, markup and 1 MiB of text:
    stored, read back, and reported with every odd character as an escape, the markup escaped,
    and the content clipped (the report stays small)."""
    task = "a\x00b \u202eevil\u202c lone\ud800x <script>alert(1)</script> " + "y" * (1 << 20)
    traj = run_team(tmp_path / "store", 4, task).trajectory()
    assert traj.task is not None and traj.task.startswith("a\x00b \u202eevil")
    out = write_report(traj, tmp_path / "odd.html")
    html = out.read_text(encoding="utf-8")
    assert "\x00" not in html and "\u202e" not in html and "<script>alert(1)" not in html
    assert "a\\x00b \\u202eevil\\u202c lone\\ud800x &lt;script&gt;" in html
    assert out.stat().st_size < 200_000
