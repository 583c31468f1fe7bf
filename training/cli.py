"""``python -m aegis_probe.train``: import datasets, build training rows, evaluate attributors.

Commands are registered lazily: :data:`COMMANDS` maps a command name to ``"module:function"``;
the function receives the subparsers object, adds its subparser and sets ``func`` (called with
the parsed ``args``, returning an exit code). Only the named command's module is imported, except
for top-level ``--help``, which lists all of them. To add a command, add an entry.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from typing import Any, Sequence

COMMANDS: dict[str, str] = {
    "import": "aegis_probe.train.cli:add_import",
    "build": "aegis_probe.train.cli:add_build",
    "eval": "aegis_probe.train.evaluate:add_eval",
    "sft": "aegis_probe.train.trainers.sft:add_parser",
    "grpo": "aegis_probe.train.trainers.grpo:add_parser",
    "dcl": "aegis_probe.train.dcl.train:add_parser",
    "attribute": "aegis_probe.train.attribute:add_parser",
    "export": "aegis_probe.train.exporters:add_parser",
    "benchmark": "aegis_probe.train.benchmark:add_parser",
    "export": "export traces or trajectories as Who&When JSON files",
}


def _register(subparsers: Any, name: str) -> None:
    module, func = COMMANDS[name].split(":")
    try:
        getattr(importlib.import_module(module), func)(subparsers)
    except ImportError as exc:  # a command whose extras are missing still shows in --help
        sub = subparsers.add_parser(name, help=f"(unavailable: {exc})")
        sub.set_defaults(func=lambda args, error=exc: _unavailable(name, error))


def _unavailable(name: str, exc: Exception) -> int:
    print(f"aegis_probe.train {name}: unavailable ({exc})", file=sys.stderr)
    return 2


def parser(names: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The CLI parser with the given commands registered (default: all)."""
    p = argparse.ArgumentParser(prog="python -m aegis_probe.train", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    subparsers = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in names if names is not None else COMMANDS:
        _register(subparsers, name)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    args = parser([command] if command in COMMANDS else None).parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (OSError, ValueError) as exc:  # bad input: one line, no traceback
        print(f"aegis_probe.train {args.command}: error: {exc}", file=sys.stderr)
        return 2


def add_source_args(p: argparse.ArgumentParser) -> None:
    """The input options shared by commands that read trajectories."""
    from .importers import FORMATS

    p.add_argument("source", help="file, directory, or Jaeger /api/traces URL")
    p.add_argument("--format", default="auto", choices=["auto", *FORMATS], help="input format (default: sniffed)")
    p.add_argument("--labels-dir", help="TRAIL only: directory of label files")


def load_source(args: argparse.Namespace) -> Any:
    """Import ``args.source``; print the summary and the first errors to stderr."""
    from .importers import load

    options = {"labels_dir": args.labels_dir} if getattr(args, "labels_dir", None) else {}
    result = load(args.source, args.format, **options)
    print(f"{args.source}: {result.summary()}", file=sys.stderr)
    for issue in result.errors[:10]:
        print(f"  error: {issue}", file=sys.stderr)
    if len(result.errors) > 10:
        print(f"  ... {len(result.errors) - 10} more errors", file=sys.stderr)
    return result


def add_import(subparsers: Any) -> None:
    p = subparsers.add_parser("import", help="import a dataset or traces as trajectory JSON lines",
                              description="Import a public attribution dataset (Who&When, Aegis, TracerTraj, TRAIL) "
                                          "or traces (OTLP/JSON, Jaeger API) into trajectory JSON lines.")
    add_source_args(p)
    p.add_argument("-o", "--out", required=True, help="output .jsonl of trajectories")
    p.add_argument("--errors", help="also write the import errors (file, record, message) as JSON here")
    p.set_defaults(func=_run_import)


def _run_import(args: argparse.Namespace) -> int:
    from .importers.native import write

    result = load_source(args)
    if args.errors:
        Path(args.errors).write_text(json.dumps([vars(e) for e in result.errors], indent=2))
    if result.errors and not result.trajectories:
        print(f"nothing imported; {args.out} left as it was", file=sys.stderr)
        return 1
    write(result.trajectories, args.out)
    print(f"wrote {len(result.trajectories)} trajectories to {args.out}")
    return 0 if result.trajectories or not result.errors else 1


def add_build(subparsers: Any) -> None:
    p = subparsers.add_parser("build", help="build SFT / GRPO / DCL rows",
                              description="Build training rows from trajectories; writes JSON lines and, "
                                          "with --hf-dir, a Hugging Face dataset saved to disk.")
    p.add_argument("kind", choices=["sft", "grpo", "dcl"], help="row type")
    add_source_args(p)
    p.add_argument("-o", "--out", required=True, help="output .jsonl")
    p.add_argument("--target", choices=["pairs", "agent_step"], default="pairs", help="answer format (sft, grpo)")
    p.add_argument("--max-tokens", type=int, default=4096, help="prompt token budget (sft, grpo)")
    p.add_argument("--tokenizer", help="local path of a Hugging Face tokenizer for the budget (default: words)")
    p.add_argument("--reasoning", action="store_true", help="sft agent_step: <think>reason</think> before the answer")
    p.add_argument("--hf-dir", help="also save a datasets.Dataset here")
    p.set_defaults(func=_run_build)


def _run_build(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from . import builders

    result = load_source(args)
    if result.errors and not result.trajectories:
        print(f"nothing imported; {args.out} left as it was", file=sys.stderr)
        return 1
    trajs = tqdm(result.trajectories, desc=f"build {args.kind}", unit="traj", file=sys.stderr)
    if args.kind == "dcl":
        rows = builders.build_dcl(trajs)
    else:
        tokenizer = None
        if args.tokenizer:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(args.tokenizer, local_files_only=True)
        options: dict[str, Any] = {"max_tokens": args.max_tokens, "tokenizer": tokenizer}
        if args.kind == "sft":
            options["reasoning"] = args.reasoning
        rows = builders.BUILDERS[args.kind](trajs, args.target, **options)
    builders.write_jsonl(rows, args.out)
    if args.hf_dir:
        builders.to_hf_dataset(rows).save_to_disk(args.hf_dir)
    print(f"wrote {len(rows)} {args.kind} rows to {args.out}")
    return 0
