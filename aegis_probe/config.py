"""Probe configuration: explicit arguments first, then environment variables, then defaults."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ENV_CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
ENV_TRACE_DIR = "AEGIS_TRACE_DIR"
ENV_OTLP_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
ENV_OTLP_TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
ENV_OTLP_PROTOCOL = "OTEL_EXPORTER_OTLP_PROTOCOL"
ENV_OTLP_TRACES_PROTOCOL = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
TRACES_PATH = "/v1/traces"
ENV_SERVICE_NAME = "OTEL_SERVICE_NAME"
DEFAULT_TRACE_DIR = "aegis-traces"

_FALSE = {"0", "false", "no", "off"}


def env_flag(name: str, default: bool) -> bool:
    """Read a boolean environment variable (``false``, ``0``, ``no``, ``off`` are false)."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    return raw.strip().lower() not in _FALSE


@dataclass(frozen=True)
class ProbeConfig:
    """Resolved settings of one :class:`~aegis_probe.Probe`."""

    capture_content: bool
    trace_dir: Path
    otlp_endpoint: str | None
    otlp_protocol: str
    service_name: str
    redact: Callable[[str], str] | None = None

    @classmethod
    def resolve(
        cls,
        *,
        capture_content: bool | None = None,
        trace_dir: str | os.PathLike[str] | None = None,
        otlp_endpoint: str | None = None,
        otlp_protocol: str | None = None,
        service_name: str | None = None,
        redact: Callable[[str], str] | None = None,
    ) -> "ProbeConfig":
        if capture_content is None:
            capture_content = env_flag(ENV_CAPTURE, True)
        # The OTLP exporter spec: the signal-specific endpoint is a full URL used as is; a base
        # endpoint (argument or OTEL_EXPORTER_OTLP_ENDPOINT) gets /v1/traces for http.
        signal_endpoint = None if otlp_endpoint else os.environ.get(ENV_OTLP_TRACES_ENDPOINT)
        endpoint = (otlp_endpoint or signal_endpoint or os.environ.get(ENV_OTLP_ENDPOINT) or "").strip() or None
        protocol = (
            otlp_protocol or os.environ.get(ENV_OTLP_TRACES_PROTOCOL) or os.environ.get(ENV_OTLP_PROTOCOL) or ""
        ).strip()
        if not protocol:
            protocol = "grpc" if endpoint and endpoint.rstrip("/").endswith(":4317") else "http/protobuf"
        if protocol not in {"grpc", "http/protobuf"}:
            raise ValueError(f"unsupported OTLP protocol {protocol!r}: use 'grpc' or 'http/protobuf'")
        if endpoint and protocol == "http/protobuf" and not signal_endpoint and not endpoint.rstrip("/").endswith(TRACES_PATH):
            endpoint = endpoint.rstrip("/") + TRACES_PATH
        return cls(
            capture_content=capture_content,
            trace_dir=Path(trace_dir or os.environ.get(ENV_TRACE_DIR) or DEFAULT_TRACE_DIR),
            otlp_endpoint=endpoint,
            otlp_protocol=protocol,
            service_name=service_name or os.environ.get(ENV_SERVICE_NAME) or "aegis-probe",
            redact=redact,
        )
