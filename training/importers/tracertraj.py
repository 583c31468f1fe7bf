"""TracerTraj (AgenTracer's released split), parquet or JSON lines; same fields as Who&When."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from aegis_probe.trajectory import Trajectory

from ..files import plain_stem
from .base import ImportIssue, ImportResult, data_files, import_records, step_number, tick
from .whowhen import trajectory_from_record

SOURCE = "tracertraj"


def _convert(record: Any, file: Path, name: str) -> Trajectory:
    key = record.get("question_ID") if isinstance(record, dict) else None
    rid = f"{SOURCE}:{key}" if key else f"{SOURCE}:{plain_stem(file)}:{name.replace(' ', '')}"
    traj = trajectory_from_record(record, source=SOURCE, record_id=rid, file=file.name)
    for step, entry in zip(traj.steps, record["history"]):
        if step_number(entry.get("step"), f"history[{step.index}].step") not in (None, step.index):  # 3 or "3"
            raise ValueError(f"history[{step.index}] has step {entry['step']!r}, expected {step.index}")
    return traj


def _load_parquet(file: Path) -> ImportResult:
    import pyarrow.parquet as pq

    result = ImportResult()
    try:
        rows = pq.read_table(file).to_pylist()
    except Exception as exc:  # pyarrow raises its own error types for unreadable files
        result.errors.append(ImportIssue(str(file), "file", f"unreadable parquet: {exc}"))
        return result
    for i, row in enumerate(rows):
        tick()
        try:
            result.add(_convert(row, file, f"row {i}"))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            result.errors.append(ImportIssue(str(file), f"row {i}", str(exc)))
    return result


def load(path: str | os.PathLike[str]) -> ImportResult:
    """TracerTraj records from ``*.parquet`` or ``*.jsonl``/``*.json`` files (a file or a directory)."""
    result = ImportResult()
    for file in data_files(path, (".parquet", ".jsonl", ".json")):
        result.extend(_load_parquet(file) if file.suffix == ".parquet" else import_records(file, _convert))
    return result
