"""``train import --executor ray``: a sharded store converted shard by shard, each in a Ray task.

A shard is one source to import: a store (a folder holding ``spans.jsonl``), a data file, or a
URL. A folder that is no store stands for every store below it (an injection campaign's
``traces`` and ``baselines``, a folder of campaign outputs), in path order. A task returns its
shard's trajectories as ``(identity, JSON line)`` pairs with its import result; the driver takes
the shards in order (holding the ones that finish early until those before them are in) and keeps
each record once, as the local import does.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

from aegis_probe.executors import Executor, Failure
from aegis_probe.storage.store import SPANS_FILE

from .base import ImportIssue, ImportResult, row

#: What a trajectory becomes in a shard's result: its :func:`~.base.identity` and its JSON line.
Row = tuple[tuple[str, str], str]


@dataclass
class Converted:
    """One shard's trajectories as rows, and its import result (errors and counts; no trajectories)."""

    source: str
    rows: list[Row] = field(default_factory=list)
    result: ImportResult = field(default_factory=ImportResult)


def shards(sources: Sequence[str]) -> list[str]:
    """The shards of ``sources``, in order: a folder that is no store is every store below it
    (none: the folder itself, whose import then says what it holds)."""
    out: list[str] = []
    for source in sources:
        path = Path(source)
        if source.startswith(("http://", "https://")) or not path.is_dir() or (path / SPANS_FILE).is_file():
            out.append(source)
            continue
        stores = sorted(p.parent for p in path.rglob(SPANS_FILE)
                        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts))
        out += [str(s) for s in stores] or [source]
    return out


def convert(source: str, fmt: str = "auto", labels_dir: str | None = None) -> Converted:
    """Import one shard (a store read trace by trace) into rows."""
    from . import stream

    done = Converted(source)
    for item in stream(source, fmt, fast=True, **({"labels_dir": labels_dir} if labels_dir else {})):
        if isinstance(item, ImportIssue):
            done.result.errors.append(item)
        else:
            done.result.add(item, keep=False)
            done.rows.append(row(item))
    return done


def in_order(executor: Executor, sources: Sequence[str], fmt: str = "auto",
             labels_dir: str | None = None) -> Iterator[Converted]:
    """Each shard of ``sources`` converted by ``executor``, yielded in the shards' order; a shard
    whose task failed (after its retries) is a ``ValueError`` naming it."""
    parts = shards(sources)
    calls = [functools.partial(convert, s, fmt, labels_dir) for s in parts]
    early: dict[int, Any] = {}
    following = 0
    with executor:
        for i, done in executor.run_all(calls):
            early[i] = done
            while following in early:
                got = early.pop(following)
                if isinstance(got, Failure):
                    raise ValueError(f"{parts[following]}: {got.error}")
                yield got
                following += 1
