"""The adapter contract: how a framework plugs into the probe.

An adapter is the only code that knows a framework's internals. It says whether an object is an
app of its framework, registers the app's parts with a probe, and installs class-level patches
once. The core owns everything else: span content, the trace store, run bookkeeping.

Adding a framework: write ``adapters/<name>.py`` with an :class:`Adapter` subclass and add one
line to :data:`ADAPTERS` (see docs/adapters.md).
"""

from __future__ import annotations

import importlib
import logging
import sys
import weakref
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar

import wrapt

if TYPE_CHECKING:
    from .probe import Probe

logger = logging.getLogger("aegis_probe")

@dataclass(frozen=True)
class AdapterEntry:
    """Where a framework's adapter lives, and what it instruments."""

    marker: str  #: top-level module whose presence in ``sys.modules`` means the app may use it
    target: str  #: "module:Class" of the adapter, imported only once ``marker`` is loaded
    supports: str  #: the app types it accepts, for error messages


#: Adapter registry: framework name -> entry.
ADAPTERS: dict[str, AdapterEntry] = {
    "autogen": AdapterEntry("autogen_agentchat", "aegis_probe.adapters.autogen:AutogenAdapter",
                            "AutoGen BaseGroupChat teams (RoundRobinGroupChat, SelectorGroupChat, Swarm, ...) and BaseChatAgent"),
    "camel": AdapterEntry("camel", "aegis_probe.adapters.camel:CamelAdapter", "CAMEL RolePlaying, Workforce and ChatAgent"),
    "metagpt": AdapterEntry("metagpt", "aegis_probe.adapters.metagpt:MetaGPTAdapter", "MetaGPT Team and Role"),
}

_MISSING = object()


@dataclass(frozen=True)
class AppInfo:
    """What an adapter learned about an app when registering it."""

    name: str
    lone_agent: bool
    agents: tuple[str, ...]


class Patcher:
    """Installs wrapt wrappers on class or module attributes and restores the originals exactly.

    The raw ``__dict__`` entry is saved (so classmethods and staticmethods come back as the same
    descriptor objects), and an attribute that was inherited is deleted again on restore.
    """

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] = []

    def wrap(
        self, owner: Any, name: str, wrapper: Callable[..., Any], enabled: Callable[[], Any] | None = None
    ) -> None:
        """Wrap ``owner.name`` with ``wrapper(wrapped, instance, args, kwargs)``.

        With ``enabled``, each call goes straight to the original (adding no Python frame) while
        ``enabled()`` is falsy.
        """
        saved = vars(owner).get(name, _MISSING)
        if saved is _MISSING and not hasattr(owner, name):
            raise AttributeError(f"{owner!r} has no attribute {name!r}")
        wrapt.wrap_object(owner, name, wrapt.FunctionWrapper, (wrapper, enabled))
        self._saved.append((owner, name, saved))

    def restore(self) -> None:
        """Put every saved original back, last patched first."""
        while self._saved:
            owner, name, saved = self._saved.pop()
            try:
                if saved is _MISSING:
                    delattr(owner, name)
                else:
                    setattr(owner, name, saved)
            except Exception:
                logger.warning("aegis-probe: could not restore %r.%s", owner, name, exc_info=True)

    def __len__(self) -> int:
        return len(self._saved)


class Registry:
    """Weak map of the objects an ``instrument(app)`` call found, to the probe that owns them."""

    def __init__(self) -> None:
        self._probes: "weakref.WeakKeyDictionary[Any, Probe]" = weakref.WeakKeyDictionary()
        self._by_id: dict[int, "Probe"] = {}

    def add(self, obj: Any, probe: "Probe") -> None:
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
        for obj, owner in list(self._probes.items()):
            if owner is probe:
                del self._probes[obj]
        for key, owner in list(self._by_id.items()):
            if owner is probe:
                del self._by_id[key]

    def __bool__(self) -> bool:
        return bool(len(self._probes) or self._by_id)


class Adapter(ABC):
    """Base class of framework adapters (one instance per framework per process)."""

    #: Framework name, the key in :data:`ADAPTERS` and the value of ``aegis.framework``.
    name: ClassVar[str]
    #: Requirement strings of the framework versions the adapter was written for.
    instrumentation_dependencies: ClassVar[tuple[str, ...]]

    def __init__(self) -> None:
        self.registry = Registry()
        self._patcher = Patcher()

    @abstractmethod
    def detect(self, app: Any) -> bool:
        """Whether ``app`` is an app of this framework."""

    @abstractmethod
    def register(self, app: Any, probe: "Probe") -> AppInfo:
        """Add ``app`` and the parts it owns (agents, model clients) to :attr:`registry`."""

    @abstractmethod
    def _instrument(self, patcher: Patcher) -> None:
        """Install this framework's class-level patches through ``patcher``."""

    @property
    def installed(self) -> bool:
        return len(self._patcher) > 0

    def install(self) -> None:
        """Install patches once; a second call does nothing."""
        if self.installed:
            return
        try:
            self._instrument(self._patcher)
        except Exception:
            self._patcher.restore()
            raise

    def uninstall(self) -> None:
        """Restore every original this adapter patched."""
        self._patcher.restore()

    def release(self, probe: "Probe") -> None:
        """Forget ``probe``'s objects; remove the patches when no probe is left."""
        self.registry.discard_probe(probe)
        if not self.registry:
            self.uninstall()


_instances: dict[str, Adapter] = {}


def get_adapter(name: str) -> Adapter:
    """The process-wide adapter instance for framework ``name``."""
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
