"""Living beside other GenAI instrumentations of the same framework (OpenInference's, OTel's own).

With one of them active, a run would get two spans per agent step and model call, and two token
counts per call. aegis-probe keeps its own spans (its store, replay, blame and injection read
them) and the other side yields inside aegis's runs: the run's context carries OpenTelemetry's
suppression key, which every instrumentation built on ``opentelemetry-instrumentation`` (and
OpenInference's) honours, set to :data:`YIELDED`, which aegis-probe itself does not take for
suppression. Outside aegis's runs the other instrumentation works as before.
"""

from __future__ import annotations

import sys
from typing import NamedTuple


class Other(NamedTuple):
    """An instrumentation whose spans duplicate aegis-probe's for ``frameworks`` (``*``: every one)."""

    module: str
    instrumentor: str
    frameworks: frozenset[str]


#: The GenAI instrumentations aegis-probe knows to duplicate its spans (by module, never imported here).
OTHERS: tuple[Other, ...] = (
    Other("openinference.instrumentation.autogen_agentchat", "AutogenAgentChatInstrumentor", frozenset({"autogen"})),
    Other("openinference.instrumentation.langchain", "LangChainInstrumentor", frozenset({"langgraph"})),
    Other("openinference.instrumentation.openai_agents", "OpenAIAgentsInstrumentor", frozenset({"openai-agents"})),
    Other("openinference.instrumentation.crewai", "CrewAIInstrumentor", frozenset({"crewai"})),
    Other("openinference.instrumentation.openai", "OpenAIInstrumentor", frozenset({"*"})),
    Other("opentelemetry.instrumentation.openai_v2", "OpenAIInstrumentor", frozenset({"*"})),
)


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
    """The active instrumentations that duplicate aegis-probe's spans of ``framework`` (module names)."""
    return [o.module for o in OTHERS if ("*" in o.frameworks or framework in o.frameworks) and active(o)]
