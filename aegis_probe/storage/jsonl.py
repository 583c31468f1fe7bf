"""JSON-lines files: the one strict reader and atomic writer of task files, dataset rows,
predictions and trajectories (trace stores have their own tolerant reader, :mod:`.store`)."""

from __future__ import annotations

import gzip
import json
import os
import zlib
from pathlib import Path
from typing import Any, Iterable

from .outputs import replacing

_GZIP_ERRORS = (OSError, EOFError, zlib.error)  # gzip.BadGzipFile is an OSError


class DuplicateKey(ValueError):
    """A JSON object that gives one key twice (``json`` would keep the last silently)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(f"key {key!r} given twice in one object")
            seen.add(key)
    return obj


def read_jsonl(path: str | os.PathLike[str], required: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file (blank lines skipped); a ``.gz`` file is read through gzip.

    Raises ``ValueError`` naming the file and line of a record that is not UTF-8 JSON, gives a key
    twice, is not a JSON object or lacks one of the ``required`` fields, and naming the file when
    it is not a readable gzip file. A UTF-8 byte order mark at the start is ignored.
    """
    with open(path, "rb") as fh:
        if not str(path).endswith(".gz"):
            return _rows(path, fh, required)
        try:
            with gzip.GzipFile(fileobj=fh) as unpacked:
                return _rows(path, unpacked, required)
        except _GZIP_ERRORS as exc:
            raise ValueError(f"{path}: not a readable gzip file ({exc or type(exc).__name__})") from None


def _rows(path: str | os.PathLike[str], lines: Iterable[bytes], required: Iterable[str]) -> list[dict[str, Any]]:
    rows = []
    for no, raw in enumerate(lines, 1):
        try:
            line = raw.decode("utf-8-sig" if no == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path}:{no}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at byte {exc.start} "
                             "of the line)") from None
        if not line.strip():
            continue
        try:
            row = json.loads(line, object_pairs_hook=_unique_keys)
        except DuplicateKey as exc:
            raise ValueError(f"{path}:{no}: {exc}") from None
        except ValueError as exc:
            raise ValueError(f"{path}:{no}: invalid JSON: {exc}") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{no}: expected a JSON object, got {type(row).__name__}")
        missing = [k for k in required if k not in row]
        if missing:
            raise ValueError(f"{path}:{no}: missing field(s) {', '.join(missing)}")
        rows.append(row)
    return rows


def write_jsonl(rows: Iterable[dict[str, Any] | str], path: str | os.PathLike[str]) -> Path:
    """Write rows (objects, or already encoded JSON strings) as JSON lines; returns the path.

    The file is replaced only once every row is written, so a failure leaves an existing file whole;
    a device or FIFO is written in place (:func:`~aegis_probe.storage.outputs.replacing`).
    """
    with replacing(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write((row if isinstance(row, str) else json.dumps(row, ensure_ascii=False)) + "\n")
    return Path(path)
