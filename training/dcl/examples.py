"""DCL rows (``{"id", "group", "turns", "label_agents", "label_modes", "label_pairs", "label_step", "positive"}``)
turned into the tensors the head and the losses read."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch import Tensor

from ..answers import distinct_agents, normalize_agent
from ..importers.base import step_number
from .reading import FEATURES, name_pattern, step_features


class RowError(ValueError):
    """A DCL row that cannot be read (the commands add the file it came from)."""


@dataclass
class Example:
    """One trajectory, indexed: turn texts, each turn's agent, and known targets (None = unknown)."""

    id: str
    group: str
    turn_texts: list[str]
    turn_agent: Tensor  # [T] index into agents
    agents: list[str]  # one per agent identity (normalize_agent), in order of first appearance, as first named
    agent_texts: list[str]  # what the encoder reads for each agent (its name, or "agent k" when anonymised)
    agent_target: Tensor | None  # [A]
    mode_target: Tensor | None  # [M]
    pair_target: Tensor | None  # [A, M]
    step: int | None
    positive: bool | None
    n_turns: int  # turns in the row (all of them are read unless max_turns cut the trace)
    features: Tensor | None  # [T, len(FEATURES)]: the reading features of each turn (reading.py); None: not read


def turn_text(agent: str, text: str) -> str:
    """What the encoder reads for one turn."""
    return f"{agent}: {text}"


def name_text(agent: str) -> str:
    """What the encoder reads for an agent's name (its prototype)."""
    return agent.replace("_", " ")


def anonymise(agents: Sequence[str], text: str, spellings: Sequence[str] = ()) -> str:
    """``text`` with every mention of an agent's name (as written, or with ``_`` as spaces) replaced
    by ``agent k`` (k: the agent's order of first appearance, from 1); names match case-sensitively.
    ``spellings``: other spellings of the agents' names (the row's "coder" of "Coder"), replaced alike."""
    index = {normalize_agent(a): i for i, a in enumerate(agents)}
    names = [*agents, *(n for n in spellings if normalize_agent(n) in index)]
    pattern = name_pattern(names)
    if pattern is None:
        return text
    label = {v: f"agent {index[normalize_agent(n)] + 1}" for n in names for v in (n, name_text(n))}
    return pattern.sub(lambda m: label[m.group(0)], text)


def example_from_row(row: dict[str, Any], modes: Sequence[str], max_turns: int = 0, anonymise_agents: bool = False,
                     modes_known: bool = True, reading_features: bool = True,
                     feature_names: Sequence[str] = FEATURES) -> Example:
    """Index one DCL row. Every turn is kept unless ``max_turns`` > 0 (then the first ``max_turns``;
    a label pointing past them is dropped and ``n_turns`` tells how many there were).
    With ``anonymise_agents`` the encoder never sees agent names: each becomes ``agent k`` in the
    turn prefixes, in the turn texts and in the agent prototypes. ``reading_features`` false: the
    turns' reading features are not computed (``features`` is None); else ``feature_names`` are.

    Agent targets are known when the row names agents or is a clean run; mode and pair targets
    when it names modes (aligned with the agents), or when it is a clean run and ``modes_known``
    (the data set labels modes at all), so the mode head learns from mode-labelled rows only.
    """
    all_turns = row.get("turns")
    if not isinstance(all_turns, list):
        raise RowError(f"DCL row {row.get('id')!r}: 'turns' must be a list of {{agent, text}}")
    bad = next((i for i, t in enumerate(all_turns) if not isinstance(t, dict) or "agent" not in t), None)
    if bad is not None:
        raise RowError(f"DCL row {row.get('id')!r} turn {bad}: not an object with an 'agent'")
    _check_types(row, all_turns)
    turns = all_turns[:max_turns] if max_turns > 0 else all_turns
    if not turns:
        raise RowError(f"DCL row {row.get('id')!r} has no turns")
    texts = [str(t.get("text") or "") for t in turns]
    agents = distinct_agents(str(t["agent"]) for t in turns)  # "Coder" and "coder" are one agent
    index = {normalize_agent(a): i for i, a in enumerate(agents)}
    turn_agent = [index[normalize_agent(str(t["agent"]))] for t in turns]
    spellings = list(dict.fromkeys(str(t["agent"]) for t in turns))
    features = None
    if reading_features:  # only for a model that reads them
        try:
            features = torch.tensor(step_features(texts, [agents[i] for i in turn_agent], str(row.get("task") or ""),
                                                  feature_names))
        except ValueError as exc:
            raise RowError(f"DCL row {row.get('id')!r}: {exc}") from None
    mode_index = {m: i for i, m in enumerate(modes)}
    positive = row.get("positive")
    gold_agents = [a for a in row.get("label_agents") or [] if a]
    gold_modes = list(row.get("label_modes") or [])
    agent_target = mode_target = pair_target = None
    # a label naming only agents that never act (a name spelt otherwise, a flagged label) says
    # nothing about the agents present: their targets stay unknown rather than all "not at fault"
    named_present = any(normalize_agent(a) in index for a in gold_agents)
    if named_present or positive:
        agent_target = torch.zeros(len(agents))
        for a in gold_agents:
            if normalize_agent(a) in index:
                agent_target[index[normalize_agent(a)]] = 1.0
    # modes outside the bank (another taxonomy: TRAIL's error categories) say nothing about the
    # bank's modes: without a bank mode, the mode targets stay unknown rather than all "absent"
    bank_modes = [m for m in gold_modes if m in mode_index]
    if bank_modes or (positive and modes_known):
        mode_target = torch.zeros(len(modes))
        for m in bank_modes:
            mode_target[mode_index[m]] = 1.0
        pairs = _label_pairs(row, gold_agents, gold_modes)  # None: pairs unknown
        if pairs is not None and (named_present or not gold_agents) and all(m in mode_index for _, m in pairs):
            pair_target = torch.zeros(len(agents), len(modes))
            for a, m in pairs:
                if normalize_agent(a) in index:
                    pair_target[index[normalize_agent(a)], mode_index[m]] = 1.0
    step = step_number(row.get("label_step"), "'label_step'")
    agent_texts = [f"agent {i + 1}" if anonymise_agents else name_text(a) for i, a in enumerate(agents)]
    return Example(
        id=str(row.get("id")),
        group=str(row.get("group") or row.get("id")),
        turn_texts=[turn_text(agent_texts[a], anonymise(agents, text, spellings) if anonymise_agents else text)
                    for a, text in zip(turn_agent, texts)],
        turn_agent=torch.tensor(turn_agent),
        agents=agents,
        agent_texts=agent_texts,
        agent_target=agent_target,
        mode_target=mode_target,
        pair_target=pair_target,
        step=step if step is not None and 0 <= step < len(turns) else None,
        positive=None if positive is None else bool(positive),
        n_turns=len(all_turns),
        features=features,
    )


def _check_types(row: dict[str, Any], turns: list[dict[str, Any]]) -> None:
    """A ``RowError`` naming the row and field whose value has the wrong type (a ``"false"`` for
    ``positive`` would read as true, a name for ``label_agents`` as its letters)."""
    where = f"DCL row {row.get('id')!r}"
    bad_turn = next((i for i, t in enumerate(turns) if not isinstance(t.get("text"), (str, type(None)))
                     or not isinstance(t["agent"], (str, int))), None)
    if bad_turn is not None:
        raise RowError(f"{where} turn {bad_turn}: 'agent' must be a name and 'text' a string")
    for name in ("label_agents", "label_modes"):
        value = row.get(name)
        if value is not None and not (isinstance(value, list) and all(isinstance(v, (str, type(None))) for v in value)):
            raise RowError(f"{where}: {name!r} must be a list of names, got {json.dumps(value)[:80]}")
    if not isinstance(row.get("positive"), (bool, type(None))):
        raise RowError(f"{where}: 'positive' must be true, false or null, got {json.dumps(row['positive'])[:80]}")
    try:
        step_number(row.get("label_step"), "'label_step'")
    except ValueError as exc:
        raise RowError(f"{where}: {exc}") from None


def _label_pairs(row: dict[str, Any], agents: list[str], modes: list[str]) -> list[tuple[str, str]] | None:
    """The row's labelled (agent, mode) pairs: ``label_pairs`` when the row has them (``build dcl``
    writes them; null: unknown), else ``label_agents`` and ``label_modes`` read as aligned when
    they are as long (rows written by hand, one fault each); ``None``: pairs unknown."""
    if "label_pairs" not in row:
        return list(zip(agents, modes)) if len(agents) == len(modes) else None
    pairs = row["label_pairs"]
    if pairs is None:
        return None
    if not isinstance(pairs, list) or not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in pairs):
        raise RowError(f"DCL row {row.get('id')!r}: 'label_pairs' must be a list of [agent, mode]")
    return [(str(a), str(m)) for a, m in pairs]
