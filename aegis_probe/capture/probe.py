"""``instrument(app)``: find the app's framework, register it, install patches, and trace runs."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, NamedTuple, TypeVar

from opentelemetry import metrics, trace
from opentelemetry._logs import Logger, LoggerProvider
from opentelemetry.metrics import MeterProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.trace import Tracer, TracerProvider

from . import evaluations
from . import semconv as sc
from .adapter import Adapter, AppInfo, adapter_for, loaded_adapters
from .content_events import event_logger
from ..config import ProbeConfig
from ..pricing import PriceTable, Prices
from .session import session_attributes
from ..errors import AegisProbeError
from .interception import Interceptor
from .messages import forget as forget_messages
from ..storage.metrics import add_metrics
from ..storage.exporting import EXPORT_WAIT_S, add_once, batch_processor, default_provider, flush_exporters
from ..storage.sampling import sampled
from ..redact import make_redactor, remember_environment_secrets
from .spans import RunScope, current_run, start_run
from ..storage.store import StoreSpanProcessor, TraceStore
from ..storage.writer import SCOPE
from ..trajectory import Outcome, Trajectory

if TYPE_CHECKING:
    from ..injection import InjectionPlan, Injector

logger = logging.getLogger("aegis_probe")

InterceptorT = TypeVar("InterceptorT", bound=Interceptor)

#: A judge receives the task and the run's final answer and says whether the run succeeded.
Judge = Callable[[str | None, str | None], "bool | Outcome | None"]

#: Live probes, for :func:`uninstrument`. Weak: a probe lives as long as its apps (the adapter's
#: registry) or its caller keep it, so an app instrumented per request and dropped takes its probe along.
_probes: "weakref.WeakSet[Probe]" = weakref.WeakSet()
_probes_lock = threading.Lock()


class AmbiguousRun(AegisProbeError, RuntimeError):
    """``set_outcome()`` / ``trajectory()`` without a trace id, called where no run of the probe ran
    while runs of it ran concurrently elsewhere (or where the caller's own runs overlapped): which
    run is meant cannot be told, so the trace id must be given."""


class _Ended(NamedTuple):
    """A finished run, when it started and ended (``time.time_ns``), and whether another run of the
    probe was in flight during it (``overlapped``: any thread; ``overlapped_here``: its thread)."""

    run: RunScope
    start: int
    end: int
    overlapped: bool
    overlapped_here: bool


def _current_task() -> "asyncio.Task[Any] | None":
    """The asyncio task running the calling code, None outside one (or outside a running loop)."""
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running event loop in this thread
        return None


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class Probe:
    """The handle ``instrument(app)`` returns: configuration, tracer, store and run results."""

    def __init__(
        self,
        adapter: Adapter,
        config: ProbeConfig,
        tracer: Tracer,
        store: TraceStore | None,
        provider: Any,
        judge: Judge | None,
    ) -> None:
        self.adapter = adapter
        self.config = config
        self.tracer = tracer
        self.store = store
        self.provider = provider
        self.judge = judge
        if remember_environment_secrets():  # the app may have loaded keys since: what was encoded before goes
            forget_messages()
        self.redact = make_redactor(config.redact)
        #: The session attributes of runs started outside any ``using_attributes`` block.
        self.session: dict[str, Any] = {}
        #: Prices of model calls (``aegis.cost.usd``); ``instrument(..., prices=)`` overrides.
        self.prices = PriceTable.load()
        self.apps: list[AppInfo] = []
        #: The most recent run of this probe to finish, in any thread (see :meth:`set_outcome` for
        #: which run the calls without a trace id refer to).
        self.last_run: RunScope | None = None
        self._runs_lock = threading.Lock()
        self._last: _Ended | None = None  # last_run, with its times
        #: Runs started (:meth:`_run_started`) and not finished, with their start times; weak, so a
        #: run the app abandoned (never ended) leaves it when it is collected.
        self._in_flight: "weakref.WeakKeyDictionary[RunScope, int]" = weakref.WeakKeyDictionary()
        self._here = threading.local()  # .last: the _Ended of the latest run to finish in this thread
        self._by_task: "weakref.WeakKeyDictionary[asyncio.Task[Any], _Ended]" = weakref.WeakKeyDictionary()
        #: Model-call interceptors (recording, replay, injection), applied in order; an immutable
        #: tuple replaced as a whole by :meth:`intercept`, so a call in flight sees a stable chain.
        self.interceptors: tuple[Interceptor, ...] = ()
        self._interceptors_lock = threading.Lock()
        self._active = True
        #: Where model calls emit their content events (``EVENT_ONLY``/``SPAN_AND_EVENT``); None: not at all.
        self.events: Logger | None = None

    @property
    def active(self) -> bool:
        """False once :meth:`uninstrument` was called."""
        return self._active

    # -- results -------------------------------------------------------------------------
    @property
    def last_trace_id(self) -> str | None:
        """Trace id of the probe's most recent finished run, in any thread."""
        return self.last_run.trace_id if self.last_run else None

    def set_outcome(
        self, success: bool, *, answer: str | None = None, expected: str | None = None, trace_id: str | None = None
    ) -> None:
        """Report a run's outcome: the run ``trace_id``, by default the caller's own run (see below).

        While the run is open the attributes go on its root span; afterwards they are appended
        to the trace store as an amendment of the root span (OTLP backends only see outcomes
        reported before the run ended, or given by a ``judge``). A run the sampler dropped is left alone.

        Without ``trace_id`` the run is the caller's own: the run of this probe open in the
        calling context, else the latest one that finished in the calling asyncio task (in a
        running event loop) or thread (outside one: also runs of loops it ran, ``asyncio.run``).
        Where the caller ran none, the probe's latest run is taken if no other run of the probe
        was in flight during it; otherwise, and where the caller's own latest run overlapped
        another of its runs (``asyncio.gather``), :class:`AmbiguousRun` asks for the trace id.
        """
        attrs = self._outcome_attributes(Outcome(success=success, answer=answer, expected=expected))
        if trace_id is None:
            run = self._callers_run("set_outcome")
            if not run.span.get_span_context().trace_flags.sampled:  # a dropped run has no trace to amend
                return
            if run.span.is_recording():  # still open
                run.span.set_attributes(attrs)
                run.span.add_event(evaluations.EVENT, evaluations.outcome_evaluation(success, expected))
                return
            trace_id = run.trace_id
        elif self._dropped(trace_id):
            return
        if self.store is None:
            raise RuntimeError("set_outcome after the run ended needs the trace store (store=False was given)")
        self.store.amend(trace_id, attributes=attrs)

    def _callers_run(self, what: str) -> RunScope:
        """The run a call without a trace id refers to (see :meth:`set_outcome`)."""
        run = current_run()
        if run is not None and run.probe is self:
            return run
        if _loop_running():  # the caller's task: another task's runs are not its own
            task = _current_task()
            with self._runs_lock:
                own = self._by_task.get(task) if task is not None else None
        else:
            own = getattr(self._here, "last", None)
            if own is not None and own.overlapped_here:
                raise AmbiguousRun(f"{what}: the latest run of the probe in this thread (trace {own.run.trace_id}) "
                                   "ran concurrently with others of it here (asyncio.gather): pass trace_id=")
        if own is not None:
            return own.run
        with self._runs_lock:
            last, in_flight = self._last, len(self._in_flight)
        if last is None and not in_flight:
            raise RuntimeError(f"{what}: no run has happened yet")
        if last is None or last.overlapped or in_flight:
            raise AmbiguousRun(f"{what}: no run of the probe ran in this thread or task, and its runs elsewhere "
                               f"{'are in flight' if in_flight else 'ran concurrently'}: pass trace_id= (the trace id "
                               "of the run you mean, e.g. probe.trajectory().trace_id read where it ran)")
        return last.run

    def _dropped(self, trace_id: str) -> bool:
        """Whether ``trace_id`` is the most recent run and the tracer provider's sampler dropped it."""
        run = self.last_run
        return run is not None and trace_id == run.trace_id and not run.span.get_span_context().trace_flags.sampled

    def _why_dropped(self, run: RunScope | None) -> str:
        if run is not None and run.span.get_span_context().is_valid:
            sampler = os.environ.get("OTEL_TRACES_SAMPLER")
            return (f"the tracer provider's sampler dropped it{f' (OTEL_TRACES_SAMPLER={sampler})' if sampler else ''}; "
                    "sample every run to read it back")
        if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            return "tracing is off (OTEL_SDK_DISABLED=true)"
        return "the tracer provider records nothing (a no-op provider)"

    def _outcome_attributes(self, outcome: Outcome) -> dict[str, Any]:
        attrs: dict[str, Any] = {}
        if outcome.success is not None:
            attrs[sc.OUTCOME_SUCCESS] = outcome.success
        if not self.config.capture_content:  # answers are message content
            return attrs
        if outcome.answer is not None:
            attrs[sc.OUTCOME_ANSWER] = self.redact(outcome.answer)
        if outcome.expected is not None:
            attrs[sc.OUTCOME_EXPECTED] = self.redact(outcome.expected)
        return attrs

    def trajectory(self, trace_id: str | None = None) -> Trajectory:
        """The stored trajectory of run ``trace_id``, by default of the caller's own latest run (the
        same run :meth:`set_outcome` would label; :class:`AmbiguousRun` where that is unclear).

        ``LookupError`` when the run was not sampled (never recorded), ``KeyError`` when it is not stored.
        """
        if self.store is None:
            raise RuntimeError("no trace store configured (store=False)")
        if trace_id is None:
            run = self._callers_run("trajectory")
            if run.span.is_recording():
                raise RuntimeError(f"trajectory: run {run.trace_id} is still running; its trajectory is "
                                   "stored when it ends")
            if not run.span.get_span_context().trace_flags.sampled:
                raise LookupError(f"run {run.trace_id} was not recorded: {self._why_dropped(run)}")
            trace_id = run.trace_id
        elif self._dropped(trace_id):
            raise LookupError(f"run {trace_id} was not recorded: {self._why_dropped(self.last_run)}")
        return Trajectory.from_spans(self.store.trace(trace_id))

    @contextmanager
    def inject(self, plan: "InjectionPlan", **options: Any) -> Iterator["Injector"]:
        """Apply a fault-injection ``plan`` to the runs inside the ``with`` block (see docs/injection.md)."""
        from ..injection import Injector

        with self.intercept(Injector(plan, **options)) as injector, injector.here():
            yield injector

    @contextmanager
    def intercept(self, interceptor: InterceptorT) -> Iterator[InterceptorT]:
        """Route this probe's model calls through ``interceptor`` inside the ``with`` block."""
        with self._interceptors_lock:
            self.interceptors = (*self.interceptors, interceptor)
        try:
            yield interceptor
        finally:
            with self._interceptors_lock:
                chain = list(self.interceptors)
                chain.remove(interceptor)
                self.interceptors = tuple(chain)

    @contextmanager
    def run(self, task: str | None = None) -> Iterator[RunScope]:
        """Make everything the app does inside the block one run (one trace), e.g. a loop of rounds."""
        app = self.apps[-1]
        run = start_run(self, app.name, framework=self.adapter.name, task=task, lone_agent=app.lone_agent)
        error: BaseException | None = None
        token = run.attach()
        try:
            yield run
        except BaseException as exc:
            error = exc
            raise
        finally:
            run.detach(token)
            run.finish(error)

    # -- hooks the spans module calls ------------------------------------------------------
    def _run_started(self, run: RunScope) -> None:
        """Note ``run`` as in flight (for :meth:`set_outcome`'s choice of the caller's run); every
        :class:`RunScope` calls it once, as it opens."""
        with self._runs_lock:
            self._in_flight[run] = time.time_ns()

    def _run_ending(self, run: RunScope) -> None:
        """Remember ``run`` as the latest (of the probe, and of the thread and task it ends in) and
        let the judge score it before its root span ends."""
        self._remember(run)
        if self.judge is None:
            return
        verdict = self.judge(run.task, run.answer)
        if verdict is None:
            return
        outcome = verdict if isinstance(verdict, Outcome) else Outcome(success=bool(verdict))
        if outcome.answer is None:
            outcome.answer = run.answer
        run.span.set_attributes(self._outcome_attributes(outcome))
        if outcome.success is not None:
            run.span.add_event(evaluations.EVENT, evaluations.outcome_evaluation(outcome.success, outcome.expected))

    def _remember(self, run: RunScope) -> None:
        end = time.time_ns()
        here: _Ended | None = getattr(self._here, "last", None)
        with self._runs_lock:
            start = self._in_flight.pop(run, None)
            if start is None:  # a run the probe was not told of at its start: its root span's start
                start = getattr(run.span, "start_time", None) or end
            last = self._last
            ended = _Ended(run, start, end, overlapped=bool(self._in_flight) or (last is not None and last.end > start),
                           overlapped_here=here is not None and here.end > start)
            self._last, self.last_run = ended, run
            task = _current_task()
            if task is not None:
                self._by_task[task] = ended
        self._here.last = ended

    # -- lifecycle -------------------------------------------------------------------------
    def flush(self, timeout_millis: int | None = None) -> bool:
        """Write pending spans to the store, and give exporters (OTLP) up to ``timeout_millis``
        (default 500 ms) to send theirs; True when everything went out in time.

        A collector that is down or hung never holds the caller longer: what is left is sent on
        a background thread, or at process exit.
        """
        stored = self.store.flush() if self.store is not None else True
        wait_s = EXPORT_WAIT_S if timeout_millis is None else timeout_millis / 1000
        return flush_exporters(self.provider, wait_s) and stored

    def uninstrument(self) -> None:
        """Stop tracing this probe's apps; restore the framework's originals when no probe is left."""
        if not self._active:
            return
        self._active = False
        with _probes_lock:
            _probes.discard(self)
        self.adapter.release(self)

    def __enter__(self) -> "Probe":
        return self

    def __exit__(self, *exc: object) -> None:
        self.flush()
        self.uninstrument()


def instrument(
    app: Any,
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    capture_content: bool | None = None,
    store: TraceStore | str | os.PathLike[str] | bool | None = None,
    exporter: SpanExporter | None = None,
    judge: Judge | None = None,
    keep_successes: float | None = None,
    logger_provider: LoggerProvider | None = None,
    root_messages: bool | None = None,
    redact: Callable[[str], str] | None = None,
    service_name: str | None = None,
    session_id: str | None = None,
    user_id: str | None = None,
    tags: list[str] | None = None,
    metadata: dict[str, Any] | None = None,
    prices: Prices | None = None,
) -> Probe:
    """Trace ``app`` (an AutoGen team or agent, a CAMEL society/workforce/agent, a MetaGPT team/role).

    Arguments override environment variables (see README "Configuration"):

    - ``tracer_provider``: your SDK provider. Without one, the global provider is used when one
      is set (``trace.set_tracer_provider``, or ``opentelemetry-instrument``); else aegis-probe
      makes one that writes to the trace store and, when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set,
      to OTLP.
    - ``meter_provider``: where the GenAI metrics go (default: the global one, when set).
    - ``capture_content``: record message content (default on; env ``AEGIS_CAPTURE_CONTENT``,
      then OTel's ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``). Secrets are always redacted.
    - ``store``: a directory or :class:`TraceStore` (default ``AEGIS_TRACE_DIR`` or
      ``./aegis-traces``); ``False`` disables it. With your own or the global provider the store
      is added only when given explicitly.
    - ``exporter``: an extra span exporter (batched), e.g. an OTLP exporter you configured.
    - ``judge``: ``judge(task, answer) -> bool | Outcome`` called when a run ends.
    - ``keep_successes``: the share of successful runs the store and aegis's exporters keep,
      0..1 (default 1, env ``AEGIS_KEEP_SUCCESSES``); failed or judged-bad runs are always kept,
      each run whole (see docs/otel.md "Sampling").
    - ``logger_provider``: where the GenAI content events go when
      ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is ``EVENT_ONLY`` or ``SPAN_AND_EVENT``
      (default: the global one).
    - ``root_messages``: the run's task and answer as ``gen_ai.input.messages``/``gen_ai.output.messages``
      on its root span too (default off; env ``AEGIS_ROOT_MESSAGES``; only with ``capture_content``).
    - ``redact``: your own ``str -> str`` redaction, applied after the built-in one.
    - ``session_id``, ``user_id``, ``tags``, ``metadata``: of every run (``using_attributes`` overrides).
    - ``prices``: model prices over the built-in table, a JSON file or a mapping (see ``aegis_probe.pricing``).

    Instrumenting an app twice returns the same probe. Raises ``TypeError`` for unsupported apps.
    """
    adapter = adapter_for(app)
    existing = adapter.registry.get(app)
    if existing is not None and existing.active:
        return existing
    setup = ProbeSetup.resolve(tracer_provider=tracer_provider, meter_provider=meter_provider,
                               capture_content=capture_content, store=store, exporter=exporter,
                               redact=redact, service_name=service_name, keep_successes=keep_successes,
                               logger_provider=logger_provider, root_messages=root_messages)
    probe = setup.probe(adapter, judge)
    probe.session = session_attributes(session_id, user_id, tags, metadata)
    if prices is not None:
        probe.prices = PriceTable.load(prices)
    probe.apps.append(adapter.register(app, probe))
    adapter.install()
    with _probes_lock:
        _probes.add(probe)
    return probe


@dataclass(frozen=True)
class ProbeSetup:
    """Configuration, tracer provider and trace store that probes are made from."""

    config: ProbeConfig
    provider: Any
    store: TraceStore | None
    logger_provider: LoggerProvider | None = None

    @classmethod
    def resolve(
        cls,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        capture_content: bool | None = None,
        store: TraceStore | str | os.PathLike[str] | bool | None = None,
        exporter: SpanExporter | None = None,
        redact: Callable[[str], str] | None = None,
        service_name: str | None = None,
        keep_successes: float | None = None,
        logger_provider: LoggerProvider | None = None,
        root_messages: bool | None = None,
    ) -> "ProbeSetup":
        """The provider: ``tracer_provider``, else the global one when set, else aegis-probe's own.

        The store is part of aegis-probe's own provider by default; on another provider it is
        added only when ``store`` names one (a directory, a :class:`TraceStore` or ``True``).
        """
        config = ProbeConfig.resolve(
            capture_content=capture_content,
            trace_dir=store if isinstance(store, (str, os.PathLike)) else None,
            service_name=service_name,
            redact=redact,
            keep_successes=keep_successes,
            root_messages=root_messages,
        )
        if tracer_provider is None and global_provider_set():
            tracer_provider = trace.get_tracer_provider()
        trace_store: TraceStore | None
        if isinstance(store, TraceStore):
            trace_store = store
        elif store is False or (tracer_provider is not None and store is None):
            trace_store = None
        else:
            trace_store = TraceStore(config.trace_dir)
        if tracer_provider is None:
            provider: Any = default_provider(config, trace_store, exporter)
        else:
            provider = tracer_provider
            if trace_store is not None:  # only the runs' traces, not the app's others
                store_dir = trace_store.path.resolve()
                add_once(provider, store_dir, lambda: sampled(StoreSpanProcessor(TraceStore(store_dir), runs_only=True),
                                                              config.keep_successes))
            if exporter is not None:
                add_once(provider, id(exporter), lambda: sampled(batch_processor(exporter), config.keep_successes))  # the provider keeps it: no id reuse
        if meter_provider is not None or global_meter_provider_set():
            add_metrics(provider, meter_provider or metrics.get_meter_provider(), _version())
        return cls(config, provider, trace_store, logger_provider)

    def probe(self, adapter: Adapter, judge: Judge | None = None) -> Probe:
        """A new probe for ``adapter`` on this setup."""
        tracer = self.provider.get_tracer(SCOPE, _version(), schema_url=sc.SCHEMA_URL)
        probe = Probe(adapter, self.config, tracer, self.store, self.provider, judge)
        if self.config.content_events:
            probe.events = event_logger(self.logger_provider, _version())
        return probe


def global_provider_set() -> bool:
    """Whether a global tracer provider was set (the API's proxy stands in until one is)."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def global_meter_provider_set() -> bool:
    """Whether a global meter provider was set."""
    from opentelemetry.metrics import _internal as metrics_internal

    return not isinstance(metrics.get_meter_provider(), metrics_internal._ProxyMeterProvider)


#: What :func:`uninstrument` undoes besides the probes: the zero-code instrumentors register
#: theirs when their module is imported (:mod:`.instrumentor`), so this module never imports it.
GLOBAL_UNINSTALLERS: list[Callable[[], None]] = []


def uninstrument() -> None:
    """Uninstrument every probe (trace-every-app mode too) and restore every patched original."""
    for undo in list(GLOBAL_UNINSTALLERS):
        undo()
    with _probes_lock:
        probes = list(_probes)
    for probe in probes:
        probe.uninstrument()
    for adapter in loaded_adapters():
        adapter.uninstall()


def _version() -> str:
    from .. import __version__

    return __version__

