"""Probe configuration: explicit arguments first, then environment variables, then defaults.

What OpenTelemetry defines is read as OpenTelemetry defines it: the OTLP exporters resolve their
own endpoint, headers, TLS, compression and timeout from ``OTEL_EXPORTER_OTLP_*``; content
capture follows ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` as OTel's GenAI utilities
read it; aegis's own provider exports what ``OTEL_TRACES_EXPORTER`` names. Only the rest is
aegis-probe's own: the trace store (``AEGIS_TRACE_DIR``), capture's default-on switch
(``AEGIS_CAPTURE_CONTENT``) and whether aegis's own provider exports over OTLP.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from opentelemetry.environment_variables import OTEL_TRACES_EXPORTER
from opentelemetry.sdk.environment_variables import (
    OTEL_EXPORTER_OTLP_ENDPOINT,
    OTEL_EXPORTER_OTLP_PROTOCOL,
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
    OTEL_SERVICE_NAME,
)

logger = logging.getLogger("aegis_probe")

ENV_CAPTURE = "AEGIS_CAPTURE_CONTENT"
ENV_TRACE_DIR = "AEGIS_TRACE_DIR"
#: The share of successful runs kept (failed ones always are): see :mod:`aegis_probe.storage.sampling`.
ENV_KEEP_SUCCESSES = "AEGIS_KEEP_SUCCESSES"
#: Opt-in: the run's task and final answer as ``gen_ai.input.messages``/``gen_ai.output.messages`` on its root span.
ENV_ROOT_MESSAGES = "AEGIS_ROOT_MESSAGES"
DEFAULT_TRACE_DIR = "aegis-traces"
#: OTel's GenAI content variable, and the opt-in that turns it from a boolean into a mode.
ENV_OTEL_CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
ENV_SEMCONV_OPT_IN = "OTEL_SEMCONV_STABILITY_OPT_IN"
GENAI_OPT_IN = "gen_ai_latest_experimental"
#: ``ContentCapturingMode`` names of opentelemetry-util-genai: content on spans, in events, or both.
CONTENT_MODES = ("NO_CONTENT", "SPAN_ONLY", "EVENT_ONLY", "SPAN_AND_EVENT")
_SPAN_CONTENT = frozenset({"SPAN_ONLY", "SPAN_AND_EVENT"})
_EVENT_CONTENT = frozenset({"EVENT_ONLY", "SPAN_AND_EVENT"})
#: OTLP protocols (``OTEL_EXPORTER_OTLP_PROTOCOL``), the specification's default first.
OTLP_PROTOCOLS = ("http/protobuf", "grpc")
#: ``OTEL_TRACES_EXPORTER`` names aegis's own provider knows (the SDK's built-in ones).
TRACES_EXPORTERS = ("otlp", "console", "none")

_FALSE = {"0", "false", "no", "off"}
_TRUE = {"1", "true", "yes", "on"}
_warned: set[tuple[str, str]] = set()


def env_flag(name: str, default: bool) -> bool:
    """Read a boolean environment variable (``false``, ``0``, ``no``, ``off`` are false)."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    return raw.strip().lower() not in _FALSE


def _warn_once(name: str, value: str, fallback: str) -> None:
    if (name, value) not in _warned:
        _warned.add((name, value))
        logger.warning("aegis-probe: %s=%r is not a valid value; using %s", name, value, fallback)


def genai_opted_in() -> bool:
    """Whether ``OTEL_SEMCONV_STABILITY_OPT_IN`` lists ``gen_ai_latest_experimental``."""
    return GENAI_OPT_IN in {part.strip() for part in os.environ.get(ENV_SEMCONV_OPT_IN, "").split(",")}


def otel_content_mode() -> str | None:
    """The content-capturing mode ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` selects; None when unset.

    As OTel's GenAI utilities read it: with ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``
    the value is a mode name (any case; another value warns and means ``NO_CONTENT``); without
    the opt-in it is the legacy boolean (``true``, any case, means capture), and a mode name is
    accepted too, as newer opentelemetry-util-genai releases read it without the opt-in.
    """
    raw = os.environ.get(ENV_OTEL_CAPTURE, "").strip()
    if not raw:
        return None
    if raw.upper() in CONTENT_MODES:
        return raw.upper()
    if not genai_opted_in() and raw.lower() in ("true", "false"):
        return "SPAN_ONLY" if raw.lower() == "true" else "NO_CONTENT"
    _warn_once(ENV_OTEL_CAPTURE, raw, "NO_CONTENT")
    return "NO_CONTENT"


def resolve_capture(capture_content: bool | None) -> bool:
    """Content capture: the argument, else ``AEGIS_CAPTURE_CONTENT`` (true/1/yes/on or
    false/0/no/off; another value warns and means no content), else OTel's variable, else on."""
    if capture_content is not None:
        return capture_content
    raw = os.environ.get(ENV_CAPTURE, "").strip()
    if raw:
        if raw.lower() in _TRUE | _FALSE:
            return raw.lower() in _TRUE
        _warn_once(ENV_CAPTURE, raw, "false (no content), as OTel does for a value it does not know")
        return False
    mode = otel_content_mode()
    return True if mode is None else mode in _SPAN_CONTENT


def resolve_keep_successes(keep_successes: float | None) -> float:
    """The share of successful runs kept: the argument, else ``AEGIS_KEEP_SUCCESSES``, else 1 (all).

    A value outside 0..1 raises for the argument; in the environment it warns (once) and means 1.
    """
    if keep_successes is not None:
        if not 0 <= keep_successes <= 1:
            raise ValueError(f"keep_successes must be between 0 and 1, not {keep_successes!r}")
        return float(keep_successes)
    raw = os.environ.get(ENV_KEEP_SUCCESSES, "").strip()
    if not raw:
        return 1.0
    try:
        ratio = float(raw)
    except ValueError:
        ratio = -1.0
    if not 0 <= ratio <= 1:
        _warn_once(ENV_KEEP_SUCCESSES, raw, "1 (every run kept)")
        return 1.0
    return ratio


def content_events() -> bool:
    """Whether model calls emit their content as GenAI events (OTel's ``EVENT_ONLY``/``SPAN_AND_EVENT``)."""
    return otel_content_mode() in _EVENT_CONTENT


def otlp_protocol() -> str:
    """The OTLP protocol of ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``/``OTEL_EXPORTER_OTLP_PROTOCOL``.

    Default ``http/protobuf``; an unknown value warns (once) and falls back to it.
    """
    name = OTEL_EXPORTER_OTLP_TRACES_PROTOCOL if os.environ.get(OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, "").strip() \
        else OTEL_EXPORTER_OTLP_PROTOCOL
    raw = os.environ.get(name, "").strip()
    if not raw:
        return OTLP_PROTOCOLS[0]
    if raw.lower() not in OTLP_PROTOCOLS:
        _warn_once(name, raw, OTLP_PROTOCOLS[0])
        return OTLP_PROTOCOLS[0]
    return raw.lower()


def traces_exporters() -> frozenset[str]:
    """The exporters ``OTEL_TRACES_EXPORTER`` names (comma-separated; ``none`` names none), default ``otlp``.

    Names it does not know are left out with a warning (once); a value naming no known exporter
    warns and means the default.
    """
    raw = os.environ.get(OTEL_TRACES_EXPORTER, "").strip()
    names = {part.strip().lower() for part in raw.split(",") if part.strip()}
    known = names & set(TRACES_EXPORTERS)
    if names - known:
        _warn_once(OTEL_TRACES_EXPORTER, raw, ", ".join(sorted(known)) if known else "otlp")
    if not known:
        return frozenset({"otlp"})
    return frozenset(known - {"none"})


def resource_service_name() -> str | None:
    """``service.name`` as ``OTEL_RESOURCE_ATTRIBUTES`` sets it (decoded as the SDK does); None when unset."""
    from opentelemetry.sdk.resources import SERVICE_NAME, OTELResourceDetector

    name = OTELResourceDetector().detect().attributes.get(SERVICE_NAME)
    return str(name) if name else None


@dataclass(frozen=True)
class ProbeConfig:
    """Resolved settings of one :class:`~aegis_probe.Probe`."""

    capture_content: bool
    trace_dir: Path
    #: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT`` as set (the
    #: exporter resolves it); when set, aegis's own provider also exports over OTLP (None when
    #: ``OTEL_TRACES_EXPORTER`` leaves ``otlp`` out).
    otlp_endpoint: str | None
    otlp_protocol: str
    service_name: str
    redact: Callable[[str], str] | None = None
    #: ``OTEL_TRACES_EXPORTER`` lists ``console``: aegis's own provider also prints its spans.
    console_export: bool = False
    #: The share of successful runs the store and the exporters keep (every failed run is kept).
    keep_successes: float = 1.0
    #: Model calls also emit ``gen_ai.client.inference.operation.details`` events with their content.
    content_events: bool = False
    #: The run's task and answer as input/output messages on its root span (with ``capture_content``).
    root_messages: bool = False

    @classmethod
    def resolve(
        cls,
        *,
        capture_content: bool | None = None,
        trace_dir: str | os.PathLike[str] | None = None,
        service_name: str | None = None,
        redact: Callable[[str], str] | None = None,
        keep_successes: float | None = None,
        root_messages: bool | None = None,
    ) -> "ProbeConfig":
        exporters = traces_exporters()
        endpoint = (os.environ.get(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, "").strip()
                    or os.environ.get(OTEL_EXPORTER_OTLP_ENDPOINT, "").strip() or None)
        if "otlp" not in exporters:
            endpoint = None
        return cls(
            capture_content=resolve_capture(capture_content),
            trace_dir=Path(trace_dir or os.environ.get(ENV_TRACE_DIR) or DEFAULT_TRACE_DIR),
            otlp_endpoint=endpoint,
            otlp_protocol=otlp_protocol() if endpoint else OTLP_PROTOCOLS[0],
            service_name=service_name or os.environ.get(OTEL_SERVICE_NAME) or resource_service_name() or "aegis-probe",
            redact=redact,
            console_export="console" in exporters,
            keep_successes=resolve_keep_successes(keep_successes),
            content_events=content_events(),
            root_messages=env_flag(ENV_ROOT_MESSAGES, False) if root_messages is None else root_messages,
        )
