"""How the default configuration's cost grows with a run's length (content capture on).

Every prompt of these apps repeats the conversation so far, so a tracer that encodes or stores
each prompt whole does work that grows with the square of the run's length. For each framework
and length (10, 100, 1000 agent steps by default), ``uninstrumented`` and ``default``
(``instrument(app)``: the embedded store, content on, timed until the trace is written) run
interleaved ``--repeats`` times; the table gives per agent step:

- ``overhead us``: (default - uninstrumented) process CPU time / steps, median [p25-p75] over
  repeats: flat when aegis's cost is linear in the run's length;
- ``writer us``: CPU time of the store's writer thread / steps (min over repeats): what encoding
  and writing the run costs, off the app thread;
- ``store B``: bytes the store wrote for the run / steps;
- ``peak kB``: the largest amount of memory Python held during the run (``tracemalloc``, one
  extra run each, not timed), default minus uninstrumented, / steps; Python allocations only
  (the frameworks' and aegis's objects), not native buffers or the RSS;
- ``x first``: this length's median overhead and peak per step over the first (shortest) length's.

After a framework's rows, a verdict: ``flat`` when at the longest length the overhead's p25 is
within ``--tolerance`` (1.5x) of the shortest length's p75 and the peak per step within the same
factor of the shortest's; else ``growing`` (and which). The load average is printed before and
after: CPU figures on a shared machine are only as good as the load lets them be.

The Agents SDK, CrewAI and AG2 are measured by this script run again in their own environments
(``.venv-<framework>``), as are Google ADK's. Run:
``python benchmarks/scaling.py [--framework F] [--steps 10 100 1000] [--repeats N] [--tolerance X]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import aegis_probe
from _harness import elapsed, quartiles, spread, start
from aegis_probe.storage.writer import shared_writer
from apps import APPS, App, installed


def writer_cpu() -> float:
    """CPU seconds the store's writer thread has used so far (0 before it starts)."""
    thread = shared_writer()._thread
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident)) if thread and thread.ident else 0.0


def run_once(app: App, steps: int, store: Path | None) -> tuple[float, int, float]:
    """Process CPU seconds of one run (``store``: the default configuration writing there), the
    bytes the store gained and the writer thread's CPU seconds."""
    target = app.build(steps)
    probe: Any = aegis_probe.instrument(target, store=str(store)) if store is not None else None
    before = probe.store.file.stat().st_size if probe and probe.store.file.exists() else 0
    try:
        writer = writer_cpu()
        begin = start()
        app.play(target, probe, steps)
        if probe is not None:
            assert probe.store.flush()
        seconds = elapsed(begin)["cpu"]
        writer = writer_cpu() - writer
    finally:
        if probe is not None:
            probe.uninstrument()
    return seconds, (probe.store.file.stat().st_size - before) if probe else 0, writer


def peak_bytes(app: App, steps: int, store: Path | None) -> int:
    """The peak of memory traced by ``tracemalloc`` during one run."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        run_once(app, steps, store)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def importable(name: str) -> bool:
    """Whether framework ``name`` can be imported in this environment."""
    from importlib.util import find_spec

    from aegis_probe.demos import REQUIREMENTS

    return find_spec(REQUIREMENTS[name][0]) is not None


def _in_own_env(name: str, argv: list[str]) -> None:
    """Print ``name``'s rows measured by this script in ``.venv-<name>`` (Agents SDK, CrewAI, AG2, ADK)."""
    python = Path(__file__).resolve().parents[1] / f".venv-{name}" / "bin" / "python"
    if not python.exists():
        installed([name])  # says it is skipped, and why
        return
    rest = [a for i, a in enumerate(argv) if a != "--framework" and (i == 0 or argv[i - 1] != "--framework")]
    proc = subprocess.run([str(python), __file__, *rest, "--framework", name], capture_output=True, text=True)
    rows = [line for line in proc.stdout.splitlines() if line.startswith(name)]
    print("\n".join(rows) if rows else f"{name}: failed in {python.parent.parent.name}: {proc.stderr[-2000:]}", flush=True)


def verdict(over: dict[int, list[float]], peak: dict[int, float], tolerance: float) -> str:
    """``flat`` or ``growing (...)``: the longest length against the shortest (see the module)."""
    first, last = min(over), max(over)
    grown = []
    if quartiles(over[last])[0] > tolerance * quartiles(over[first])[2]:
        grown.append("cpu")
    if peak[last] > tolerance * peak[first]:
        grown.append("memory")
    return f"growing ({', '.join(grown)})" if grown else "flat"


def _ratio(value: float, first: float) -> str:
    return f"{value / first:.2f}" if first > 0 else "-"


def measure_framework(name: str, lengths: list[int], repeats: int, tolerance: float, store: Path) -> None:
    """Print ``name``'s row at each length, then its verdict."""
    app = APPS[name]()
    run_once(app, 10, store)  # warm-up: imports and first-call costs
    run_once(app, 10, None)
    overs: dict[int, list[float]] = {}
    peaks: dict[int, float] = {}
    for steps in lengths:
        base, default, sizes, writer = [], [], [], []
        for _ in range(repeats):
            base.append(run_once(app, steps, None)[0])
            seconds, size, writer_seconds = run_once(app, steps, store)
            default.append(seconds)
            sizes.append(size)
            writer.append(writer_seconds)
        over = overs[steps] = [(d - b) / steps * 1e6 for d, b in zip(default, base)]
        peak = peaks[steps] = (peak_bytes(app, steps, store) - peak_bytes(app, steps, None)) / steps / 1e3
        first = lengths[0]
        growth = f"{_ratio(quartiles(over)[1], quartiles(overs[first])[1])}/{_ratio(peak, peaks[first])}"
        print(f"{name:<16}{steps:>6}{statistics.median(base) / steps * 1e6:>10.0f}{spread(over, '{:.1f}'):>26}"
              f"{min(writer) / steps * 1e6:>10.1f}{sorted(sizes)[len(sizes) // 2] / steps:>10.0f}{peak:>10.1f}"
              f"{growth:>12}", flush=True)
    print(f"{name:<16}verdict: {verdict(overs, peaks, tolerance)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=tuple(APPS), action="append")
    parser.add_argument("--steps", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tolerance", type=float, default=1.5)
    args = parser.parse_args()
    lengths = sorted(args.steps)
    store = Path(tempfile.mkdtemp(prefix="aegis-scaling-"))
    try:
        print(f"Default configuration (store on, content on) by run length, {args.repeats} interleaved repeats, "
              "per agent step; overhead = process CPU, median [p25-p75]; peak = tracemalloc; "
              f"load average {os.getloadavg()[0]:.1f}")
        print(f"{'framework':<16}{'steps':>6}{'base us':>10}{'overhead us':>26}{'writer us':>10}{'store B':>10}"
              f"{'peak kB':>10}{'x first':>12}")
        for name in args.framework or list(APPS):
            if importable(name):
                measure_framework(name, lengths, args.repeats, args.tolerance, store)
            else:
                _in_own_env(name, sys.argv[1:])
        print(f"load average after: {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main()
