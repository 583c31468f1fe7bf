"""Seed ensembles of DCL attributors: K models trained alike with seeds ``seed .. seed+K-1``, kept
as one model (one head per seed over the same inputs) whose prediction averages their joint
(agent, step) log-scores. One training seed alone moves out-of-domain accuracy by 20-35 points
(docs/results.md, round 3); the ensemble's answer depends less on it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ..trainers.logs import JsonlLog
from .attributor import DCLAttributor
from .inputs import MEMBERS_DIR

if TYPE_CHECKING:
    from .train import DCLConfig


def combine(models: Sequence[DCLAttributor]) -> DCLAttributor:
    """One attributor holding the heads of ``models`` (single models trained on the same inputs
    with the same settings), in that order."""
    if not models:
        raise ValueError("an ensemble needs at least one model")
    spec = {k: v for k, v in models[0].spec.items() if k != "members"}
    for model in models:
        if model.spec.get("members", 1) != 1:
            raise ValueError("an ensemble is made of single models, not of ensembles")
        if {k: v for k, v in model.spec.items() if k != "members"} != spec:
            raise ValueError("an ensemble's models must share every setting (inputs, features, sizes, modes)")
    if spec["train_encoder"]:
        raise ValueError("an ensemble shares one frozen encoder: its models cannot fine-tune their own")
    ensemble = DCLAttributor(**spec, members=len(models), encoder_dim=models[0].head.name_proj.in_features)
    for head, model in zip(ensemble.heads, models):
        head.load_state_dict(model.head.state_dict())
    return ensemble.eval()


def member_dir(out: str | Path, seed: int) -> Path:
    """Where the ensemble at ``out`` trains (and keeps) its model of seed ``seed``."""
    return Path(out) / MEMBERS_DIR / f"seed-{seed}"


def fit_ensemble(rows: list[dict[str, Any]], out: str | Path, cfg: "DCLConfig", encoder: str | None = None,
                 resume: bool = False, progress: bool = True) -> DCLAttributor:
    """Train ``cfg.ensemble`` models with seeds ``cfg.seed ..`` (each a whole DCL run, with its
    checkpoints, in ``OUT/members/seed-N``; ``resume`` continues each), then save them as one
    model at ``out``."""
    from .train import checkpoints, fit

    if checkpoints(Path(out)):
        raise ValueError(f"{out} holds the checkpoints of a single model's run: train the ensemble into another "
                         "directory (or remove them)")
    if cfg.train_encoder:
        raise ValueError("--ensemble > 1 needs a frozen encoder (the models share it): drop --train_encoder")
    seeds = [cfg.seed + i for i in range(cfg.ensemble)]
    models = [fit(rows, member_dir(out, s), replace(cfg, seed=s, ensemble=1), encoder, resume, progress) for s in seeds]
    ensemble = combine(models)
    ensemble.save(out)
    JsonlLog(Path(out)).write({"event": "ensemble", "seeds": seeds,
                               "members": [str(member_dir(out, s)) for s in seeds]})
    return ensemble
