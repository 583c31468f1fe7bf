"""Record, exact replay and counterfactual search for the decisive error of a failed run.

``aegis_probe.replay`` and ``aegis_probe.blame`` are re-exported from here."""

from .blame import Attempt, BlameReport, Fixer, blame
from .fixers import AnalyzerFixer
from .recording import RecordedCall, RecordingError, load_recording
from .replayer import Endpoint, ReplayDivergence, ReplayResult, first_difference, replay

__all__ = [
    "AnalyzerFixer",
    "Attempt",
    "BlameReport",
    "Endpoint",
    "Fixer",
    "RecordedCall",
    "RecordingError",
    "ReplayDivergence",
    "ReplayResult",
    "blame",
    "first_difference",
    "load_recording",
    "replay",
]
