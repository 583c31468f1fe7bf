"""What message-content capture costs per agent step (zero-latency models), one table.

For each framework (apps in ``apps.py``, 50 agent steps, each configuration on a fresh app, all run
interleaved in every repeat): ``spans only`` (an SDK provider with an in-memory exporter, no
store) and ``default`` (``instrument(app)`` with its embedded store, timed until the trace is
written), each with content capture on (what a user gets) and off (``capture_content=False``).
Per configuration: process CPU above the uninstrumented app, us per step, and the same as
``x floor`` (the bare SDK cost of the run's spans, ``_harness.floor_cost``); median [p25-p75]
over repeats (x floor: the median only). The last column is what content adds to the default configuration.
Run: ``python benchmarks/content_cost.py [--repeats N] [--framework F]``.
"""

from __future__ import annotations

import atexit
import shutil
import statistics
import tempfile
from typing import Any

import aegis_probe
from _harness import Config, Result, elapsed, measure, memory_provider, parse_args, spread, start
from apps import APPS, App, installed

STEPS = 50
_STORE_DIR = tempfile.mkdtemp(prefix="aegis-bench-content-")
atexit.register(shutil.rmtree, _STORE_DIR, ignore_errors=True)
CONFIGS = ("spans only, content", "spans only, no content", "default, content", "default, no content")


def configs(app: App) -> dict[str, Config]:
    """The uninstrumented app and the four configurations of :data:`CONFIGS`."""

    def uninstrumented() -> Result:
        target = app.build(STEPS)
        begin = start()
        app.play(target, None, STEPS)
        return elapsed(begin), ()

    def instrumented(store: bool, content: bool) -> Config:
        def run() -> Result:
            provider, exporter = memory_provider() if not store else (None, None)
            target = app.build(STEPS)
            options: dict[str, Any] = {"store": _STORE_DIR} if store else {"tracer_provider": provider, "store": False}
            probe = aegis_probe.instrument(target, capture_content=content, **options)
            try:
                begin = start()
                app.play(target, probe, STEPS)
                if store:
                    assert probe.store.flush()
                times = elapsed(begin)
            finally:
                probe.uninstrument()
            return times, exporter.get_finished_spans() if exporter is not None and content else ()
        return run

    return {"uninstrumented": uninstrumented,
            **{name: instrumented(name.startswith("default"), not name.endswith("no content")) for name in CONFIGS}}


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], installed(list(APPS)), repeats=41)
    print(f"Process CPU above the uninstrumented app per agent step ({STEPS} steps, {args.repeats} interleaved repeats): "
          "us/step median [p25-p75], and its median x floor")
    print(f"{'framework':<10}{'floor us/step':>14}" + "".join(f"{name:>32}" for name in CONFIGS) + f"{'content adds (default)':>28}")
    for fw in args.framework:
        r = measure(configs(APPS[fw]()), args.repeats)
        floors = r["spans only, content"]["floor"]
        base = r["uninstrumented"]["cpu"]
        cells, costs = [], {}
        for name in CONFIGS:
            costs[name] = [(t - b) / STEPS * 1e6 for t, b in zip(r[name]["cpu"], base)]
            ratio = [(t - b) / f for t, b, f in zip(r[name]["cpu"], base, floors)]
            cells.append(f"{spread(costs[name], '{:.0f}')} us = {statistics.median(ratio):.2f}x")
        added = [c - n for c, n in zip(costs["default, content"], costs["default, no content"])]
        print(f"{fw:<10}{spread([f / STEPS * 1e6 for f in floors], '{:.1f}'):>14}"
              + "".join(f"{cell:>32}" for cell in cells) + f"{spread(added, '{:.0f}') + ' us':>28}")


if __name__ == "__main__":
    main()
