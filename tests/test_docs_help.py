"""``--help`` of every command and subcommand (``python -m aegis_probe ...`` and
``python -m aegis_probe.train ...``) says what the command does, shows each option's default and
ends with examples that the command's own parser accepts; a bad option value is one error line
naming the option and what it takes."""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import shlex
from typing import Iterator

import pytest

from aegis_probe import cli
from aegis_probe.cli.common import EXAMPLES
from aegis_probe.train import cli as train_cli


def _example_lines(parser: argparse.ArgumentParser) -> list[str]:
    """The example command lines of ``parser``'s ``--help``, after its name (``[]`` when it has none)."""
    epilog = parser.epilog or ""
    if not epilog.startswith(EXAMPLES):
        return []
    return [line.strip().removeprefix("%(prog)s").strip() for line in epilog.splitlines()[1:]]


@functools.lru_cache(maxsize=None)
def _roots() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    return cli.build_parser("python -m aegis_probe"), train_cli.parser(list(train_cli.COMMANDS))


def commands() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(command line, parser) of every command and subcommand of both command lines."""

    def walk(name: str, parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
        yield name, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub_name, sub in action.choices.items():
                    if not (name == "python -m aegis_probe" and sub_name == "train"):  # the train parser's, below
                        yield from walk(f"{name} {sub_name}", sub)

    main, train = _roots()
    yield from walk("python -m aegis_probe", main)
    yield from walk("python -m aegis_probe.train", train)


def _parses(parser: argparse.ArgumentParser, words: list[str]) -> str | None:
    """The error of ``parser.parse_args(words)`` (nothing runs), or None (``--help`` included)."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stderr(out), contextlib.redirect_stdout(out):
            parser.parse_args(words)
    except SystemExit as exc:
        return None if exc.code == 0 else out.getvalue().strip().splitlines()[-1]
    return None


def test_every_command_is_walked() -> None:
    names = {name for name, _ in commands()}
    assert {"python -m aegis_probe traces export", "python -m aegis_probe.train build",
            "python -m aegis_probe.train sft", "python -m aegis_probe blame"} <= names, names
    assert len(names) == 19, names


@pytest.mark.parametrize("name", [name for name, _ in commands()])
def test_help_says_what_the_command_does_and_ends_with_examples_that_parse(name: str) -> None:
    parser = dict(commands())[name]
    text = parser.format_help()
    assert parser.description and len(parser.description.split()) >= 4, f"{name}: no description"
    examples = _example_lines(parser)
    assert examples, f"{name} --help has no examples"
    assert f"examples:\n  {parser.prog} {examples[0]}".rstrip() in text, text[-600:]
    for line in examples:
        words = shlex.split(line, comments=True)
        target = parser
        if name == "python -m aegis_probe" and words[:1] == ["train"]:  # dispatched to the train command line
            target, words = _roots()[1], words[1:]
        assert _parses(target, words) is None, f"{name} --help example {line!r}: {_parses(target, words)}"


@pytest.mark.parametrize("name", [name for name, _ in commands()])
def test_help_shows_the_default_of_every_option_that_has_one(name: str) -> None:
    parser = dict(commands())[name]
    silent = [action.option_strings[-1] for action in parser._actions
              if action.option_strings and action.nargs != 0 and action.default not in (None, argparse.SUPPRESS)
              and not action.required and "default" not in (action.help or "")]
    assert not silent, f"{name} --help shows no default for {silent}"


@pytest.mark.parametrize(("main", "prog"), [(cli.main, "aegis-probe"), (train_cli.main, "aegis-probe train")])
def test_both_command_lines_say_their_version(main, prog, capsys) -> None:
    """README: ``--version`` on both; ``python -m aegis_probe.train --version`` said COMMAND is required."""
    import aegis_probe

    with pytest.raises(SystemExit) as exit_:
        main(["--version"], prog=prog)
    assert exit_.value.code == 0 and capsys.readouterr().out == f"{prog} {aegis_probe.__version__}\n"


@pytest.mark.parametrize(("options", "says"), [
    (["--modes", "FM-9,FM-2.6"], "unknown mode/strategy: FM-9 (--modes takes a comma-separated list of FM-1.1, "),
    (["--strategies", "foo"], "(--strategies takes a comma-separated list of prompt_injection, response_corruption)"),
    (["--plans-per-run", "-1"], "--plans-per-run must be >= 0 (0: the baselines only), not -1"),
    (["--concurrency", "0"], "--concurrency must be >= 1, not 0"),
])
def test_a_bad_inject_option_value_is_named_with_what_it_takes(options, says, tmp_path, capsys) -> None:
    """These were 'unknown mode/strategy: FM-9' (no option) and '--plans-per-run must be >= 0 and
    --concurrency >= 1' (for either)."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "task": "What is 1 + 1?", "expected": "2"}\n')
    code = cli.main(["inject", "--app", "aegis_probe.demos.autogen:build_app", "--tasks", str(tasks),
                     "--out", str(tmp_path / "out"), *options])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and says in err and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()
