"""``AegisInstrumentor``: aegis-probe as an OpenTelemetry instrumentor (zero-code, trace every app).

``opentelemetry-instrument python app.py`` loads it through the ``opentelemetry_instrumentor``
entry point ``aegis_probe``; ``AegisInstrumentor().instrument(tracer_provider=...)`` does the same
in code. While it is on, every run of any supported team, society, company or agent opens a
trace, with the same spans ``aegis_probe.instrument(app)`` gives one app. A framework's adapter is
installed when the app imports the framework (an import hook), so nothing is imported early.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from typing import Any, ClassVar, Collection

import wrapt
from opentelemetry.instrumentation.dependencies import DependencyConflict, get_dependency_conflicts
# (the module is marked "type: ignore" as a whole, so mypy sees none of its names)
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from .adapter import ADAPTERS, AUTO_PROBES, get_adapter
from ..config import ENV_TRACE_DIR
from .probe import GLOBAL_UNINSTALLERS, Probe, ProbeSetup

logger = logging.getLogger("aegis_probe")

#: The entry point's name: ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=aegis_probe`` turns it off.
ENTRY_POINT = "aegis_probe"
#: OTel's variable listing the entry points ``opentelemetry-instrument`` leaves out.
ENV_DISABLED = "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"


def entry_point(framework: str) -> str:
    """The entry point of one framework (``aegis_probe_openai_agents``): disabling it turns that framework off."""
    return f"{ENTRY_POINT}_{framework.replace('-', '_')}"


def disabled_frameworks() -> frozenset[str]:
    """The frameworks whose entry point ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS`` lists (``*`` or
    ``aegis_probe``: every one)."""
    names = {part.strip() for part in os.environ.get(ENV_DISABLED, "").split(",")}
    if names & {"*", ENTRY_POINT}:
        return frozenset(ADAPTERS)
    return frozenset(name for name in ADAPTERS if entry_point(name) in names)


def supported_frameworks() -> list[str]:
    """Frameworks installed at a version aegis-probe supports; a warning names each one that is not."""
    usable = []
    for name, entry in ADAPTERS.items():
        conflict = get_dependency_conflicts([entry.requires])
        if conflict is None:
            usable.append(name)
        elif conflict.found:
            logger.warning("aegis-probe: %s is installed but aegis-probe supports %s; its apps are not traced",
                           conflict.found, entry.requires)
        else:
            logger.debug("aegis-probe: %s is not installed", entry.requires)
    return usable


class AegisInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Trace every run of every supported multi-agent app (AutoGen, CAMEL, MetaGPT).

    ``instrument()`` takes ``tracer_provider``, ``meter_provider`` and the other keyword arguments
    of :func:`aegis_probe.instrument` (``capture_content``, ``store``, ``exporter``, ``redact``,
    ``service_name``, ``keep_successes``); the provider precedence is the same (argument, then the global provider,
    then aegis-probe's own with the trace store). Apps given to ``aegis_probe.instrument(app)``
    keep their own probe. ``uninstrument()`` restores every patched original.
    """

    _lock = threading.Lock()
    #: The frameworks this instrumentor traces (None: every supported one); the subclasses below
    #: are one framework's each, under entry points of their own.
    frameworks: ClassVar[tuple[str, ...] | None] = None

    def instrumentation_dependencies(self) -> Collection[str]:
        """Requirement strings of the supported framework versions (any one of them suffices)."""
        return tuple(ADAPTERS[name].requires for name in self._frameworks())

    def _frameworks(self) -> tuple[str, ...]:
        """The frameworks of this instrumentor, less those ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS`` turns off."""
        off = disabled_frameworks()  # as opentelemetry-instrument leaves out the entry points it lists
        return tuple(name for name in (self.frameworks or ADAPTERS) if name not in off)

    def _check_dependency_conflicts(self) -> DependencyConflict | None:
        """None: each framework is checked on its own in ``_instrument``, with a warning when its
        version is unsupported (the base class would refuse everything unless all were installed)."""
        return None

    def _instrument(self, **kwargs: Any) -> None:
        mine = self._frameworks()
        frameworks = [name for name in supported_frameworks() if name in mine]
        if not frameworks and mine:  # a framework's own entry point, loaded where it is not installed: quietly
            logger.log(logging.WARNING if self.frameworks is None else logging.DEBUG,
                       "aegis-probe: none of %s is installed; nothing is traced",
                       ", ".join(ADAPTERS[name].requires for name in mine))
        with self._lock:
            self._generation = getattr(self, "_generation", 0) + 1
            self._setup_args = {k: v for k, v in kwargs.items() if k in _SETUP_ARGS}
            if "store" not in kwargs and os.environ.get(ENV_TRACE_DIR, "").strip():
                # Zero-code has no arguments: a store directory set in the environment asks for the store.
                self._setup_args["store"] = os.environ[ENV_TRACE_DIR]
            self._setup: ProbeSetup | None = None
            generation = self._generation
        for name in frameworks:
            wrapt.register_post_import_hook(_Enable(self, name, generation), ADAPTERS[name].marker)

    def _enable(self, name: str, generation: int) -> None:
        """Install framework ``name``'s adapter in trace-every-app mode (its module was just imported).

        The provider is chosen at the first such import, so a global provider set after
        ``instrument()`` but before the app imports its framework is the one used.
        """
        with self._lock:
            if generation != getattr(self, "_generation", None) or name in AUTO_PROBES:
                return  # uninstrumented (or re-instrumented) before the app imported the framework, or
                # another aegis instrumentor (the all-frameworks one, a framework's own) traces it already
            try:
                if self._setup is None:
                    self._setup = ProbeSetup.resolve(**self._setup_args)
                adapter = get_adapter(name)
                AUTO_PROBES[name] = self._setup.probe(adapter)
                self._owned = {*getattr(self, "_owned", ()), name}  # what _uninstrument takes back
                adapter.install()
            except Exception:
                AUTO_PROBES.pop(name, None)
                logger.warning("aegis-probe: could not instrument %s; its apps are not traced", name, exc_info=True)

    def _uninstrument(self, **kwargs: Any) -> None:
        with self._lock:
            self._generation = getattr(self, "_generation", 0) + 1
            owned: set[str] = getattr(self, "_owned", set())
            self._owned = set()
            probes: list[Probe] = [AUTO_PROBES.pop(name) for name in owned if name in AUTO_PROBES]
        for probe in probes:
            probe.flush()
            probe.uninstrument()  # removes the adapter's patches unless an instrument(app) probe still needs them

    def probe(self, framework: str) -> "Probe | None":
        """The trace-every-app probe of ``framework`` (e.g. ``"autogen"``), once its apps are traced."""
        return AUTO_PROBES.get(framework)


def class_name(framework: str) -> str:
    """The name of ``framework``'s instrumentor class (``openai-agents``: ``OpenaiAgentsInstrumentor``)."""
    return "".join(part.capitalize() for part in re.split(r"[-_]", framework)) + "Instrumentor"


def _framework_instrumentor(framework: str) -> type[AegisInstrumentor]:
    """aegis-probe for ``framework`` only, under its entry point (:func:`entry_point`)."""
    return type(class_name(framework), (AegisInstrumentor,), {
        "__doc__": f"aegis-probe for {ADAPTERS[framework].supports} only (entry point ``{entry_point(framework)}``).",
        "__module__": __name__,
        "_instance": None,  # BaseInstrumentor's singleton: one per class, not the base class's
        "frameworks": (framework,),
    })


#: Each framework's instrumentor, by framework name; each is also a name of this module, which
#: pyproject's ``opentelemetry_instrumentor`` entry points name (tests/test_coexist.py checks both agree).
FRAMEWORK_INSTRUMENTORS: dict[str, type[AegisInstrumentor]] = {name: _framework_instrumentor(name) for name in ADAPTERS}
globals().update({cls.__name__: cls for cls in FRAMEWORK_INSTRUMENTORS.values()})


def _uninstrument_all() -> None:
    """Uninstrument every aegis instrumentor that is instrumented (for ``aegis_probe.uninstrument()``)."""
    instrumentors: list[type[AegisInstrumentor]] = [AegisInstrumentor, *FRAMEWORK_INSTRUMENTORS.values()]
    for cls in instrumentors:
        if cls().is_instrumented_by_opentelemetry:
            cls().uninstrument()


GLOBAL_UNINSTALLERS.append(_uninstrument_all)


_SETUP_ARGS = frozenset({"tracer_provider", "meter_provider", "capture_content", "store", "exporter", "redact",
                         "service_name", "keep_successes", "logger_provider", "root_messages"})


class _Enable:
    """The post-import hook of one framework; never raises into the app's ``import``."""

    def __init__(self, instrumentor: AegisInstrumentor, name: str, generation: int) -> None:
        self.instrumentor, self.name, self.generation = instrumentor, name, generation

    def __call__(self, module: Any) -> None:
        try:
            self.instrumentor._enable(self.name, self.generation)
        except Exception:
            logger.warning("aegis-probe: could not instrument %s", self.name, exc_info=True)
