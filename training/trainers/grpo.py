"""GRPO of an attributor with TRL's ``GRPOTrainer`` and the data module's rewards.

Rows are ``{"id", "prompt": [system, user], "gold_pairs", "gold_agent", "gold_step"}``; the gold
columns reach the reward functions as keyword arguments.
"""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer, ModelConfig

from ..importers.base import step_number
from .common import device_defaults, run_trl
from .config import add_trainer_parser, resolve_configs, training_rows

REWARDS = {
    "aegis": "aegis_hierarchical_reward",
    "agentracer": "agentracer_multigranular_reward",
}


@dataclass
class AttributorGRPOConfig(GRPOConfig):
    """``GRPOConfig`` plus the choice of rewards."""

    rewards: list[str] = field(
        default_factory=lambda: ["aegis"],
        metadata={"help": f"reward functions of aegis_probe.train.rewards, by short name: {', '.join(REWARDS)}"},
    )


CONFIG_TYPES = (AttributorGRPOConfig, ModelConfig)


def reward_functions(names: list[str]) -> list[Callable[..., list[float]]]:
    """The reward callables named by ``names`` (short names of :data:`REWARDS`)."""
    module = importlib.import_module("aegis_probe.train.rewards")
    unknown = [n for n in names if n not in REWARDS]
    if unknown:
        raise ValueError(f"unknown rewards {unknown}; choose from {sorted(REWARDS)}")
    return [getattr(module, REWARDS[n]) for n in names]


def to_example(row: dict[str, Any], path: str | Path = "data") -> dict[str, Any]:
    """A GRPO row with the columns the trainer and rewards read; a ``ValueError`` naming ``path``
    and the row when a column has the wrong type."""
    where = f"{path}: GRPO row {row.get('id')!r}"
    prompt, pairs = row["prompt"], row.get("gold_pairs") or []
    if not isinstance(prompt, list) or not prompt or not all(isinstance(m, dict) and "role" in m for m in prompt):
        raise ValueError(f"{where}: 'prompt' must be a list of {{role, content}}")
    if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 for p in pairs):
        raise ValueError(f"{where}: 'gold_pairs' must be a list of [agent, mode]")
    if not isinstance(row.get("gold_agent"), (str, type(None))):
        raise ValueError(f"{where}: 'gold_agent' must be a name or null")
    try:
        step = step_number(row.get("gold_step"), "'gold_step'")
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return {"prompt": prompt, "gold_pairs": pairs, "gold_agent": row.get("gold_agent"), "gold_step": step}


def train(args: argparse.Namespace) -> int:
    """Run GRPO as configured by ``args`` (see :func:`add_parser`)."""
    grpo_args, model_args = resolve_configs(args, CONFIG_TYPES, device_defaults(), output_dir=args.out)
    dataset = Dataset.from_list([to_example(r, args.data) for r in training_rows(args.data, ("prompt",))])
    run_trl(GRPOTrainer, args, grpo_args, model_args, dataset,
                   reward_funcs=reward_functions(grpo_args.rewards))
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The ``grpo`` subcommand."""
    return add_trainer_parser(subparsers, "grpo", "GRPO of an attributor (TRL GRPOTrainer, data-module rewards)",
                              CONFIG_TYPES, train)
