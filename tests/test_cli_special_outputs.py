"""Outputs that are special files: a device or FIFO named as an output is written in place, never
replaced by a regular file (run as root, ``--out /dev/null`` once replaced the machine's
/dev/null); a write that fails is an error, with nothing reported as written; a directory option
naming one is refused. Private device nodes stand in for /dev/null (1, 3) and /dev/full (1, 7)."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path
from typing import Callable

import pytest

from aegis_probe.cli import main
from aegis_probe.capture import semconv as sc
from aegis_probe.train.cli import main as train_main

TRACE = "0123456789abcdef0123456789abcdef"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="making device nodes needs root")


def _store(root: Path) -> Path:
    """A store with one failed trace of one agent step."""
    spans = [
        {"traceId": TRACE, "spanId": "00000000000000a1", "name": "invoke_workflow team", "kind": 1,
         "startTimeUnixNano": "1", "endTimeUnixNano": "9",
         "attributes": [{"key": sc.OUTCOME_SUCCESS, "value": {"boolValue": False}},
                        {"key": sc.TASK, "value": {"stringValue": "What is 1 + 1?"}}]},
        {"traceId": TRACE, "spanId": "00000000000000a2", "parentSpanId": "00000000000000a1", "name": "invoke_agent solver",
         "kind": 1, "startTimeUnixNano": "2", "endTimeUnixNano": "8",
         "attributes": [{"key": sc.STEP_INDEX, "value": {"intValue": "0"}},
                        {"key": sc.OPERATION, "value": {"stringValue": sc.OP_AGENT}},
                        {"key": "gen_ai.agent.name", "value": {"stringValue": "solver"}}]},
    ]
    store = root / "S"
    store.mkdir()
    line = {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"scope": {"name": "t"}, "spans": spans}]}]}
    (store / "spans.jsonl").write_text(json.dumps(line) + "\n")
    return store


#: Each command with a file output, as typed, with OUT where the output goes.
COMMANDS: dict[str, Callable[[Path], list[str]]] = {
    "report --out": lambda s: ["report", TRACE[:8], "--dir", str(s), "--out", "OUT"],
    "traces export --out": lambda s: ["traces", "export", TRACE[:8], "--dir", str(s), "--out", "OUT"],
    "train import -o": lambda s: ["train", "import", str(s), "-o", "OUT", "--no-progress"],
    "train import --errors": lambda s: ["train", "import", str(s), "-o", str(s.parent / "t.jsonl"), "--errors", "OUT",
                                        "--no-progress"],
    "train import -o .gz": lambda s: ["train", "import", str(s), "-o", "OUT", "--no-progress"],
}


def _run(argv: list[str], out: Path) -> int:
    return main([str(out) if a == "OUT" else a for a in argv])


def _device(path: Path, minor: int) -> Path:
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    return path


@pytest.mark.parametrize("command", COMMANDS)
def test_a_null_device_as_output_is_written_in_place_and_stays_a_device(command, tmp_path, capsys):
    store = _store(tmp_path)
    null = _device(tmp_path / ("null.gz" if command.endswith(".gz") else "null"), 3)
    assert _run(COMMANDS[command](store), null) == 0, capsys.readouterr().err
    assert stat.S_ISCHR(os.lstat(null).st_mode) and os.lstat(null).st_rdev == os.makedev(1, 3)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporary file left


@pytest.mark.parametrize("command", COMMANDS)
def test_a_full_device_as_output_is_an_error_naming_it_and_nothing_said_written(command, tmp_path, capsys):
    store = _store(tmp_path)
    full = _device(tmp_path / "full", 7)
    assert _run(COMMANDS[command](store), full) == 2
    captured = capsys.readouterr()
    assert f"error: [Errno 28] No space left on device: '{full}'" in captured.err, captured.err
    assert "written" not in captured.out and "wrote" not in captured.out, captured.out
    assert stat.S_ISCHR(os.lstat(full).st_mode)


@pytest.mark.parametrize("command", ["report --out", "traces export --out", "train import -o"])
def test_a_fifo_as_output_is_written_into_the_pipe_and_stays_a_fifo(command, tmp_path, capsys):
    store = _store(tmp_path)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    assert _run(COMMANDS[command](store), fifo) == 0, capsys.readouterr().err
    reader.join(10)
    assert received and TRACE.encode() in received[0]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_socket_as_output_is_refused_and_left_alone(tmp_path, capsys):
    import socket

    store, path = _store(tmp_path), tmp_path / "sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        assert main(["report", TRACE[:8], "--dir", str(store), "--out", str(path)]) == 2
    assert "a socket, not a file to write" in capsys.readouterr().err
    assert stat.S_ISSOCK(os.lstat(path).st_mode)


@pytest.mark.parametrize("argv", [
    ["traces", "ls", "--dir", "DEV"],
    ["traces", "show", TRACE[:8], "--dir", "DEV"],
    ["report", TRACE[:8], "--dir", "DEV"],
    ["demo", "--trace-dir", "DEV"],
    ["inject", "--app", "aegis_probe.demos.autogen:build_app", "--tasks", "TASKS", "--out", "DEV"],
    ["train", "export", "S", "--format", "whowhen", "-o", "DEV"],
    ["train", "attribute", "--model", "m", "--trace", TRACE[:8], "--store", "DEV"],
], ids=lambda argv: " ".join(argv[:2]) + " " + next(a for a in argv if a.startswith("-") and a != "--app"))
def test_a_directory_option_naming_a_device_is_refused_and_the_device_kept(argv, tmp_path, capsys):
    store, dev = _store(tmp_path), _device(tmp_path / "null", 3)
    (tmp_path / "tasks.jsonl").write_text('{"id": "a", "task": "1 + 1?", "expected": "2"}\n')
    values = {"DEV": str(dev), "S": str(store), "TASKS": str(tmp_path / "tasks.jsonl")}
    assert main([values.get(a, a) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and str(dev) in err, err
    assert stat.S_ISCHR(os.lstat(dev).st_mode)


def test_a_file_named_as_an_output_directory_is_never_renamed_or_removed(tmp_path):
    from aegis_probe.train.files import replacing_dir

    dev = _device(tmp_path / "null", 3)
    with pytest.raises(NotADirectoryError, match="not a directory"), replacing_dir(dev):
        pass
    assert stat.S_ISCHR(os.lstat(dev).st_mode)


def test_a_temporary_name_taken_by_a_device_is_refused_not_removed(tmp_path):
    from aegis_probe.storage.jsonl import write_jsonl

    taken = _device(tmp_path / ".rows.jsonl.tmp", 3)
    with pytest.raises(FileExistsError, match="not a regular file"):
        write_jsonl([{"a": 1}], tmp_path / "rows.jsonl")
    assert stat.S_ISCHR(os.lstat(taken).st_mode) and not (tmp_path / "rows.jsonl").exists()


def test_train_command_line_writes_a_device_in_place_too(tmp_path, capsys):
    store, null = _store(tmp_path), _device(tmp_path / "null", 3)
    assert train_main(["import", str(store), "-o", str(null), "--no-progress"]) == 0
    assert f"wrote 1 trajectories to {null}" in capsys.readouterr().out
    assert stat.S_ISCHR(os.lstat(null).st_mode)
