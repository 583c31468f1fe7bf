"""Per-step tracing overhead in instructions (valgrind's callgrind): nearly deterministic, one table.

Wall-clock and CPU-time figures on a shared machine move by +-1 floor between runs; instruction
counts move far less (same hash seed, address randomisation off), but not by nothing where the
store's writer thread runs beside the app: the GIL hands over after an interval of real time, so
the threads' switches follow the machine's load (AutoGen's default configuration: +-0.2 floors
between identical runs under load; MetaGPT's 0.1 %). For each framework (apps in
``apps.py``, 50 agent steps) it counts the instructions of ``play()`` (all threads: the store's
writer counted, like ``overhead.py``'s cpu clock) after a warm-up, for:

- ``uninstrumented``; ``default`` (``instrument(app)``: aegis-probe's own provider with its lean
  spans and the embedded store; until the trace is written); ``default, SDK spans`` (the same with
  the SDK's own ``TracerProvider``, to show what the lean spans save); ``spans only`` (an SDK
  provider with an in-memory exporter, store off);
- ``floor``: the bare SDK spans of a ``spans only`` run, as ``overhead.py`` makes them;
- ``in-app floor``: the uninstrumented app making the floor's spans inside it, once per model
  call (``overhead.py``); its cost is (this - uninstrumented). Its instructions are the floor's
  plus what running between framework code adds (collections, context), so against the time
  figures it shows how much of the in-app floor's extra time is not more instructions.

``x floor`` = (configuration - uninstrumented) / floor. Instructions are not time: framework code
runs at a lower instructions-per-cycle than the floor's tight loop, and system calls (camel's
per-step stack walk ``stat``\\ s every frame's file) are not counted. Needs ``valgrind`` on PATH.
Run: ``python benchmarks/instructions.py [--repeats N] [--framework F]`` (a few minutes).
"""

from __future__ import annotations

import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

MODES = ("uninstrumented", "default", "default, SDK spans", "spans only", "floor", "in-app floor")
STEPS = 50


def _count(framework: str, mode: str, repeats: int) -> int:
    """Instructions of ``repeats`` runs of ``mode``, from a child process under callgrind."""
    command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=/dev/null",
               sys.executable, os.path.abspath(__file__), "--child", framework, mode, str(repeats)]
    if shutil.which("setarch"):
        command = ["setarch", "-R", *command]  # no address randomisation: the same count every time
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"},
                          cwd=os.path.dirname(os.path.abspath(__file__)))
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"instructions.py: {framework} {mode} failed under valgrind:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def _child(framework: str, mode: str, repeats: int) -> None:
    """Inside callgrind: warm up every configuration, then count ``repeats`` runs of ``mode``."""
    import logging

    import aegis_probe
    from _harness import floor_cost, floor_in_app, memory_provider
    from apps import APPS
    from opentelemetry.sdk.trace import TracerProvider

    from aegis_probe.storage import exporting

    logging.getLogger("camel").setLevel(logging.ERROR)
    app = APPS[framework]()
    counting = [False]

    def toggle(state: str) -> None:
        if counting[0]:
            subprocess.run(["callgrind_control", "-i", state, str(os.getpid())], stdout=subprocess.DEVNULL)

    def uninstrumented() -> None:
        target = app.build(STEPS)
        toggle("on")
        app.play(target, None, STEPS)
        toggle("off")

    def default(store: str = tempfile.mkdtemp(prefix="aegis-bench-")) -> None:
        target = app.build(STEPS)
        probe = aegis_probe.instrument(target, store=store)
        try:
            toggle("on")
            app.play(target, probe, STEPS)
            assert probe.store.flush()
            toggle("off")
        finally:
            probe.uninstrument()

    def sdk_default() -> None:
        lean = exporting.LeanTracerProvider
        exporting.LeanTracerProvider = TracerProvider  # type: ignore[misc]  # a provider of its own store dir
        try:
            default(store=sdk_store)
        finally:
            exporting.LeanTracerProvider = lean  # type: ignore[misc]

    def spans_only() -> list:
        provider, exporter = memory_provider()
        target = app.build(STEPS)
        probe = aegis_probe.instrument(target, tracer_provider=provider, store=False)
        try:
            toggle("on")
            app.play(target, probe, STEPS)
            toggle("off")
        finally:
            probe.uninstrument()
        return list(exporter.get_finished_spans())

    sdk_store = tempfile.mkdtemp(prefix="aegis-bench-")
    spans = spans_only()

    def floor() -> None:
        toggle("on")
        floor_cost(spans)
        toggle("off")

    def in_app() -> None:
        with floor_in_app(spans, STEPS):
            uninstrumented()

    runs = {"uninstrumented": uninstrumented, "default": default, "default, SDK spans": sdk_default,
            "spans only": spans_only, "floor": floor, "in-app floor": in_app}
    for run in runs.values():
        run()
    gc.collect()
    counting[0] = True
    for _ in range(repeats):
        runs[mode]()


def main() -> None:
    from _harness import parse_args
    from apps import installed

    args = parse_args(__doc__.splitlines()[0], ("autogen", "camel", "metagpt"), repeats=3)
    if not shutil.which("valgrind"):
        raise SystemExit("instructions.py: needs valgrind on PATH (apt-get install valgrind)")
    print(f"Per-step instructions (callgrind), {STEPS} agent steps, {args.repeats} runs each after a warm-up; "
          "x floor = (configuration - uninstrumented) / floor")
    print(f"{'framework':10}" + "".join(f"{m + ' Ir/step':>28}" for m in MODES)
          + "   x floor: default | SDK spans | spans only | in-app floor")
    frameworks = installed(args.framework)
    with ThreadPoolExecutor(os.cpu_count()) as pool:  # counts do not depend on what else runs
        counts = {(f, m): pool.submit(_count, f, m, args.repeats) for f in frameworks for m in MODES}
        for framework in frameworks:
            per_step = {mode: counts[framework, mode].result() / (args.repeats * STEPS) for mode in MODES}
            _row(framework, per_step)


def _row(framework: str, per_step: dict[str, float]) -> None:
    base, floor = per_step["uninstrumented"], per_step["floor"]
    ratios = " | ".join(f"{(per_step[m] - base) / floor:.2f}"
                        for m in ("default", "default, SDK spans", "spans only", "in-app floor"))
    print(f"{framework:10}" + "".join(f"{per_step[m]:>28,.0f}" for m in MODES) + f"   {ratios}", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        main()
