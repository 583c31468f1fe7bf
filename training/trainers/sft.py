"""Supervised fine-tuning of an attributor on SFT rows with TRL's ``SFTTrainer``.

Rows are ``{"id", "source", "messages": [system, user, assistant]}``; they are trained as
prompt/completion pairs so the loss covers only the assistant's answer.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from datasets import Dataset
from trl import ModelConfig, SFTConfig, SFTTrainer

from .common import device_defaults, run_trl
from .config import add_trainer_parser, resolve_configs, training_rows

CONFIG_TYPES = (SFTConfig, ModelConfig)


def to_prompt_completion(row: dict[str, Any], path: str | Path = "data") -> dict[str, Any]:
    """An SFT row as a conversational prompt/completion example (the last assistant turn is the completion)."""
    messages = row["messages"]
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
        raise ValueError(f"{path}: SFT row {row.get('id')!r}: 'messages' must be a list of {{role, content}}")
    if not messages or messages[-1]["role"] != "assistant":
        raise ValueError(f"{path}: SFT row {row.get('id')!r}: the last message must be the assistant's answer")
    return {"prompt": messages[:-1], "completion": messages[-1:]}


def train(args: argparse.Namespace) -> int:
    """Run SFT as configured by ``args`` (see :func:`add_parser`)."""
    sft_args, model_args = resolve_configs(args, CONFIG_TYPES, device_defaults(), output_dir=args.out)
    dataset = Dataset.from_list([to_prompt_completion(r, args.data) for r in training_rows(args.data, ("messages",))])
    run_trl(SFTTrainer, args, sft_args, model_args, dataset)
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The ``sft`` subcommand."""
    return add_trainer_parser(subparsers, "sft", "supervised fine-tuning of an attributor (TRL SFTTrainer)",
                              CONFIG_TYPES, train)
