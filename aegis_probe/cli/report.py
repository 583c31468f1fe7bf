"""``report TRACE_ID|FILE --out report.html``: write a self-contained HTML report of one trace.

TRACE_ID (a unique prefix is enough) is looked up in the trace store (``--dir``, else
``$AEGIS_TRACE_DIR`` or ./aegis-traces). A FILE (or directory) of OTLP/JSON(-lines) is read
directly; when it holds several traces, pick one with ``--trace``. Links to the trace in Jaeger
or Phoenix are added when ``--jaeger-url``/``--phoenix-url`` (or ``$AEGIS_JAEGER_URL``/
``$AEGIS_PHOENIX_URL``) name their UI.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from .common import add_examples, check_replaceable, http_url
from ..report.html import ENV_JAEGER_URL, ENV_PHOENIX_URL, write_report
from ..storage.store import SPANS_FILE, merge_records, read_span_file, span_files
from ..trajectory import Trajectory, load_trajectories
from .traces import store_at, stored


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="write a self-contained HTML report of one trace",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", metavar="TRACE_ID|FILE", help="trace id (or unique prefix) in the store, or an OTLP/JSON(-lines) file")
    p.add_argument("--out", help="output HTML file (default: aegis-report-<trace id prefix>.html); an existing "
                                 "file is replaced only when it is an aegis-probe report, or with --force")
    p.add_argument("--force", action="store_true", help="replace an existing --out file that is not an aegis-probe report")
    p.add_argument("--dir", default=None, help="trace store directory (default: $AEGIS_TRACE_DIR or ./aegis-traces)")
    p.add_argument("--trace", metavar="ID", help="which trace of a FILE holding several (id or unique prefix)")
    p.add_argument("--jaeger-url", help=f"Jaeger UI base URL for a trace link (default: ${ENV_JAEGER_URL})")
    p.add_argument("--phoenix-url", help=f"Phoenix UI base URL for a trace link (default: ${ENV_PHOENIX_URL})")
    add_examples(p, "3f2a --out report.html", "run.jsonl --trace 13a1 --out r.html",
                 "3f2a --jaeger-url http://localhost:16686")
    p.set_defaults(func=run)


def _select(trajs: list[Trajectory], prefix: str | None, where: str) -> Trajectory:
    if prefix is not None and not prefix.strip():
        raise ValueError("--trace is empty: give a trace id (or a unique prefix of one)")
    matches = [t for t in trajs if prefix is None or (t.trace_id or "").startswith(prefix.lower())]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise KeyError(f"no trace{f' matching {prefix!r}' if prefix else ''} in {where}")
    raise ValueError(f"{where} holds {len(matches)} traces{f' matching {prefix!r}' if prefix else ''}: pick one with --trace ID")


def _matching(path: Path, prefix: str) -> list[Trajectory]:
    """The trajectories of the traces of a file or directory that ``prefix`` starts; only lines
    that may hold them are decoded (a store is not read whole, nor its other traces built)."""
    if not prefix.strip():
        return []  # _select says why
    traces = merge_records(rec for f in span_files(path) for rec in read_span_file(f, prefix))
    try:
        return [Trajectory.from_spans(spans) for tid, spans in traces.items() if tid.startswith(prefix.lower())]
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc


def _nested_stores(path: Path) -> list[str]:
    """The names of ``path``'s folders that are trace stores when ``path`` is a directory that is
    not one itself (an injection campaign's OUT: ``traces``, ``baselines``), else ``[]``."""
    try:
        if not path.is_dir() or (path / SPANS_FILE).is_file():
            return []
        names = [p.name for p in path.iterdir() if (p / SPANS_FILE).is_file()]
    except OSError:  # unreadable: reading it says why
        return []
    return sorted(names, key=lambda name: (name != "traces", name))


def load(target: str, store_dir: str | None = None, trace: str | None = None) -> Trajectory:
    """The trajectory a ``report`` target names: a file or directory of traces, else a stored trace id."""
    if not target.strip():  # not the current directory, which Path("") is
        raise ValueError("TRACE_ID|FILE is empty: give a trace id (or a unique prefix of one) or a file")
    path = Path(target)
    nested = _nested_stores(path)
    if nested:  # an injection campaign's folder: runs.jsonl beside its traces/ and baselines/ stores
        others = ", ".join(str(path / name) for name in nested[1:])
        where = f"{path / nested[0]}" + (f" (or {others})" if others else "")
        raise ValueError(f"{path}: not a trace store (its folders {', '.join(nested)} are): give {where} or a trace id")
    if path.exists():
        return _select(load_trajectories(path) if trace is None else _matching(path, trace), trace, str(path))
    if not re.fullmatch(r"[0-9a-fA-F]+", target):
        raise FileNotFoundError(f"no file {target} (and not a trace id: those are hexadecimal)")
    store = store_at(store_dir)
    return stored(store, target)


def is_report(head: bytes) -> bool:
    """Whether a file starting with ``head`` is an HTML report of :func:`write_report`'s."""
    return head.lstrip()[:15].lower() == b"<!doctype html>" and b"<title>aegis-probe" in head


def check_out(out: str, force: bool) -> None:
    """Refuse an ``--out`` that is a directory, or an existing file that is no report of ours (unless ``force``)."""
    if os.path.isdir(out):
        raise ValueError(f"--out {out}: a directory; give the report's file name (e.g. {Path(out) / 'report.html'})")
    check_replaceable("--out", out, is_report, "an aegis-probe report", force)


def run(args: argparse.Namespace) -> int:
    for option, url in (("--jaeger-url", args.jaeger_url), ("--phoenix-url", args.phoenix_url)):
        if url is not None:
            http_url(option, url, "the UI's http(s):// URL, e.g. http://localhost:16686")
    traj = load(args.target, args.dir, args.trace)
    out = args.out or f"aegis-report-{(traj.trace_id or 'trace')[:12]}.html"
    check_out(out, args.force)
    path = write_report(traj, out, jaeger_url=args.jaeger_url, phoenix_url=args.phoenix_url)
    print(f"report of trace {traj.trace_id} ({len(traj.steps)} steps) written to {path}")
    return 0
