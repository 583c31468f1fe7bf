"""Trajectories as ``python -m aegis_probe.train import`` writes them: one Trajectory JSON a line."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

from pydantic import ValidationError

from aegis_probe.trajectory import Trajectory

from .base import ImportIssue, ImportResult, data_files, iter_records


def load(path: str | os.PathLike[str]) -> ImportResult:
    """Trajectory JSON lines (a file or a directory of them)."""
    result = ImportResult()
    for file in data_files(path):
        for name, record in iter_records(file):
            try:
                if isinstance(record, Exception):
                    raise record
                result.add(Trajectory.model_validate(record))
            except (ValueError, ValidationError) as exc:
                result.errors.append(ImportIssue(str(file), name, str(exc).splitlines()[0]))
    return result


def write(trajectories: Iterable[Trajectory], path: str | os.PathLike[str]) -> Path:
    """Write trajectories as JSON lines; returns the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as fh:
        for traj in trajectories:
            fh.write(traj.model_dump_json(exclude_none=True) + "\n")
    return out


def looks_native(record: Any) -> bool:
    return isinstance(record, dict) and "steps" in record and "labels" in record
