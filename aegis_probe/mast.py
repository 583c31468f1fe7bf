"""The 14 MAST failure modes (Cemri et al.), keyed by id: the label vocabulary of every source."""

#: Mode id -> name as in the MAST taxonomy. Key on the id: names drift between sources.
MODES: dict[str, str] = {
    "FM-1.1": "disobey task specification",
    "FM-1.2": "disobey role specification",
    "FM-1.3": "step repetition",
    "FM-1.4": "loss of conversation history",
    "FM-1.5": "unaware of termination conditions",
    "FM-2.1": "conversation reset",
    "FM-2.2": "fail to ask for clarification",
    "FM-2.3": "task derailment",
    "FM-2.4": "information withholding",
    "FM-2.5": "ignored other agent's input",
    "FM-2.6": "reasoning-action mismatch",
    "FM-3.1": "premature termination",
    "FM-3.2": "no or incomplete verification",
    "FM-3.3": "incorrect verification",
}
