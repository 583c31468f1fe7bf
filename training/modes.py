"""MAST failure modes, keyed by id, with a per-source alias table (names drift between sources)."""

from __future__ import annotations

import re

from aegis_probe.mast import MODES

MODE_IDS: tuple[str, ...] = tuple(MODES)

# Names a source uses for a mode, lower-cased, mapped to the id. "mast" holds the canonical names.
ALIASES: dict[str, dict[str, str]] = {
    "mast": {name: mode for mode, name in MODES.items()},
    "aegis": {
        "add redundant steps": "FM-1.3",
        "make request ambiguous": "FM-2.2",
        "hide important information": "FM-2.4",
        "remove verification steps": "FM-3.2",
    },
}

_ID = re.compile(r"\bFM[-_ ]?([123])\.(\d)\b", re.IGNORECASE)


def normalize_mode(raw: str | None, source: str | None = None) -> str | None:
    """The ``FM-x.y`` id of ``raw`` (an id in any spelling, or an alias of ``source`` or MAST).

    Unknown names are returned stripped but otherwise unchanged, so source-specific taxonomies
    (e.g. TRAIL categories) survive; ``None``/blank gives ``None``.
    """
    if raw is None or not str(raw).strip():
        return None
    text = str(raw).strip()
    match = _ID.search(text)
    if match and f"FM-{match.group(1)}.{match.group(2)}" in MODES:
        return f"FM-{match.group(1)}.{match.group(2)}"
    key = text.lower()
    for table in (ALIASES.get(source or "", {}), ALIASES["mast"]):
        if key in table:
            return table[key]
    return text
