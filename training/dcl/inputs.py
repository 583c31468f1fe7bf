"""What a DCL head reads of each turn, as the commands name it (no torch import: ``--help`` stays fast)."""

from __future__ import annotations

from typing import TypedDict

#: what the head reads of each turn (``benchmark --inputs``, ``dcl.whowhen --inputs``); ``features``
#: is the default, the primary setting of the out-of-domain protocol (docs/results.md)
INPUTS = {
    "features": "the name-free reading features only (default; nothing encoded, nothing domain-specific in the wording to learn)",
    "features+text": "the reading features and the encoder's turn embeddings",
    "text": "the encoder's turn embeddings only (the earlier DCL)",
}

#: models in a seed ensemble by default (``dcl --ensemble``, ``benchmark --ensemble``), chosen on
#: training data only (docs/results.md, round 4)
DEFAULT_ENSEMBLE = 5
#: the folder of an ensemble's model directory that holds each seed's own run
MEMBERS_DIR = "members"


class InputFields(TypedDict):
    """The ``DCLConfig`` fields an ``INPUTS`` choice sets."""

    reading_features: bool
    text_embeddings: bool


def input_fields(inputs: str) -> InputFields:
    """The ``DCLConfig`` fields of an ``INPUTS`` choice."""
    return {"reading_features": inputs != "text", "text_embeddings": inputs != "features"}
