"""aegis-probe: make LLM multi-agent systems debuggable and trainable.

``aegis_probe.instrument(app)`` traces an unmodified AutoGen, CAMEL or MetaGPT app: one
OpenTelemetry span per agent step (GenAI semantic conventions), LLM-call and tool-call spans
beneath, written to an embedded trace store and, when configured, exported over OTLP.
``aegis_probe.load_trajectories()`` reads the runs back as :class:`Trajectory` objects.

Only what ``instrument()`` needs is imported with the package; every other name below (replay,
blame, injection, the OpenTelemetry instrumentor, the trajectory model) loads on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .capture.probe import Probe, instrument, uninstrument

__version__ = "0.1.0"

#: public name -> the module (relative to this package) that defines it, imported on first use
_LAZY: dict[str, str] = {
    "AegisProbeError": ".errors",
    "Adapter": ".capture.adapter",
    "AppInfo": ".capture.adapter",
    "Patcher": ".capture.adapter",
    "AppSpec": ".apps",
    "AegisInstrumentor": ".capture.instrumentor",
    "TraceFileError": ".storage.store",
    "TraceStore": ".storage.store",
    "BlameReport": ".counterfactual.search",
    "ReplayResult": ".counterfactual.replayer",
    "blame": ".counterfactual.blame",
    "replay": ".counterfactual.replayer",
    "Fault": ".trajectory",
    "Labels": ".trajectory",
    "LLMCall": ".trajectory",
    "Message": ".trajectory",
    "Outcome": ".trajectory",
    "Step": ".trajectory",
    "ToolCall": ".trajectory",
    "Trajectory": ".trajectory",
    "Usage": ".trajectory",
    "load_trajectories": ".trajectory",
    "using_attributes": ".capture.session",
}

__all__ = [
    "Adapter",
    "AegisInstrumentor",
    "AegisProbeError",
    "AppInfo",
    "AppSpec",
    "BlameReport",
    "Fault",
    "LLMCall",
    "Labels",
    "Message",
    "Outcome",
    "Patcher",
    "Probe",
    "ReplayResult",
    "Step",
    "ToolCall",
    "TraceFileError",
    "TraceStore",
    "Trajectory",
    "Usage",
    "blame",
    "instrument",
    "load_trajectories",
    "replay",
    "uninstrument",
    "using_attributes",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'aegis_probe' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


if TYPE_CHECKING:
    from .capture.adapter import Adapter, AppInfo, Patcher
    from .apps import AppSpec
    from .counterfactual.blame import blame
    from .counterfactual.search import BlameReport
    from .counterfactual.replayer import ReplayResult, replay
    from .errors import AegisProbeError
    from .capture.instrumentor import AegisInstrumentor
    from .storage.store import TraceFileError, TraceStore
    from .trajectory import Fault, Labels, LLMCall, Message, Outcome, Step, ToolCall, Trajectory, Usage, load_trajectories
    from .capture.session import using_attributes
