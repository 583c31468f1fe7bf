"""Span scopes the adapters open: one run (the trace root), agent steps, LLM calls, tool calls.

Adapters know *where* a framework acts; this module knows *what* a span carries. Run and step
state travel in the OpenTelemetry ``Context`` next to the active span, so one ``attach`` per item
is enough, also inside async generators and threads that copy the context.
"""

from __future__ import annotations

import itertools
import logging
import threading
import traceback
import uuid
import weakref
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, AsyncGenerator, AsyncIterator, Awaitable, Callable, Generator, Iterator, Mapping, NamedTuple, Sequence, TypeVar, Union

from opentelemetry import context as otel_context
from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
from opentelemetry import trace
from opentelemetry.instrumentation.utils import _SUPPRESS_INSTRUMENTATION_KEY, _SUPPRESS_INSTRUMENTATION_KEY_PLAIN
from opentelemetry.sdk.trace import _Span as _SdkSpan
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from . import semconv as sc
from . import session as _session
from .coexist import YIELDED, yielding_to
from .leanspans import LeanSpan
from .jsontext import json_text
from .messages import ChatMessage, encode_messages, forget as forget_messages, forget_long_texts as forget_long_encoded_texts
from ..redact import forget as forget_redactions, forget_long_texts as forget_long_clean_texts, redact_secrets

if TYPE_CHECKING:
    from .probe import Probe

logger = logging.getLogger("aegis_probe")

T = TypeVar("T")

#: Message content handed to a span: the messages, or a function returning them, called only when
#: the span records content (so a span that is not sampled costs no conversion or encoding).
Content = Union[Sequence[ChatMessage], Callable[[], Sequence[ChatMessage]], None]

_RUN_KEY = otel_context.create_key("aegis.run")
_STEP_KEY = otel_context.create_key("aegis.step")
_LLM_KEY = otel_context.create_key("aegis.llm")
_ACTOR_KEY = otel_context.create_key("aegis.actor")


def _context_var() -> ContextVar[otel_context.Context] | None:
    """The ``ContextVar`` holding the current context when the runtime context is OpenTelemetry's
    default, else None (another runtime context is used through the API)."""
    runtime = getattr(otel_context, "_RUNTIME_CONTEXT", None)
    var = getattr(runtime, "_current_context", None)
    return var if type(runtime) is ContextVarsRuntimeContext and isinstance(var, ContextVar) else None


_VAR = _context_var()
#: The current OpenTelemetry context: ``otel_context.get_current`` without its two Python calls
#: when the runtime context is the default one (patched calls read it often).
current_context: Callable[[], otel_context.Context] = otel_context.get_current if _VAR is None else _VAR.get
#: ``otel_context.attach`` and the reset under ``otel_context.detach``, likewise direct (two
#: Python calls each fewer; a failed direct reset goes to ``otel_context.detach``, which logs it).
_attach: Callable[[otel_context.Context], object] = otel_context.attach if _VAR is None else _VAR.set
_reset: Callable[[Any], None] = otel_context.detach if _VAR is None else _VAR.reset
#: The key ``trace.set_span_in_context`` sets (read through the API, not imported).
(_SPAN_KEY,) = trace.set_span_in_context(trace.INVALID_SPAN, otel_context.Context()).keys()


#: The SDK's span classes: ``is_recording()`` is ``_end_time is None`` (read without the call).
_SDK_SPANS = frozenset((_SdkSpan, LeanSpan))


def _span_in(ctx: otel_context.Context) -> Span:
    """``trace.get_current_span(ctx)`` in one Python call instead of three."""
    span = ctx.get(_SPAN_KEY)
    return span if isinstance(span, Span) else trace.INVALID_SPAN


def log_hook_error(where: str) -> None:
    """Log (never raise) an exception caught inside instrumentation code, its message and stack
    trace redacted (it may carry the app's data: a user's judge or interceptor failing on a key)."""
    if logger.isEnabledFor(logging.WARNING):  # logger.warning(..., exc_info=True), the stack trace redacted
        record = logger.makeRecord(logger.name, logging.WARNING, __file__, 0, "aegis-probe: error in %s hook, ignored",
                                   (where,), None, "log_hook_error")
        record.exc_text = redact_secrets(traceback.format_exc()).rstrip()
        logger.handle(record)


def _not_reset(scope: "_Scope", token: object, error: Exception) -> None:
    """After ``_reset(token)`` of ``scope`` raised ``error``: logged by ``otel_context.detach``
    (which fails the same way and swallows it), except for a coroutine or generator being closed
    (``GeneratorExit``) outside the context it attached ``scope`` in, where ``scope`` is not
    current either (e.g. a pending task's coroutine closed by the garbage collector after its loop
    closed): that context is discarded with it, and the uninstrumented app logs nothing there."""
    if isinstance(error, ValueError) and isinstance(error.__context__, GeneratorExit) \
            and current_context() is not scope.ctx:
        return
    otel_context.detach(token)  # type: ignore[arg-type]


def instrumentation_suppressed(ctx: otel_context.Context | None = None) -> bool:
    """Whether OpenTelemetry instrumentation is suppressed in ``ctx`` (default: the current context).

    The keys ``opentelemetry.instrumentation.utils.is_instrumentation_enabled`` reads: the API's
    (set by ``suppress_instrumentation()`` and by the SDK's export threads) and the legacy string key.
    """
    ctx = current_context() if ctx is None else ctx
    suppressed = ctx.get(_SUPPRESS_INSTRUMENTATION_KEY)  # YIELDED: aegis's own, for the others (coexist)
    return bool((suppressed and suppressed is not YIELDED) or ctx.get(_SUPPRESS_INSTRUMENTATION_KEY_PLAIN))


def current_run() -> "RunScope | None":
    """The run the calling code belongs to, or None outside instrumented runs (and while suppressed)."""
    ctx = current_context()  # one context read: this runs on every patched call
    run = ctx.get(_RUN_KEY)
    if run is None or ctx.get(_SUPPRESS_INSTRUMENTATION_KEY_PLAIN):
        return None
    suppressed = ctx.get(_SUPPRESS_INSTRUMENTATION_KEY)
    if suppressed and suppressed is not YIELDED:
        return None  # (instrumentation_suppressed, inlined)
    return run  # type: ignore[return-value]


def current_step() -> "StepScope | None":
    """The agent step the calling code belongs to, if any."""
    return current_context().get(_STEP_KEY)  # type: ignore[return-value]


class Actor(NamedTuple):
    """Who makes the model calls of code running outside any agent step (e.g. a team's manager)."""

    agent: str
    purpose: str | None = None


def current_actor() -> Actor | None:
    """The actor set by :func:`acting_context` for the calling code, if any (steps take precedence)."""
    return current_context().get(_ACTOR_KEY)  # type: ignore[return-value]


def acting_context(actor: Actor, ctx: otel_context.Context | None = None) -> otel_context.Context:
    """``ctx`` (default: the current one) with no step current and ``actor`` making its model calls:
    their ``chat`` spans name ``actor.agent`` and ``actor.purpose``, and replay keys them by it."""
    ctx = current_context() if ctx is None else ctx
    return otel_context.Context({**ctx, _STEP_KEY: None, _ACTOR_KEY: actor})  # set_value twice, in one copy


def in_llm_call() -> bool:
    """Whether the calling code runs inside a traced model call (a client delegating to another)."""
    return current_context().get(_LLM_KEY) is not None


class _Scope:
    """A span plus the context that makes it current; ends exactly once."""

    __slots__ = ("probe", "span", "ctx", "_ended")

    #: The context key under which a scope of this kind is current besides its span (None: none).
    _KEY: str | None = None

    def __init__(self, probe: "Probe", span: Span, parent: otel_context.Context) -> None:
        self.probe, self.span, self._ended = probe, span, False
        # ``parent`` with the span and this scope set: one copy (set_span_in_context, then set_value, made two)
        self.ctx = otel_context.Context({**parent, _SPAN_KEY: span} if self._KEY is None
                                        else {**parent, _SPAN_KEY: span, self._KEY: self})

    def attach(self) -> object:
        """Make this scope current (``otel_context.attach``); returns the token for :meth:`detach`."""
        return _attach(self.ctx)

    def detach(self, token: object) -> None:
        """``otel_context.detach(token)``: a token that cannot be reset here (attached in another
        context, e.g. a generator finished elsewhere, or reset already) is logged, never raised
        (see :func:`_not_reset` for the one case left silent)."""
        try:
            _reset(token)
        except Exception as error:
            _not_reset(self, token, error)

    @property
    def records_content(self) -> bool:
        """Whether message content set on this span is kept: capture is on and the span records."""
        return self.probe.config.capture_content and self.span.is_recording()

    def fail(self, exc: BaseException) -> None:
        """Mark the span as failed by the app's own exception (which the caller re-raises)."""
        if self._ended:
            return
        if not self.span.is_recording():  # nothing to redact and record
            self.end()
            return
        try:
            self.record_error(exc)
            self.span.set_status(Status(StatusCode.ERROR, self.probe.redact(f"{type(exc).__name__}: {exc}")))
        finally:
            self.end()

    def record_error(self, exc: BaseException) -> None:
        """Add the ``exception`` event (message and stack trace redacted) and ``error.type``; the span stays open."""
        redact = self.probe.redact
        self.span.record_exception(exc, attributes={  # overrides the SDK's own, unredacted, message and trace
            "exception.message": redact(str(exc)),
            "exception.stacktrace": redact("".join(traceback.format_exception(exc))),
        })
        self.span.set_attribute(sc.ERROR_TYPE, type(exc).__qualname__)

    def end(self) -> None:
        if not self._ended:
            self._ended = True
            self.span.end()

    def content(self, key: str, messages: Content) -> None:
        """Set a message-content attribute when content capture is on and the span records."""
        if messages is not None and self.probe.config.capture_content and self.span.is_recording():  # records_content
            self.span.set_attribute(key, _encoded(self.probe, messages, self.ctx))


def _encoded(probe: "Probe", messages: Content, ctx: otel_context.Context) -> str:
    """``messages`` as JSON; a prompt is remembered for the run of ``ctx`` (let go of when it ends)."""
    run: RunScope | None = ctx.get(_RUN_KEY)  # type: ignore[assignment]
    prompts = None if run is None else run.caches.get("prompts")
    if prompts is None and run is not None:
        prompts = run.caches["prompts"] = {}
    return encode_messages(messages() if callable(messages) else messages, probe.redact, prompts)  # type: ignore[arg-type]


def _open(probe: "Probe", name: str, kind: SpanKind, attrs: dict[str, Any], parent: otel_context.Context,
          late: Callable[[], dict[str, Any]] | None, links: list[trace.Link] | None = None) -> Span:
    """Start a span with ``attrs`` followed by ``late()``'s (content: conversion, encoding and
    redaction), which are only built for a span that records. Under a recording parent (children of
    a sampled span are sampled) they go in with the others; else the span is started without them
    and gets them afterwards only if it records (e.g. a root span, or a sampler of its own)."""
    if late is not None:
        current = parent.get(_SPAN_KEY)  # _span_in(parent).is_recording(), an SDK span's without calls
        if current._end_time is None if type(current) in _SDK_SPANS else _span_in(parent).is_recording():  # type: ignore[attr-defined]
            attrs.update(late())
            late = None
    span = probe.tracer.start_span(name, context=parent, kind=kind, attributes=attrs, links=links)
    if late is not None and span.is_recording():
        span.set_attributes(late())
    return span


#: The runs open in this process (weakly: an abandoned run is not kept), and what to let go of
#: each time the last of them ends (:func:`when_no_run_is_open`).
_OPEN_RUNS: "weakref.WeakSet[RunScope]" = weakref.WeakSet()
_WHEN_NONE_OPEN: list[Callable[[], None]] = [forget_messages, forget_redactions]


def when_no_run_is_open(clear: Callable[[], None]) -> None:
    """Call ``clear`` each time the last open run of the process ends: caches of the apps' messages
    (kept so that a prompt costs only its new messages) let go of them then, rather than keep the
    last big prompts of apps that are gone up to the caches' bounds."""
    _WHEN_NONE_OPEN.append(clear)


def _run_closed(run: "RunScope") -> None:
    _OPEN_RUNS.discard(run)
    run.caches.clear()  # what was remembered for the run alone, and the long texts it may have
    forget_long_encoded_texts()
    forget_long_clean_texts()
    if not _OPEN_RUNS:
        for clear in _WHEN_NONE_OPEN:
            try:
                clear()
            except Exception:
                log_hook_error("message caches")


class RunScope(_Scope):
    """One run of an app: the trace root. Holds the step and per-agent call counters."""

    __slots__ = ("run_id", "conversation_id", "framework", "task", "answer", "caches", "session", "cost", "name",
                 "last_agent", "_steps",
                 "_calls", "_lock", "__weakref__")

    _KEY = _RUN_KEY

    def __init__(self, probe: "Probe", span: Span, parent: otel_context.Context, framework: str, task: str | None,
                 conversation_id: str | None = None, session: dict[str, Any] | None = None, name: str = ""):
        self.probe, self.span, self._ended = probe, span, False
        self.ctx = otel_context.Context({**parent, _SPAN_KEY: span, _RUN_KEY: self})  # _Scope.__init__
        if yielding_to(framework):  # another GenAI instrumentation of the framework yields inside the run
            self.ctx = otel_context.Context({**self.ctx, _SUPPRESS_INSTRUMENTATION_KEY: YIELDED})
        self.run_id = uuid.uuid4().hex
        #: The session, user, tags and metadata every span of the run carries (see ``session``).
        self.session = session or {}
        #: ``gen_ai.conversation.id`` of the run's spans: the session id, else the framework's own
        #: (e.g. a checkpointer thread id), else the run's id.
        self.conversation_id = self.session.get(_session.SESSION_ID) or conversation_id or self.run_id
        #: USD of the run's priced model calls so far (``aegis.cost.usd`` on the root when it ends).
        self.cost: float | None = None
        self.framework, self.task = framework, task
        self.answer: str | None = None
        #: The run's name (its root's workflow or agent name) and the agent of its latest step, for
        #: the graph and hand-over attributes of the next step.
        self.name: str = name
        self.last_agent: str | None = None
        #: What the core and adapters remember for this run only (e.g. its last prompts, to convert
        #: and encode only a prompt's new messages), by owner; emptied when the run ends.
        self.caches: dict[str, Any] = {}
        self._steps = itertools.count()
        self._calls: dict[str, itertools.count] = {}
        self._lock = threading.Lock()
        span.set_attributes({sc.RUN_ID: self.run_id, sc.CONVERSATION_ID: self.conversation_id, sc.GRAPH_NODE_ID: name})
        _OPEN_RUNS.add(self)
        try:  # in flight from now on (the probe holds it weakly: an abandoned run is not kept)
            probe._run_started(self)
        except Exception:
            log_hook_error("run start")

    @property
    def trace_id(self) -> str:
        return format(self.span.get_span_context().trace_id, "032x")

    def next_step_index(self) -> int:
        return next(self._steps)

    def next_call_index(self, agent: str) -> int:
        """The 0-based index of ``agent``'s next LLM call in this run."""
        with self._lock:
            counter = self._calls.setdefault(agent, itertools.count())
        return next(counter)

    def finish(self, exc: BaseException | None = None) -> None:
        """End the run: judge it, write the outcome, end the root span (which writes the trace)."""
        if exc is not None:
            self.fail(exc)
        elif not self._ended:
            self._ending()
            self.end()

    def fail(self, exc: BaseException) -> None:
        """End the run as failed by the app's exception, judged and remembered like any run
        (``call_in_scope``/``await_in_scope`` fail a run that raises through here)."""
        if not self._ended:
            self._ending()
            super().fail(exc)

    def end(self) -> None:
        _set_cost(self)
        if self.probe.config.root_messages and not self._ended and self.records_content:
            _set_root_messages(self)
        super().end()

    def _ending(self) -> None:
        try:
            self.probe._run_ending(self)
        except Exception:
            log_hook_error("judge")
        _run_closed(self)


class StepScope(_Scope):
    """One agent step: an ``invoke_agent`` span with a contiguous ``aegis.step.index``."""

    __slots__ = ("run", "agent", "index", "cost")

    _KEY = _STEP_KEY

    def __init__(self, probe: "Probe", span: Span, parent: otel_context.Context, run: RunScope | None, agent: str, index: int | None):
        self.probe, self.span, self._ended = probe, span, False
        self.ctx = otel_context.Context({**parent, _SPAN_KEY: span, _STEP_KEY: self})  # _Scope.__init__
        self.run, self.agent, self.index = run, agent, index
        self.cost: float | None = None  #: USD of the step's priced model calls

    def finish(self, output: Content = None) -> None:
        span = self.span
        if output is not None and self.probe.config.capture_content and span.is_recording():  # self.content(...)
            span.set_attribute(sc.OUTPUT_MESSAGES, _encoded(self.probe, output, self.ctx))
        if not self._ended:  # self.end(), inline: one call fewer on every step
            if self.cost is not None:  # _set_cost(self)
                span.set_attribute(sc.COST_USD, self.cost)
            self._ended = True
            span.end()

    def end(self) -> None:
        if not self._ended:  # _set_cost(self), then _Scope.end, inline
            if self.cost is not None:
                self.span.set_attribute(sc.COST_USD, self.cost)
            self._ended = True
            self.span.end()


_COST_LOCK = threading.Lock()


def _set_root_messages(run: RunScope) -> None:
    """The run's task and final answer as the root span's input and output messages (opt-in: ``root_messages``)."""
    try:
        attrs = {}
        if run.task is not None:
            attrs[sc.INPUT_MESSAGES] = encode_messages([{"role": "user", "content": run.task}], run.probe.redact)
        if run.answer is not None:
            attrs[sc.OUTPUT_MESSAGES] = encode_messages([{"role": "assistant", "content": run.answer}], run.probe.redact)
        run.span.set_attributes(attrs)
    except Exception:
        log_hook_error("root messages")


def _set_cost(scope: "RunScope | StepScope") -> None:
    """``aegis.cost.usd`` on a step's or run's span before it ends, when a call of it was priced."""
    if not scope._ended and scope.cost is not None:
        scope.span.set_attribute(sc.COST_USD, scope.cost)


def _add_cost(ctx: otel_context.Context, usd: float) -> None:
    """Add a model call's cost to the step and the run it was made in."""
    with _COST_LOCK:
        for key in (_STEP_KEY, _RUN_KEY):
            scope = ctx.get(key)
            if scope is not None:
                scope.cost = (scope.cost or 0.0) + usd  # type: ignore[attr-defined]


class LLMScope(_Scope):
    """One model call: a ``chat {model}`` span."""

    __slots__ = ("model",)

    _KEY = _LLM_KEY

    def __init__(self, probe: "Probe", span: Span, parent: otel_context.Context, model: str | None = None) -> None:
        self.probe, self.span, self._ended = probe, span, False
        self.ctx = otel_context.Context({**parent, _SPAN_KEY: span, _LLM_KEY: self})  # _Scope.__init__, inline
        self.model = model  #: the requested model (priced when the response names none)

    def finish(
        self,
        output: Content = None,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        response_model: str | None = None,
        finish_reasons: Sequence[str] | None = None,
        response_id: str | None = None,
        cache_read_input_tokens: int | None = None,
        cache_creation_input_tokens: int | None = None,
        reasoning_output_tokens: int | None = None,
    ) -> None:
        if not self.span.is_recording():
            self.end()
            return
        attrs: dict[str, Any] = {}
        if response_id:
            attrs[sc.RESPONSE_ID] = response_id
        if input_tokens is not None:
            attrs[sc.USAGE_INPUT_TOKENS] = int(input_tokens)
        if output_tokens is not None:
            attrs[sc.USAGE_OUTPUT_TOKENS] = int(output_tokens)
        if cache_read_input_tokens is not None:
            attrs[sc.USAGE_CACHE_READ_INPUT_TOKENS] = int(cache_read_input_tokens)
        if cache_creation_input_tokens is not None:
            attrs[sc.USAGE_CACHE_CREATION_INPUT_TOKENS] = int(cache_creation_input_tokens)
        if reasoning_output_tokens is not None:
            attrs[sc.USAGE_REASONING_OUTPUT_TOKENS] = int(reasoning_output_tokens)
        usd = self.probe.prices.cost(response_model or self.model, input_tokens=input_tokens, output_tokens=output_tokens,
                                     cache_read_input_tokens=cache_read_input_tokens,
                                     cache_creation_input_tokens=cache_creation_input_tokens)
        if usd is not None:
            attrs[sc.COST_USD] = usd
            _add_cost(self.ctx, usd)
        if response_model:
            attrs[sc.RESPONSE_MODEL] = response_model
        if finish_reasons:
            attrs[sc.RESPONSE_FINISH_REASONS] = list(finish_reasons)
        if output is not None and self.probe.config.capture_content:
            attrs[sc.OUTPUT_MESSAGES] = _encoded(self.probe, output, self.ctx)
        self.span.set_attributes(attrs)  # one lock and one pass, not one per attribute
        self.end()


class ToolScope(_Scope):
    """One tool call: an ``execute_tool {tool}`` span."""

    __slots__ = ()

    #: A failed call's status description when its result is not captured (content off) or empty.
    FAILED = "tool call failed"

    def finish(self, result: Any = None, *, is_error: bool = False) -> None:
        """End the span with the tool's ``result``; ``is_error``: status ERROR, described by the result
        text when content is captured, else by :attr:`FAILED` (the result is content)."""
        text = None
        if result is not None and self.records_content:  # a dict, list or tuple as JSON, anything else as text
            structured = isinstance(result, (dict, list, tuple))
            text = self.probe.redact(json_text(result) if structured else result if type(result) is str else str(result))
        if text is not None:
            self.span.set_attribute(sc.TOOL_CALL_RESULT, text)
        if is_error:
            self.span.set_status(Status(StatusCode.ERROR, text[:200] if text else self.FAILED))
        self.end()


def _add_conversation(attrs: dict[str, Any], ctx: otel_context.Context) -> dict[str, Any]:
    """``attrs`` with ``gen_ai.conversation.id`` and the session's attributes for a span opened inside a run."""
    run = ctx.get(_RUN_KEY)
    if run is not None:
        attrs[sc.CONVERSATION_ID] = run.conversation_id  # type: ignore[attr-defined]
        attrs.update(run.session)  # type: ignore[attr-defined]
    return attrs


def _text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json_text(arguments)


def start_run(
    probe: "Probe", name: str, *, framework: str, task: str | None, lone_agent: bool = False,
    conversation_id: str | None = None,
) -> RunScope:
    """Open the root span of a run (``invoke_workflow {name}``, or ``invoke_agent`` for a lone agent);
    ``conversation_id``: the framework's own id of the conversation (default: the run's id).

    A run is one trace: opened under a span of the app's own (a web request's, another
    instrumentation's) it starts a new trace linked to that span; inside another run it nests."""
    op = sc.OP_AGENT if lone_agent else sc.OP_WORKFLOW
    attrs: dict[str, Any] = {sc.OPERATION: op, sc.FRAMEWORK: framework}
    attrs[sc.AGENT_NAME if lone_agent else sc.WORKFLOW_NAME] = name
    session = _session.from_context(current_context(), probe.session)
    attrs.update(session)
    late = (lambda: {sc.TASK: probe.redact(task)}) if task is not None and probe.config.capture_content else None  # type: ignore[arg-type]
    parent = current_context()
    links = None
    outer = _span_in(parent).get_span_context()
    if outer.is_valid and parent.get(_RUN_KEY) is None:
        parent, links = trace.set_span_in_context(trace.INVALID_SPAN, parent), [trace.Link(outer)]
    span = _open(probe, sc.span_name(op, name), SpanKind.INTERNAL, attrs, parent, late, links)
    return RunScope(probe, span, parent, framework, task, conversation_id, session, name)


def start_step(
    probe: "Probe",
    agent: str,
    *,
    run: RunScope | None,
    agent_id: str | None = None,
    description: str | None = None,
    role: str | None = None,
    input_messages: Content = None,
    attributes: Mapping[str, Any] | None = None,
) -> StepScope:
    """Open an ``invoke_agent {agent}`` step span under the current context (``attributes``: extra ones;
    ``input_messages`` are encoded only if the span records content)."""
    index = next(run._steps) if run is not None else None  # run.next_step_index()
    attrs: dict[str, Any] = {sc.OPERATION: sc.OP_AGENT, sc.AGENT_NAME: agent, **(attributes or {})}
    if run is not None:
        attrs[sc.CONVERSATION_ID] = run.conversation_id
        attrs.update(run.session)
        path = attrs.get(sc.AGENT_PATH)
        attrs[sc.GRAPH_NODE_ID] = agent
        attrs[sc.GRAPH_NODE_PARENT_ID] = path[-1] if path else run.name
        previous, run.last_agent = run.last_agent, agent
        if previous is not None and previous != agent:
            attrs[sc.HANDOFF_SOURCE], attrs[sc.HANDOFF_TARGET] = previous, agent
    if index is not None:
        attrs[sc.STEP_INDEX] = index
        attrs[sc.FRAMEWORK] = run.framework  # type: ignore[union-attr]
    if agent_id:
        attrs[sc.AGENT_ID] = agent_id
    if description:
        attrs[sc.AGENT_DESCRIPTION] = description
    if role:
        attrs[sc.AGENT_ROLE] = role
    parent = current_context()
    late = None
    if input_messages is not None and probe.config.capture_content:
        late = lambda: {sc.INPUT_MESSAGES: _encoded(probe, input_messages, parent)}  # noqa: E731
    span = _open(probe, sc.span_name(sc.OP_AGENT, agent), SpanKind.INTERNAL, attrs, parent, late)
    return StepScope(probe, span, parent, run, agent, index)


def start_llm(
    probe: "Probe",
    model: str | None,
    *,
    provider: str,
    input_messages: Content = None,
    agent: str | None = None,
    call_index: int | None = None,
    purpose: str | None = None,
    attributes: Mapping[str, Any] | None = None,
) -> LLMScope:
    """Open a ``chat {model}`` span under the current context (``agent`` is the calling agent,
    ``purpose`` why an agent outside any step called, ``attributes`` the request's own, which
    may name a more precise provider; ``input_messages`` are encoded only if the span records content)."""
    attrs: dict[str, Any] = {sc.OPERATION: sc.OP_CHAT, sc.PROVIDER: provider, **(attributes or {})}
    if model:
        attrs[sc.REQUEST_MODEL] = model
    if agent is not None:
        attrs[sc.AGENT_NAME] = agent
    if purpose is not None:
        attrs[sc.LLM_PURPOSE] = purpose
    if call_index is not None:
        attrs[sc.AGENT_CALL_INDEX] = call_index
    parent = current_context()
    late = None
    if input_messages is not None and probe.config.capture_content:  # content, then the conversation id
        late = lambda: _add_conversation({sc.INPUT_MESSAGES: _encoded(probe, input_messages, parent)}, parent)  # noqa: E731
    else:
        _add_conversation(attrs, parent)
    span = _open(probe, sc.span_name(sc.OP_CHAT, model), SpanKind.CLIENT, attrs, parent, late)
    return LLMScope(probe, span, parent, model)


def start_tool(
    probe: "Probe", name: str, *, call_id: str | None = None, arguments: Any = None,
    description: str | None = None, tool_type: str | None = None,
) -> ToolScope:
    """Open an ``execute_tool {tool}`` span under the current context (``tool_type``: the
    conventions' ``function``, ``extension`` or ``datastore``)."""
    attrs: dict[str, Any] = {sc.OPERATION: sc.OP_TOOL, sc.TOOL_NAME: name}
    if description:
        attrs[sc.TOOL_DESCRIPTION] = description
    if tool_type:
        attrs[sc.TOOL_TYPE] = tool_type
    if call_id:
        attrs[sc.TOOL_CALL_ID] = str(call_id)
    parent = current_context()
    late = None
    if arguments is not None and probe.config.capture_content:  # content, then the conversation id
        late = lambda: _add_conversation({sc.TOOL_CALL_ARGUMENTS: probe.redact(_text(arguments))}, parent)  # noqa: E731
    else:
        _add_conversation(attrs, parent)
    span = _open(probe, sc.span_name(sc.OP_TOOL, name), SpanKind.INTERNAL, attrs, parent, late)
    return ToolScope(probe, span, parent)


@contextmanager
def attached(scope: _Scope | None) -> Iterator[None]:
    """Make ``scope`` current inside the ``with`` block (nothing when None); not for a block that yields."""
    token = scope.attach() if scope is not None else None
    try:
        yield
    finally:
        if token is not None:
            scope.detach(token)  # type: ignore[union-attr]


def _fail(scope: _Scope, exc: BaseException) -> None:
    try:
        scope.fail(exc)
    except Exception:
        log_hook_error("span failure")


def call_in_scope(scope: _Scope, call: Callable[[], T], finish: Callable[[T], None], where: str) -> T:
    """Run ``call()`` with ``scope`` current, then ``finish(result)`` to end the scope.

    The app's exception fails the scope and propagates unchanged; an error inside ``finish`` is
    logged as the ``{where} end`` hook's and the scope ended anyway.
    """
    token = _attach(scope.ctx)  # scope.attach(), and below its detach and _finish, inline: fewer calls per scope
    try:
        result = call()
    except BaseException as exc:
        _fail(scope, exc)
        raise
    finally:
        try:
            _reset(token)
        except Exception as error:
            _not_reset(scope, token, error)  # logged and swallowed
    try:
        finish(result)
    except Exception:
        log_hook_error(f"{where} end")
        scope.end()
    return result


async def await_in_scope(scope: _Scope, call: Callable[[], Awaitable[T]], finish: Callable[[T], None], where: str) -> T:
    """The async twin of :func:`call_in_scope`: await ``call()`` with ``scope`` current."""
    token = _attach(scope.ctx)  # as call_in_scope: attach, detach and finish inline
    try:
        result = await call()
    except BaseException as exc:
        _fail(scope, exc)
        raise
    finally:
        try:
            _reset(token)
        except Exception as error:
            _not_reset(scope, token, error)  # logged and swallowed
    try:
        finish(result)
    except Exception:
        log_hook_error(f"{where} end")
        scope.end()
    return result


def scoped_wrappers(
    open_scope: Callable[[Any, tuple, dict], _Scope | None],
    finisher: Callable[[Any], Callable[[Any], None]],
    where: str,
) -> tuple[Callable[..., Any], Callable[..., Awaitable[Any]]]:
    """The ``(sync, async)`` wrapt wrappers ``(wrapped, instance, args, kwargs)`` of one hook point.

    Each opens ``open_scope(instance, args, kwargs)``; on None it calls the original untouched,
    otherwise it runs it in :func:`call_in_scope` / :func:`await_in_scope` with
    ``finisher(scope)`` and ``where``. The returned functions are the wrappers themselves (no
    extra frame); build them once per adapter so a re-wrap finds the very same wrapper.
    """

    def wrapper(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        scope = open_scope(instance, args, kwargs)
        if scope is None:
            return wrapped(*args, **kwargs)
        return call_in_scope(scope, lambda: wrapped(*args, **kwargs), finisher(scope), where)

    async def async_wrapper(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        scope = open_scope(instance, args, kwargs)
        if scope is None:
            return await wrapped(*args, **kwargs)
        return await await_in_scope(scope, lambda: wrapped(*args, **kwargs), finisher(scope), where)

    return wrapper, async_wrapper


def _hook(hook: Callable[[Any], None], value: Any, where: str) -> None:
    """Call a stream's ``on_item``/``on_done`` hook; its errors are logged, never the app's."""
    try:
        hook(value)
    except Exception:
        log_hook_error(where)


async def iterate_in_scope(
    agen: AsyncIterator[Any],
    scope: _Scope,
    on_item: Callable[[Any], None] | None = None,
    on_done: Callable[[BaseException | None], None] | None = None,
) -> AsyncGenerator[Any, None]:
    """Re-yield ``agen``'s items with ``scope`` current while each item is produced.

    The context is attached around each ``__anext__`` only, never across a ``yield``, so a
    consumer that stops early causes no "Failed to detach context" error. ``on_item`` sees each
    item and ``on_done`` the end (None, or the app's exception, which is re-raised unchanged);
    errors inside either are logged and swallowed.
    """
    error: BaseException | None = None
    try:
        while True:
            token = scope.attach()
            try:
                item = await agen.__anext__()
            except StopAsyncIteration:
                break
            finally:
                scope.detach(token)
            if on_item is not None:
                _hook(on_item, item, "stream item")
            yield item
    except GeneratorExit:
        raise
    except BaseException as exc:
        error = exc
        raise
    finally:
        try:
            aclose = getattr(agen, "aclose", None)
            if aclose is not None:
                token = scope.attach()
                try:
                    await aclose()
                finally:
                    scope.detach(token)
        except BaseException as exc:
            error = error or exc
            raise
        finally:
            if on_done is not None:
                _hook(on_done, error, "stream end")


def iterate_sync_in_scope(
    items: Iterator[Any],
    scope: _Scope,
    on_item: Callable[[Any], None] | None = None,
    on_done: Callable[[BaseException | None], None] | None = None,
) -> Generator[Any, None, None]:
    """The synchronous twin of :func:`iterate_in_scope`: re-yield ``items`` (an iterator) with
    ``scope`` current while each item is produced, never across a ``yield``."""
    error: BaseException | None = None
    try:
        while True:
            token = scope.attach()
            try:
                item = next(items)
            except StopIteration:
                break
            finally:
                scope.detach(token)
            if on_item is not None:
                _hook(on_item, item, "stream item")
            yield item
    except GeneratorExit:
        raise
    except BaseException as exc:
        error = exc
        raise
    finally:
        try:
            close = getattr(items, "close", None)
            if close is not None:
                token = scope.attach()
                try:
                    close()
                finally:
                    scope.detach(token)
        except BaseException as exc:
            error = error or exc
            raise
        finally:
            if on_done is not None:
                _hook(on_done, error, "stream end")
