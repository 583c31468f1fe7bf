"""What SFT and GRPO share: model + LoRA setup, checkpoint resumption, running a TRL trainer."""

from __future__ import annotations

import argparse
import logging
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from transformers.trainer_utils import get_last_checkpoint
from trl import ModelConfig, get_peft_config

from ..files import partial_dir, replacing_dir
from .config import check_fresh_run
from .logs import JsonlLog, JsonlLogCallback
from .modelio import FINAL_MODEL, load_causal_lm

logger = logging.getLogger("aegis_probe.train")


def device_defaults() -> dict[str, Any]:
    """Defaults that depend on the machine: no bf16 where it is unsupported (e.g. on CPU); no tqdm
    bars of transformers when standard error is not a terminal (they were drawn into logs and
    pipes). A value from ``--config`` or the command line wins."""
    import torch

    from aegis_probe.cli.common import on_terminal

    return ({} if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else {"bf16": False}) | (
        {} if on_terminal() else {"disable_tqdm": True})


def last_checkpoint(out_dir: str | Path) -> str | None:
    """The newest ``checkpoint-N`` directory under ``out_dir`` (None if there is none)."""
    return get_last_checkpoint(str(out_dir)) if Path(out_dir).is_dir() else None


def run_trl(trainer_cls: type, args: argparse.Namespace, train_args: Any, model_args: ModelConfig,
            dataset: Any, **trainer_kwargs: Any) -> Path:
    """Build and run ``trainer_cls`` on ``dataset``; saves the final model (safetensors) to
    ``<out>/model`` (:func:`save_final_model`).

    ``--model`` is loaded here (LoRA adapters added when ``use_peft``); with ``--resume`` training
    continues from the last checkpoint in ``--out``.
    """
    found = last_checkpoint(args.out)
    check_fresh_run(args.out, found, args.resume)
    model, tokenizer = load_causal_lm(args.model, model_args.dtype)
    resume = found if args.resume else None
    if args.resume and resume is None:
        logger.warning("--resume: no checkpoint in %s, starting from scratch", args.out)
    trainer = trainer_cls(
        model=model,
        args=train_args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
        callbacks=[JsonlLogCallback(args.out)],
        **trainer_kwargs,
    )
    _check_rows_kept(args, train_args, len(dataset), len(trainer.train_dataset))
    result = trainer.train(resume_from_checkpoint=resume)
    save_final_model(trainer, args.out)
    if trainer.is_world_process_zero():
        JsonlLog(args.out).write({"event": "done", "step": trainer.state.global_step, "resumed_from": resume,
                                  **result.metrics})
    return Path(args.out)


def save_final_model(trainer: Any, out: str | Path) -> Path:
    """Save ``trainer``'s model into ``<out>/model``, whole or not at all: every process writes its
    part into ``<out>/.model.partial``, which the saving process renames ``<out>/model`` (replacing
    an earlier one) only once all are done; a save that fails removes it, one that is killed leaves
    it, and loading refuses it (:func:`~.modelio.resolve_model_path`). Returns ``<out>/model``."""
    final = Path(out) / FINAL_MODEL
    saver = trainer.args.should_save  # the main process (of each node with save_on_each_node)
    with replacing_dir(final) if saver else nullcontext(partial_dir(final)) as partial:
        trainer.accelerator.wait_for_everyone()  # the folder is made afresh before anyone writes into it
        trainer.save_model(str(partial))
        trainer.accelerator.wait_for_everyone()  # every process wrote its part (DeepSpeed ZeRO-3 shards)
    return final


def _check_rows_kept(args: argparse.Namespace, train_args: Any, given: int, kept: int) -> None:
    """Say why when the trainer dropped rows (completions truncated away by ``max_length``)."""
    max_length = getattr(train_args, "max_length", None)
    if kept == 0:
        raise ValueError(f"{args.data}: all {given} rows were dropped before training: with --max_length "
                         f"{max_length} no row keeps a token of its answer (the prompt fills the whole "
                         "window); raise --max_length or shorten the rows (train build --max-tokens)")
    if kept < given:
        logger.warning("%s: %d of %d rows dropped (their answers lie beyond --max_length %s)",
                       args.data, given - kept, given, max_length)
