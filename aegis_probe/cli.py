"""Command line: ``python -m aegis_probe demo | traces ls | traces show ID``.

Each command lives in its own module and registers its sub-parser through :data:`COMMANDS`;
command modules import their heavy dependencies (frameworks, tqdm) only when they run, so
``--help`` stays fast and a missing extra only breaks its own command.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

#: command name -> "module:function" that adds the command's sub-parser.
COMMANDS: dict[str, str] = {
    "demo": "aegis_probe.commands.demo:add_parser",
    "traces": "aegis_probe.commands.traces:add_parser",
    "inject": "aegis_probe.commands.inject:add_parser",
    "blame": "aegis_probe.commands.blame:add_parser",
    "report": "aegis_probe.commands.report:add_parser",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m aegis_probe",
        description="aegis-probe: trace, inject faults into, replay and debug LLM multi-agent apps.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug output of aegis-probe")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for target in COMMANDS.values():
        module, _, func = target.partition(":")
        getattr(importlib.import_module(module), func)(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (OSError, KeyError, ValueError) as exc:
        print(f"error: {exc.args[0] if isinstance(exc, KeyError) and exc.args else exc}", file=sys.stderr)
        return 2
