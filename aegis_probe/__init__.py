"""aegis-probe: make LLM multi-agent systems debuggable and trainable.

``aegis_probe.instrument(app)`` traces an unmodified AutoGen, CAMEL or MetaGPT app: one
OpenTelemetry span per agent step (GenAI semantic conventions), LLM-call and tool-call spans
beneath, written to an embedded trace store and, when configured, exported over OTLP.
``aegis_probe.load_trajectories()`` reads the runs back as :class:`Trajectory` objects.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .adapter import Adapter, AppInfo, Patcher
from .apps import AppSpec
from .probe import Probe, instrument, uninstrument
from .store import TraceFileError, TraceStore
from .counterfactual import BlameReport, ReplayResult, blame, replay
from .trajectory import Fault, Labels, LLMCall, Message, Outcome, Step, ToolCall, Trajectory, Usage, load_trajectories

__all__ = [
    "Adapter",
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
]
