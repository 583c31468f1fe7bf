"""Traces -> dataset rows per second, beside plain ``json.loads`` of the same bytes as the floor.

Writes N synthetic traces (root + S agent steps + one chat span per step, with message content
and a fault label) into a core :class:`TraceStore`, then times:

- ``json.loads``: parse every line of the store file (the floor: no decoding, no rows);
- ``import``: the OTLP importer (decode, merge, rebuild trajectories);
- ``import+sft`` / ``import+grpo`` / ``import+dcl``: import plus building the rows.

Usage: ``python benchmarks/dataset_throughput.py [--traces 2000] [--steps 8]``.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

from aegis_probe.capture import semconv as sc
from aegis_probe.storage.otlp_json import SpanRecord
from aegis_probe.storage.store import TraceStore
from aegis_probe.train import builders
from aegis_probe.train.importers.otlp import load_otlp

AGENTS = ["planner", "coder", "executor", "critic"]


def _messages(text: str) -> str:
    return json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": text}]}])


def synthetic_trace(i: int, steps: int, rng: random.Random) -> list[SpanRecord]:
    trace = f"{i + 1:032x}"
    root = f"{(i << 8) + 1:016x}"
    bad = rng.randrange(steps)
    faults = [{"agent": AGENTS[bad % len(AGENTS)], "step": bad, "mode": "FM-1.3"}]
    spans = [SpanRecord(trace, root, None, "invoke_workflow app", 0, 10_000,
                        {sc.OPERATION: sc.OP_WORKFLOW, sc.FRAMEWORK: "autogen", sc.TASK: f"task {i}: " + "word " * 30,
                         sc.OUTCOME_SUCCESS: False, sc.LABEL_FAULTS: json.dumps(faults), sc.LABEL_SOURCE: "injection"})]
    for s in range(steps):
        step_id = f"{(i << 8) + 2 + 2 * s:016x}"
        text = " ".join(rng.choice(["compute", "the", "answer", "is", "def", "return", "x", "42"]) for _ in range(120))
        spans.append(SpanRecord(trace, step_id, root, f"invoke_agent {AGENTS[s % 4]}", 100 + s * 100, 150 + s * 100,
                                {sc.OPERATION: sc.OP_AGENT, sc.AGENT_NAME: AGENTS[s % 4], sc.STEP_INDEX: s,
                                 sc.INPUT_MESSAGES: _messages("previous: " + text[:200]), sc.OUTPUT_MESSAGES: _messages(text)}))
        spans.append(SpanRecord(trace, f"{(i << 8) + 3 + 2 * s:016x}", step_id, "chat m", 110 + s * 100, 140 + s * 100,
                                {sc.OPERATION: sc.OP_CHAT, sc.REQUEST_MODEL: "m", sc.USAGE_INPUT_TOKENS: 300,
                                 sc.USAGE_OUTPUT_TOKENS: 120}))
    return spans


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", type=int, default=2000)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=1024, help="render budget (forces truncation work)")
    args = ap.parse_args()
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        store = TraceStore(Path(tmp) / "store")
        t0 = time.perf_counter()
        for i in range(args.traces):
            store.append(synthetic_trace(i, args.steps, rng))
        write_s = time.perf_counter() - t0
        data = store.file.read_bytes()
        mb = len(data) / 1e6
        results = []

        t0 = time.perf_counter()
        n = sum(1 for line in data.split(b"\n") if line and json.loads(line))
        results.append(("json.loads (floor)", n, time.perf_counter() - t0))

        t0 = time.perf_counter()
        imported = load_otlp(store.path)
        import_s = time.perf_counter() - t0
        assert len(imported.trajectories) == args.traces and not imported.errors
        results.append(("import", len(imported.trajectories), import_s))
        for kind in ("sft", "grpo", "dcl"):
            t0 = time.perf_counter()
            trajs = load_otlp(store.path).trajectories
            if kind == "dcl":
                rows = builders.build_dcl(trajs)
            else:
                rows = builders.BUILDERS[kind](trajs, max_tokens=args.max_tokens)
            results.append((f"import+{kind}", len(rows), time.perf_counter() - t0))

    print(f"store: {args.traces} traces x {args.steps} steps, {mb:.1f} MB, written in {write_s:.2f} s\n")
    print(f"{'stage':<20} {'items':>7} {'seconds':>8} {'items/s':>10} {'MB/s':>8} {'x floor':>8}")
    floor = results[0][2]
    for name, count, secs in results:
        print(f"{name:<20} {count:>7} {secs:>8.3f} {count / secs:>10.1f} {mb / secs:>8.1f} {secs / floor:>8.1f}")


if __name__ == "__main__":
    main()
