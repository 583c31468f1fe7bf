"""Attribution answers: the gold record of a trajectory, target texts, and tolerant parsers.

Two answer formats exist: *pairs*, JSON ``{"faulty_agents": [{"agent_name", "error_type"}]}``
(Aegis), and *agent|step* after a reasoning block (AgenTracer), e.g.
``<think>...</think>\\n<answer>Coder|3</answer>`` (the ``<answer>`` tags are optional).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from aegis_probe.trajectory import Fault, Trajectory

from .modes import MODES, normalize_mode

Pair = tuple[str, str | None]

_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL | re.IGNORECASE)
_ANSWER_TAG = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.DOTALL | re.IGNORECASE)
_AGENT_STEP = re.compile(r"^\s*[`*]*([^|\n`*]+?)[`*]*\s*\|\s*(?:step\s*)?(\d+)\s*[`*]*\s*$", re.IGNORECASE | re.MULTILINE)
_LABELLED = re.compile(r"agent(?:\s*name)?\s*[:=]\s*[`*]*([^\n`*]+?)[`*]*\s*$.*?step(?:\s*number)?\s*[:=]\s*(\d+)",
                       re.IGNORECASE | re.MULTILINE | re.DOTALL)


@dataclass
class Attribution:
    """What an attributor says (or the gold label says) about one trajectory."""

    agent: str | None = None
    step: int | None = None
    pairs: list[Pair] = field(default_factory=list)


def normalize_agent(name: str | None) -> str:
    """An agent's identity: its name lower-cased with whitespace removed ("Data Analyst", "data_analyst"
    stay two; "Coder" and "coder" are one)."""
    return re.sub(r"\s+", "", str(name or "")).lower()


def distinct_agents(names: Iterable[str]) -> list[str]:
    """One name per agent identity (:func:`normalize_agent`), in order of first appearance, spelt as
    it first appears: what builders, baselines, metrics and DCL count as the agents of a run."""
    first: dict[str, str] = {}
    for name in names:
        first.setdefault(normalize_agent(name), name)
    return list(first.values())


def decisive_fault(faults: list[Fault]) -> Fault | None:
    """The earliest fault that names a step, else the first fault naming an agent."""
    stepped = [f for f in faults if f.step is not None]
    if stepped:
        return min(stepped, key=lambda f: f.step)  # type: ignore[arg-type, return-value]
    return next((f for f in faults if f.agent), None)


def fault_reason(fault: Fault) -> str:
    """Why a fault is one: its reason, else its failure mode named (``FM-2.4 information
    withholding``, what an injected run's label says); empty when it has neither."""
    if fault.reason:
        return fault.reason
    return f"{fault.mode} {MODES[fault.mode]}" if fault.mode in MODES else (fault.mode or "")


def recovered(traj: Trajectory) -> bool:
    """Whether ``traj`` is labelled with a fault yet succeeded (its team recovered from an injected
    fault): no failure to attribute, and no clean run either. Builders skip it and ``eval`` and
    ``benchmark`` leave it out, as the injection campaign drops such runs."""
    return bool(traj.labels.faults) and traj.outcome.success is True


def gold_attribution(traj: Trajectory) -> Attribution:
    """The label of ``traj`` as an :class:`Attribution` (pairs deduplicated, order kept); none for a
    :func:`recovered` run."""
    faults = [] if recovered(traj) else traj.labels.faults
    decisive = decisive_fault(faults)
    pairs = list(dict.fromkeys((f.agent, f.mode) for f in faults if f.agent))
    return Attribution(decisive.agent if decisive else None, decisive.step if decisive else None, pairs)  # type: ignore[arg-type]


def format_pairs(pairs: list[Pair]) -> str:
    """The pairs target text (no fault: an empty list)."""
    return json.dumps({"faulty_agents": [{"agent_name": a, "error_type": m} for a, m in pairs]}, ensure_ascii=False)


def format_agent_step(agent: str, step: int, reasoning: str | None = None) -> str:
    """The agent|step target text, with a reasoning block when ``reasoning`` is given."""
    answer = f"{agent}|{step}"
    return f"<think>{reasoning}</think>\n<answer>{answer}</answer>" if reasoning is not None else answer


def completion_text(completion: Any) -> str:
    """The text of a completion: a string, a message dict, or a chat list (last assistant turn)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content") or "")
    if isinstance(completion, (list, tuple)):
        assistant = [m for m in completion if isinstance(m, dict) and m.get("role", "assistant") == "assistant"]
        return completion_text(assistant[-1]) if assistant else ""
    return "" if completion is None else str(completion)


def strip_reasoning(text: str) -> str:
    """``text`` without its ``<think>`` blocks."""
    return _THINK.sub("", text)


def has_reasoning(text: str) -> bool:
    """Whether ``text`` holds a non-empty ``<think>`` block."""
    return any(m.group(1).strip() for m in _THINK.finditer(text))


def parse_pairs(text: str) -> list[Pair] | None:
    """Predicted (agent, mode) pairs from the last ``{"faulty_agents": [...]}`` object in ``text``.

    Modes are normalised to ``FM-x.y`` ids; agents are kept as written. ``None`` when no such
    object parses or an entry lacks a string ``agent_name``.
    """
    body = strip_reasoning(text)
    decoder = json.JSONDecoder()
    found: Any = None
    for match in re.finditer(r"\{", body):
        try:
            obj, _ = decoder.raw_decode(body, match.start())
        except ValueError:
            continue
        if isinstance(obj, dict) and "faulty_agents" in obj:
            found = obj
    if found is None or not isinstance(found["faulty_agents"], list):
        return None
    pairs: list[Pair] = []
    for entry in found["faulty_agents"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("agent_name"), str):
            return None
        mode = entry.get("error_type")
        pairs.append((entry["agent_name"], normalize_mode(mode if isinstance(mode, str) else None)))
    return pairs


def parse_agent_step(text: str) -> tuple[str, int] | None:
    """``(agent, step)`` from ``<answer>agent|step</answer>``, a last ``agent|step`` line, or
    ``Agent Name: X ... Step Number: N`` (the Who&When judge format); ``None`` otherwise."""
    body = strip_reasoning(text)
    tagged = _ANSWER_TAG.findall(body)
    candidates = [tagged[-1]] if tagged else [body]
    for chunk in candidates:
        lines = _AGENT_STEP.findall(chunk)
        if lines:
            agent, step = lines[-1]
            return agent.strip(), int(step)
        labelled = _LABELLED.findall(chunk)
        if labelled:
            agent, step = labelled[-1]
            return agent.strip(), int(step)
    return None
