"""The train commands' files: inputs read through gzip when their name ends in ``.gz``, outputs
written beside their place and moved there only when complete.

A failed command never leaves a truncated or emptied output: :func:`replacing` (a file, see
:mod:`aegis_probe.storage.outputs`: a device or FIFO is written in place) and :func:`replacing_dir`
(a directory) yield a temporary path in the same directory, which takes the output's place with
a rename when the block ends without an error; nothing but a regular file or a directory of our
own is renamed over or removed.
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import shutil
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

from aegis_probe.storage.jsonl import read_jsonl, write_jsonl
from aegis_probe.storage.outputs import replacing

#: The name ending of a gzipped input (``rows.jsonl.gz``, ``12.json.gz``), read as the plain file.
GZIP_SUFFIX = ".gz"
_GZIP_ERRORS = (OSError, EOFError, zlib.error)  # gzip.BadGzipFile is an OSError


def plain_name(path: str | os.PathLike[str]) -> str:
    """The file name without a trailing ``.gz`` (``12.json.gz`` -> ``12.json``)."""
    name = Path(path).name
    return name[:-len(GZIP_SUFFIX)] if name.endswith(GZIP_SUFFIX) else name


def plain_stem(path: str | os.PathLike[str]) -> str:
    """The name without ``.gz`` and its data suffix (``12.json.gz`` -> ``12``)."""
    return Path(plain_name(path)).stem


def _gzip_error(exc: BaseException) -> str:
    return f"not a readable gzip file ({exc or type(exc).__name__})"


def read_input(path: str | os.PathLike[str]) -> bytes:
    """The bytes of an input file, decompressed when its name ends in ``.gz``; a corrupt or
    truncated gzip file is a ``ValueError`` (which the caller names the file in)."""
    data = Path(path).read_bytes()
    if not str(path).endswith(GZIP_SUFFIX):
        return data
    try:
        return gzip.decompress(data)
    except _GZIP_ERRORS as exc:
        raise ValueError(_gzip_error(exc)) from None


def read_rows(path: str | os.PathLike[str], required: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file, as :func:`aegis_probe.storage.jsonl.read_jsonl` reads them
    (a record that is not a JSON object of the ``required`` fields is a ``ValueError`` naming file
    and line; a ``.jsonl.gz`` file read through gzip, one that is no readable gzip named)."""
    if Path(path).is_dir():
        raise ValueError(f"{path}: a directory, not a JSON-lines file")
    return read_jsonl(path, required)


def write_rows(rows: Iterable[dict[str, Any] | str], path: str | os.PathLike[str]) -> Path:
    """Write rows (objects, or JSON text) as JSON lines, whole or not at all, as
    :func:`aegis_probe.storage.jsonl.write_jsonl` does; gzipped when ``path`` ends in ``.gz`` (so that it
    reads back as the inputs named so do). Returns the path."""
    if not str(path).endswith(GZIP_SUFFIX):
        return write_jsonl(rows, path)
    with replacing(path) as tmp, gzip.open(tmp, "wt", encoding="utf-8") as fh:
        for row in rows:
            fh.write((row if isinstance(row, str) else json.dumps(row, ensure_ascii=False)) + "\n")
    return Path(path)


#: The ending of :func:`replacing_dir`'s directory while it is filled (``.<name>.partial``).
PARTIAL = "partial"


def _temp_beside(out: Path, kind: str) -> Path:
    """``.<name>.<kind>`` beside ``out``: one fixed name, so that what an interrupted run left there
    (killed before its cleanup) is replaced by the next run, not piled up."""
    return out.with_name(f".{out.name}.{kind}")


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path``, whole or not at all; returns the path."""
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def partial_dir(path: str | os.PathLike[str]) -> Path:
    """Where :func:`replacing_dir` fills ``path`` before it takes its place."""
    return _temp_beside(Path(path), PARTIAL)


@contextmanager
def replacing_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary directory beside ``path`` to fill; it takes the place of ``path`` (an earlier
    directory there is removed) when the block ends without an error, and is removed otherwise,
    so ``path`` is never a half-written directory."""
    out = Path(path)
    if os.path.lexists(out) and not out.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "not a directory (an output directory goes there)", str(out))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp, old = partial_dir(out), _temp_beside(out, "old")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        if out.exists():
            out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
