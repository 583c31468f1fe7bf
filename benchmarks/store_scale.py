"""The data path at campaign scale: ``traces ls`` and ``train import`` on stores of N runs.

A store of N runs is made by copying one real run's line (an AutoGen demo team, scripted model)
under new trace ids. Each command runs in a fresh process, timed, with its peak memory (ru_maxrss);
``json.loads`` of every line is the floor. ``traces ls`` is timed twice: the first builds the index
(a store written without one), the second reads it. ``train import`` and ``json.loads`` are also
given in CPU seconds of their process (user and system; on a machine loaded by other work, wall
time is not theirs alone), runs/s from those.

    python benchmarks/store_scale.py --sizes 1000,20000,100000
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_MEASURE = """
import resource, sys, time
sys.argv = {argv!r}
t = time.perf_counter()
{body}
use = resource.getrusage(resource.RUSAGE_SELF)
print(time.perf_counter() - t, use.ru_utime + use.ru_stime, use.ru_maxrss / 1024, file=sys.stderr)
"""
_LS = "from aegis_probe.cli import main\nimport contextlib, io\nwith contextlib.redirect_stdout(io.StringIO()): main(sys.argv)"
_IMPORT = "from aegis_probe.train.cli import main\nmain(sys.argv)"
_JSON = "import json\nfor line in open(sys.argv[0], 'rb'): json.loads(line)"


def one_run(where: Path) -> bytes:
    """The stored line of one run of the AutoGen demo team."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.apps import TASK, autogen_app

    import aegis_probe

    team = autogen_app().build(3)
    probe = aegis_probe.instrument(team, store=str(where))
    try:
        asyncio.run(team.run(task=TASK))
        assert probe.store is not None and probe.store.flush()
    finally:
        probe.uninstrument()
    return (where / "spans.jsonl").read_bytes().splitlines()[0]


def make_store(path: Path, line: bytes, n: int) -> None:
    trace_id = re.search(rb'"traceId":"([0-9a-f]{32})"', line).group(1)  # type: ignore[union-attr]
    path.mkdir(parents=True)
    with open(path / "spans.jsonl", "wb") as fh:
        for i in range(1, n + 1):
            fh.write(line.replace(trace_id, b"%032x" % i) + b"\n")


def measure(body: str, argv: list[str]) -> tuple[float, float, float]:
    """(seconds, CPU seconds, peak MB) of ``body`` in a fresh process (CPU: the whole process's,
    interpreter start and imports included)."""
    done = subprocess.run([sys.executable, "-c", _MEASURE.format(argv=argv, body=body)], capture_output=True,
                          text=True, cwd=ROOT, check=True)
    seconds, cpu, mb = done.stderr.strip().splitlines()[-1].split()
    return float(seconds), float(cpu), float(mb)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1000,20000", help="runs per store, comma-separated (default: %(default)s)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        line = one_run(Path(tmp) / "one")
        print(f"one run: {len(line)} bytes\n")
        print("| runs | store MB | ls (builds index) s | ls s | ls peak MB | import s | import CPU s | import peak MB "
              "| import runs/s (CPU) | json.loads runs/s (CPU) | import / json.loads |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for n in (int(s) for s in args.sizes.split(",")):
            store = Path(tmp) / f"s{n}"
            make_store(store, line, n)
            mb = (store / "spans.jsonl").stat().st_size / 1e6
            first, _, _ = measure(_LS, ["traces", "ls", "--dir", str(store)])
            ls_s, _, ls_mb = measure(_LS, ["traces", "ls", "--dir", str(store)])
            imp_s, imp_cpu, imp_mb = measure(_IMPORT, ["import", str(store), "-o", str(Path(tmp) / "out.jsonl"),
                                                       "--no-progress"])
            _, json_cpu, _ = measure(_JSON, [str(store / "spans.jsonl")])
            print(f"| {n} | {mb:.0f} | {first:.2f} | {ls_s:.3f} | {ls_mb:.0f} | {imp_s:.1f} | {imp_cpu:.1f} | {imp_mb:.0f} "
                  f"| {n / imp_cpu:.0f} | {n / json_cpu:.0f} | {json_cpu / imp_cpu:.2f} |", flush=True)
            (store / "spans.jsonl").unlink()


if __name__ == "__main__":
    main()
