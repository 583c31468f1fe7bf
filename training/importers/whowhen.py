"""Who&When (both layouts) into trajectories.

Algorithm-Generated records name the agent in ``name``; Hand-Crafted (Magentic-One) records put
it in ``role``, e.g. ``"Orchestrator (-> WebSurfer)"``, whose agent is ``"Orchestrator"``. The
label is one fault ``(mistake_agent, int(mistake_step), reason=mistake_reason)``. A label whose
agent does not act at its step is kept and flagged ``suspicious:agent-not-at-step`` (or
``suspicious:step-out-of-range``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from aegis_probe.trajectory import Fault, Labels, Outcome, Step, Trajectory

from ..files import plain_stem
from .base import ImportResult, import_records, label_flags, require, step_number

SOURCE = "whowhen"
_ROLE_AGENT = re.compile(r"^\s*(.*?)\s*\(.*\)\s*$")


def agent_of(entry: dict[str, Any]) -> str:
    """The acting agent of one history entry: ``name``, else ``role`` without its ``(...)`` suffix."""
    name = entry.get("name")
    if isinstance(name, str) and name.strip():
        return name.strip()
    role = str(entry.get("role") or "")
    match = _ROLE_AGENT.match(role)
    return match.group(1) if match else role.strip()


def trajectory_from_record(record: Any, *, source: str, record_id: str, file: str | None = None) -> Trajectory:
    """One Who&When-shaped record (also TracerTraj's) as a trajectory; raises ``ValueError`` when bad."""
    require(record, "history", "mistake_agent", "mistake_step")
    history = record["history"]
    if not isinstance(history, list) or not history:
        raise ValueError("history is empty or not a list")
    steps = []
    for i, entry in enumerate(history):
        if not isinstance(entry, dict):
            raise ValueError(f"history[{i}] is not an object")
        steps.append(Step(index=i, agent=agent_of(entry), role=entry.get("role"), output=str(entry.get("content") or "")))
    step = step_number(record["mistake_step"], "mistake_step")
    agent = str(record["mistake_agent"] if record["mistake_agent"] is not None else "").strip() or None
    correct = _flag(record.get("is_correct", record.get("is_corrected")))
    metadata = {k: record[k] for k in ("question_ID", "level", "mistake_type") if record.get(k) not in (None, "")}
    if file:
        metadata["file"] = file
    return Trajectory(
        run_id=record_id,
        task=record.get("question"),
        steps=steps,
        outcome=Outcome(success=correct if correct is not None else False, expected=_text(record.get("ground_truth"))),
        labels=Labels(
            faults=[Fault(agent=agent, step=step, reason=record.get("mistake_reason"))] if agent or step is not None else [],
            source=source,
            flags=label_flags(steps, agent, step),
        ),
        source="import",
        metadata=metadata,
    )


def _flag(value: Any) -> bool | None:
    """``is_correct`` / ``is_corrected``: a JSON boolean, or ``"true"``/``"false"`` text (CSV, parquet)."""
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return None if value is None or value == "" else bool(value)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def load(path: str | os.PathLike[str]) -> ImportResult:
    """Who&When JSON files (a file, a directory of ``*.json``, or JSON lines of records)."""

    def convert(record: Any, file: Path, name: str) -> Trajectory:
        rid = f"{SOURCE}:{plain_stem(file)}" if name == "file" else f"{SOURCE}:{plain_stem(file)}:{name.replace(' ', '')}"
        return trajectory_from_record(record, source=SOURCE, record_id=rid, file=file.name)

    return import_records(path, convert)
