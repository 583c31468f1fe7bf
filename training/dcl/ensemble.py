"""Seed ensembles of DCL attributors: K models trained alike with seeds ``seed .. seed+K-1``, kept
as one model (one head per seed over the same inputs) whose prediction averages their joint
(agent, step) log-scores. One training seed alone moves out-of-domain accuracy by 20-35 points
(docs/results.md, round 3); the ensemble's answer depends less on it. Training one is
:func:`.train.fit` with ``ensemble`` > 1."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .attributor import DCLAttributor
from .inputs import MEMBERS_DIR


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
