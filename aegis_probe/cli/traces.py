"""``traces ls``, ``traces show ID`` and ``traces export ID|--all``: browse and export the embedded trace store."""

from __future__ import annotations

import argparse
import logging
import os
from datetime import datetime, timezone

from .common import add_examples
from ..config import ProbeConfig
from ..errors import one_line
from ..storage.otlp_json import SpanRecord
from ..report.steptable import cost_text, printable, step_table, summary
from ..storage.store import SPANS_FILE, TraceStore
from ..trajectory import Trajectory
from . import export

logger = logging.getLogger("aegis_probe")

_DIR_HELP = "trace store directory (default: $AEGIS_TRACE_DIR or ./aegis-traces)"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("traces", help="list, show and export traces of the embedded trace store",
                       description="Browse and export the embedded trace store (AEGIS_TRACE_DIR or ./aegis-traces).")
    p.add_argument("--dir", default=None, help=_DIR_HELP)
    add_examples(p, "ls", "show 3f2a", "export --all --out traces.jsonl")
    # also accepted after the action; SUPPRESS keeps the sub-parser from resetting a --dir given before it
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dir", default=argparse.SUPPRESS, help=_DIR_HELP)
    tsub = p.add_subparsers(dest="traces_command", metavar="ACTION", required=True)
    ls_help = ("one line per trace: trace id, started (UTC), framework, steps, outcome, cost USD, replay of, app, "
               "labels (source agent@step mode)")
    ls = tsub.add_parser("ls", parents=[common], help=ls_help, description=f"traces ls: {ls_help}; newest first.")
    ls.add_argument("--limit", type=int, default=20, help="show the N most recent traces (default 20; 0 = all)")
    ls.add_argument("--session", metavar="ID", default=None, help="only the runs of session ID (their session.id)")
    add_examples(ls, "", "--limit 0", "--dir inject-out/traces")
    ls.set_defaults(func=_ls)
    show = tsub.add_parser("show", parents=[common], help="a trace's step table (ID may be a unique prefix)",
                           description="traces show ID: a trace's summary (task, outcome, injected faults, blamed "
                                       "steps, an attributor's verdict) and its step table.")
    show.add_argument("trace_id", metavar="ID", help="trace id, or a unique prefix of one")
    show.add_argument("--json", action="store_true", help="print the Trajectory as JSON instead")
    add_examples(show, "3f2a", "3f2a --json")
    show.set_defaults(func=_show)
    export.add_parser(tsub, common).set_defaults(func=_export)


def store_at(path: str | None) -> TraceStore:
    """The trace store ``--dir`` names, else the default ($AEGIS_TRACE_DIR or ./aegis-traces, which
    may not exist yet: no traces). ``ValueError`` for a ``--dir`` that names nothing (a typo)."""
    if path and not os.path.lexists(path):
        raise ValueError(f"--dir {path}: no such trace store directory")
    return TraceStore(path or ProbeConfig.resolve().trace_dir)


def _store(args: argparse.Namespace) -> TraceStore:
    return store_at(args.dir)


def stored(store: TraceStore, trace_id: str) -> Trajectory:
    """The trace ``trace_id`` (or a unique prefix) of ``store`` as a trajectory; ``ValueError``
    naming the store when its spans make none (malformed aegis attributes)."""
    spans = store.trace(trace_id)
    try:
        return Trajectory.from_spans(spans)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{store.path}: {_malformed(spans, exc)}") from None


def _malformed(spans: list[SpanRecord], exc: BaseException) -> str:
    """What is wrong with a stored trace that makes no trajectory, on one line."""
    if isinstance(exc, RecursionError):
        trace_id = spans[0].trace_id if spans else "?"
        return f"trace {trace_id}: an aegis attribute holds JSON nested too deeply to read"
    return one_line(str(exc))


def _ls(args: argparse.Namespace) -> int:
    if args.limit < 0:
        raise ValueError(f"--limit must be >= 0 (0: all), not {args.limit}")
    store = _store(args)
    hint = store.nested_hint()
    if hint and not (store.path / SPANS_FILE).is_file():  # a campaign's folder: its runs.jsonl is no trace file
        print(f"no traces in {store.path}{hint}")
        return 0
    rows = _rows(store, args.limit, args.session)
    if not rows:
        print(f"no traces in {store.path}{hint}")
        return 0
    print(f"{'trace id':<32}  {'started (UTC)':<19}  {'framework':<9}  {'steps':>5}  {'outcome':<10}  {'cost USD':>9}  {'replay of':<9}  "
          "app  labels (source agent@step mode)")
    for row in rows:
        print(row)
    return 0


def _rows(store: TraceStore, limit: int, session: str | None) -> list[str]:
    """The lines of ``traces ls``, newest first: through the store's index, only the traces listed
    are read (more when some make no trajectory); else every trace of the store."""
    want = limit
    while True:
        recent = store.recent(want, session)
        traces = iter(recent) if recent is not None else iter(store.traces().values())
        rows: list[tuple[int, str]] = []  # (start, line): a trace's line, not its trajectory, is kept
        skipped = 0
        for spans in traces:  # each trace's spans let go of once it is listed
            try:
                t = Trajectory.from_spans(spans)
            except (ValueError, RecursionError) as exc:  # one malformed trace is left out of the list, not the whole store
                logger.warning("%s: %s; trace skipped", store.path, _malformed(spans, exc))
                skipped += 1
                continue
            if session is not None and t.metadata.get("session", {}).get("session_id") != session:
                continue
            rows.append((t.start_ns or 0, _row(t)))
        rows.sort(key=lambda row: row[0], reverse=True)
        if recent is None or not limit or not skipped or len(recent) < want:
            return [row for _, row in (rows[:limit] if limit else rows)]
        want += skipped  # as many more traces as were left out


def _row(t: Trajectory) -> str:
    """A trace's line of ``traces ls``."""
    started = datetime.fromtimestamp((t.start_ns or 0) / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    verdict = {True: "success", False: "failure", None: "-"}[t.outcome.success]
    replay_of = str(t.metadata.get("replay_of") or "-")[:8]
    return (f"{t.trace_id:<32}  {started:<19}  {t.framework or '-':<9}  {len(t.steps):>5}  {verdict:<10}  {cost_text(t.cost_usd):>9}  {replay_of:<9}  "
            f"{printable(t.app or '-')}  {printable(label_summary(t)) or '-'}")


def label_summary(t: Trajectory) -> str:
    """Each label of a run as ``source agent@step mode`` (``;``-separated), every source's."""
    return "; ".join(f"{s.source or '-'} {f.agent or '-'}@{'-' if f.step is None else f.step}" + (f" {f.mode}" if f.mode else "")
                     for s in t.labels.sets for f in s.faults)


def _show(args: argparse.Namespace) -> int:
    traj = stored(_store(args), args.trace_id)
    if args.json:
        print(traj.model_dump_json(indent=2))
    else:
        print(summary(traj))
        print()
        print(step_table(traj))
    return 0


def _export(args: argparse.Namespace) -> int:
    return export.run(args, _store(args))
