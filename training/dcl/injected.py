"""Injected traces for the DCL benchmark: a small offline fault-injection campaign over the
example apps (cached: a rerun resumes and reuses every finished run), its kept failures and clean
baselines read back as trajectories, and a deterministic split by contrastive group."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Sequence

from aegis_probe.injection.campaign import read_records, run_campaign
from aegis_probe.trajectory import Trajectory

from ..builders import group_key
from ..data import REPO_ROOT
from ..importers.otlp import load_otlp

EXAMPLES = REPO_ROOT / "examples" / "injection"
# (app, tasks file): run offline against each app's scripted model on the embedded server
APPS: tuple[tuple[str, str], ...] = (
    ("autogen_math.py", "math_tasks.jsonl"),
    ("metagpt_math.py", "math_tasks.jsonl"),
    ("autogen_code.py", "code_tasks.jsonl"),
)


def campaign(out: str | Path, plans_per_run: int, seed: int) -> list[Trajectory]:
    """Run (or resume) one campaign per app into ``out/<app>``; return the kept injected runs and
    the successful baselines in campaign order (app, run key), which does not depend on the
    random trace ids. App ``i`` uses seed ``seed + i``, so apps sharing a tasks file do not get
    the same plans."""
    ordered: list[Trajectory] = []
    for i, (app, tasks) in enumerate(APPS):
        directory = Path(out) / Path(app).stem
        run_campaign(f"{EXAMPLES / app}:build_app", EXAMPLES / tasks, directory,
                     plans_per_run=plans_per_run, seed=seed + i, progress=False)
        keys = {rec["trace_id"]: key for key, rec in read_records(directory).items() if "trace_id" in rec}
        trajs = [t for store in ("traces", "baselines") for t in load_otlp(directory / store).trajectories]
        ordered += sorted(trajs, key=lambda t: keys[t.trace_id])
    return ordered


def split_by_group(trajs: Sequence[Trajectory], fraction: float, seed: int) -> tuple[list[Trajectory], list[Trajectory]]:
    """(train, held-out): a seeded shuffle of the sorted groups (task, framework), ``fraction`` of
    them held out whole, so held-out tasks and their clean baselines are never trained on; order kept."""
    groups = sorted({group_key(t) for t in trajs})
    random.Random(seed).shuffle(groups)
    held = set(groups[:round(len(groups) * fraction)])
    return [t for t in trajs if group_key(t) not in held], [t for t in trajs if group_key(t) in held]
