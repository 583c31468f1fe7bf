"""What every command of both command lines shares: examples and plain help, errors as one
``error:`` line (:func:`run_command`), output checks, quiet framework imports, logging."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import os
import re
import sys
import traceback
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence
from urllib.parse import urlsplit

from ..errors import one_line, validation_summary
from ..redact import redact_secrets, redacted_log_records

#: Exceptions that mean bad input (a file, a record, an option, an app that does not load): one line, exit 2.
BAD_INPUT: tuple[type[BaseException], ...] = (OSError, LookupError, ValueError, RecursionError, OverflowError,
                                              ImportError, SyntaxError)

#: Argument names (dests) that name files or directories a command reads, writes, or a trace store.
INPUT_DESTS = ("source", "target", "tasks", "predictions", "data", "fit_on", "config", "labels_dir", "train", "test")
OUTPUT_DESTS = ("out", "output", "errors", "hf_dir", "out_dir")
STORE_DESTS = ("dir", "trace_dir", "store")
#: Argument names of directories a command writes into (made when missing).
DIR_DESTS = ("trace_dir", "report_dir", "hf_dir", "out_dir")


# -- help text -------------------------------------------------------------------------------
_REST = re.compile(r"``(.+?)``|:[a-z]+:`(~?)(.+?)`")


def _unrest(match: re.Match[str]) -> str:
    if match.group(1) is not None:
        return match.group(1)
    return match.group(3).rpartition(".")[2] if match.group(2) else match.group(3)


def plain(text: str) -> str:
    """Docstring text as a terminal shows it: ``x`` becomes x, :role:`~a.b` becomes b."""
    return _REST.sub(_unrest, text)


#: The first line of a command's ``--help`` examples (its epilog, kept line by line).
EXAMPLES = "examples:"


def add_examples(parser: argparse.ArgumentParser, *lines: str) -> argparse.ArgumentParser:
    """End ``parser``'s ``--help`` with example command lines (each after the command's name, as
    typed: ``python -m aegis_probe demo`` or ``aegis-probe demo``); returns ``parser``."""
    parser.epilog = "\n".join([EXAMPLES, *(f"  %(prog)s {line}".rstrip() for line in lines)])
    return parser


class _PlainHelp(argparse.HelpFormatter):
    def _format_text(self, text: str) -> str:
        if text.startswith(EXAMPLES):  # command lines: one a line, never re-wrapped
            return text % {"prog": self._prog} + "\n\n"
        return super()._format_text(plain(text))

    def _expand_help(self, action: argparse.Action) -> str:
        return plain(super()._expand_help(action))


class _PlainRawHelp(_PlainHelp, argparse.RawDescriptionHelpFormatter):
    pass


def plain_help(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Give ``parser`` and every sub-parser below it help without reST markup; returns ``parser``."""
    raw = isinstance(parser.formatter_class, type) and issubclass(parser.formatter_class, argparse.RawDescriptionHelpFormatter)
    parser.formatter_class = _PlainRawHelp if raw else _PlainHelp
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                plain_help(sub)
            for choice in action._choices_actions:
                choice.help = plain(choice.help or "")
    return parser


VERBOSE_HELP = "log debug output of aegis-probe; tracebacks of errors"


def verbose_everywhere(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Accept ``-v``/``--verbose`` after every (sub-)command of ``parser`` too (``demo -v``), as
    well as before it; returns ``parser``. (A sub-parser's default is left unset, so that it does
    not reset a ``-v`` given before the command.)"""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                if "-v" not in sub._option_string_actions and "--verbose" not in sub._option_string_actions:
                    sub.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP)
                verbose_everywhere(sub)
    return parser


def version() -> str:
    from .. import __version__

    return __version__


def prog_name(default: str) -> str:
    """The name the user typed: the console script's name, else ``default`` (``python -m ...``)."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return default if not name or name.endswith(".py") or name.startswith("-") else name


# -- running a command -----------------------------------------------------------------------
def describe(exc: BaseException) -> str:
    """One line for an exception raised by bad input."""
    if isinstance(exc, KeyError) and exc.args:
        return str(exc.args[0])
    if isinstance(exc, RecursionError):
        return "input nested too deeply to read (a JSON value nested thousands of levels)"
    summary = validation_summary(exc)
    if summary is not None:
        return summary
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{exc.filename}:{exc.lineno}: {type(exc).__name__}: {exc.msg}"
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if isinstance(exc, (OSError, ValueError, LookupError)) else f"{type(exc).__name__}: {text}"


#: The longest ``--timeout``/``--run-timeout`` (a year): longer ones overflow the clocks they are added to.
MAX_SECONDS = 365 * 86400.0


def http_url(option: str, value: str, example: str) -> str:
    """``value`` stripped when it is an http(s) URL with a host and a valid port; else ``ValueError``
    naming ``option`` (``example``: a URL of the kind it wants)."""
    url = value.strip()
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - raises for a port out of range or not a number
    except ValueError as exc:
        raise ValueError(f"{option} {value!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{option} {value!r}: give {example}")
    return url


def seconds(option: str, value: float) -> float:
    """``value`` when it is a number of seconds > 0 and at most :data:`MAX_SECONDS`; else ``ValueError``."""
    if not 0 < value <= MAX_SECONDS:
        raise ValueError(f"{option} must be > 0 seconds and at most a year ({MAX_SECONDS:.0f}), not {value}")
    return value


def on_terminal() -> bool:
    """Whether progress bars are drawn: standard error is a terminal (a log or a pipe gets the
    summary lines only)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by a caller, or closed
        return False


def progress_on_terminal_only(args: argparse.Namespace) -> None:
    """A command's ``--no-progress`` set when standard error is not a terminal (see :func:`on_terminal`)."""
    if hasattr(args, "no_progress") and not on_terminal():
        args.no_progress = True


def _is_store_dir(path: Path, stores: set[Path]) -> bool:
    return path in stores or (path.is_dir() and (path / "spans.jsonl").is_file())


def _paths(args: argparse.Namespace, dests: Sequence[str]) -> list[tuple[str, Path]]:
    """The paths the options ``dests`` of a parsed command name, resolved, with their option's
    dest: one per item of an option taking several (``nargs='+'``)."""
    found = []
    for dest in dests:
        value = getattr(args, dest, None)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, (str, os.PathLike)) and str(item):
                found.append((dest, Path(item).expanduser().resolve()))
    return found


def _check_writable_place(args: argparse.Namespace) -> None:
    """Refuse a path to write under a file (``--out notes.txt/r.html``), or a directory to write
    into or a trace store directory that is a file: before the command runs (a demo or a campaign would fail only at its end,
    with ``File exists``)."""
    for dest, path in _paths(args, (*OUTPUT_DESTS, *STORE_DESTS, "report_dir")):
        option = "--" + dest.replace("_", "-")
        if dest in STORE_DESTS and dest not in DIR_DESTS and path.exists() and not path.is_dir():  # else read as one trace file, or an empty store
            raise ValueError(f"{option} {path}: a file, not a trace store directory")
        check_place(option, path, directory=dest in DIR_DESTS)


def check_place(option: str, path: Path, directory: bool) -> None:
    """``ValueError`` naming ``option`` when ``path`` cannot be written: it is under a file, or
    (``directory``: a directory to write into) it is a file."""
    if directory and path.exists() and not path.is_dir():
        raise ValueError(f"{option} {path}: not a directory")
    above = next((p for p in path.parents if p.exists()), None)
    if above is not None and not above.is_dir():
        raise ValueError(f"{option} {path}: {above} is not a directory")


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse an output that is one of the command's inputs, a trace store, or a file of one, or
    that cannot be written where it is (under a file).

    ``ValueError`` names the option and what it would overwrite; nothing has been written yet.
    """
    from ..config import ProbeConfig

    _check_writable_place(args)
    inputs = {p for _, p in _paths(args, INPUT_DESTS) if p.exists()}
    stores = {p for _, p in _paths(args, STORE_DESTS)} | {Path(ProbeConfig.resolve().trace_dir).resolve()}
    for dest, out in _paths(args, OUTPUT_DESTS):
        option = "--" + dest.replace("_", "-")
        if out in inputs:
            raise ValueError(f"{option} {out} is an input of this command; choose another path")
        if _is_store_dir(out, stores):
            raise ValueError(f"{option} {out} is a trace store; choose another path")
        if out.suffix in (".jsonl", ".json") and _is_store_dir(out.parent, stores):
            raise ValueError(f"{option} {out} is in the trace store {out.parent} (its .jsonl/.json files are "
                             "trace files); choose another path")


#: How much of an existing output file :func:`check_replaceable` reads to tell whose it is.
_HEAD = 4096


def check_replaceable(option: str, path: str | os.PathLike[str], ours: Callable[[bytes], bool], what: str,
                      force: bool = False) -> None:
    """``ValueError`` naming ``option`` when ``path`` is an existing regular file that is not
    this command's output (``ours`` tells from its first bytes; an empty file is anyone's), unless
    ``force``: a mistyped ``--out README.md`` is not replaced. (A device or FIFO is written in place,
    never replaced: see :mod:`aegis_probe.storage.outputs`.)"""
    if force or not os.path.isfile(path):
        return
    with open(path, "rb") as fh:
        head = fh.read(_HEAD)
    if head.strip() and not ours(head):
        raise ValueError(f"{option} {path}: an existing file that is not {what}; not replaced (choose another "
                         "path, or give --force to replace it)")


def _quiet_stdout() -> None:
    """After a closed pipe (``... | head``): send what is left to /dev/null, so exit is silent."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _tolerant_output() -> None:
    """Print text that the terminal's encoding cannot hold (a lone surrogate in a task id or a
    trace) as escapes, not as an encoding error after the command's work is done."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):  # not a text stream of io's (replaced by the caller)
            pass


def _print_traceback() -> None:
    """The exception being handled, with its traceback (``-v``), secrets redacted like its error line."""
    print(redact_secrets(traceback.format_exc()), end="", file=sys.stderr)


def run_command(func: Callable[[argparse.Namespace], Any], args: argparse.Namespace, verbose: bool = False) -> int:
    """Run a parsed command: bad input is one ``error:`` line and status 2, never a traceback.

    Other errors are one line and status 1 (with ``-v``/``--verbose``, also their traceback);
    secrets in an error's message (a key in a user function's exception) are redacted;
    Ctrl-C is 130; a closed output pipe ends quietly; text the output encoding cannot hold is escaped.
    """
    _tolerant_output()
    try:
        with redacted_log_records():
            check_outputs(args)
            code = int(func(args) or 0)
        sys.stdout.flush()
        return code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        _quiet_stdout()
        return 141
    except SystemExit as exc:  # sys.exit() in user code (an app, a fixer) is bad input too
        print(f"error: user code called sys.exit({exc.code!r})", file=sys.stderr)
        return 2
    except BAD_INPUT as exc:
        if verbose:
            _print_traceback()
        message = describe(exc)
        if isinstance(exc, (RecursionError, OverflowError)):  # raised deep in a parser: name what was read
            inputs = [str(p) for _, p in _paths(args, INPUT_DESTS) if p.exists()]
            message = f"{', '.join(inputs)}: {message}" if inputs else message
        print(f"error: {redact_secrets(message)}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - a bug or an app's own error: one line, traceback on -v
        if verbose:
            _print_traceback()
        hint = "" if verbose else " (run with -v for the traceback)"
        print(f"error: {type(exc).__name__}: {redact_secrets(one_line(str(exc)))}{hint}", file=sys.stderr)
        return 1


class _OursOrErrors(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR or record.name.startswith("aegis_probe")


@contextmanager
def quiet_frameworks(enabled: bool = True) -> Iterator[None]:
    """While a command runs a framework's app, keep the framework's warnings and log lines
    (Python warnings, logging below ERROR, metagpt's loguru) out of the output; aegis-probe's own
    warnings still show."""
    if not enabled:
        yield
        return
    handlers = [h for h in (*logging.getLogger().handlers, logging.lastResort) if h is not None]
    only_ours = _OursOrErrors()
    with warnings.catch_warnings(), _loguru_off():
        warnings.simplefilter("ignore")
        for handler in handlers:
            handler.addFilter(only_ours)
        try:
            yield
        finally:
            for handler in handlers:
                handler.removeFilter(only_ours)


@contextmanager
def quiet_imports(enabled: bool = True) -> Iterator[None]:
    """While a framework is imported, no log lines or warnings at all: its dependencies log at
    import from handlers of their own. (Nothing of aegis-probe's runs meanwhile.)"""
    if not enabled:
        yield
        return
    with warnings.catch_warnings(), _loguru_off():
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        try:
            yield
        finally:
            logging.disable(logging.NOTSET)


_loguru_depth = 0


@contextmanager
def _loguru_off() -> Iterator[None]:
    """metagpt's loguru messages off (nested uses: on again when the outermost ends)."""
    global _loguru_depth
    if importlib.util.find_spec("loguru") is None:
        yield
        return
    from loguru import logger

    _loguru_depth += 1
    logger.disable("metagpt")
    try:
        yield
    finally:
        _loguru_depth -= 1
        if not _loguru_depth:
            logger.enable("metagpt")


def configure_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
