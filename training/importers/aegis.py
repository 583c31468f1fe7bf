"""Aegis unified records into trajectories.

``input.conversation_history`` becomes the steps (ordered by ``step``); each
``output.faulty_agents`` entry becomes a fault ``(agent, mode, strategy)`` with no step. A clean
record (no faulty agents) is the positive of its contrastive group ``(query, framework,
benchmark)``, kept in ``metadata``. A faulty agent that never acts is flagged
``suspicious:agent-absent``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from aegis_probe.trajectory import Fault, Labels, Outcome, Step, Trajectory

from ..answers import normalize_agent
from ..modes import normalize_mode
from ..files import plain_stem
from .base import SUSPICIOUS, ImportResult, import_records, require, step_number

SOURCE = "aegis"


def trajectory_from_record(record: Any, record_id: str) -> Trajectory:
    """One Aegis record as a trajectory; raises ``ValueError`` when malformed."""
    require(record, "input", "output")
    inp, out = record["input"], record["output"]
    require(inp, "conversation_history")
    history = inp["conversation_history"]
    if not isinstance(history, list) or not history:
        raise ValueError("input.conversation_history is empty or not a list")
    order = []
    for i, turn in enumerate(history):
        require(turn, "agent_name", "content")
        step = step_number(turn.get("step"), f"conversation_history[{i}].step")  # 3 or "3"
        order.append((i if step is None else step, i))
    ordered = [history[i] for _, i in sorted(order)]
    steps = [
        Step(index=i, agent=_name(turn["agent_name"]) or _name(turn.get("agent_role")) or "unknown",
             role=turn.get("agent_role"), output=str(turn["content"] or ""))
        for i, turn in enumerate(ordered)
    ]
    faults = []
    for entry in (out or {}).get("faulty_agents") or []:
        require(entry, "agent_name")  # null: a mode without an agent (not an agent named "None")
        faults.append(Fault(agent=_name(entry["agent_name"]), mode=normalize_mode(entry.get("error_type"), SOURCE),
                            strategy=entry.get("injection_strategy")))
    meta = dict(record.get("metadata") or {})
    acting = {normalize_agent(s.agent) for s in steps}  # "coder" labels the acting "Coder"
    flags = [f"{SUSPICIOUS}:agent-absent"] if any(f.agent and normalize_agent(f.agent) not in acting for f in faults) else []
    phases = [turn.get("phase") for turn in ordered]
    return Trajectory(
        run_id=record_id,
        framework=meta.get("framework"),
        task=inp.get("query"),
        steps=steps,
        outcome=Outcome(success=None, answer=inp.get("final_output")),
        labels=Labels(faults=faults, source=SOURCE, flags=flags),
        source="import",
        metadata={**meta, "group": [inp.get("query"), meta.get("framework"), meta.get("benchmark")],
                  **({"phases": phases} if any(phases) else {})},
    )


def _name(value: Any) -> str | None:
    """An agent name: the text, stripped; ``None`` for null or blank."""
    return str(value).strip() or None if value is not None else None


def load(path: str | os.PathLike[str]) -> ImportResult:
    """Aegis records from JSON lines, a JSON list, or a directory of them."""

    def convert(record: Any, file: Path, name: str) -> Trajectory:
        rid = record.get("id") if isinstance(record, dict) else None
        return trajectory_from_record(record, str(rid) if rid else f"{SOURCE}:{plain_stem(file)}:{name.replace(' ', '')}")

    return import_records(path, convert)
