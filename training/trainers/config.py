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

from ..files import read_rows


def read_config_file(path: str | Path) -> dict[str, Any]:
    """A flat mapping from a ``.json`` or ``.yaml``/``.yml`` file."""
    try:
        text = Path(path).read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc})") from None
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


#: The ``train build`` kind of each trainer's rows, by the field its rows must have.
_BUILD_KIND = {"turns": "dcl", "messages": "sft", "prompt": "grpo"}


def training_rows(path: str | Path, required: Sequence[str]) -> list[dict[str, Any]]:
    """The rows of a trainer's ``--data`` file; a file without any is an error naming it (before
    anything is written to ``--out``), and so is a file of trajectories (``train import``'s
    output), saying which ``train build`` makes the rows from it."""
    try:
        rows = read_rows(path, required=required)
    except ValueError as exc:
        if "missing field" not in str(exc) or not _trajectories(path):
            raise
        kind = _BUILD_KIND.get(required[0], "KIND") if required else "KIND"
        raise ValueError(f"{path}: trajectories, not {kind} training rows: make the rows first with "
                         f"train build {kind} {path} -o {kind}.jsonl, and give that file as --data") from None
    if not rows:
        raise ValueError(f"{path}: no rows to train on")
    return rows


def _trajectories(path: str | Path) -> bool:
    """Whether ``path``'s first record is a trajectory (it has ``steps``)."""
    try:
        return "steps" in read_rows(path)[0]
    except (ValueError, OSError, IndexError):
        return False


def check_fresh_run(out: str | Path, last_checkpoint: str | Path | None, resume: bool) -> None:
    """Refuse to start over (no ``--resume``) in a directory holding an earlier run's checkpoints:
    the new run would overwrite its model and mix its checkpoints with the old ones (a later
    ``--resume`` could pick an old one up)."""
    if last_checkpoint is not None and not resume:
        raise ValueError(f"{out} holds the checkpoints of an earlier run ({Path(last_checkpoint).name}): continue it "
                         "with --resume, or train into another directory (or remove them)")


#: The defaults ``sft``/``grpo`` set otherwise than TRL (``common.device_defaults``), as ``--help`` shows them.
DEFAULTS_SET_HERE = {"disable_tqdm": "true when standard error is not a terminal, else transformers' rule"}


def add_trainer_parser(
    subparsers: argparse._SubParsersAction,
    name: str,
    help: str,
    config_types: Sequence[type],
    run: Callable[[argparse.Namespace], Any],
    model_default: str | None = None,
    model_help: str = "base model directory (or .gguf file)",
    final_model: str = "OUT/model",
) -> argparse.ArgumentParser:
    """Add subcommand ``name`` with ``--data/--model/--out/--config/--resume`` and every field of
    ``config_types`` as an option; parsing sets ``args.func = run``. ``--model`` is required unless
    ``model_default`` is given; ``final_model`` says where in ``--out`` the trained model goes."""
    from transformers import HfArgumentParser

    fields = HfArgumentParser(list(config_types), add_help=False)  # type: ignore[arg-type]
    for action in fields._actions:
        if isinstance(action, argparse._StoreFalseAction):  # HfArgumentParser's --no_<field> copies its help
            action.help = f"the same as --{action.dest} false"
        elif action.help is not argparse.SUPPRESS:
            shown = DEFAULTS_SET_HERE.get(action.dest) or _shown(action.default)
            action.help = f"{action.help or ''} (default: {shown})".lstrip()
        action.default = argparse.SUPPRESS  # only options given explicitly override the file
        action.required = False
    parser = subparsers.add_parser(name, help=help, description=help, parents=[fields])
    add_run_options(parser, True, model_default, model_help, final_model)
    parser.set_defaults(func=run)
    return parser


def add_run_options(parser: argparse.ArgumentParser, required: bool, model_default: str | None = None,
                    model_help: str = "base model directory (or .gguf file)", final_model: str = "OUT/model") -> None:
    """A trainer's ``--data/--model/--out/--config/--resume`` (``required``: ``--data``, ``--out``
    and a ``--model`` without a default must be given)."""
    parser.add_argument("--data", required=required, help="training rows (JSON lines)")
    parser.add_argument("--model", required=required and model_default is None, default=model_default,
                        help=model_help + (f" (default: {model_default})" if model_default else ""))
    parser.add_argument("--out", required=required, help=f"output directory: checkpoints, log.jsonl, the final model ({final_model})")
    parser.add_argument("--config", help="JSON or YAML file of config fields")
    parser.add_argument("--resume", action="store_true", help="resume from the last checkpoint in --out")


def _shown(default: Any) -> str:
    """A field's default as ``--help`` shows it (``%`` escaped for argparse)."""
    text = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else "none" if default in (None, "") else str(default)
    return text.replace("%", "%%")


def _at_least(low: int) -> tuple[Callable[[Any], bool], str]:
    return (lambda v: v >= low), f"at least {low}"


_POSITIVE = ((lambda v: v > 0), "greater than 0")
_NOT_NEGATIVE = ((lambda v: v >= 0), "at least 0")
_FRACTION = ((lambda v: 0 <= v <= 1), "between 0 and 1")
#: Allowed values of the numeric config fields, by name (DCL's, TRL's and transformers'; a name
#: means the same in each); a value outside is an error before anything is loaded or written.
#: ``None`` (an optional field left unset) is always allowed.
BOUNDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    **dict.fromkeys(("epochs", "groups_per_batch", "hidden_size", "max_length", "max_chunks", "save_total_limit",
                     "per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps",
                     "max_completion_length", "max_prompt_length", "num_iterations", "generation_batch_size",
                     "steps_per_generation", "lora_r"), _at_least(1)),
    "num_generations": _at_least(2),  # GRPO's advantages compare the completions of one prompt
    "max_steps": ((lambda v: v == -1 or v >= 1), "-1 (train for the epochs) or at least 1"),
    **dict.fromkeys(("num_train_epochs", "learning_rate", "encoder_learning_rate", "temperature", "logging_steps",
                     "save_steps", "eval_steps", "lora_alpha", "repetition_penalty"), _POSITIVE),
    **dict.fromkeys(("seed", "data_seed", "max_turns", "weight_decay", "warmup_steps", "max_grad_norm", "beta",
                     "epsilon", "top_k", "classification_weight", "contrastive_weight", "hierarchy_weight",
                     "dataloader_num_workers"), _NOT_NEGATIVE),
    **dict.fromkeys(("threshold", "min_p", "warmup_ratio"), _FRACTION),
    "top_p": ((lambda v: 0 < v <= 1), "greater than 0 and at most 1"),
    "lora_dropout": ((lambda v: 0 <= v < 1), "at least 0 and below 1"),
}


def _read(value: Any, convert: Callable[[Any], Any]) -> Any:
    """One value as the option's type reads it: a number or its text for a number, else its text."""
    if convert in (int, float):
        if isinstance(value, bool) or (convert is int and isinstance(value, float)):
            raise ValueError(f"not {'an integer' if convert is int else 'a number'}")
        return convert(value)
    return convert(value if isinstance(value, (str, bool)) else str(value))


def _from_file(value: Any, action: argparse.Action, where: str) -> Any:
    """A config file's value read as the command line reads the option's text (``--epochs 3``):
    ``3`` or ``"3"`` for an integer field, ``true`` for a flag; ``ValueError`` naming ``where``
    otherwise. Values of fields that take a mapping are left as they are."""
    if value is None:
        if action.default is not None:
            raise ValueError(f"{where}: null is not allowed (default {action.default!r})")
        return None
    convert: Callable[[Any], Any] = action.type if callable(action.type) else str
    many = action.nargs in ("+", "*")
    if isinstance(value, dict) and not many and convert not in (int, float, str) and not action.choices:
        return value  # a mapping for a field that takes one (model_init_kwargs, ...)
    if many != isinstance(value, list) or any(isinstance(v, (dict, list)) for v in (value if many else [value])):
        raise ValueError(f"{where}: expected {'a list' if many else 'one value'}, got {type(value).__name__}")
    try:
        read = [_read(v, convert) for v in (value if many else [value])]
    except (TypeError, ValueError, argparse.ArgumentTypeError) as exc:
        raise ValueError(f"{where}: {value!r} is not a valid value ({exc})") from None
    if action.choices and any(r not in action.choices for r in read):
        raise ValueError(f"{where}: {value!r} is not one of {', '.join(map(str, action.choices))}")
    return read if many else read[0]


def check_bounds(values: dict[str, Any], origin: Callable[[str], str]) -> None:
    """Refuse a numeric field outside :data:`BOUNDS` (``origin(name)`` says where it was given)."""
    for name, value in values.items():
        if name not in BOUNDS or value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        ok, allowed = BOUNDS[name]
        if not ok(value):  # nan fails every bound
            raise ValueError(f"{origin(name)}: must be {allowed}, got {value}")


def resolve_configs(args: argparse.Namespace, config_types: Sequence[type], defaults: dict[str, Any] | None = None,
                    **forced: Any) -> list[Any]:
    """Instances of ``config_types`` from ``defaults`` (below the file), ``args.config`` and explicit
    options; ``forced`` values (e.g. ``output_dir`` from ``--out``) win over all. A file's value is
    read as its option's text would be; a value outside :data:`BOUNDS`, from the file or the command
    line, is a ``ValueError`` naming the field and where it came from."""
    values = dict(defaults or {})
    names_by_type = [{f.name for f in dataclasses.fields(t) if f.init} for t in config_types]
    known = set().union(*names_by_type)
    from_file = read_config_file(args.config) if getattr(args, "config", None) else {}
    unknown = sorted(set(from_file) - known - set(defaults or {}))
    if unknown:
        raise ValueError(f"{args.config}: unknown config fields: {', '.join(unknown)}")
    if from_file:
        actions: dict[str, argparse.Action] = {}
        from transformers import HfArgumentParser

        for action in HfArgumentParser(list(config_types))._actions:  # type: ignore[arg-type]
            actions.setdefault(action.dest, action)  # --field, not the --no_field that follows it
        values.update({k: _from_file(v, actions[k], f"{args.config}: {k}") if k in actions else v
                       for k, v in from_file.items()})
    given = {k: v for k, v in vars(args).items() if k in known}
    values.update(given)
    check_bounds(values, lambda name: f"--{name}" if name in given else f"{args.config}: {name}" if name in from_file
                 else name)
    values.update(forced)
    return [t(**{k: v for k, v in values.items() if k in names}) for t, names in zip(config_types, names_by_type)]
