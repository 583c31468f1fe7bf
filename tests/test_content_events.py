"""Content as events: OTel's ``EVENT_ONLY`` and ``SPAN_AND_EVENT`` modes emit one
``gen_ai.client.inference.operation.details`` event per model call through the logs API (a real
SDK ``LoggerProvider`` and log exporter), in the call's span context, with structured, redacted
messages; ``SPAN_ONLY`` emits none. Also the opt-in input/output messages on the run's root span."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

import aegis_probe
from aegis_probe.capture import semconv as sc
from aegis_probe.capture.content_events import INFERENCE_DETAILS
from aegis_probe.demos import autogen as demo

SECRET = "sk-proj-Zq9Vw7Xk9Lm2Np4Rt6YAb12Cd34"
TASK = f"{demo.TASK} (billing key {SECRET})"


@pytest.fixture
def logs() -> tuple[LoggerProvider, InMemoryLogRecordExporter]:
    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    return provider, exporter


def _run(server_url: str, tracer_provider, **options) -> str | None:
    app = demo.build_app(server_url, "aegis-scripted", "sk-test")
    probe = aegis_probe.instrument(app, tracer_provider=tracer_provider, **options)
    answer = demo.run_app(app, TASK)
    assert answer and "126" in answer
    return probe.last_trace_id


def _mode(monkeypatch, mode: str) -> None:
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", mode)


@pytest.mark.parametrize("mode", ["EVENT_ONLY", "SPAN_AND_EVENT"])
def test_event_modes_emit_one_details_event_per_model_call(mode, monkeypatch, model_server, provider, exporter, logs):
    _mode(monkeypatch, mode)
    logger_provider, log_exporter = logs
    _run(model_server(demo.policy).base_url, provider, logger_provider=logger_provider)
    chats = [s for s in exporter.get_finished_spans() if (s.attributes or {}).get(sc.OPERATION) == sc.OP_CHAT]
    records = [r.log_record for r in log_exporter.get_finished_logs()]
    assert len(chats) >= 3 and [r.event_name for r in records] == [INFERENCE_DETAILS] * len(chats)
    by_span = {r.span_id: r for r in records}
    assert set(by_span) == {s.context.span_id for s in chats}  # each in its call's span context
    for span in chats:
        attrs = by_span[span.context.span_id].attributes
        assert attrs[sc.OPERATION] == sc.OP_CHAT and attrs[sc.REQUEST_MODEL] == "aegis-scripted"
        assert attrs[sc.USAGE_INPUT_TOKENS] == span.attributes[sc.USAGE_INPUT_TOKENS]
        inputs, outputs = attrs[sc.INPUT_MESSAGES], attrs[sc.OUTPUT_MESSAGES]
        assert inputs and all({"role", "parts"} <= set(m) for m in inputs)  # structured, not JSON text
        assert outputs[0]["role"] == "assistant" and outputs[0]["finish_reason"]
        assert (sc.INPUT_MESSAGES in span.attributes) is (mode == "SPAN_AND_EVENT")
    text = json.dumps([dict(r.attributes) for r in records])
    assert "billing key" in text and SECRET not in text and "[REDACTED]" in text


def test_span_only_emits_no_events(monkeypatch, model_server, provider, exporter, logs):
    _mode(monkeypatch, "SPAN_ONLY")
    logger_provider, log_exporter = logs
    _run(model_server(demo.policy).base_url, provider, logger_provider=logger_provider)
    assert log_exporter.get_finished_logs() == ()
    assert any(sc.INPUT_MESSAGES in (s.attributes or {}) for s in exporter.get_finished_spans())


def test_the_global_logger_provider_is_used_without_one(tmp_path):
    script = textwrap.dedent("""
        import os
        os.environ.update(OTEL_SEMCONV_STABILITY_OPT_IN="gen_ai_latest_experimental",
                          OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="EVENT_ONLY")
        from opentelemetry._logs import set_logger_provider
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
        import aegis_probe
        from aegis_probe.demos import autogen as demo
        from aegis_probe.modelserver import ModelServer
        exporter, provider = InMemoryLogRecordExporter(), LoggerProvider()
        provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
        set_logger_provider(provider)
        with ModelServer(demo.policy) as server:
            app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
            aegis_probe.instrument(app, store=False)
            demo.run_app(app, demo.TASK)
        print(sorted({r.log_record.event_name for r in exporter.get_finished_logs()}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.stdout.strip().splitlines()[-1] == repr([INFERENCE_DETAILS]), out.stderr[-2000:]


def test_root_messages_are_opt_in(model_server, provider, exporter):
    server = model_server(demo.policy)
    trace_id = _run(server.base_url, provider, root_messages=True)
    [root] = [s for s in exporter.get_finished_spans() if s.parent is None
              and format(s.context.trace_id, "032x") == trace_id]
    [task] = json.loads(root.attributes[sc.INPUT_MESSAGES])
    assert task["role"] == "user" and "billing key" in task["parts"][0]["content"]
    assert SECRET not in root.attributes[sc.INPUT_MESSAGES]
    [answer] = json.loads(root.attributes[sc.OUTPUT_MESSAGES])
    assert answer["role"] == "assistant" and "126" in answer["parts"][0]["content"]
    exporter.clear()
    trace_id = _run(server.base_url, provider)  # default: off
    [root] = [s for s in exporter.get_finished_spans() if s.parent is None
              and format(s.context.trace_id, "032x") == trace_id]
    assert sc.INPUT_MESSAGES not in root.attributes and sc.OUTPUT_MESSAGES not in root.attributes
