"""Command line: ``aegis-probe`` (or ``python -m aegis_probe``) and its ``train`` half.

``demo | traces | inject | blame | report`` live here, one module per command; ``train ...`` is
the same command line as ``python -m aegis_probe.train ...`` (:mod:`aegis_probe.train.cli`).
Both follow one convention: a command module's ``add_parser(subparsers)`` adds its sub-parser and
sets ``func(args) -> exit code``; both run it through :func:`run_command`, which turns bad input
into one ``error:`` line and exit status 2, and refuses outputs that would overwrite an input or
a trace store file. Command modules import their heavy dependencies (frameworks, tqdm) only when
they run, so ``--help`` stays fast and a missing extra only breaks its own command.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

from .common import (VERBOSE_HELP, add_examples, configure_logging, plain_help, prog_name, progress_on_terminal_only,
                     run_command, verbose_everywhere, version)

#: command name -> "module:function" that adds the command's sub-parser.
COMMANDS: dict[str, str] = {
    "demo": "aegis_probe.cli.demo:add_parser",
    "traces": "aegis_probe.cli.traces:add_parser",
    "inject": "aegis_probe.cli.inject:add_parser",
    "blame": "aegis_probe.cli.blame:add_parser",
    "report": "aegis_probe.cli.report:add_parser",
}
TRAIN_HELP = "import datasets, build training rows, train and evaluate attributors (train --help)"


# -- the parser ------------------------------------------------------------------------------
def build_parser(prog: str = "aegis-probe") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="aegis-probe: trace, inject faults into, replay and debug LLM multi-agent apps, "
                    "and train failure-attribution models on the traces. COMMAND --help: a command's options, "
                    "their defaults and examples.",
    )
    add_examples(parser, "demo                    # an instrumented AutoGen team on a scripted model; prints its trace",
                 "demo --inject FM-2.6    # a failed run, to blame",
                 "traces ls               # the runs in ./aegis-traces",
                 "train --help            # datasets, training rows, attributors")
    parser.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for target in COMMANDS.values():
        module, _, func = target.partition(":")
        getattr(importlib.import_module(module), func)(sub)
    verbose_everywhere(parser)
    sub.add_parser("train", help=TRAIN_HELP, add_help=False)  # dispatched before parsing: see main()
    return plain_help(parser)


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = prog or prog_name("aegis-probe")
    first = next((i for i, a in enumerate(argv) if not a.startswith("-")), None)
    if first is not None and argv[first] == "train":  # the training command line, unchanged
        from ..train.cli import main as train_main

        verbose = any(a in ("-v", "--verbose") for a in argv[:first])
        return train_main(argv[first + 1:], prog=f"{prog} train", verbose=verbose)
    args = build_parser(prog).parse_args(argv)
    configure_logging(args.verbose)
    progress_on_terminal_only(args)
    return run_command(args.func, args, verbose=args.verbose)
