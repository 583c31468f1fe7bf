"""What every importer returns, and the record readers they share."""

from __future__ import annotations

import hashlib
import json
import os
import re
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from pydantic import ValidationError

from aegis_probe.redact import encodable
from aegis_probe.trajectory import Step, Trajectory

from ..answers import normalize_agent
from ..files import GZIP_SUFFIX, plain_name, plain_stem, read_input

SUSPICIOUS = "suspicious"
_UNDECODABLE = re.compile("[\udc80-\udcff]")  # bytes that are not UTF-8, as surrogateescape keeps them
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # a JSON escape of a surrogate (maybe a lone one)
_POSITION = re.compile(r":(line|item|row)\d+$")  # a record id's position in its file (see :func:`identity`)
#: What :func:`identity` leaves out of a record's content: its id and the file it was read from.
_NOT_CONTENT: Any = {"run_id": True, "metadata": {"file": True}}
_TICK: ContextVar[Callable[[], Any] | None] = ContextVar("aegis_import_tick", default=None)


@dataclass
class ImportIssue:
    """One record that did not import: the file, the record within it, and why."""

    file: str
    record: str
    message: str

    def __str__(self) -> str:
        return f"{self.file} [{self.record}]: {self.message}"


@dataclass
class ImportResult:
    """Imported trajectories, the records that failed, and how many kept labels were flagged."""

    trajectories: list[Trajectory] = field(default_factory=list)
    errors: list[ImportIssue] = field(default_factory=list)
    flagged: int = 0
    #: Trajectories counted but not kept (written as they were read: ``train import``).
    passed: int = 0

    @property
    def imported(self) -> int:
        return len(self.trajectories) + self.passed

    def extend(self, other: "ImportResult") -> None:
        self.trajectories += other.trajectories
        self.errors += other.errors
        self.flagged += other.flagged
        self.passed += other.passed

    def add(self, traj: Trajectory, keep: bool = True) -> None:
        if keep:
            self.trajectories.append(traj)
        else:
            self.passed += 1
        if any(f.startswith(SUSPICIOUS) for f in traj.labels.flags):
            self.flagged += 1

    def summary(self) -> str:
        return f"{self.imported} imported, {len(self.errors)} errors, {self.flagged} flagged"


@contextmanager
def counting(tick: Callable[[], Any]) -> Iterator[None]:
    """Call ``tick()`` for every record read (a progress bar's ``update``) until the block ends."""
    token = _TICK.set(tick)
    try:
        yield
    finally:
        _TICK.reset(token)


def tick() -> None:
    """One more record read (see :func:`counting`)."""
    callback = _TICK.get()
    if callback is not None:
        callback()


def identity(traj: Trajectory) -> tuple[str, str]:
    """What makes two imported records one: the record's id (its trace id, else its record id
    without the position in its file that importers add to the ids of records sharing a file,
    ``whowhen:f:line3`` -> ``whowhen:f``) and a hash of everything else it holds but the name of
    the file it was read from. So one record read twice (twice in one input, one input given twice,
    a file and its ``.gz`` copy) is one record; two files or traces of the same content are two.
    The hash is of the record's JSON as it is written (pydantic's, in field order, fields that are
    None left out: one pass in Rust, no dict tree; :func:`.rows.row` makes the same of its structs)."""
    try:
        content = traj.model_dump_json(exclude_none=True, exclude=_NOT_CONTENT).encode()
    except ValueError:  # a lone surrogate in a text (JSON of it is not UTF-8): the standard library writes it escaped
        content = json.dumps(traj.model_dump(mode="python", exclude_none=True, exclude=_NOT_CONTENT), default=str).encode()
    return content_identity(traj.trace_id, traj.run_id, content)


def content_identity(trace_id: str | None, run_id: str | None, content: bytes) -> tuple[str, str]:
    """:func:`identity` of a record of these ids and this JSON of its content."""
    return trace_id or _POSITION.sub("", run_id or ""), hashlib.sha256(content).hexdigest()


def row(traj: Any) -> tuple[tuple[str, str], str]:
    """``(identity, JSON line)`` of a trajectory: its models, or :mod:`.rows`' structs."""
    if isinstance(traj, Trajectory):
        return identity(traj), traj.model_dump_json(exclude_none=True)
    from .rows import row as struct_row

    return struct_row(traj)


def drop_duplicates(trajs: Iterable[Trajectory]) -> tuple[list[Trajectory], int]:
    """The trajectories with each :func:`identity` kept once (the first), and how many were dropped."""
    seen: set[tuple[str, str]] = set()
    kept, dropped = [], 0
    for traj in trajs:
        key = identity(traj)
        if key in seen:
            dropped += 1
        else:
            seen.add(key)
            kept.append(traj)
    return kept, dropped


def data_files(path: str | os.PathLike[str], suffixes: tuple[str, ...] = (".json", ".jsonl")) -> list[Path]:
    """``path`` itself, or the matching files of a directory in natural order (2.json < 10.json);
    JSON and JSON-lines files may be gzipped (``.json.gz``, ``.jsonl.gz``); hidden files
    (``.name``: macOS ``._`` copies, editor locks) are no data."""
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise FileNotFoundError(f"no file or directory at {p}")
    names = suffixes + tuple(s + GZIP_SUFFIX for s in suffixes if s in (".json", ".jsonl"))

    def key(f: Path) -> tuple[int, int, str]:
        stem = plain_stem(f)
        return (0, int(stem), f.name) if stem.isdigit() else (1, 0, f.name)

    return sorted((f for f in p.iterdir() if f.is_file() and f.name.endswith(names) and not f.name.startswith(".")),
                  key=key)


def iter_records(file: Path) -> Iterator[tuple[str, Any]]:
    """``(record name, parsed JSON)`` of a file: each line of JSON lines, each item of a JSON list,
    or the one JSON object (a ``.gz`` file read through gzip). An undecodable record (bad JSON,
    bytes that are not UTF-8) yields ``(name, ValueError)``; the rest still reads; a corrupt gzip
    file yields ``("file", ValueError)``."""
    try:
        raw = read_input(file)
    except ValueError as exc:
        yield "file", exc
        return
    text = raw.decode("utf-8", errors="surrogateescape").replace("\r\n", "\n").replace("\r", "\n")
    text = text.removeprefix("\ufeff")  # a UTF-8 byte order mark (Windows editors, Excel exports)
    if not plain_name(file).endswith(".jsonl"):
        try:
            data = _json(text)
        except (ValueError, RecursionError) as exc:  # RecursionError: JSON nested too deeply
            if text.count("\n{") == 0:
                yield "file", ValueError(f"invalid JSON: {exc}")
                return
        else:
            if isinstance(data, list):
                for i, item in enumerate(data):
                    tick()
                    yield f"item {i}", item
            else:
                tick()
                yield "file", data
            return
    for no, line in enumerate(text.splitlines(), 1):
        if line.strip():
            tick()
            try:
                record = _json(line)
            except (ValueError, RecursionError) as exc:
                yield f"line {no}", ValueError(f"invalid JSON: {exc or 'nested too deeply'}")
            else:
                yield f"line {no}", record


def _json(text: str) -> Any:
    bad = _UNDECODABLE.search(text)
    if bad:
        raise ValueError(f"not UTF-8 text: byte 0x{ord(bad.group()) - 0xDC00:02x} at character {bad.start()}")
    data = json.loads(text)
    return _encodable(data) if _SURROGATE_ESCAPE.search(text) else data


def _encodable(value: Any) -> Any:
    """``value`` with lone surrogates (JSON escapes such as ``\\ud800`` without their pair, common in
    scraped web text) in its strings escaped as the text ``\\udxxx``, as the core escapes them, so
    the record can be written out again as UTF-8."""
    if isinstance(value, str):
        return encodable(value)
    if isinstance(value, list):
        return [_encodable(v) for v in value]
    if isinstance(value, dict):
        return {encodable(k): _encodable(v) for k, v in value.items()}
    return value


def import_records(
    path: str | os.PathLike[str],
    convert: Callable[[Any, Path, str], Trajectory],
    suffixes: tuple[str, ...] = (".json", ".jsonl"),
) -> ImportResult:
    """Run ``convert(record, file, record_name)`` on every record; failures become issues."""
    result = ImportResult()
    for file in data_files(path, suffixes):
        for name, record in iter_records(file):
            try:
                if isinstance(record, Exception):
                    raise record
                result.add(convert(record, file, name))
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                result.errors.append(ImportIssue(str(file), name, _message(exc)))
    return result


def _message(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return f"missing field {exc.args[0]!r}"
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        return f"{'.'.join(map(str, first['loc'])) or 'record'}: {first['msg']}"
    return str(exc) or type(exc).__name__


def require(record: Any, *keys: str) -> None:
    """Raise ``ValueError`` unless ``record`` is an object holding every key."""
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object, got {type(record).__name__}")
    missing = [k for k in keys if k not in record]
    if missing:
        raise ValueError(f"missing field(s) {', '.join(missing)}")


def step_number(raw: Any, name: str = "step") -> int | None:
    """A step index as an int: a number or its text (``3``, ``"3"``, ``3.0`` from a float column);
    ``None`` for null or empty; ``ValueError`` naming ``name`` otherwise."""
    if raw is None or raw == "":
        return None
    if isinstance(raw, float) and raw.is_integer():
        return int(raw)
    try:
        return int(str(raw).strip())
    except ValueError:
        raise ValueError(f"{name} {raw!r} is not an integer") from None


def label_flags(steps: list[Step], agent: str | None, step: int | None) -> list[str]:
    """Flags for a label whose named agent does not act at its named step (names compared as agent
    identities, :func:`normalize_agent`; prefix match on roles)."""
    if agent is None or step is None:
        return []
    if not 0 <= step < len(steps):
        return [f"{SUSPICIOUS}:step-out-of-range"]
    actual, named = steps[step], normalize_agent(agent)
    if normalize_agent(actual.agent) == named or normalize_agent(actual.role).startswith(named):
        return []
    return [f"{SUSPICIOUS}:agent-not-at-step"]
