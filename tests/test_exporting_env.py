"""OTEL_* settings the SDK refuses never break the app: a warning, and the specification's defaults."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from aegis_probe.capture.probe import ProbeSetup


def _exported(provider: TracerProvider, exporter: InMemorySpanExporter) -> list[str]:
    provider.get_tracer("t").start_span("s", attributes={"text": "x" * 50}).end()
    assert provider.force_flush()
    return [span.attributes["text"] for span in exporter.get_finished_spans()]


@pytest.mark.parametrize("env", [{"OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT": "-3"},
                                 {"OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT": "many"},
                                 {"OTEL_BSP_MAX_QUEUE_SIZE": "-1"},
                                 {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "99999"}])
def test_own_provider_ignores_refused_settings(env: dict[str, str], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    exporter = InMemorySpanExporter()
    with caplog.at_level(logging.WARNING, logger="aegis_probe"):
        setup = ProbeSetup.resolve(store=tmp_path, exporter=exporter)
    assert _exported(setup.provider, exporter) == ["x" * 50]  # recorded whole: no limit applied
    (warning,) = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
    assert "specification's defaults" in warning


def test_exporter_on_an_apps_provider_ignores_refused_batch_settings(monkeypatch: pytest.MonkeyPatch,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "0")
    exporter, provider = InMemorySpanExporter(), TracerProvider()
    with caplog.at_level(logging.WARNING, logger="aegis_probe"):
        ProbeSetup.resolve(tracer_provider=provider, exporter=exporter, store=False)
    assert _exported(provider, exporter) == ["x" * 50]
    assert any("OTEL_BSP_" in r.getMessage() for r in caplog.records)
