"""Injection-campaign throughput (runs/s) per executor, against a model endpoint with latency.

The app is the AutoGen example team (examples/injection/autogen_math.py: 3 agents, a tool, 3
model calls per run); its scripted model is served by the embedded OpenAI-compatible server,
which waits ``--latency`` seconds (default 0.2) before each answer, as a remote model would. Each
configuration runs the same campaign (``--tasks`` copies of the example tasks, ``--plans-per-run``
plans each) once timed, after a warm-up (its baselines only: imports, Ray workers), into scratch
directories:

- local threads, ``--concurrency`` 1, 8 and 32;
- Ray with 2 and 8 workers: a local Ray instance started with that many CPUs, one run per task.

Usage: ``python benchmarks/campaign_throughput.py [--tasks 8] [--plans-per-run 3] [--latency 0.2]
[--threads 1,8,32] [--ray-workers 2,8]``. Where the machine may only use loopback, start it as
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 RAY_USAGE_STATS_ENABLED=0 python benchmarks/...`` (Ray reads
these at import). Figures and what to expect on a cluster: docs/scale.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path

from aegis_probe.apps import AppSpec, Endpoint
from aegis_probe.executors import Executor, RayExecutor, ThreadExecutor
from aegis_probe.injection.campaign import read_records, run_campaign
from aegis_probe.modelserver import ModelServer

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "injection"
APP = f"{EXAMPLES / 'autogen_math.py'}:build_app"


def tasks(copies: int) -> list[dict]:
    """``copies`` tasks cycling through the example math tasks, with distinct ids."""
    rows = [json.loads(line) for line in (EXAMPLES / "math_tasks.jsonl").read_text().splitlines() if line.strip()]
    return [{**rows[i % len(rows)], "id": f"{rows[i % len(rows)]['id']}-{i}"} for i in range(copies)]


def timed_campaign(app: AppSpec, executor: Executor, server: ModelServer, rows: list[dict], plans: int) -> tuple[int, int, float]:
    """Warm up, then time one campaign; return (finished runs, model calls, seconds)."""
    endpoint = Endpoint(server.base_url, "aegis-scripted", "not-needed")
    executor.ship(app)  # before Ray starts: it takes the app's folder with it
    with executor:
        with tempfile.TemporaryDirectory() as warm:  # baselines only: imports done, workers started
            run_campaign(app, rows, warm, plans_per_run=0, endpoint=endpoint, executor=executor, progress=False)
        with tempfile.TemporaryDirectory() as out:
            calls = len(server.requests)
            start = time.perf_counter()
            run_campaign(app, rows, out, plans_per_run=plans, endpoint=endpoint, executor=executor, progress=False)
            seconds = time.perf_counter() - start
            runs, calls = len(read_records(out)), len(server.requests) - calls
    return runs, calls, seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=8, help="tasks in the campaign (default 8)")
    ap.add_argument("--plans-per-run", type=int, default=3, help="plans per successful baseline (default 3)")
    ap.add_argument("--latency", type=float, default=0.2, help="seconds the model waits per call (default 0.2)")
    ap.add_argument("--threads", default="1,8,32", help="local concurrencies (default 1,8,32)")
    ap.add_argument("--ray-workers", default="2,8", help="Ray worker counts (default 2,8; empty: none)")
    args = ap.parse_args()
    logging.getLogger("aegis_probe").setLevel(logging.ERROR)

    app = AppSpec.load(APP)
    rows = tasks(args.tasks)
    configs: list[tuple[str, int, Executor]] = [("threads", int(n), ThreadExecutor(int(n))) for n in args.threads.split(",") if n]
    configs += [("ray", int(n), RayExecutor(concurrency=int(n), init={"num_cpus": int(n), "log_to_driver": False}))
                for n in args.ray_workers.split(",") if n]
    print(f"campaign: {len(rows)} tasks x (1 baseline + {args.plans_per_run} plans), model latency {args.latency * 1000:.0f} ms/call")
    print(f"{'executor':<9} {'workers':>7} {'runs':>5} {'calls/run':>9} {'seconds':>8} {'runs/s':>7} {'x row 1':>7}")
    base = None
    with ModelServer(app.policy, latency=args.latency) as server:  # type: ignore[arg-type]
        for kind, n, executor in configs:
            runs, calls, seconds = timed_campaign(app, executor, server, rows, args.plans_per_run)
            rate = runs / seconds
            base = base or rate
            print(f"{kind:<9} {n:>7} {runs:>5} {calls / runs:>9.1f} {seconds:>8.1f} {rate:>7.2f} {rate / base:>7.1f}", flush=True)


if __name__ == "__main__":
    main()
