"""Tracer-provider set-up: the embedded trace store, and OTLP export when an endpoint is set."""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import weakref
from typing import Any, Callable

from opentelemetry.sdk.environment_variables import OTEL_EXPORTER_OTLP_TIMEOUT, OTEL_EXPORTER_OTLP_TRACES_TIMEOUT
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

from ..config import ProbeConfig
from ..capture.leanspans import LeanTracerProvider
from ..redact import encodable
from .sampling import sampled
from .store import StoreSpanProcessor, TraceStore

logger = logging.getLogger("aegis_probe")

#: Seconds one OTLP export may take before it is abandoned (on the exporter's background thread).
EXPORT_TIMEOUT_S = 5
_TIMEOUT_VARS = (OTEL_EXPORTER_OTLP_TRACES_TIMEOUT, OTEL_EXPORTER_OTLP_TIMEOUT)

_providers: dict[tuple[Any, ...], TracerProvider] = {}
_providers_lock = threading.Lock()


def otlp_exporter(config: ProbeConfig) -> SpanExporter:
    """An OTLP span exporter for ``config.otlp_protocol`` (http/protobuf or grpc).

    The exporter reads its endpoint, headers, TLS settings and compression from the
    ``OTEL_EXPORTER_OTLP_*`` variables itself; each export gives up after ``EXPORT_TIMEOUT_S``
    unless ``OTEL_EXPORTER_OTLP_TIMEOUT`` (or its ``_TRACES_`` form) says otherwise.
    """
    timeout = None if any(os.environ.get(name) for name in _TIMEOUT_VARS) else EXPORT_TIMEOUT_S
    if config.otlp_protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc

        return Grpc(timeout=timeout)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http

    return Http(timeout=timeout)


def default_provider(config: ProbeConfig, store: TraceStore | None, exporter: SpanExporter | None) -> TracerProvider:
    """A shared SDK provider for this configuration (created once per process and config).

    Spans go to ``store`` (written when each trace's root ends) and, batched on a background
    thread, to ``exporter`` or to OTLP when an endpoint is configured (and to the console when
    ``OTEL_TRACES_EXPORTER`` lists it). A slow or absent collector
    only drops spans after the exporter's timeout; the app never waits on it.
    """
    key = (config.service_name, config.otlp_endpoint, config.otlp_protocol, config.console_export,
           str(store.path) if store else None, exporter, config.keep_successes)
    with _providers_lock:  # apps instrumented in parallel threads share one provider, not one each
        provider = _providers.get(key)
        if provider is None:
            provider = _providers[key] = _new_provider(config, store, exporter)
        return provider


#: The specification's defaults, for when the environment's ``OTEL_*`` values are refused by the SDK.
_SPEC_LIMITS: dict[str, Any] = {"max_attributes": 128, "max_events": 128, "max_links": 128,
                                "max_span_attributes": 128, "max_event_attributes": 128, "max_link_attributes": 128,
                                "max_attribute_length": SpanLimits.UNSET, "max_span_attribute_length": SpanLimits.UNSET}
_SPEC_BATCH: dict[str, Any] = {"max_queue_size": 2048, "schedule_delay_millis": 5000, "max_export_batch_size": 512,
                               "export_timeout_millis": 30000}


def batch_processor(exporter: SpanExporter) -> BatchSpanProcessor:
    """``BatchSpanProcessor(exporter)``; ``OTEL_BSP_*`` values the SDK refuses are ignored with a
    warning (the specification's defaults apply), never raised into the app."""
    try:
        return BatchSpanProcessor(exporter)
    except ValueError as exc:
        logger.warning("aegis-probe: OTEL_BSP_* settings ignored, the specification's defaults apply: %s", exc)
        return BatchSpanProcessor(exporter, **_SPEC_BATCH)


def _new_provider(config: ProbeConfig, store: TraceStore | None, exporter: SpanExporter | None) -> TracerProvider:
    resource = Resource.create({"service.name": encodable(config.service_name)})
    try:
        provider = LeanTracerProvider(resource=resource)
    except ValueError as exc:  # e.g. OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT=-1
        logger.warning("aegis-probe: OTel span limits from the environment ignored, the specification's defaults "
                       "apply: %s", exc)
        provider = LeanTracerProvider(resource=resource, span_limits=SpanLimits(**_SPEC_LIMITS))
    keep = config.keep_successes
    if store is not None:
        provider.add_span_processor(sampled(StoreSpanProcessor(store), keep))
    if config.console_export and exporter is None:
        provider.add_span_processor(sampled(batch_processor(ConsoleSpanExporter(out=sys.stdout)), keep))  # stdout now, not at import
    remote = exporter
    if remote is None and config.otlp_endpoint:
        try:
            remote = otlp_exporter(config)
        except Exception as exc:  # a value the exporter refuses (e.g. OTEL_EXPORTER_OTLP_COMPRESSION=bogus)
            logger.warning("aegis-probe: OTLP export is off, the exporter refused its configuration: %s: %s",
                           type(exc).__name__, exc)
    if remote is not None:
        provider.add_span_processor(sampled(batch_processor(remote), keep))
        atexit.register(_end_export, provider, remote)  # after the provider's own exit hook: runs before it
        _exports.append((provider, remote))
        mp = sys.modules.get("multiprocessing")
        if mp is not None and mp.parent_process() is not None:  # made in a multiprocessing child
            _export_at_child_end(None)
    return provider


def _end_export(provider: TracerProvider, exporter: SpanExporter) -> None:
    """At exit, before the SDK's shutdown of ``provider``: one export timeout to send what is queued;
    if that was not enough, ``exporter`` is shut down, so that the SDK's final drain fails what is
    left at once instead of waiting one timeout per batch on a collector that does not answer."""
    if flush_exporters(provider, EXPORT_TIMEOUT_S):
        return  # all sent: the SDK's shutdown has nothing left to wait for
    try:
        exporter.shutdown()
        # The SDK's shutdown of the provider comes next and shuts the exporter down again: the
        # OTLP exporters would log "Exporter already shutdown, ignoring call" after the real warning.
        exporter.shutdown = _shut_down_already  # type: ignore[method-assign]
    except Exception:
        logger.debug("aegis-probe: exporter shutdown at exit failed", exc_info=True)


def _shut_down_already(*args: Any, **kwargs: Any) -> None:
    """An exporter's ``shutdown`` once :func:`_end_export` has shut it down."""


#: aegis-probe's own providers that export to OTLP, with their exporters (never an app's provider).
_exports: list[tuple[TracerProvider, SpanExporter]] = []


def _end_exports() -> None:
    for provider, exporter in list(_exports):
        _end_export(provider, exporter)


def _after_fork() -> None:
    """A multiprocessing child (fork, forkserver) ends with ``os._exit``: no atexit handler sends
    what the inherited providers still queue. Have the child's start (which clears the finalizers
    it inherited) register one."""
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is not None and _exports:
        mp_util.register_after_fork(_end_exports, _export_at_child_end)


_finalizer_pid: int | None = None


def _export_at_child_end(_: object) -> None:
    """In a multiprocessing child: its finalizer sends what aegis's own providers queue (those it
    inherited and those made in it), as their atexit hooks do in a process that exits normally."""
    global _finalizer_pid
    if _finalizer_pid != os.getpid():  # once per process
        _finalizer_pid = os.getpid()
        from multiprocessing.util import Finalize

        Finalize(None, _end_exports, exitpriority=10)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)

#: Seconds ``Probe.flush`` (and leaving ``with instrument(app)``) waits for exporters by default.
EXPORT_WAIT_S = 0.5

_flushes: dict[int, tuple[Any, threading.Thread, list[bool]]] = {}  # id(provider) -> its flush in flight
_flushes_lock = threading.Lock()


def flush_exporters(provider: Any, wait_s: float = EXPORT_WAIT_S) -> bool:
    """``provider.force_flush()`` waited on for at most ``wait_s``; True when it finished in time.

    The SDK's batch processor exports on the calling thread until the exporter gives up, so the
    flush runs on a daemon thread (one per provider at a time) and is left to finish there: a
    collector that is down or hung costs the caller ``wait_s``, not the export timeout. What it
    has not sent yet still goes out when the collector answers, or at exit (the provider's own
    shutdown, within one export timeout).
    """
    force_flush = getattr(provider, "force_flush", None)
    if force_flush is None:
        return True
    with _flushes_lock:
        flush = _flushes.get(id(provider))
        if flush is None or flush[0] is not provider or not flush[1].is_alive():
            done: list[bool] = []
            thread = threading.Thread(target=lambda: done.append(bool(force_flush())), name="aegis-probe-flush", daemon=True)
            flush = _flushes[id(provider)] = (provider, thread, done)
            thread.start()
    flush[1].join(wait_s)
    return bool(flush[2]) and flush[2][0]


_attached: "weakref.WeakKeyDictionary[Any, set[Any]]" = weakref.WeakKeyDictionary()


def add_once(provider: Any, key: Any, make: Callable[[], SpanProcessor]) -> None:
    """Attach ``make()`` to a user's SDK provider unless a processor for ``key`` (a store's
    directory, an exporter) is on it already: an app built and instrumented per request must not
    add one, and a copy of every span, each time."""
    if hasattr(provider, "add_span_processor"):
        with _providers_lock:
            seen = _attached.setdefault(provider, set())
            if key in seen:
                return
            seen.add(key)
    add_processor(provider, make())


def add_processor(provider: Any, processor: SpanProcessor) -> None:
    """Attach ``processor`` to a user's SDK provider (ignored, with a warning, for API-only ones)."""
    if hasattr(provider, "add_span_processor"):
        provider.add_span_processor(processor)
    else:
        logger.warning("aegis-probe: tracer provider %r takes no span processors; trace store disabled", provider)
