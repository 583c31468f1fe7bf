"""Living beside other GenAI instrumentations of the same framework (OpenInference's, OTel's own).

With one of them active, a run would get two spans per agent step and model call, and two token
counts per call. aegis-probe keeps its own spans (its store, replay, blame and injection read
them) and the other side yields inside aegis's runs:

- those that honour OpenTelemetry's suppression key (OpenInference's): the run's context carries
  the key set to :data:`YIELDED`, which aegis-probe itself does not take for suppression;
- OTel's ``openai-v2``, which does not: inside aegis's ``chat`` span of a model client built on
  the ``openai`` SDK, the current span is a non-sampled copy of aegis's, so its ``chat`` span is
  not recorded (a parent-based sampler, the SDK's default, follows the parent), and aegis leaves
  the call's duration and token metrics to it (it records them whatever the sampling);
- wrappers that ignore the key on the framework's own attributes (OpenLLMetry's CrewAI wrappers,
  its LangChain instrumentor's ``Pregel.stream``/``astream``; ``Other.bypassed``): bypassed. When
  aegis-probe installs a framework's patches while one is active, each such wrapt wrapper is
  replaced by a layer with the same wrapper function over the same original, on only outside
  aegis's runs (one context read per call; a generator wrapper decides when iterated): inside a
  run the call goes to the original, as honouring the key would have made it. Nothing is added
  while none is active. One turned on after aegis's patches sits over them, out of reach: a
  warning at the next run says to instrument aegis-probe last. aegis's uninstrument puts the
  peer's wrapper back, or the original once the peer is off; the peer's ``unwrap`` takes the
  layer off as its own wrapper.

Outside aegis's runs the other instrumentation works as before. A framework's own telemetry
(pydantic-ai's, Agent Framework's, ADK's) is given :data:`SILENT` inside aegis's runs instead.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator, NamedTuple

import wrapt
from opentelemetry.trace import (
    NonRecordingSpan,
    NoOpTracer,
    Span,
    SpanContext,
    TraceFlags,
    get_current_span,
    set_span_in_context,
    use_span,
)

from ..storage.metrics import leave_metrics

if TYPE_CHECKING:
    from .spans import LLMScope


class Other(NamedTuple):
    """An instrumentation whose spans duplicate aegis-probe's for ``frameworks`` (``*``: every one);
    ``suppressible``: it honours OTel's suppression key; ``openai_calls``: it instruments the
    ``openai`` SDK's calls without honouring the key (given a non-sampled parent and the metrics);
    ``bypassed``: its wrappers that ignore the key, bypassed inside aegis's runs (``Class.attribute``
    names on the framework's classes, ``*``: every one of its wrappers there)."""

    module: str
    instrumentor: str
    frameworks: frozenset[str]
    suppressible: bool = True
    openai_calls: bool = False
    bypassed: frozenset[str] = frozenset()


#: The GenAI instrumentations aegis-probe knows to duplicate its spans (by module, never imported here).
OTHERS: tuple[Other, ...] = (
    Other("openinference.instrumentation.autogen_agentchat", "AutogenAgentChatInstrumentor", frozenset({"autogen"})),
    Other("openinference.instrumentation.langchain", "LangChainInstrumentor", frozenset({"langgraph"})),
    Other("openinference.instrumentation.openai_agents", "OpenAIAgentsInstrumentor", frozenset({"openai-agents"})),
    Other("openinference.instrumentation.crewai", "CrewAIInstrumentor", frozenset({"crewai"})),
    Other("openinference.instrumentation.ag2", "AG2Instrumentor", frozenset({"ag2"})),
    Other("openinference.instrumentation.smolagents", "SmolagentsInstrumentor", frozenset({"smolagents"})),
    Other("openinference.instrumentation.google_adk", "GoogleADKInstrumentor", frozenset({"google-adk"})),
    Other("openinference.instrumentation.openai", "OpenAIInstrumentor", frozenset({"*"})),
    Other("opentelemetry.instrumentation.openai_v2", "OpenAIInstrumentor", frozenset({"*"}), suppressible=False,
          openai_calls=True),
    # OpenLLMetry's: LangChain's callback handler honours the key, its LangGraph wrappers do not; the
    # OpenAI Agents SDK one is an SDK trace processor (the SDK's tracing is off inside aegis's runs: it
    # sees nothing); CrewAI's wrappers ignore the key.
    Other("opentelemetry.instrumentation.langchain", "LangchainInstrumentor", frozenset({"langgraph"}),
          bypassed=frozenset({"Pregel.stream", "Pregel.astream"})),
    Other("opentelemetry.instrumentation.openai_agents", "OpenAIAgentsInstrumentor", frozenset({"openai-agents"}),
          suppressible=False),
    Other("opentelemetry.instrumentation.crewai", "CrewAIInstrumentor", frozenset({"crewai"}), suppressible=False,
          bypassed=frozenset({"*"})),
)

#: Those of :data:`OTHERS` that instrument the ``openai`` SDK's calls (checked at every model call).
_OPENAI_SDK_OTHERS = tuple(o for o in OTHERS if o.openai_calls)

class _Yielded:
    """The suppression value aegis-probe sets in its runs: truthy for the others, not for aegis."""

    __slots__ = ()

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        return "aegis_probe.YIELDED"


YIELDED = _Yielded()


def active(other: Other) -> bool:
    """Whether ``other``'s instrumentor is loaded and instrumenting (``BaseInstrumentor``'s singleton)."""
    module = sys.modules.get(other.module)
    cls = getattr(module, other.instrumentor, None) if module is not None else None
    instance = vars(cls).get("_instance") if isinstance(cls, type) else None
    return bool(getattr(instance, "_is_instrumented_by_opentelemetry", False))


def yielding_to(framework: str) -> list[str]:
    """The active instrumentations honouring suppression that duplicate aegis-probe's spans of
    ``framework`` (module names)."""
    return [o.module for o in OTHERS if o.suppressible and ("*" in o.frameworks or framework in o.frameworks)
            and active(o)]


def unyielding(framework: str) -> tuple[Other, ...]:
    """Those of :data:`OTHERS` with wrappers on ``framework``'s attributes that ignore the key."""
    return tuple(o for o in OTHERS if o.bypassed and ("*" in o.frameworks or framework in o.frameworks))


def _owners(package: str) -> Iterator[Any]:
    """The loaded modules of ``package`` and the classes they hold that it defines, each once."""
    seen: set[int] = set()
    prefix = package + "."
    for name, module in list(sys.modules.items()):
        if module is None or not (name == package or name.startswith(prefix)):
            continue
        yield module
        for value in list(vars(module).values()):
            defined_in = getattr(value, "__module__", None) if isinstance(value, type) else None
            if isinstance(defined_in, str) and (defined_in == package or defined_in.startswith(prefix)) \
                    and id(value) not in seen:
                seen.add(id(value))
                yield value


def unyielding_wrappers(others: tuple[Other, ...], package: str) -> list[tuple[Other, Any, str, Any]]:
    """``(other, owner, name, wrapper)``: each wrapt wrapper that an active one of ``others`` put on an
    attribute of ``package``'s loaded modules or classes (found by its wrapper function's module)
    and bypasses; none, and no scan, while none of them is active."""
    on = [o for o in others if active(o)]
    found: list[tuple[Other, Any, str, Any]] = []
    for owner in _owners(package) if on else ():
        prefix = f"{owner.__name__}." if isinstance(owner, type) else ""
        for name, value in list(vars(owner).items()):
            if not isinstance(value, wrapt.FunctionWrapper) or value._self_enabled is not None:
                continue
            module = str(getattr(value._self_wrapper, "__module__", ""))
            for other in on:
                if module.startswith(other.module) and ("*" in other.bypassed or prefix + name in other.bypassed):
                    found.append((other, owner, name, value))
    return found


def _openai_clients() -> tuple[type, ...]:
    openai = sys.modules.get("openai")
    return (openai.OpenAI, openai.AsyncOpenAI) if openai is not None else ()


def through_openai_sdk(instance: Any) -> bool:
    """Whether model client ``instance`` calls through an ``openai`` SDK client (its own attribute,
    or its attribute's ``_client``: AutoGen's, LangChain's, the OpenAI Agents SDK's models)."""
    clients = _openai_clients()
    if not clients or isinstance(instance, clients):
        return bool(clients)
    values = vars(instance).values() if hasattr(instance, "__dict__") else ()
    return any(isinstance(v, clients) or isinstance(getattr(v, "_client", None), clients) for v in values)


def hide_inside(scope: "LLMScope", instance: Any) -> None:
    """Inside ``scope`` (a model call by ``instance``), make an unsuppressible instrumentation of the
    ``openai`` SDK (openai-v2) record no span, and leave the call's metrics to it."""
    if not any(active(o) for o in _OPENAI_SDK_OTHERS) or not through_openai_sdk(instance):
        return
    own = scope.span.get_span_context()
    hidden = NonRecordingSpan(SpanContext(own.trace_id, own.span_id, False, TraceFlags(TraceFlags.DEFAULT)))
    scope.ctx = set_span_in_context(hidden, scope.ctx)
    if scope.span.is_recording():
        leave_metrics(scope.probe.provider, own.span_id)


class SilentTracer(NoOpTracer):
    """A tracer whose spans record nothing and stand for the current span (its children keep their
    parent): what a framework's own telemetry gets inside aegis's runs."""

    def start_span(self, name: str, context: Any = None, *args: Any, **kwargs: Any) -> Span:
        return NonRecordingSpan(get_current_span(context).get_span_context())

    @contextmanager
    def start_as_current_span(  # type: ignore[override]
        self, name: str, context: Any = None, *args: Any, **kwargs: Any
    ) -> Iterator[Span]:
        with use_span(self.start_span(name, context), end_on_exit=False) as span:
            yield span


SILENT = SilentTracer()
