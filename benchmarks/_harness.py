"""What the overhead benchmarks share: the clock, in-memory providers, the floor, the table.

A *configuration* is a callable that runs the app once and returns ``(seconds, finished spans)``;
it times only the app's run, with :func:`now`. :func:`measure` warms every configuration up,
then runs them interleaved ``repeats`` times and keeps medians; the floor of a configuration is
what creating its spans again, bare, costs (:func:`floor_cost`).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable, Mapping, Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

#: The runs are CPU-bound in one thread (no I/O), so process CPU time equals wall time on an idle
#: machine and stays stable on a shared one; ``--clock wall`` uses ``perf_counter`` instead.
CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}
_clock: Callable[[], float] = CLOCKS["cpu"]

Result = tuple[float, Sequence[ReadableSpan]]
Config = Callable[[], Result]


def now() -> float:
    """The benchmark clock (``--clock``)."""
    return _clock()


def memory_provider(sampled: bool = True) -> tuple[TracerProvider, InMemorySpanExporter]:
    """An SDK provider exporting synchronously to memory (what aegis and the floor both use).
    ``sampled=False`` samples nothing: spans are not recorded, so a run then costs only the
    instrumentation's own work (the diagnostic ``not sampled`` rows)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=None if sampled else ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def floor_cost(spans: Sequence[ReadableSpan]) -> float:
    """Seconds to create ``spans`` again, bare: same names, kinds, parents and attribute values
    (content included, already encoded), one context attach each, same processor and exporter."""
    provider, _ = memory_provider()
    tracer = provider.get_tracer("floor")
    plan = [(s.name, s.kind, dict(s.attributes or {}), s.context.span_id, s.parent.span_id if s.parent else None)
            for s in sorted(spans, key=lambda s: s.start_time)]
    start = now()
    made: dict[int, Any] = {}
    for name, kind, attrs, span_id, parent_id in plan:
        parent = made.get(parent_id)
        ctx = trace.set_span_in_context(parent) if parent is not None else None
        span = tracer.start_span(name, context=ctx, kind=kind, attributes=attrs)
        with trace.use_span(span, end_on_exit=False):
            made[span_id] = span
    for span in reversed(list(made.values())):
        span.end()
    return now() - start


def measure(configs: Mapping[str, Config], repeats: int) -> dict[str, dict[str, float]]:
    """Median time, median floor and span count of each configuration."""
    times: dict[str, list[float]] = {name: [] for name in configs}
    floors: dict[str, list[float]] = {name: [] for name in configs}
    counts: dict[str, int] = {}
    for run in configs.values():  # warm-up: imports, caches, first-call costs
        run()
    for _ in range(repeats):
        for name, run in configs.items():
            elapsed, spans = run()
            times[name].append(elapsed)
            floors[name].append(floor_cost(spans) if spans else 0.0)
            counts[name] = len(spans)
    return {name: {"time": statistics.median(times[name]), "floor": statistics.median(floors[name]),
                   "spans": counts[name]} for name in configs}


def table(title: str, results: Mapping[str, Mapping[str, float]], steps: int, baseline: str = "uninstrumented") -> str:
    """One row per configuration: overhead over ``baseline`` per step, ratio, floor per step."""
    base = results[baseline]["time"]
    lines = [title, f"{'config':<22}{'spans':>7}{'time ms':>10}{'overhead us/step':>18}{'ratio':>8}"
                    f"{'floor us/step':>15}{'overhead/floor':>16}"]
    for name, r in results.items():
        overhead = (r["time"] - base) / steps * 1e6
        floor = r["floor"] / steps * 1e6
        over_floor = f"{overhead / floor:.2f}" if floor else "-"
        lines.append(f"{name:<22}{int(r['spans']):>7}{r['time'] * 1e3:>10.1f}{overhead:>18.1f}"
                     f"{r['time'] / base:>8.3f}{floor:>15.1f}{over_floor:>16}")
    return "\n".join(lines)


def parse_args(description: str, frameworks: Sequence[str] = ()) -> argparse.Namespace:
    """``--repeats``, ``--clock`` (which also selects the clock) and, given ``frameworks``,
    ``--framework`` (default: all of them, as a list)."""
    global _clock
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu")
    if frameworks:
        parser.add_argument("--framework", choices=frameworks, action="append")
    args = parser.parse_args()
    _clock = CLOCKS[args.clock]
    if frameworks and not args.framework:
        args.framework = list(frameworks)
    return args
