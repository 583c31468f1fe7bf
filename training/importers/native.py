"""Trajectories as ``python -m aegis_probe.train import`` writes them: one Trajectory JSON a line."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

from aegis_probe.trajectory import Trajectory

from ..files import write_rows
from .base import ImportResult, import_records, require


def _convert(record: Any, file: Path, name: str) -> Trajectory:
    require(record, "steps")
    return Trajectory.model_validate(record)


def load(path: str | os.PathLike[str]) -> ImportResult:
    """Trajectory JSON lines (a file or a directory of them); each record needs ``steps``."""
    return import_records(path, _convert)


def write(trajectories: Iterable[Trajectory], path: str | os.PathLike[str]) -> Path:
    """Write trajectories as JSON lines (gzipped for a ``.gz`` path), whole or not at all; returns the path."""
    return write_rows((traj.model_dump_json(exclude_none=True) for traj in trajectories), path)
