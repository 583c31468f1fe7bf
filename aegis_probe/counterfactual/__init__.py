"""Record, exact replay and counterfactual search for the decisive error of a failed run.

``aegis_probe.replay`` and ``aegis_probe.blame`` are re-exported from here."""

from .blame import blame
from .search import Attempt, BlameReport, Fixer
from .fixers import AnalyzerFixer
from .step_injection import StepInjection, inject_step
from .recording import RecordedCall, RecordingError, load_recording
from .replayer import RecordedFailure, ReplayDivergence, ReplayResult, first_difference, replay

__all__ = [
    "AnalyzerFixer",
    "Attempt",
    "BlameReport",
    "Fixer",
    "RecordedCall",
    "RecordedFailure",
    "RecordingError",
    "ReplayDivergence",
    "ReplayResult",
    "StepInjection",
    "blame",
    "first_difference",
    "inject_step",
    "load_recording",
    "replay",
]
