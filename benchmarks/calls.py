"""Python calls per agent step that aegis-probe adds (cProfile): deterministic, unlike time on a shared machine.

For each framework (apps in ``apps.py``, 50 agent steps), ``--repeats`` runs after a warm-up of
``uninstrumented`` and of ``default`` (``instrument(app)``: aegis's own provider and the embedded
store, content on; until the trace is written), each profiled on the app's thread (the store's
writer thread is not counted). Prints the call totals per step, what aegis adds, and with ``--top N``
the N functions whose call counts grew the most. A framework that needs an environment of its own is
run with that environment's Python (``../.venv-google-adk/bin/python calls.py --framework google-adk``).
Run: ``python benchmarks/calls.py [--repeats N] [--framework F] [--top N]``.
"""

from __future__ import annotations

import cProfile
import pstats
import shutil
import sys
import tempfile
from typing import Any

import aegis_probe
from apps import APPS, App, installed

STEPS = 50


def profiled(app: App, instrumented: bool, repeats: int) -> pstats.Stats:
    """The profile of ``repeats`` runs of ``app`` (after one unprofiled run)."""
    store = tempfile.mkdtemp(prefix="aegis-bench-")
    profile = cProfile.Profile()

    def once(profiling: bool) -> None:
        target = app.build(STEPS)
        probe = aegis_probe.instrument(target, store=store) if instrumented else None
        try:
            if profiling:
                profile.enable()
            app.play(target, probe, STEPS)
            if probe is not None:
                assert probe.store is not None and probe.store.flush()
            if profiling:
                profile.disable()
        finally:
            if probe is not None:
                probe.uninstrument()

    try:
        once(False)
        for _ in range(repeats):
            once(True)
    finally:
        shutil.rmtree(store, ignore_errors=True)
    return pstats.Stats(profile)


def _calls(stats: pstats.Stats) -> dict[Any, int]:
    return {key: row[1] for key, row in stats.stats.items()}  # type: ignore[attr-defined]


def main() -> None:
    top = 0
    if "--top" in sys.argv:
        at = sys.argv.index("--top")
        top = int(sys.argv[at + 1])
        del sys.argv[at:at + 2]
    from _harness import parse_args

    args = parse_args(__doc__.splitlines()[0], frameworks=tuple(APPS), repeats=3)
    print(f"Python calls per agent step (cProfile, app thread), {STEPS} steps, {args.repeats} runs after a warm-up")
    for name in installed(args.framework):
        app = APPS[name]()
        base, aegis = profiled(app, False, args.repeats), profiled(app, True, args.repeats)
        per_step = args.repeats * STEPS
        b, d = base.total_calls / per_step, aegis.total_calls / per_step  # type: ignore[attr-defined]
        print(f"{name:<16} uninstrumented {b:>9,.0f}   default {d:>9,.0f}   added {d - b:>7,.0f}")
        before, after = _calls(base), _calls(aegis)
        grown = sorted(set(before) | set(after), key=lambda k: before.get(k, 0) - after.get(k, 0))
        for key in grown[:top]:
            where = f"{key[0].split('site-packages/')[-1]}:{key[1]} {key[2]}"
            print(f"    {(after.get(key, 0) - before.get(key, 0)) / per_step:>8.1f}/step  {where}")


if __name__ == "__main__":
    main()
