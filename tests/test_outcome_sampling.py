"""Outcome-aware sampling (``keep_successes``): a real AutoGen team runs 50 times against the loopback
model server, a judge fails some runs; the store and an exporter keep every failed run whole,
successful runs at about the ratio, the same runs in both, and never a part of a run."""

from __future__ import annotations

import itertools
import logging
import random
from collections import defaultdict

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import aegis_probe
from aegis_probe.config import ENV_KEEP_SUCCESSES, ProbeConfig
from aegis_probe.demos import autogen as demo
from aegis_probe.modelserver import ModelServer
from aegis_probe.storage.sampling import OutcomeSampling
from aegis_probe.storage.store import TraceStore

RUNS = 50
RATIO = 0.25


def _by_trace(spans: tuple[ReadableSpan, ...]) -> dict[str, set[int]]:
    out: dict[str, set[int]] = defaultdict(set)
    for span in spans:
        out[format(span.context.trace_id, "032x")].add(span.context.span_id)
    return out


def test_failures_kept_whole_and_successes_at_the_ratio_in_the_store_and_an_exporter(tmp_path):
    verdicts = itertools.cycle([True, True, False, True, False])  # 2 of 5 runs judged bad
    judged: list[bool] = []

    def judge(task: str | None, answer: str | None) -> bool:
        judged.append(next(verdicts))
        return judged[-1]

    exported, everything = InMemorySpanExporter(), InMemorySpanExporter()
    random.seed(20261203)  # the SDK's trace ids, and so which successes are kept
    trace_ids = []
    with ModelServer(demo.policy) as server:
        for i in range(RUNS):  # an app per run (its model client is closed at the end); one provider for all
            app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
            probe = aegis_probe.instrument(app, store=tmp_path / "store", exporter=exported, judge=judge,
                                           keep_successes=RATIO)
            if i == 0:
                probe.provider.add_span_processor(SimpleSpanProcessor(everything))  # the unsampled reference
            assert "126" in demo.run_app(app, demo.TASK)
            trace_ids.append(probe.last_trace_id)
        assert probe.flush(10_000)

    outcome = dict(zip(trace_ids, judged, strict=True))
    failures = {t for t, ok in outcome.items() if not ok}
    assert len(failures) == 20
    all_spans = _by_trace(everything.get_finished_spans())
    assert set(all_spans) == set(trace_ids) and all(len(s) > 3 for s in all_spans.values())
    stored = {t: {int(r.span_id, 16) for r in spans} for t, spans in TraceStore(tmp_path / "store").traces().items()}
    sent = _by_trace(exported.get_finished_spans())

    for kept in (stored, sent):
        assert failures <= set(kept)  # every failed run ...
        for trace_id, spans in kept.items():
            assert spans == all_spans[trace_id], trace_id  # ... and every kept run, whole
        successes = set(kept) - failures
        assert 4 <= len(successes) <= 14, len(successes)  # 30 successes at 0.25: 7.5 expected
    assert set(stored) == set(sent)  # the store and the exporter keep the same runs
    sampler = next(p for p in probe.provider._active_span_processor._span_processors
                   if isinstance(p, OutcomeSampling))
    assert sampler.dropped_runs == RUNS - len(stored)


def test_keep_nothing_but_failures_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_KEEP_SUCCESSES, "0")
    verdicts = iter([True, False, True])
    ids = []
    with ModelServer(demo.policy) as server:
        for _ in range(3):
            app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
            probe = aegis_probe.instrument(app, store=tmp_path / "store", judge=lambda task, answer: next(verdicts))
            demo.run_app(app, demo.TASK)
            ids.append(probe.last_trace_id)
        probe.flush()
    assert list(TraceStore(tmp_path / "store").traces()) == [ids[1]]
    with pytest.raises(KeyError):
        probe.trajectory(ids[0])


def test_a_run_that_raises_is_kept_and_spans_ending_after_the_root_follow_it():
    exporter = InMemorySpanExporter()
    sampler = OutcomeSampling(SimpleSpanProcessor(exporter), 0.0)
    provider = TracerProvider()
    provider.add_span_processor(sampler)
    tracer = provider.get_tracer("t")
    with pytest.raises(RuntimeError), tracer.start_as_current_span("failed run"):
        with tracer.start_as_current_span("step"):
            pass
        raise RuntimeError("boom")
    with tracer.start_as_current_span("good run") as root:
        late = tracer.start_span("late step")
    root_id = root.get_span_context().trace_id
    late.end()  # after its root: follows the root's decision (dropped)
    with tracer.start_as_current_span("unfinished run"):
        tracer.start_span("step").end()
        assert [s.name for s in exporter.get_finished_spans()] == ["step", "failed run"]
        sampler.shutdown()  # an unfinished run's spans are passed on, not lost
    assert [s.name for s in exporter.get_finished_spans()] == ["step", "failed run", "step"]
    assert all(s.context.trace_id != root_id for s in exporter.get_finished_spans())


@pytest.mark.parametrize("raw", ["1.5", "-0.1", "most"])
def test_a_bad_ratio_in_the_environment_warns_and_keeps_everything(monkeypatch, caplog, raw):
    monkeypatch.setenv(ENV_KEEP_SUCCESSES, raw)
    with caplog.at_level(logging.WARNING, logger="aegis_probe"):
        assert ProbeConfig.resolve().keep_successes == 1.0
    assert ENV_KEEP_SUCCESSES in caplog.text
    with pytest.raises(ValueError, match="between 0 and 1"):
        ProbeConfig.resolve(keep_successes=2)
