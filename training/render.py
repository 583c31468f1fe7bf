"""Trajectory -> prompt text: numbered steps within a token budget, with label leaks stripped.

``render`` writes ``Task: ...`` and one ``Step {i} - {agent}: {text}`` line per step (original
indices, so answers name real steps). When the text exceeds ``max_tokens``:

1. the middle of long step texts is cut (``[... N tokens elided ...]``), longest first: every
   unprotected step is capped at the largest length that fits (never below ``MIN_STEP_TOKENS``);
2. then unprotected steps farthest from the protected ones are dropped, consecutive drops marked
   ``[... steps i-j elided ...]``;
3. then the middle of the task text is cut.

Protected steps (default: the labelled ones) are never cut or dropped, so the text may exceed
the budget only when they alone do. Pass ``protect=()`` for inference-time rendering: protecting
labelled steps changes which text survives, a positional hint a model could learn.
Token counts are summed per line (exact enough for budgeting, not a tokenizer-exact total).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable

from aegis_probe.trajectory import Step, Trajectory

MIN_STEP_TOKENS = 24
MIN_TASK_TOKENS = 32

# (pattern, replacement) pairs removing text that would leak the label. Extend for new injectors.
ARTEFACTS: list[tuple[re.Pattern[str], str]] = [
    # TracerTraj-code: "<id>_attacked_solution.py" names the attacked file.
    (re.compile(r"\b[\w.-]*?(?:attacked|injected|poisoned|corrupted)_([\w.-]*\.py)\b", re.IGNORECASE), r"\1"),
    # Aegis-style injection prompt blocks: dropped with their content.
    (re.compile(r"<(injection(?:_prompt|_instruction)?|aegis[_-]injection)\b[^>]*>.*?</\1\s*>", re.IGNORECASE | re.DOTALL), ""),
    # Markers around manipulated text: the marker goes, the manipulated action stays.
    (re.compile(r"</?(?:injected|manipulated)\b[^>]*>", re.IGNORECASE), ""),
    (re.compile(r"\[/?(?:INJECTED|INJECTION|AEGIS[ _-]?INJECT(?:ION|ED)?)\b[^\]]*\]\s?", re.IGNORECASE), ""),
    (re.compile(r"^\s*(?:INJECTED|INJECTION|AEGIS[ _-]INJECTION)\s*:.*$\n?", re.IGNORECASE | re.MULTILINE), ""),
]


def strip_artefacts(text: str) -> str:
    """``text`` without injection artefacts (see :data:`ARTEFACTS`)."""
    for pattern, repl in ARTEFACTS:
        text = pattern.sub(repl, text)
    return text


#: Without a tokenizer a token is a whitespace-separated word, a long run of non-space characters
#: (a URL, a base64 blob, a minified file) one per this many characters, so it is cut like text.
WORD_CHARS = 20
_WORD = re.compile(rf"\S{{1,{WORD_CHARS}}}\s*")


class TokenCounter:
    """Counts and cuts text with a tokenizer (HF or tiktoken style ``encode``/``decode``), or by
    whitespace-separated words (see :data:`WORD_CHARS`) when there is none."""

    def __init__(self, tokenizer: Any = None) -> None:
        self.tokenizer = tokenizer

    def _encode(self, text: str) -> list[Any]:
        if self.tokenizer is None:
            return _WORD.findall(text.strip())
        try:
            return list(self.tokenizer.encode(text, add_special_tokens=False))
        except TypeError:  # tiktoken-style encode() takes no add_special_tokens
            return list(self.tokenizer.encode(text))

    def _decode(self, tokens: list[Any]) -> str:
        return "".join(tokens) if self.tokenizer is None else self.tokenizer.decode(tokens)

    def count(self, text: str) -> int:
        return len(self._encode(text))

    def middle_cut(self, text: str, keep: int) -> str:
        """``text`` reduced to about ``keep`` tokens: its head and tail around an elision marker."""
        tokens = self._encode(text)
        if len(tokens) <= keep:
            return text
        head = keep - keep // 2
        tail = keep - head
        cut = len(tokens) - keep
        return (self._decode(tokens[:head]).rstrip() + f" [... {cut} tokens elided ...] "
                + (self._decode(tokens[-tail:]).lstrip() if tail else ""))


def step_text(step: Step) -> str:
    """What a step contributes: its output plus its tool calls (results included)."""
    parts = [step.output.strip()] if step.output.strip() else []
    for call in step.tool_calls:
        result = f" -> {call.error or call.result}" if (call.error or call.result) else ""
        parts.append(f"[tool {call.name}({call.arguments or ''}){result}]")
    if not parts and step.input_messages:
        parts.append(step.input_messages[-1].content.strip())
    return "\n".join(parts)


def labelled_steps(traj: Trajectory) -> set[int]:
    """Indices of the steps that a fault names."""
    return {f.step for f in traj.labels.faults if f.step is not None}


def _elision(first: int, last: int) -> str:
    return f"[... step {first} elided ...]" if first == last else f"[... steps {first}-{last} elided ...]"


def render(traj: Trajectory, *, max_tokens: int, tokenizer: Any = None, protect: Iterable[int] | None = None) -> str:
    """The numbered-step text of ``traj`` within ``max_tokens`` (see the module docstring)."""
    counter = TokenCounter(tokenizer)
    protected = labelled_steps(traj) if protect is None else set(protect)
    task = strip_artefacts(traj.task or "").strip()
    prefixes = {s.index: f"Step {s.index} - {s.agent}: " for s in traj.steps}
    full = {s.index: strip_artefacts(step_text(s)).strip() for s in traj.steps}
    cost_cache: dict[tuple[int, str], int] = {}

    def line_cost(i: int, text: str) -> int:
        key = (i, text)
        if key not in cost_cache:
            cost_cache[key] = counter.count(prefixes[i] + text) + 1
        return cost_cache[key]

    def total(task_text: str, texts: dict[int, str], kept: list[int]) -> int:
        cost = counter.count(f"Task: {task_text}") + 1 if task_text else 0
        cost += sum(line_cost(i, texts[i]) for i in kept)
        gaps = _gaps(kept, [s.index for s in traj.steps])
        return cost + sum(counter.count(_elision(a, b)) + 1 for a, b in gaps)

    kept = [s.index for s in traj.steps]
    texts = dict(full)
    if total(task, texts, kept) > max_tokens:
        texts = _cap_steps(full, protected, lambda t: total(task, t, kept) <= max_tokens, counter)
    if total(task, texts, kept) > max_tokens:
        for i in _drop_order(kept, protected):
            kept.remove(i)
            if total(task, texts, kept) <= max_tokens:
                break
        # spend what the drops freed on the remaining steps
        texts = _cap_steps(full, protected | (set(full) - set(kept)), lambda t: total(task, t, kept) <= max_tokens, counter)
    if task and total(task, texts, kept) > max_tokens:
        room = max_tokens - total("", texts, kept) - 2
        task = counter.middle_cut(task, max(MIN_TASK_TOKENS, room))
    return _assemble(task, texts, kept, prefixes, [s.index for s in traj.steps])


def _cap_steps(full: dict[int, str], protected: set[int], fits: Callable[[dict[int, str]], bool],
               counter: TokenCounter) -> dict[int, str]:
    """Unprotected texts capped at the largest cap (>= MIN_STEP_TOKENS) that fits, else at the minimum."""
    lengths = {i: counter.count(t) for i, t in full.items() if i not in protected}
    if not lengths or max(lengths.values()) <= MIN_STEP_TOKENS:
        return dict(full)

    def capped(cap: int) -> dict[int, str]:
        return {i: counter.middle_cut(t, cap) if i in lengths and lengths[i] > cap else t for i, t in full.items()}

    lo, hi = MIN_STEP_TOKENS, max(lengths.values())
    if not fits(capped(lo)):
        return capped(lo)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(capped(mid)) else (lo, mid - 1)
    return capped(lo)


def _drop_order(kept: list[int], protected: set[int]) -> list[int]:
    """Unprotected steps, farthest from a protected step first (no protected step: from the ends
    inward is kept, i.e. the middle goes first)."""
    anchors = sorted(protected & set(kept)) or ([kept[0], kept[-1]] if kept else [])
    candidates = [i for i in kept if i not in protected]
    return sorted(candidates, key=lambda i: (-min(abs(i - a) for a in anchors), -i))


def _gaps(kept: list[int], all_steps: list[int]) -> list[tuple[int, int]]:
    kept_set = set(kept)
    gaps: list[tuple[int, int]] = []
    start: int | None = None
    prev = all_steps[0] if all_steps else 0
    for i in all_steps:
        if i not in kept_set and start is None:
            start = i
        if i in kept_set and start is not None:
            gaps.append((start, prev))
            start = None
        prev = i
    if start is not None:
        gaps.append((start, all_steps[-1]))
    return gaps


def _assemble(task: str, texts: dict[int, str], kept: list[int], prefixes: dict[int, str], all_steps: list[int]) -> str:
    lines = [f"Task: {task}"] if task else []
    gaps = {a: b for a, b in _gaps(kept, all_steps)}
    kept_set = set(kept)
    for i in all_steps:
        if i in gaps:
            lines.append(_elision(i, gaps[i]))
        if i in kept_set:
            lines.append(prefixes[i] + texts[i])
    return "\n".join(lines)
