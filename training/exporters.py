"""Trajectories out to other tools' formats: ``python -m aegis_probe.train export``.

``whowhen``: one Who&When JSON file per trajectory, so captured runs feed any Who&When-compatible
attributor or judge script. ``history`` holds one ``{name, role, content}`` entry per step, in step
order (``mistake_step`` indexes it); ``role`` is the agent's name, and a manager step that chose
the next speaker reads like Who&When's Hand-Crafted (Magentic-One) records:
``"MagenticOneOrchestrator (-> calculator)"``. ``question``, ``question_ID``, ``ground_truth`` and
``is_correct`` come from the task and outcome when known; ``mistake_agent``, ``mistake_step`` and
``mistake_reason`` from the earliest labelled fault (empty strings for an unlabelled run, so that
every file has Who&When's fields). The Who&When importer reads these files back to the same steps,
agents and label.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path
from typing import Any, Iterable

from aegis_probe.trajectory import Fault, Step, Trajectory

from .answers import fault_reason
from .files import write_text

FORMATS = ("whowhen",)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def decisive_fault(traj: Trajectory) -> Fault | None:
    """The label Who&When's single mistake stands for: the earliest fault naming an agent or a step."""
    faults = [f for f in traj.labels.faults if f.agent or f.step is not None]
    if not faults:
        return None
    return min(faults, key=lambda f: (f.step is None, f.step if f.step is not None else 0))


def _role(step: Step) -> str:
    return f"{step.agent} (-> {step.next_speaker})" if step.next_speaker else step.agent


def whowhen_record(traj: Trajectory) -> dict[str, Any]:
    """One trajectory as a Who&When record."""
    record: dict[str, Any] = {
        "question_ID": traj.run_id or traj.trace_id or "",
        "question": traj.task or "",
        "history": [{"name": s.agent, "role": _role(s), "content": s.output} for s in traj.steps],
    }
    if traj.outcome.expected is not None:
        record["ground_truth"] = traj.outcome.expected
    if traj.outcome.success is not None:
        record["is_correct"] = traj.outcome.success
    fault = decisive_fault(traj)
    record["mistake_agent"] = (fault.agent or "") if fault else ""
    record["mistake_step"] = "" if fault is None or fault.step is None else str(fault.step)
    record["mistake_reason"] = fault_reason(fault) if fault else ""
    return record


def _file_names(trajs: list[Trajectory]) -> list[str]:
    """A distinct, filesystem-safe ``<id>.json`` per trajectory (trace id, else run id, else its number)."""
    names, seen = [], set()
    for i, traj in enumerate(trajs):
        stem = _UNSAFE.sub("_", traj.trace_id or traj.run_id or str(i)).strip("_") or str(i)
        name, n = f"{stem}.json", 1
        while name in seen:
            n += 1
            name = f"{stem}-{n}.json"
        seen.add(name)
        names.append(name)
    return names


def export_whowhen(trajs: Iterable[Trajectory], out_dir: str | os.PathLike[str]) -> list[Path]:
    """Write one Who&When JSON file per trajectory into ``out_dir`` (created); return the paths.

    Each file is written whole or not at all, so an interrupted export leaves the files before it intact.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    trajs = list(trajs)
    paths = []
    for traj, name in zip(trajs, _file_names(trajs)):
        path = out / name
        write_text(path, json.dumps(whowhen_record(traj), ensure_ascii=False, indent=2))
        paths.append(path)
    return paths


def add_parser(subparsers: Any) -> None:
    from .cli import add_progress_arg
    from .importers import FORMATS as INPUTS

    p = subparsers.add_parser("export", help="export traces or trajectories in another tool's format",
                              description="Export traces (a store directory, OTLP/JSON, Jaeger) or imported "
                                          "trajectories as one Who&When JSON file per trajectory.")
    p.add_argument("source", help="traces or trajectories: file, directory, or Jaeger /api/traces URL")
    p.add_argument("--format", required=True, choices=FORMATS, help="output format")
    p.add_argument("--from", dest="source_format", default="auto", choices=["auto", *INPUTS],
                   help="input format (default: sniffed)")
    p.add_argument("-o", "--out", required=True, help="output directory (one file per trajectory)")
    add_progress_arg(p)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from aegis_probe.cli.common import check_place

    from .cli import load_source

    check_place("--out", Path(args.out), directory=True)  # before anything is read
    result = load_source(argparse.Namespace(source=args.source, format=args.source_format, labels_dir=None,
                                            no_progress=args.no_progress))
    paths = export_whowhen(result.trajectories, args.out)
    print(f"wrote {len(paths)} Who&When files to {args.out}")
    return 0 if not result.errors else 1
