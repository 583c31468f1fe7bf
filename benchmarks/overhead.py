"""Per-step tracing overhead of every framework installed here (zero-latency models), one table.

For each framework (apps in ``apps.py``, 50 agent steps, each configuration on a fresh app):

- ``uninstrumented``: the app alone (the baseline);
- ``spans only``: ``instrument(app, tracer_provider=p, store=False)``, content capture on, ``p``
  an SDK provider with an in-memory exporter;
- ``default``: ``instrument(app)`` as a user starts: aegis's own provider with the embedded
  trace store, content on; timed until the trace is written (the writer thread's CPU counted);
- ``not sampled`` (diagnostic): ``spans only`` with a sampler that records nothing, so what is
  left is aegis's own work (hooks, context, content encoding) without the SDK recording spans;
- ``in-app floor``: the uninstrumented app making the floor's spans *inside* it with the bare SDK,
  the next share at each model call (``_harness.in_app_floor``; the spans of the repeat's
  ``spans only`` run): the floor's SDK work run between framework code, as any instrumentor's
  is, instead of in a tight loop. Its cost is (in-app floor - uninstrumented), and the notes give
  every configuration against it as well;
- AutoGen only: ``openinference`` (``AutogenAgentChatInstrumentor``, in-memory exporter; it
  traces OpenAI clients only, so it makes no LLM spans here) and ``no runtime blocks``
  (diagnostic: uninstrumented with autogen-core's runtime tracing blocks skipped, as aegis does
  inside its runs).

Every configuration of every framework is run interleaved in each repeat. The *floor* of a run
is the bare cost of creating its spans with the SDK (same names, parents, attribute values,
in-memory exporter; ``_harness.floor_cost``); ``x floor`` = (configuration - uninstrumented) /
floor, computed per repeat; the table gives the median and the interquartile range over repeats,
and ``(min)`` the same ratio from each configuration's fastest run (noise on a shared machine
only adds time, so minima are the steadier estimate). The target is at most 1.5. Run: ``python benchmarks/overhead.py [--repeats N] [--framework F]``.
"""

from __future__ import annotations

import atexit
import shutil
import statistics
import tempfile
import time
from contextlib import nullcontext
from functools import partial
from typing import Any

import aegis_probe
from _harness import Config, Result, elapsed, floor_cost, floor_in_app, measure, memory_provider, parse_args, spread, start
from apps import APPS, App, installed

STEPS = 50
_STORE_DIR = tempfile.mkdtemp(prefix="aegis-bench-")
atexit.register(shutil.rmtree, _STORE_DIR, ignore_errors=True)


def configs(app: App, steps: int = STEPS) -> dict[str, Config]:
    """The configurations of one app (names as in the module docstring)."""

    def uninstrumented() -> Result:
        target = app.build(steps)
        begin = start()
        app.play(target, None, steps)
        return elapsed(begin), ()

    last_spans: list[Any] = []

    def spans_only(sampled: bool = True) -> Result:
        provider, exporter = memory_provider(sampled)
        target = app.build(steps)
        probe = aegis_probe.instrument(target, tracer_provider=provider, store=False)
        try:
            begin = start()
            app.play(target, probe, steps)
            times = elapsed(begin)
        finally:
            probe.uninstrument()
        if sampled:
            last_spans[:] = exporter.get_finished_spans()
        return times, exporter.get_finished_spans()

    def in_app() -> Result:
        with floor_in_app(last_spans, steps):
            return uninstrumented()

    def default() -> Result:
        target = app.build(steps)
        probe = aegis_probe.instrument(target, store=_STORE_DIR)
        try:
            begin = start()
            app.play(target, probe, steps)
            assert probe.store.flush()
            times = elapsed(begin)
        finally:
            probe.uninstrument()
        return times, ()

    out: dict[str, Config] = {"uninstrumented": uninstrumented, "spans only": spans_only,
                              "default": default, "not sampled": partial(spans_only, sampled=False),  # no extra frame
                              "in-app floor": in_app}  # after spans only, whose spans it makes
    if app.name == "autogen":
        out["openinference"] = lambda: _openinference(app, steps)
        out["no runtime blocks"] = lambda: _without_runtime_blocks(app, steps)
    return out


def _openinference(app: App, steps: int) -> Result:
    from openinference.instrumentation.autogen_agentchat import AutogenAgentChatInstrumentor

    provider, exporter = memory_provider()
    instrumentor = AutogenAgentChatInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        target = app.build(steps)
        begin = start()
        app.play(target, None, steps)
        times = elapsed(begin)
    finally:
        instrumentor.uninstrument()
    return times, exporter.get_finished_spans()


def _without_runtime_blocks(app: App, steps: int) -> Result:
    from autogen_core import _single_threaded_agent_runtime as runtime_module
    from autogen_core._telemetry import EnvelopeMetadata, TraceHelper

    patcher = aegis_probe.Patcher()
    patcher.wrap(TraceHelper, "trace_block", lambda w, i, a, k: nullcontext())
    patcher.wrap(runtime_module, "get_telemetry_envelope_metadata", lambda w, i, a, k: EnvelopeMetadata())
    try:
        target = app.build(steps)
        begin = start()
        app.play(target, None, steps)
        return elapsed(begin), ()
    finally:
        patcher.restore()


def per_step(seconds: list[float], steps: int) -> str:
    return f"{statistics.median(seconds) / steps * 1e6:.1f}"


def ratios(r: dict[str, Any], name: str, floors: list[float], clock: str = "cpu", base: str = "uninstrumented") -> list[float]:
    """Per repeat: (configuration - baseline) / floor, on ``clock``."""
    return [(t - b) / f for t, b, f in zip(r[name][clock], r[base][clock], floors)]


def by_min(r: dict[str, Any], name: str, floors: list[float], clock: str = "cpu", base: str = "uninstrumented") -> str:
    """(min configuration - min baseline) / min floor: the least disturbed run of each (noise
    on a shared machine only ever adds time)."""
    return f"{(min(r[name][clock]) - min(r[base][clock])) / min(floors):.2f}"


def writer_cost(app: App, repeats: int) -> tuple[float, float]:
    """Seconds the store's writer thread spends per span of one run (encode + write, measured on
    this thread), and the floor per span, interleaved: medians of ``repeats``."""
    from aegis_probe.storage.store import StoreSpanProcessor, TraceStore

    spans = configs(app)["spans only"]()[1]
    processor = StoreSpanProcessor(TraceStore(_STORE_DIR))
    writes, floors = [], []
    for _ in range(repeats):
        begin = time.thread_time()
        for span in spans:
            processor._take(span)
        writes.append((time.thread_time() - begin) / len(spans))
        floors.append(floor_cost(spans) / len(spans))
    return statistics.median(writes), statistics.median(floors)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], frameworks=tuple(APPS))
    apps = {name: APPS[name]() for name in installed(args.framework)}
    flat = measure({f"{fw}/{name}": run for fw, app in apps.items() for name, run in configs(app).items()}, args.repeats)
    print(f"Per-step tracing overhead, {STEPS} agent steps, zero-latency model, {args.repeats} interleaved repeats.\n"
          "x floor = (config - uninstrumented) / floor per repeat: median [p25-p75]; cpu = process CPU time "
          "(all threads), app thread = CPU time of the app's thread; (min) = from each configuration's fastest run")
    print(f"{'framework':<10}{'base us/step':>13}{'floor us/step':>14}{'spans':>6}{'spans only, cpu':>20}{'(min)':>6}"
          f"{'default, cpu':>20}{'(min)':>6}{'default, app thread':>22}{'(min)':>6}{'not sampled us/step':>21}")
    notes: list[str] = []
    for fw in apps:
        r = {name.split("/", 1)[1]: v for name, v in flat.items() if name.startswith(fw + "/")}
        floors = r["spans only"]["floor"]
        base = statistics.median(r["uninstrumented"]["cpu"])
        own = (statistics.median(r["not sampled"]["cpu"]) - base) / STEPS * 1e6
        print(f"{fw:<10}{per_step(r['uninstrumented']['cpu'], STEPS):>13}{per_step(floors, STEPS):>14}"
              f"{r['spans only']['spans']:>6}{spread(ratios(r, 'spans only', floors)):>20}{by_min(r, 'spans only', floors):>6}"
              f"{spread(ratios(r, 'default', floors)):>20}{by_min(r, 'default', floors):>6}"
              f"{spread(ratios(r, 'default', floors, 'thread')):>22}{by_min(r, 'default', floors, 'thread'):>6}{own:>21.1f}")
        in_app_costs = [t - b for t, b in zip(r["in-app floor"]["cpu"], r["uninstrumented"]["cpu"])]
        notes.append(f"{fw} in-app floor (the floor's SDK spans made inside the app, once per model call): "
                     f"{spread([c / STEPS * 1e6 for c in in_app_costs], '{:.1f}')} us/step = "
                     f"{spread(ratios(r, 'in-app floor', floors))} (min {by_min(r, 'in-app floor', floors)}) x floor; "
                     f"x in-app floor: spans only {spread(ratios(r, 'spans only', in_app_costs))}, default "
                     f"{spread(ratios(r, 'default', in_app_costs))}, default app thread "
                     f"{spread(ratios(r, 'default', in_app_costs, 'thread'))}; (min) spans only "
                     f"{by_min(r, 'spans only', [min(r['in-app floor']['cpu']) - min(r['uninstrumented']['cpu'])])}, default "
                     f"{by_min(r, 'default', [min(r['in-app floor']['cpu']) - min(r['uninstrumented']['cpu'])])}")
        if "openinference" in r:
            oi_floors = r["openinference"]["floor"]
            notes.append(f"{fw} openinference: {r['openinference']['spans']} spans, floor {per_step(oi_floors, STEPS)} "
                         f"us/step, cpu x its floor {spread(ratios(r, 'openinference', oi_floors))} "
                         f"(min {by_min(r, 'openinference', oi_floors)}), "
                         f"overhead {spread([x * f / STEPS * 1e6 for x, f in zip(ratios(r, 'openinference', oi_floors), oi_floors)], '{:.0f}')} us/step")
            notes.append(f"{fw} against 'no runtime blocks' (skipped by aegis inside its runs), cpu x floor: spans only "
                         f"{spread(ratios(r, 'spans only', floors, base='no runtime blocks'))} "
                         f"(min {by_min(r, 'spans only', floors, base='no runtime blocks')}), default "
                         f"{spread(ratios(r, 'default', floors, base='no runtime blocks'))} "
                         f"(min {by_min(r, 'default', floors, base='no runtime blocks')})")
    for fw, app in apps.items():
        write, floor = writer_cost(app, args.repeats)
        notes.append(f"{fw} store writer (its own thread): {write * 1e6:.1f} us/span = {write / floor:.2f} x floor per span "
                     f"({floor * 1e6:.1f} us)")
    print("\n".join(notes))


if __name__ == "__main__":
    main()
