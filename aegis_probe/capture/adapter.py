"""The adapter contract: how a framework plugs into the probe.

An adapter is the only code that knows a framework's internals. It says whether an object is an
app of its framework, registers the app's parts with a probe, and installs class-level patches
once. The core owns everything else: span content, the trace store, run bookkeeping.

Adding a framework: write ``adapters/<name>.py`` with an :class:`Adapter` subclass and add one
line to :data:`ADAPTERS` (see docs/adapters.md).
"""

from __future__ import annotations

import importlib
import inspect
import logging
import sys
import threading
import weakref
from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterator

import wrapt

from .coexist import Other, active, unyielding, unyielding_wrappers
from .spans import _RUN_KEY, current_context, instrumentation_suppressed, log_hook_error

if TYPE_CHECKING:
    from .probe import Probe

logger = logging.getLogger("aegis_probe")


def subclasses(base: type) -> Iterator[type]:
    """``base`` and its subclasses, all levels down, each once (classes an adapter patches)."""
    seen, stack = set(), [base]
    while stack:
        cls = stack.pop()
        if cls in seen:
            continue
        seen.add(cls)
        yield cls
        stack.extend(cls.__subclasses__())


def call_arg(args: tuple, kwargs: dict, name: str, position: int) -> Any:
    """A wrapped call's argument ``name`` (at ``position`` when passed positionally); None if absent."""
    return kwargs[name] if name in kwargs else args[position] if len(args) > position else None

@dataclass(frozen=True)
class AdapterEntry:
    """Where a framework's adapter lives, and what it instruments."""

    marker: str  #: top-level module whose presence in ``sys.modules`` means the app may use it
    target: str  #: "module:Class" of the adapter, imported only once ``marker`` is loaded
    supports: str  #: the app types it accepts, for error messages
    requires: str  #: requirement string of the framework versions the adapter was written for


#: Adapter registry: framework name -> entry.
ADAPTERS: dict[str, AdapterEntry] = {
    "autogen": AdapterEntry("autogen_agentchat", "aegis_probe.adapters.autogen:AutogenAdapter",
                            "AutoGen BaseGroupChat teams (RoundRobinGroupChat, SelectorGroupChat, Swarm, ...) and BaseChatAgent",
                            "autogen-agentchat >= 0.7.5, < 0.8"),
    "camel": AdapterEntry("camel", "aegis_probe.adapters.camel:CamelAdapter", "CAMEL RolePlaying, Workforce and ChatAgent",
                          "camel-ai >= 0.2.90, < 0.3"),
    "metagpt": AdapterEntry("metagpt", "aegis_probe.adapters.metagpt:MetaGPTAdapter", "MetaGPT Team and Role",
                            "metagpt == 0.8.2"),
    # langgraph is a namespace package (no import hook fires for it): its pregel package is the marker.
    "langgraph": AdapterEntry("langgraph.pregel", "aegis_probe.adapters.langgraph:LangGraphAdapter",
                              "LangGraph compiled graphs (StateGraph.compile(), create_react_agent, any Pregel)",
                              "langgraph >= 1.2, < 2"),
    "openai-agents": AdapterEntry("agents", "aegis_probe.adapters.openai_agents:OpenAIAgentsAdapter",
                                  "OpenAI Agents SDK Agent (the starting agent of Runner.run)",
                                  "openai-agents >= 0.24, < 0.25"),
    "ag2": AdapterEntry("autogen", "aegis_probe.adapters.ag2:AG2Adapter",
                        "AG2 (classic autogen) ConversableAgent and GroupChatManager",
                        "ag2 >= 0.14, < 1"),
    "crewai": AdapterEntry("crewai", "aegis_probe.adapters.crewai:CrewAIAdapter",
                           "CrewAI Crew (sequential and hierarchical processes)", "crewai >= 1.15, < 2"),
    "pydantic-ai": AdapterEntry("pydantic_ai", "aegis_probe.adapters.pydantic_ai:PydanticAIAdapter",
                                "Pydantic AI Agent (and a WrapperAgent around one)", "pydantic-ai-slim >= 2.68, < 3"),
    "agent-framework": AdapterEntry("agent_framework", "aegis_probe.adapters.agent_framework:AgentFrameworkAdapter",
                                    "Microsoft Agent Framework Workflow (sequential, concurrent, group-chat, handoff, "
                                    "Magentic) and agents (BaseAgent)", "agent-framework-core >= 1.23, < 2"),
    "google-adk": AdapterEntry("google.adk", "aegis_probe.adapters.google_adk:GoogleADKAdapter",
                               "Google ADK agents (LlmAgent, SequentialAgent, ParallelAgent, LoopAgent; a Runner or App "
                               "around one)", "google-adk >= 2.13, < 3"),
    "smolagents": AdapterEntry("smolagents", "aegis_probe.adapters.smolagents:SmolagentsAdapter",
                               "smolagents MultiStepAgent (ToolCallingAgent, CodeAgent; managed agents included)",
                               "smolagents >= 1.26, < 2"),
}
#: "Trace every app" mode (:class:`~aegis_probe.AegisInstrumentor`): framework name -> the probe
#: that runs of apps no ``instrument(app)`` registered open under. Empty while the mode is off.
AUTO_PROBES: dict[str, "Probe"] = {}

_MISSING = object()


@dataclass(frozen=True)
class AppInfo:
    """What an adapter learned about an app when registering it."""

    name: str
    lone_agent: bool
    agents: tuple[str, ...]


@dataclass
class _Patch:
    """One patched attribute: the raw ``__dict__`` entry it replaced, and how often it was asked for;
    for a bypassed peer's wrapper (``saved``), the ``layer`` put in its place and whether the peer
    is ``still_on``."""

    owner: Any
    name: str
    saved: Any
    refs: int = 1
    layer: Any = None
    still_on: Callable[[], bool] | None = None


def outside_runs() -> bool:
    """The gate of a bypassed peer's wrapper: on only outside aegis-probe's runs (one context read)."""
    return current_context().get(_RUN_KEY) is None


def _gated_when_iterated(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function``, a peer's wrapper that is a (sync or async) generator function, gated when the
    iteration starts, where it starts its span (a run's context may be entered only then)."""
    if inspect.isasyncgenfunction(function):
        async def agen(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
            items = function(wrapped, instance, args, kwargs) if outside_runs() else wrapped(*args, **kwargs)
            async for item in items:
                yield item

        return agen

    def gen(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        return (yield from function(wrapped, instance, args, kwargs) if outside_runs() else wrapped(*args, **kwargs))

    return gen


class Patcher:
    """Installs wrapt wrappers on class or module attributes and restores the originals exactly.

    The raw ``__dict__`` entry is saved (so classmethods and staticmethods come back as the same
    descriptor objects), and an attribute that was inherited is deleted again on restore.
    Thread-safe: each attribute is wrapped at most once, however many times (and from however
    many threads) it is asked for; further requests only count a reference.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._patches: dict[tuple[int, str, bool], _Patch] = {}  # in patching order; True: a bypass

    def wrap(
        self, owner: Any, name: str, wrapper: Callable[..., Any], enabled: Callable[[], Any] | None = None
    ) -> bool:
        """Wrap ``owner.name`` with ``wrapper(wrapped, instance, args, kwargs)``; False if already wrapped.

        With ``enabled``, each call goes straight to the original (adding no Python frame) while
        ``enabled()`` is falsy.
        """
        with self._lock:
            patch = self._patches.get((id(owner), name, False))
            if patch is not None and patch.owner is owner:
                patch.refs += 1
                return False
            saved = vars(owner).get(name, _MISSING)
            if saved is _MISSING and not hasattr(owner, name):
                raise AttributeError(f"{owner!r} has no attribute {name!r}")
            if isinstance(saved, wrapt.FunctionWrapper) and saved._self_wrapper == wrapper:
                return False  # this very wrapper is already there (put by an earlier patcher)
            wrapt.wrap_object(owner, name, wrapt.FunctionWrapper, (wrapper, enabled))
            self._patches[(id(owner), name, False)] = _Patch(owner, name, saved)
            return True

    def bypass(self, owner: Any, name: str, peer: Any, still_on: Callable[[], bool]) -> None:
        """Make ``peer`` (another instrumentation's wrapt wrapper, the raw entry of ``owner.name``)
        yield inside aegis-probe's runs: in its place, its own wrapper function over the same
        original, gated by :func:`outside_runs` (inside a run each call goes to ``peer.__wrapped__``;
        a generator wrapper's at the start of the iteration).

        Restored only while that layer is still there (the peer's ``unwrap`` takes it off like its
        own wrapper): to ``peer`` while ``still_on()``, else to the original, never putting back a
        wrapper whose instrumentation was turned off.
        """
        with self._lock:
            if (id(owner), name, True) in self._patches:
                return
            function = peer._self_wrapper
            if inspect.isgeneratorfunction(function) or inspect.isasyncgenfunction(function):
                layer = wrapt.FunctionWrapper(peer.__wrapped__, _gated_when_iterated(function))
            else:
                layer = wrapt.FunctionWrapper(peer.__wrapped__, function, outside_runs)
            setattr(owner, name, layer)
            self._patches[(id(owner), name, True)] = _Patch(owner, name, peer, layer=layer, still_on=still_on)

    def restore(self) -> None:
        """Put every saved original back, last patched first."""
        with self._lock:
            while self._patches:
                _, patch = self._patches.popitem()
                try:
                    if patch.still_on is not None:
                        if vars(patch.owner).get(patch.name) is patch.layer:
                            setattr(patch.owner, patch.name, patch.saved if patch.still_on() else patch.layer.__wrapped__)
                    elif patch.saved is _MISSING:
                        delattr(patch.owner, patch.name)
                    else:
                        setattr(patch.owner, patch.name, patch.saved)
                except Exception:
                    logger.warning("aegis-probe: could not restore %r.%s", patch.owner, patch.name, exc_info=True)

    def patched(self) -> list[tuple[Any, str, Any]]:
        """``(owner, name, saved __dict__ entry)`` of each attribute wrapped now (``_MISSING``: was inherited)."""
        with self._lock:
            return [(p.owner, p.name, p.saved) for p in self._patches.values()]

    def __len__(self) -> int:
        return len(self._patches)


class Registry:
    """Weak map of the objects an ``instrument(app)`` call found, to the probe that owns them.

    Lookups take no lock (one dict read, atomic); adding and discarding, which iterate, do.
    """

    def __init__(self) -> None:
        self._probes: "weakref.WeakKeyDictionary[Any, Probe]" = weakref.WeakKeyDictionary()
        self._by_id: dict[int, "Probe"] = {}
        self._lock = threading.Lock()

    def add(self, obj: Any, probe: "Probe") -> None:
        with self._lock:
            try:
                self._probes[obj] = probe
            except TypeError:  # not weak-referenceable (e.g. __slots__ without __weakref__)
                self._by_id[id(obj)] = probe

    def get(self, obj: Any) -> "Probe | None":
        try:
            probe = self._probes.get(obj)
        except TypeError:
            probe = None
        return probe if probe is not None else self._by_id.get(id(obj))

    def discard_probe(self, probe: "Probe") -> None:
        with self._lock:
            for obj, owner in list(self._probes.items()):
                if owner is probe:
                    del self._probes[obj]
            for key, owner in list(self._by_id.items()):
                if owner is probe:
                    del self._by_id[key]

    def __bool__(self) -> bool:
        with self._lock:
            return bool(len(self._probes) or self._by_id)


class Adapter(ABC):
    """Base class of framework adapters (one instance per framework per process)."""

    #: Framework name, the key in :data:`ADAPTERS` and the value of ``aegis.framework``.
    name: ClassVar[str]

    def __init__(self) -> None:
        self.registry = Registry()
        self._patcher = Patcher()
        #: Held while patches are installed, synced or removed, and while a release decides to remove them.
        self._lock = threading.RLock()
        #: The instrumentations of this framework that ignore the suppression key (coexist), and
        #: those of them bypassed at install or warned about since.
        self._unyielding = unyielding(self.name)
        self._peers_seen: set[Other] = set()

    @abstractmethod
    def detect(self, app: Any) -> bool:
        """Whether ``app`` is an app of this framework."""

    @abstractmethod
    def register(self, app: Any, probe: "Probe") -> AppInfo:
        """Add ``app`` and the parts it owns (agents, model clients) to :attr:`registry`."""

    @abstractmethod
    def _instrument(self, patcher: Patcher) -> None:
        """Install this framework's class-level patches through ``patcher``."""

    def sync_patches(self, **options: Any) -> None:
        """Patch what appeared since :meth:`install` (e.g. classes defined later); called via :meth:`sync`."""

    @property
    def installed(self) -> bool:
        return len(self._patcher) > 0

    def install(self) -> None:
        """Install patches once; a second call does nothing."""
        with self._lock:
            if self.installed:
                return
            try:
                self._bypass_peers()
                self._instrument(self._patcher)
            except Exception:
                self._patcher.restore()
                raise

    def _bypass_peers(self) -> None:
        """Bypass inside aegis's runs the active peers' wrappers on this framework's attributes
        (under aegis's own patches, which are installed next)."""
        if not self._unyielding:
            return
        package = ADAPTERS[self.name].marker.split(".")[0]
        for other, owner, name, wrapper in unyielding_wrappers(self._unyielding, package):
            try:
                self._patcher.bypass(owner, name, wrapper, partial(active, other))
                self._peers_seen.add(other)
            except Exception:
                logger.warning("aegis-probe: could not bypass %s's wrapper of %r.%s", other.module, owner, name,
                               exc_info=True)

    def _note_late_peers(self) -> None:
        """Warn once per peer that ignores the suppression key and was turned on after aegis's patches
        (its wrappers sit over aegis's, out of reach: its spans stay in aegis's runs)."""
        for other in self._unyielding:
            if other not in self._peers_seen and active(other):
                self._peers_seen.add(other)
                logger.warning("aegis-probe: %s was instrumented after aegis-probe's %s patches: its spans and "
                               "metrics stay inside aegis-probe's runs; instrument aegis-probe last (docs/otel.md)",
                               other.module, self.name)

    def sync(self, **options: Any) -> None:
        """:meth:`sync_patches` under the lock, and only while installed (never after the last release)."""
        with self._lock:
            if self.installed:
                self.sync_patches(**options)

    def uninstall(self) -> None:
        """Restore every original this adapter patched."""
        with self._lock:
            self._patcher.restore()
            self._peers_seen.clear()

    def run_probe(self, app: Any) -> "Probe | None":
        """The probe a run of ``app`` opens under: the one ``instrument(app)`` registered, else the
        trace-every-app one while that mode is on; None while OTel instrumentation is suppressed."""
        if instrumentation_suppressed():
            return None
        if self._unyielding:
            self._note_late_peers()
        probe = self.registry.get(app)
        return probe if probe is not None and probe.active else AUTO_PROBES.get(self.name)

    def register_copy(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """A wrapper for an app's ``copy``-like method: a registered app's copy is registered to the
        same probe (frameworks run copies: ``Crew.kickoff_for_each``, ``Pregel.with_config``)."""
        copied = wrapped(*args, **kwargs)
        probe = self.registry.get(instance)
        if probe is not None:
            try:
                self.registry.add(copied, probe)
            except Exception:
                log_hook_error(f"{self.name} copy")
        return copied

    def release(self, probe: "Probe") -> None:
        """Forget ``probe``'s objects; remove the patches when no probe (nor trace-every-app mode) is left."""
        with self._lock:
            self.registry.discard_probe(probe)
            if not self.registry and self.name not in AUTO_PROBES:
                self.uninstall()


_instances: dict[str, Adapter] = {}


_instances_lock = threading.Lock()


def get_adapter(name: str) -> Adapter:
    """The process-wide adapter instance for framework ``name``."""
    with _instances_lock:
        if name not in _instances:
            module_name, _, cls_name = ADAPTERS[name].target.partition(":")
            _instances[name] = getattr(importlib.import_module(module_name), cls_name)()
        return _instances[name]


def loaded_adapters() -> list[Adapter]:
    """Adapters already instantiated in this process."""
    return list(_instances.values())


def _importable_adapter(name: str) -> Adapter | None:
    """``get_adapter(name)``, or None when the framework is missing or fails at import.

    A failed import can leave the framework's top-level package in ``sys.modules`` (metagpt
    without its config does), so this guards detection as well as the error message.
    """
    try:
        return get_adapter(name)
    except Exception:
        logger.debug("aegis-probe: adapter %s not importable", name, exc_info=True)
        return None


def adapter_for(app: Any) -> Adapter:
    """The adapter whose framework ``app`` belongs to; ``TypeError`` naming the supported types."""
    for name, entry in ADAPTERS.items():
        if entry.marker not in sys.modules:
            continue
        adapter = _importable_adapter(name)
        if adapter is not None and adapter.detect(app):
            return adapter
    supported = "; ".join(entry.supports for entry in ADAPTERS.values())
    raise TypeError(
        f"aegis_probe.instrument() does not know how to instrument {type(app).__module__}."
        f"{type(app).__qualname__}; supported app types are: {supported}"
    )
