"""Every ``python -m aegis_probe ...`` and ``python -m aegis_probe.train ...`` command line in
README.md and docs/*.md (and in the docstrings of examples/) names a command that exists and only options it has, with values its
choices accept: each is parsed by the real parsers (nothing is run).

Doc notation understood: ``[...]`` marks optional parts (checked as if given), ``A|B`` alternatives
(each checked), ``...`` more of the same (ignored), upper-case words (``ID``, ``K``, ``FILE``) are
placeholders, ``# ...`` a comment, a trailing ``\\`` continues the line.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from aegis_probe import cli
from aegis_probe.train import cli as train_cli

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
EXAMPLES = sorted((ROOT / "examples").rglob("*.py"))
#: ``python -m aegis_probe`` or ``python -m aegis_probe.train`` (also after ``accelerate launch ... -m``),
#: not another module under them (``aegis_probe.train.dcl.whowhen``).
INVOCATION = re.compile(r"(?:python3?\s+)?-m\s+(aegis_probe(?:\.train)?)(?![\w.])")
PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*|<[^>]+>")
#: Doc placeholders for "any option of the command" (TRL's fields of sft/grpo).
ANY_OPTION = {"--field"}


@dataclass(frozen=True)
class Invocation:
    where: str  # file:line
    module: str  # aegis_probe or aegis_probe.train
    words: tuple[str, ...]
    fenced: bool  # in a code block (a command line), not inline code in a sentence (a mention)

    def __str__(self) -> str:
        return f"{self.where}: python -m {self.module} {' '.join(self.words)}"


def _code_lines(text: str) -> list[tuple[int, str, bool]]:
    """(line number, text, fenced) of the command lines: fenced code (a line ending in ``\\`` or followed by
    indented lines continues there) and inline code."""
    found: list[tuple[int, str, bool]] = []
    fenced, pending, start = False, "", 0
    for number, line in enumerate([*text.splitlines(), "```"], 1):
        code = "" if line.lstrip().startswith("#") else line.split(" #")[0].rstrip()
        if fenced and pending and code[:1].isspace():  # an indented line continues the command above
            pending = pending.removesuffix("\\") + " " + code
            continue
        if pending:
            found.append((start, pending.removesuffix("\\"), True))
        start, pending = number, ""
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif fenced:
            pending = code
        else:
            found.extend((number, span.replace("\\|", "|"), False) for span in re.findall(r"`([^`]+)`", line))
    return found


def invocations(name: str, text: str) -> list[Invocation]:
    """The invocations in the markdown ``text`` of the file ``name``."""
    return [Invocation(f"{name}:{number}", module, words, fenced)
            for number, line, fenced in _code_lines(text) for module, words in _commands(line)]


def docstring_invocations(name: str, source: str) -> list[Invocation]:
    """The invocations in the module docstring of the Python ``source`` of the file ``name``: in
    ````...```` (wrapped lines joined) and in indented lines; each is a command line to run."""
    doc = ast.get_docstring(ast.parse(source), clean=False) or ""
    start = source.find(doc)
    found = []
    spans = [*re.finditer(r"``(.+?)``", doc, re.S), *re.finditer(r"^ {4}(\S.*)$", doc, re.M)]
    for match in sorted(spans, key=lambda m: m.start()):
        number = source.count("\n", 0, start + match.start()) + 1
        line = " ".join(match.group(1).split())
        found += [Invocation(f"{name}:{number}", module, words, True) for module, words in _commands(line)]
    return found


def _commands(line: str) -> list[tuple[str, tuple[str, ...]]]:
    """(module, words) of each invocation on one command line."""
    found = []
    for match in INVOCATION.finditer(line):
        rest = INVOCATION.split(line[match.end():])[0]  # up to the next invocation on the line
        rest = re.split(r"\s(?:&&|\|\||;|>|2>)\s", rest)[0]
        rest = re.sub(r"\](?=\s|$)", "", re.sub(r"(^|\s)\[", r"\1", rest))  # [optional] parts
        words = tuple(shlex.split(rest.replace("[", "").replace("]", "")))
        if words:
            found.append((match.group(1), words))
    return found


@functools.lru_cache(maxsize=None)
def _parser(module: str) -> argparse.ArgumentParser:
    if module == "aegis_probe":
        return cli.build_parser("python -m aegis_probe")
    return train_cli.parser(list(train_cli.COMMANDS))


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def _is_placeholder(word: str) -> bool:
    return bool(PLACEHOLDER.fullmatch(word))


def _is_option(word: str) -> bool:
    return word.startswith("-") and not re.fullmatch(r"-\d.*", word)


def problems(inv: Invocation, parser: argparse.ArgumentParser) -> list[str]:
    """What in ``inv`` the parser does not have: a command, an option (by its full name), a value
    outside an option's or a positional's choices."""
    found: list[str] = []
    words = [w for w in inv.words if w != "..."]
    positionals: Iterator[argparse.Action] = iter([])
    i = 0
    while i < len(words):
        word, i = words[i], i + 1
        sub = _subparsers(parser)
        if word in ANY_OPTION:
            i += 1  # and its value
        elif _is_option(word):
            action = parser._option_string_actions.get(word.split("=")[0])
            if action is None:
                found.append(f"{parser.prog} has no option {word.split('=')[0]}")
            elif "=" not in word and action.nargs != 0 and i < len(words) and not _is_option(words[i]):
                values = [words[i]]
                i += 1
                while action.nargs in ("+", "*") and i < len(words) and not _is_option(words[i]):
                    values.append(words[i])
                    i += 1
                found += _outside_choices(f"{parser.prog} {word}", action, values)
        elif sub is not None:
            if _is_placeholder(word):
                return found  # ``COMMAND``: nothing more to check
            missing = [name for name in word.split("|") if name not in sub.choices]
            if missing:
                return [*found, f"{parser.prog} has no command {', '.join(missing)} (has: {', '.join(sub.choices)})"]
            parser = sub.choices[word.split("|")[0]]
            positionals = iter([a for a in parser._actions if not a.option_strings])
        else:
            action = next(positionals, None)
            if action is not None:
                found += _outside_choices(f"{parser.prog} {action.dest}", action, [word])
    return found


def _outside_choices(what: str, action: argparse.Action, values: list[str]) -> list[str]:
    if action.choices is None:
        return []
    bad = [v for value in values if not _is_placeholder(value) and not value.startswith("$")
           for v in value.split("|") if v not in action.choices]
    return [f"{what}: {', '.join(bad)} is not one of {', '.join(map(str, action.choices))}"] if bad else []


def concrete(inv: Invocation) -> bool:
    """A command line of a code block to run as written: no placeholder, shell variable, alternative or ``...``."""
    return inv.fenced and not any(_is_placeholder(w) or "$" in w or "|" in w or w == "..." or w in ANY_OPTION for w in inv.words)


def parse_error(inv: Invocation, parser: argparse.ArgumentParser) -> str | None:
    """The error ``parser.parse_args`` gives for the words of ``inv`` (it runs nothing), or None."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stderr(out), contextlib.redirect_stdout(out):
            parser.parse_args(list(inv.words))
    except SystemExit:
        return out.getvalue().strip().splitlines()[-1]
    return None


ALL = [*(inv for path in DOCS for inv in invocations(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"))),
       *(inv for path in EXAMPLES for inv in docstring_invocations(str(path.relative_to(ROOT)),
                                                                   path.read_text(encoding="utf-8")))]


def test_the_docs_show_the_command_lines() -> None:
    """The extraction finds the documented command lines (a change of notation would silently check nothing)."""
    shown = {str(inv).split(": ", 1)[1] for inv in ALL}
    assert any(line.startswith("python -m aegis_probe demo --inject FM-2.6") for line in shown)
    assert any(line.startswith("python -m aegis_probe.train build sft") for line in shown)
    assert any(line.startswith("python -m aegis_probe.train sft --data") for line in shown)
    assert any(inv.where.startswith("examples/injection/autogen_math.py:") and "--tasks" in inv.words for inv in ALL)
    assert len(ALL) >= 40, "\n".join(map(str, ALL))


@pytest.mark.parametrize("module", ["aegis_probe", "aegis_probe.train"])
def test_every_documented_command_line_parses(module: str) -> None:
    parser = _parser(module)
    report = [f"{inv}\n    {problem}" for inv in ALL if inv.module == module for problem in problems(inv, parser)]
    assert not report, "documented command lines the CLI does not accept:\n" + "\n".join(report)


@pytest.mark.parametrize("module", ["aegis_probe", "aegis_probe.train"])
def test_every_concrete_documented_command_line_parses_whole(module: str) -> None:
    """A line with nothing left to fill in parses as a whole: required options given, values of their types."""
    parser = _parser(module)
    report = [f"{inv}\n    {error}" for inv in ALL if inv.module == module and concrete(inv)
              for error in [parse_error(inv, parser)] if error]
    assert not report, "documented command lines the CLI refuses:\n" + "\n".join(report)


SAMPLE = """
Run `python -m aegis_probe demo --frmework camel` (a typo) or:

```bash
python -m aegis_probe traces list
python -m aegis_probe demo --framework haystack      # not a framework
python -m aegis_probe inject --app aegis_probe.demos.autogen:build_app \\
    --out inject-out                                 # no --tasks
python -m aegis_probe.train build sft ww.jsonl -o sft.jsonl [--target agent_step|pairs]
```
"""


def test_a_documented_option_that_does_not_exist_fails() -> None:
    """The checks are not vacuous: a made-up option, command or choice, a missing required option fail."""
    found = invocations("sample.md", SAMPLE)
    assert [inv.where for inv in found] == ["sample.md:2", "sample.md:5", "sample.md:6", "sample.md:7", "sample.md:9"]
    assert [len(problems(inv, _parser(inv.module))) for inv in found] == [1, 1, 1, 0, 0]
    assert "no option --frmework" in problems(found[0], _parser("aegis_probe"))[0]
    assert "haystack is not one of" in problems(found[2], _parser("aegis_probe"))[0]
    missing = parse_error(found[3], _parser("aegis_probe"))
    assert missing is not None and "--tasks" in missing
    assert not concrete(found[4]) and concrete(found[3]) and not concrete(found[0])  # alternatives; inline


def test_every_example_app_is_listed_in_the_docs_and_its_docstring_says_how_to_run_it() -> None:
    """docs/injection.md listed 4 of the 8 example apps; camel_math.py and metagpt_math.py had no command line."""
    section = (ROOT / "docs" / "injection.md").read_text(encoding="utf-8").split("## Examples", 1)[1]
    apps = [p for p in sorted((ROOT / "examples" / "injection").glob("*.py")) if p.stem.endswith(("_math", "_code"))]
    assert len(apps) >= 8, apps
    assert [p.name for p in apps if f"`{p.name}`" not in section] == [], "apps docs/injection.md does not list"
    run_lines = {inv.where.split(":")[0] for inv in ALL if inv.words[:1] == ("inject",) and concrete(inv)}
    assert [p.name for p in apps if str(p.relative_to(ROOT)) not in run_lines] == [], "apps without an inject command line"
