"""Per-step tracing overhead in instructions (callgrind) on all eleven frameworks and their peers: one table.

Nearly deterministic, where CPU time is not: CPU-time figures on a shared machine move by +-1 floor between runs, and where a framework's step
is long (the Agents SDK, Google ADK, CrewAI: 5-20 ms) the in-app floor's tenth of a millisecond is
below the noise of the step itself, whatever the load. Instruction counts move far less (same hash
seed, address randomisation off), but not by nothing where the store's writer thread runs beside
the app: the GIL hands over after an interval of real time, so the threads' switches follow the
machine's load (+-0.2 floors between identical runs under load).

For each framework (apps in ``apps.py``, 50 agent steps) it counts the instructions of ``play()``
(all threads: the store's writer counted, like ``overhead.py``'s cpu clock) after a warm-up, for
every configuration of ``overhead.py`` (``uninstrumented``, ``spans only``, ``default``, ``in-app
floor`` and each installed peer, content on) and ``floor`` (the bare SDK spans of a ``spans only``
run made back to back). ``x in-app`` = (configuration - uninstrumented) / (in-app floor -
uninstrumented); ``x floor`` divides by the floor instead. Each configuration is counted in a child
process of its own under callgrind (two at a time); frameworks that need an environment of their
own run in ``.venv-<framework>``, as in ``overhead.py``.

Instructions are not time: framework code runs at a lower instructions-per-cycle than the floor's
tight loop, and system calls (camel's per-step stack walk ``stat``\\ s every frame's file) are not
counted. Needs ``valgrind`` on PATH.
Run: ``python benchmarks/instructions.py [--repeats N] [--framework F]`` (minutes per framework).
"""

from __future__ import annotations

import gc
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
STEPS = 50
#: Counted in every framework, after its configurations from ``overhead.configs``.
FLOOR = "floor"


def _python(framework: str) -> str:
    """The interpreter that has ``framework``: this one, or ``.venv-<framework>``'s."""
    from importlib.util import find_spec

    from aegis_probe.demos import REQUIREMENTS

    try:
        if find_spec(REQUIREMENTS[framework][0]) is not None:
            return sys.executable
    except ModuleNotFoundError:
        pass
    own = ROOT / f".venv-{framework}" / "bin" / "python"
    if not own.exists():
        raise SystemExit(f"instructions.py: {framework} is installed neither here nor in .venv-{framework}")
    return str(own)


def _child_run(python: str, *args: str, valgrind: bool) -> subprocess.CompletedProcess[str]:
    command = [python, str(Path(__file__).resolve()), "--child", *args]
    if valgrind:
        command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=/dev/null", *command]
        if shutil.which("setarch"):
            command = ["setarch", "-R", *command]  # no address randomisation: the same count every time
    return subprocess.run(command, capture_output=True, text=True, cwd=HERE,
                          env={**os.environ, "PYTHONHASHSEED": "0"})


def _modes(framework: str, python: str) -> list[str]:
    """The configurations counted for ``framework`` (its installed peers included)."""
    done = _child_run(python, framework, "--modes", valgrind=False)
    if done.returncode != 0:
        raise SystemExit(f"instructions.py: cannot list {framework}'s configurations:\n{done.stderr[-2000:]}")
    return [*json.loads(done.stdout.strip().splitlines()[-1]), FLOOR]


def _count(framework: str, python: str, mode: str, repeats: int) -> int:
    """Instructions of ``repeats`` runs of ``mode``, from a child process under callgrind."""
    done = _child_run(python, framework, mode, str(repeats), valgrind=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"instructions.py: {framework} {mode} failed under valgrind:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def _child(framework: str, mode: str, repeats: int) -> None:
    """Inside callgrind: warm ``mode`` up (and ``spans only``, whose spans the floors make), then
    count ``repeats`` runs of it; with ``mode == "--modes"``, print the configurations instead."""
    import logging

    from _harness import floor_cost
    from apps import APPS
    from overhead import configs

    logging.getLogger("camel").setLevel(logging.ERROR)
    counting = [False]

    def toggle(state: str) -> None:
        if counting[0]:
            subprocess.run(["callgrind_control", "-i", state, str(os.getpid())], stdout=subprocess.DEVNULL)

    def on() -> None:
        toggle("on")

    def off(_: Any) -> dict[str, float]:
        toggle("off")
        return {}

    runs: dict[str, Callable[[], Any]] = dict(configs(APPS[framework](), STEPS, clock=(on, off)))
    if mode == "--modes":
        print(json.dumps(list(runs)))
        return
    spans = runs["spans only"]()[1]

    def floor() -> None:
        on()
        floor_cost(spans)
        off(None)

    runs[FLOOR] = floor
    runs[mode]()
    gc.collect()
    counting[0] = True
    for _ in range(repeats):
        runs[mode]()


def main() -> None:
    from _harness import parse_args
    from apps import APPS

    args = parse_args(__doc__.splitlines()[0], tuple(APPS), repeats=3)
    if not shutil.which("valgrind"):
        raise SystemExit("instructions.py: needs valgrind on PATH (apt-get install valgrind)")
    print(f"Per-step instructions (callgrind, all threads), {STEPS} agent steps, {args.repeats} runs each after a "
          "warm-up; x in-app = (config - uninstrumented) / (in-app floor - uninstrumented); "
          "x floor = (config - uninstrumented) / floor")
    print(f"{'framework':<16}{'base Ir':>12}{'floor Ir':>11}{'in-app Ir':>11}{'default x in-app':>18}"
          f"{'spans only':>12}{'default x floor':>17}  peers x in-app")
    with ThreadPoolExecutor(os.cpu_count()) as pool:  # counts do not depend on what else runs
        plans: list[tuple[str, dict[str, Future[int]]]] = []
        for framework in args.framework:
            python = _python(framework)
            plans.append((framework, {m: pool.submit(_count, framework, python, m, args.repeats)
                                      for m in _modes(framework, python)}))
        for framework, counts in plans:
            _row(framework, {mode: c.result() / (args.repeats * STEPS) for mode, c in counts.items()})


def _row(framework: str, per_step: dict[str, float]) -> None:
    base, floor = per_step["uninstrumented"], per_step[FLOOR]
    in_app = per_step["in-app floor"] - base
    peers = "; ".join(f"{name} {(ir - base) / in_app:.2f}" for name, ir in per_step.items()
                      if name not in ("uninstrumented", "spans only", "default", "in-app floor", FLOOR)) or "none"
    print(f"{framework:<16}{base:>12,.0f}{floor:>11,.0f}{in_app:>11,.0f}{(per_step['default'] - base) / in_app:>18.2f}"
          f"{(per_step['spans only'] - base) / in_app:>12.2f}{(per_step['default'] - base) / floor:>17.2f}  {peers}",
          flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 0)
    else:
        main()
