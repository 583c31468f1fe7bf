"""Injected traces for the DCL benchmark: a small offline fault-injection campaign over the
example apps (cached: a rerun resumes and reuses every finished run), its kept failures and clean
baselines read back as trajectories, and a deterministic split by contrastive group."""

from __future__ import annotations

import random
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import Sequence

from aegis_probe.injection.campaign import load_tasks, read_records, run_campaign
from aegis_probe.trajectory import Trajectory

from ..builders import group_key
from ..data import examples_dir
from ..importers.otlp import load_otlp
from ..quiet import polled_progress, stderr_to

# (app, tasks file) under examples/: run offline against each app's scripted model on the embedded server
APPS: tuple[tuple[str, str], ...] = (
    ("injection/autogen_math.py", "injection/math_tasks.jsonl"),
    ("injection/metagpt_math.py", "injection/math_tasks.jsonl"),
    ("injection/autogen_code.py", "injection/code_tasks.jsonl"),
)
#: the long-horizon team (orchestrator, web search, file reader, coder; 11 to 33 steps a run)
LONG_HORIZON: tuple[tuple[str, str], ...] = (("longhorizon/team.py", "longhorizon/tasks.jsonl"),)


def campaign(out: str | Path, plans_per_run: int, seed: int, apps: Sequence[tuple[str, str]] = APPS,
             progress: bool = True) -> list[Trajectory]:
    """Run (or resume) one campaign per app into ``out/<app>``; return the kept injected runs and
    the successful baselines in campaign order (app, run key), which does not depend on the
    random trace ids. App ``i`` uses seed ``seed + i``, so apps sharing a tasks file do not get
    the same plans. The apps' own stderr output goes to ``out/campaign.log``; a progress bar per
    app stays on stderr (``progress``)."""
    ordered: list[Trajectory] = []
    with stderr_to(Path(out) / "campaign.log") as terminal:
        for i, (app, tasks) in enumerate(apps):
            directory = Path(out) / Path(app).stem
            total = len(load_tasks(examples_dir() / tasks)) * (1 + plans_per_run)
            finished = partial(_finished, directory)
            bar = polled_progress(finished, total, f"injection {Path(app).stem}", terminal) if progress else nullcontext()
            with bar:
                run_campaign(f"{examples_dir() / app}:build_app", examples_dir() / tasks, directory,
                             plans_per_run=plans_per_run, seed=seed + i, progress=False)
            keys = {rec["trace_id"]: key for key, rec in read_records(directory).items() if "trace_id" in rec}
            trajs = [t for store in ("traces", "baselines") for t in load_otlp(directory / store).trajectories]
            ordered += sorted(trajs, key=lambda t: keys[t.trace_id])
    return ordered


def _finished(directory: Path) -> int:
    return len(read_records(directory))


def split_by_group(trajs: Sequence[Trajectory], fraction: float, seed: int) -> tuple[list[Trajectory], list[Trajectory]]:
    """(train, held-out): a seeded shuffle of the sorted groups (task, framework), ``fraction`` of
    them held out whole, so held-out tasks and their clean baselines are never trained on; order kept."""
    groups = sorted({group_key(t) for t in trajs})
    random.Random(seed).shuffle(groups)
    held = set(groups[:round(len(groups) * fraction)])
    return [t for t in trajs if group_key(t) not in held], [t for t in trajs if group_key(t) in held]
