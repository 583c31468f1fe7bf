"""Command-line plumbing shared by the trainers: config dataclasses from a file plus overrides.

Every trainer is configured TRL style, by dataclasses (``SFTConfig`` + ``ModelConfig``, ...).
Values come, in increasing priority, from the dataclass defaults, ``--config FILE`` (JSON or YAML,
one flat mapping whose keys are field names of any of the dataclasses) and ``--field value``
options on the command line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any, Callable, Sequence

from transformers import HfArgumentParser

from aegis_probe.jsonl import read_jsonl


def read_config_file(path: str | Path) -> dict[str, Any]:
    """A flat mapping from a ``.json`` or ``.yaml``/``.yml`` file."""
    text = Path(path).read_text(encoding="utf-8")
    if Path(path).suffix in {".yaml", ".yml"}:
        import yaml

        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ValueError(f"{path}: invalid YAML: {exc}") from None
    else:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"{path}: invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a config file holds one mapping of field names to values")
    return data


def training_rows(path: str | Path, required: Sequence[str]) -> list[dict[str, Any]]:
    """The rows of a trainer's ``--data`` file; a file without any is an error naming it (before
    anything is written to ``--out``)."""
    rows = read_jsonl(path, required=required)
    if not rows:
        raise ValueError(f"{path}: no rows to train on")
    return rows


def check_fresh_run(out: str | Path, last_checkpoint: str | Path | None, resume: bool) -> None:
    """Refuse to start over (no ``--resume``) in a directory holding an earlier run's checkpoints:
    the new run would overwrite its model and mix its checkpoints with the old ones (a later
    ``--resume`` could pick an old one up)."""
    if last_checkpoint is not None and not resume:
        raise ValueError(f"{out} holds the checkpoints of an earlier run ({Path(last_checkpoint).name}): continue it "
                         "with --resume, or train into another directory (or remove them)")


def add_trainer_parser(
    subparsers: argparse._SubParsersAction,
    name: str,
    help: str,
    config_types: Sequence[type],
    run: Callable[[argparse.Namespace], Any],
    model_default: str | None = None,
    model_help: str = "base model directory (or .gguf file)",
) -> argparse.ArgumentParser:
    """Add subcommand ``name`` with ``--data/--model/--out/--config/--resume`` and every field of
    ``config_types`` as an option; parsing sets ``args.func = run``. ``--model`` is required unless
    ``model_default`` is given."""
    fields = HfArgumentParser(list(config_types), add_help=False)  # type: ignore[arg-type]
    for action in fields._actions:
        if isinstance(action, argparse._StoreFalseAction):  # HfArgumentParser's --no_<field> copies its help
            action.help = f"the same as --{action.dest} false"
        elif action.help is not argparse.SUPPRESS:
            action.help = f"{action.help or ''} (default: {_shown(action.default)})".lstrip()
        action.default = argparse.SUPPRESS  # only options given explicitly override the file
        action.required = False
    parser = subparsers.add_parser(name, help=help, description=help, parents=[fields])
    parser.add_argument("--data", required=True, help="training rows (JSON lines)")
    parser.add_argument("--model", required=model_default is None, default=model_default,
                        help=model_help + (f" (default: {model_default})" if model_default else ""))
    parser.add_argument("--out", required=True, help="output directory: checkpoints, log.jsonl, final model")
    parser.add_argument("--config", help="JSON or YAML file of config fields")
    parser.add_argument("--resume", action="store_true", help="resume from the last checkpoint in --out")
    parser.set_defaults(func=run)
    return parser


def _shown(default: Any) -> str:
    """A field's default as ``--help`` shows it (``%`` escaped for argparse)."""
    text = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else "none" if default in (None, "") else str(default)
    return text.replace("%", "%%")


def resolve_configs(args: argparse.Namespace, config_types: Sequence[type], defaults: dict[str, Any] | None = None,
                    **forced: Any) -> list[Any]:
    """Instances of ``config_types`` from ``defaults`` (below the file), ``args.config`` and explicit
    options; ``forced`` values (e.g. ``output_dir`` from ``--out``) win over all."""
    values = dict(defaults or {})
    values.update(read_config_file(args.config) if getattr(args, "config", None) else {})
    names_by_type = [{f.name for f in dataclasses.fields(t) if f.init} for t in config_types]
    known = set().union(*names_by_type)
    unknown = sorted(set(values) - known - set(defaults or {}))
    if unknown:
        raise ValueError(f"{args.config}: unknown config fields: {', '.join(unknown)}")
    values.update({k: v for k, v in vars(args).items() if k in known})
    values.update(forced)
    return [t(**{k: v for k, v in values.items() if k in names}) for t, names in zip(config_types, names_by_type)]
