"""What the benchmarks share: the clock, in-memory providers, the floor, repeated interleaved runs.

A *configuration* is a callable that runs an app once and returns ``(times, finished spans)``;
it times only the app's run (plus, for the store, writing it) on every clock at once
(:func:`start` / :func:`elapsed`). :func:`measure` warms every configuration up, then runs them
interleaved ``repeats`` times and keeps every sample; the floor of a run is what creating its
spans again, bare, costs (:func:`floor_cost`).
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Mapping, Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

#: ``cpu``: process CPU time, all threads (the store's writer thread counted), stable on a shared
#: machine; ``thread``: CPU time of the app's thread only (what the app itself waits for when the
#: writer runs while the model call is in flight); ``wall``: elapsed time.
CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.process_time, "thread": time.thread_time, "wall": time.perf_counter}

Times = dict[str, float]
Result = tuple[Times, Sequence[ReadableSpan]]
Config = Callable[[], Result]


def start() -> Times:
    """Now, on every clock."""
    return {name: clock() for name, clock in CLOCKS.items()}


def elapsed(since: Times) -> Times:
    """Seconds since ``since``, on every clock."""
    return {name: clock() - since[name] for name, clock in CLOCKS.items()}


def memory_provider(sampled: bool = True) -> tuple[TracerProvider, InMemorySpanExporter]:
    """An SDK provider exporting synchronously to memory (what spans-only runs and the floor use).
    ``sampled=False`` samples nothing: spans are not recorded, so a run then costs only the
    instrumentation's own work (the diagnostic ``not sampled`` configuration)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=None if sampled else ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


Plan = list[tuple[str, Any, dict[str, Any], int, "int | None"]]


def floor_plan(spans: Sequence[ReadableSpan]) -> Plan:
    """``spans`` as (name, kind, attributes, span id, parent span id), in start order."""
    return [(s.name, s.kind, dict(s.attributes or {}), s.context.span_id, s.parent.span_id if s.parent else None)
            for s in sorted(spans, key=lambda s: s.start_time)]


def _start(tracer: Any, made: dict[int, Any], entry: tuple[str, Any, dict[str, Any], int, "int | None"]) -> None:
    name, kind, attrs, span_id, parent_id = entry
    parent = made.get(parent_id) if parent_id is not None else None
    ctx = trace.set_span_in_context(parent) if parent is not None else None
    span = tracer.start_span(name, context=ctx, kind=kind, attributes=attrs)
    with trace.use_span(span, end_on_exit=False):
        made[span_id] = span


def floor_cost(spans: Sequence[ReadableSpan]) -> float:
    """Seconds to create ``spans`` again, bare: same names, kinds, parents and attribute values
    (content included, already encoded), one context attach each, same processor and exporter."""
    provider, _ = memory_provider()
    tracer = provider.get_tracer("floor")
    plan = floor_plan(spans)
    begin = time.thread_time()  # one thread: the same as process CPU time, without other threads
    made: dict[int, Any] = {}
    for entry in plan:
        _start(tracer, made, entry)
    for span in reversed(list(made.values())):
        span.end()
    return time.thread_time() - begin


def in_app_floor(plan: Plan, calls: int, provider: TracerProvider | None = None) -> Callable[[], None]:
    """The floor's spans made *inside* the app: a callable for the app's model to call once per
    model call, which makes the plan's next share of spans with the bare SDK (cut before each
    LLM span, ``gen_ai.operation.name`` ``chat``) and ends each span once nothing after that
    share descends from it. Its cost is the floor's SDK work, run between framework code as an
    instrumentor's would be, instead of in the floor's tight loop. ``provider``: the floor's own
    (an SDK provider with an in-memory exporter) unless given."""
    tracer = (provider or memory_provider()[0]).get_tracer("floor")
    chats = [i for i, entry in enumerate(plan) if entry[2].get("gen_ai.operation.name") == "chat"]
    if len(chats) != calls:
        raise ValueError(f"the plan has {len(chats)} LLM spans for {calls} model calls")
    cuts = [0, *chats[1:], len(plan)]
    shares = [plan[a:b] for a, b in zip(cuts, cuts[1:])]
    parent_of = {entry[3]: entry[4] for entry in plan}
    last_share: dict[int, int] = {}  # span id -> the last share holding it or a descendant
    for index, share in enumerate(shares):
        for entry in share:
            node: "int | None" = entry[3]
            while node is not None and node in parent_of:  # (a parent outside the plan: not the floor's to end)
                last_share[node] = index
                node = parent_of.get(node)
    order = {entry[3]: i for i, entry in enumerate(plan)}
    ends = [sorted((span_id for span_id, last in last_share.items() if last == index), key=order.__getitem__, reverse=True)
            for index in range(len(shares))]
    made: dict[int, Any] = {}
    position = iter(range(len(shares)))

    def tick() -> None:
        index = next(position)
        for entry in shares[index]:
            _start(tracer, made, entry)
        for span_id in ends[index]:
            made.pop(span_id).end()

    return tick


@contextmanager
def floor_in_app(spans: Sequence[ReadableSpan], calls: int) -> Iterator[None]:
    """While inside, the benchmark apps' models make ``spans`` again at their ``calls`` model calls
    (:func:`in_app_floor`): an uninstrumented run then costs its own work plus the in-app floor."""
    from apps import MODEL_CALL_HOOKS

    tick = in_app_floor(floor_plan(spans), calls)
    MODEL_CALL_HOOKS.append(tick)
    try:
        yield
    finally:
        MODEL_CALL_HOOKS.remove(tick)


def measure(configs: Mapping[str, Config], repeats: int) -> dict[str, dict[str, Any]]:
    """Every configuration's times per clock and floors (lists, one per repeat, in repeat order)
    and span count: ``out[config]["cpu" | "thread" | "wall" | "floor" | "spans"]``."""
    out: dict[str, dict[str, Any]] = {name: {**{c: [] for c in CLOCKS}, "floor": [], "spans": 0} for name in configs}
    for run in configs.values():  # warm-up: imports, caches, first-call costs
        run()
    for _ in range(repeats):
        for name, run in configs.items():
            times, spans = run()
            for clock, seconds in times.items():
                out[name][clock].append(seconds)
            out[name]["floor"].append(floor_cost(spans) if spans else 0.0)
            out[name]["spans"] = len(spans)
    return out


def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    """(25th percentile, median, 75th percentile)."""
    if len(values) < 2:
        return (values[0],) * 3 if values else (float("nan"),) * 3
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def spread(values: Sequence[float], fmt: str = "{:.2f}") -> str:
    """``median [p25-p75]``."""
    q1, q2, q3 = quartiles(values)
    return f"{fmt.format(q2)} [{fmt.format(q1)}-{fmt.format(q3)}]"


def parse_args(description: str, frameworks: Sequence[str] = (), repeats: int = 15) -> argparse.Namespace:
    """``--repeats`` and, given ``frameworks``, ``--framework`` (default: all of them, as a list)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--repeats", type=int, default=repeats)
    if frameworks:
        parser.add_argument("--framework", choices=frameworks, action="append")
    args = parser.parse_args()
    if frameworks and not args.framework:
        args.framework = list(frameworks)
    return args
