"""Importers: public attribution datasets and traces into :class:`aegis_probe.Trajectory`.

Every importer has ``load(path) -> ImportResult``; :func:`load` picks one by name or sniffs the
first record (``format="auto"``).
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from typing import Any, Callable, Iterator

from aegis_probe.trajectory import Trajectory

from .base import ImportIssue, ImportResult, counting, data_files, iter_records

# format name -> "module:function" (relative to this package)
FORMATS: dict[str, str] = {
    "whowhen": "whowhen:load",
    "aegis": "aegis:load",
    "tracertraj": "tracertraj:load",
    "trail": "trail:load",
    "otlp": "otlp:load_otlp",
    "jaeger": "otlp:load_jaeger",
    "trajectories": "native:load",
}


def importer(fmt: str) -> Callable[..., ImportResult]:
    """The ``load`` function of one format."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
    module, func = FORMATS[fmt].split(":")
    return getattr(importlib.import_module(f"{__name__}.{module}"), func)


def sniff_record(record: Any) -> str | None:
    """The format a parsed JSON record belongs to, or ``None``."""
    if not isinstance(record, dict):
        return None
    if "resourceSpans" in record:
        return "otlp"
    if isinstance(record.get("data"), list):
        return "jaeger"
    if "spans" in record and "trace_id" in record:
        return "trail"
    if isinstance(record.get("input"), dict) and "conversation_history" in record["input"]:
        return "aegis"
    if "steps" in record and "labels" in record:
        return "trajectories"
    if "history" in record and "mistake_agent" in record:
        history = record["history"]
        stepped = bool(history) and isinstance(history[0], dict) and "step" in history[0]
        return "tracertraj" if stepped else "whowhen"
    return None


def detect(path: str | os.PathLike[str]) -> str:
    """The format of a file, directory (its first data file with a record of a known format) or URL."""
    text = str(path)
    if text.startswith(("http://", "https://")):
        return "jaeger"
    files = data_files(path, (".json", ".jsonl", ".parquet"))
    if not files:
        held = _data_folders(path)
        raise ValueError(f"no data files at {path}" + (f": give its folders holding data ({held}) as sources" if held else ""))
    unreadable = None  # the first file that could not be read at all (a corrupt gzip, not JSON)
    for file in files:  # the first file with a record of a known format (skipping stray or broken files)
        if file.suffix == ".parquet":
            return "tracertraj"
        if file.name.endswith(".jsonl"):  # its first record says it (a large trace store is not read whole)
            with open(file, "rb") as fh:
                first = next((raw for raw in fh if raw.strip()), b"")
            try:
                fmt = sniff_record(json.loads(first))
            except (ValueError, RecursionError):
                fmt = None
            if fmt:
                return fmt
        records = list(iter_records(file))
        fmt = next((f for _, record in records if (f := sniff_record(record))), None)
        if fmt:
            return fmt
        if unreadable is None and records and all(isinstance(r, Exception) for _, r in records):
            unreadable = f"{file} [{records[0][0]}]: {records[0][1]}"
    if unreadable and len(files) == 1:
        raise ValueError(unreadable)
    held = _data_folders(path)
    raise ValueError(f"cannot tell the format of {path}: no record of a known format ({', '.join(FORMATS)}); "
                     "pass --format" + (f", or give its folders holding data ({held}) as sources" if held else ""))


def _data_folders(path: str | os.PathLike[str]) -> str:
    """The subfolders of ``path`` holding data files, comma-separated (an injection campaign's
    ``traces`` and ``baselines``, Who&When's subsets): sources are read one folder at a time."""
    folder = Path(path)
    return ", ".join(sorted(d.name for d in folder.iterdir() if d.is_dir() and not d.name.startswith(".")
                            and data_files(d, (".json", ".jsonl", ".parquet")))) if folder.is_dir() else ""


def load(path: str | os.PathLike[str], format: str = "auto", **options: Any) -> ImportResult:
    """Import ``path`` (file, directory or, for Jaeger, URL) with the named or detected importer."""
    with counting(lambda: None):  # records sniffed are not yet records read
        fmt = detect(path) if format == "auto" else format
    if options.get("labels_dir") and fmt != "trail":
        raise ValueError(f"labels_dir (--labels-dir) is for TRAIL traces only; {path} is {fmt}")
    src = path if str(path).startswith(("http://", "https://")) else Path(path)
    return importer(fmt)(src, **options)


def stream(path: str | os.PathLike[str], format: str = "auto", fast: bool = False,
           **options: Any) -> Iterator[Trajectory | Any | ImportIssue]:
    """As :func:`load`, one trajectory (or issue) at a time: an OTLP source (a trace store) is
    read as it goes; the other formats, whole datasets of modest size, are loaded first. ``fast``:
    an OTLP source's trajectories made of structs where they can be, to be written out
    (:func:`.base.row`; not models)."""
    with counting(lambda: None):
        fmt = detect(path) if format == "auto" else format
    if fmt == "otlp" and not options:
        from .otlp import iter_otlp

        yield from iter_otlp(Path(path), fast)
        return
    result = load(path, fmt, **options)
    yield from result.errors
    yield from result.trajectories


__all__ = ["FORMATS", "ImportIssue", "ImportResult", "detect", "importer", "load", "sniff_record", "stream"]
