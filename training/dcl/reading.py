"""Reading features: name-free, domain-agnostic numbers per step, computed from the trace text.

They describe what a step *does* to the run rather than who speaks or where: whether the final
answer's distinctive content (numbers, rare words not in the task) first enters the run there
(*provenance*), whether the step or the steps after it show error, correction or guesswork cues
(*evidence*), how much of it is new and how much later steps reuse it (*novelty, dependence*),
whether it answers the step before it or repeats an earlier one, and the speaker's share of the
run (no names, no roles, no position in the run). Agent names are replaced by one placeholder
before tokenising, so renaming or permuting agents leaves every value unchanged. Every value lies
in [0, 1].
"""

from __future__ import annotations

import math
import re
from collections import Counter
from itertools import chain
from typing import Sequence

#: The round-2 features (issue 17), in the order of each step's vector.
ROUND2: tuple[str, ...] = (
    "answer_numbers_introduced",  # share of the answer's distinctive numbers that first appear here
    "answer_words_introduced",  # same, for its distinctive words
    "answer_content_present",  # share of the answer's distinctive tokens this step contains
    "answer_provenance",  # 1 at the earlier step introducing most answer numbers, then words (earliest on ties)
    "feeds_provenance",  # 1 at the step just before the provenance step (its request or its code)
    "error_cues",  # error/failure words in the step
    "correction_cues",  # correction/restart/retry words in the step
    "guess_cues",  # assumption/guess/placeholder words in the step
    "error_cues_next",  # error cues in the next step (the reaction to this one)
    "error_cues_after",  # mean error cues over the steps after this one
    "correction_cues_after",  # mean correction cues over the steps after this one
    "novelty",  # share of the step's content tokens never seen before (task and earlier steps)
    "new_numbers",  # numbers never seen before (saturating count)
    "reused_later",  # share of the step's new tokens that later steps repeat
    "steps_depending",  # share of later steps that reuse one of its new tokens
    "answers_previous",  # share of the previous step's content tokens this step takes up
    "repeats_earlier",  # highest token overlap (Jaccard) with an earlier step
    "task_overlap",  # share of the step's content tokens found in the task
    "relative_length",  # the step's length against the run's longest step
    "speaker_share",  # the speaker's share of the run's steps
    "speaker_first_turn",  # 1 on the speaker's first step
)
#: Round 3: tool-result turns (a turn that only reports what the step before asked to run).
RESULT_TURN: tuple[str, ...] = (
    "result_turn",  # the step only reports the result of the previous step's request (code it ran)
    "requests_result",  # the next step is a result turn answering this step's request
    "answer_provenance_passed",  # answer_provenance with a result turn's content credited to its requester
)
#: Round 3: transitive provenance (validated, not read by default: docs/results.md, round 3).
TRANSITIVE: tuple[str, ...] = (
    "answer_inputs_introduced",  # share of the provenance step's inputs (content it took from earlier steps) first seen here
    "provenance_source",  # 1 at the step introducing most of those inputs (numbers, then words; earliest on ties)
)
ROUND3: tuple[str, ...] = RESULT_TURN + TRANSITIVE
#: Every feature :func:`step_features` computes.
ALL_FEATURES: tuple[str, ...] = ROUND2 + ROUND3
#: The features a DCL model reads by default (``DCLConfig.features``): round 2's and the tool-result
#: turn's, chosen on training data only before any round-3 test run (docs/results.md).
FEATURES: tuple[str, ...] = ROUND2 + RESULT_TURN

_TOKEN = re.compile(r"\d+(?:[.,]\d+)*|[^\W\d_]+", re.UNICODE)
_STOP = frozenset("""a about above after again all also am an and any are as at be because been before being
below between both but by can could did do does doing done down each few for from further had has have having
he her here hers him his how i if in into is it its itself just let me more most my no nor not now of off on once
only or other our out over own same she should so some such than that the their them then there these they this
those through to too under until up very was we were what when where which while who whom why will with would
you your yours please ok okay yes thanks thank""".split())
_ERROR = re.compile(r"\b(errors?|exceptions?|traceback|fail(?:ed|s|ure|ing)?|not found|cannot|can't|unable|invalid|"
                    r"incorrect|wrong|mistakes?|missing|time(?:d)? ?out|denied|undefined|no such|nan|unavailable|"
                    r"exit ?code:? ?[1-9]|doesn't|does not|didn't|did not|mismatch)\b", re.IGNORECASE)
_CORRECTION = re.compile(r"\b(actually|instead|correct(?:ion|ed)|start over|from the beginning|regardless|retry|"
                         r"try again|once more|re-?(?:check|run|try|do|verify)|fix(?:ed)?|revis(?:e|ed|ion)|"
                         r"apolog\w*|sorry|stand by)\b", re.IGNORECASE)
_GUESS = re.compile(r"\b(assum\w*|likely|probably|might|perhaps|guess\w*|approximate\w*|hypothetical\w*|"
                    r"placeholder|simulat\w*|example|suppose|presum\w*|estimate\w*|unverified)\b", re.IGNORECASE)
_DONE = re.compile(r"\b(terminate|final answer)\b", re.IGNORECASE)
_REQUEST = re.compile(r"```|^\s*(?:>>>|\$) ", re.MULTILINE)  # code to run: a fenced block, a prompt line
_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)
NAME_PLACEHOLDER = "agentname"


def _number(token: str) -> str:
    """A numeric token in one spelling: thousands commas dropped, trailing decimal zeros cut."""
    digits = token.replace(",", "")
    if "." in digits:
        digits = digits.rstrip("0").rstrip(".") or "0"
    return digits


def tokens(text: str) -> list[str]:
    """Lower-cased content tokens of ``text``: numbers (normalised) and words, stop words dropped."""
    out = []
    for tok in _TOKEN.findall(text.lower()):
        if tok[0].isdigit():
            out.append(_number(tok))
        elif tok not in _STOP and len(tok) > 1:
            out.append(tok)
    return out


def is_number(token: str) -> bool:
    return token[0].isdigit()


def name_pattern(names: Sequence[str], flags: int = 0) -> re.Pattern[str] | None:
    """A regex matching any of ``names`` as a whole word, as written or with ``_`` as spaces
    (longest first); None without names."""
    variants = sorted({v for n in names for v in (n, n.replace("_", " ")) if v.strip()}, key=len, reverse=True)
    return re.compile("|".join(rf"(?<!\w){re.escape(v)}(?!\w)" for v in variants), flags) if variants else None


def strip_names(text: str, names: Sequence[str]) -> str:
    """``text`` with every agent name (as written, or with ``_`` as spaces) replaced by one placeholder."""
    pattern = name_pattern(names, re.IGNORECASE)
    return pattern.sub(NAME_PLACEHOLDER, text) if pattern else text


def _cues(pattern: re.Pattern[str], text: str) -> float:
    return 1.0 - math.exp(-len(pattern.findall(text)) / 2)  # saturating: 0, .39, .63, .78, ...


def _first_share(pool: set[str], first_seen: dict[str, int], step: int) -> float:
    """The share of ``pool`` whose first appearance is at ``step``."""
    return sum(first_seen[w] == step for w in pool) / len(pool) if pool else 0.0


def _answer_index(texts: Sequence[str]) -> int:
    """The last step that says something beyond a termination signal (the run's final claims)."""
    for i in range(len(texts) - 1, -1, -1):
        if tokens(_DONE.sub(" ", texts[i])):
            return i
    return len(texts) - 1


def check_features(features: Sequence[str]) -> list[str]:
    """``features`` as a list, each of :data:`ALL_FEATURES` and named once; else a ValueError naming the first that is not."""
    names = list(features)
    bad = next((f for i, f in enumerate(names) if f not in _COLUMN or f in names[:i]), None)
    if bad is not None:
        raise ValueError(f"--features: {bad!r} is {'named twice' if bad in _COLUMN else 'no reading feature'} "
                         f"(known: {', '.join(ALL_FEATURES)})")
    return names


def _report_like(text: str) -> float:
    """1 for text that reads as output, not prose: few stop words among its words (at most 15%),
    0 from 30% (prose); no words at all reads as output."""
    words = _WORD.findall(text.lower())
    prose = sum(w in _STOP for w in words) / len(words) if words else 0.0
    return min(1.0, max(0.0, (0.30 - prose) / 0.15))


def result_turns(texts: Sequence[str], speakers: Sequence[str]) -> list[float]:
    """Per step, how much it reads as a tool-result turn: another speaker than the step before,
    which holds code to run (a fenced block or a prompt line), no request of its own, and output
    rather than prose. Name-free: only which steps share a speaker matters."""
    return [float(i > 0 and speakers[i] != speakers[i - 1] and bool(_REQUEST.search(texts[i - 1]))
                  and not _REQUEST.search(texts[i])) * _report_like(texts[i]) for i in range(len(texts))]


def _introducers(pool: set[str], first_seen: dict[str, int], before: int, passed: list[int]) -> int:
    """The step before ``before`` that first said most of ``pool`` (numbers, then words; earliest
    on ties), each token credited to ``passed[step]``; -1 when none did."""
    credit: dict[int, list[int]] = {}
    for w in pool:
        if first_seen[w] < before:
            credit.setdefault(passed[first_seen[w]], [0, 0])[0 if is_number(w) else 1] += 1
    return max(credit, key=lambda i: (*credit[i], -i)) if credit else -1


def step_features(texts: Sequence[str], speakers: Sequence[str], task: str = "",
                  features: Sequence[str] = FEATURES) -> list[list[float]]:
    """One vector of the ``features`` (of :data:`ALL_FEATURES`, default :data:`FEATURES`) per
    step. ``texts[i]`` is step i's text, ``speakers[i]`` who spoke it (any names: only which steps
    share a speaker matters), ``task`` the run's task text."""
    check_features(features)
    if len(texts) != len(speakers):
        raise ValueError(f"reading features: {len(texts)} step texts but {len(speakers)} speakers")
    bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
    if bad is not None:
        raise ValueError(f"reading features: step {bad} text is {type(texts[bad]).__name__}, not a string")
    if not isinstance(task, str):
        raise ValueError(f"reading features: the task is {type(task).__name__}, not a string")
    n = len(texts)
    if n == 0:
        return []
    names = list(dict.fromkeys(str(s) for s in speakers))
    clean = [strip_names(t, names) for t in texts]
    toks = [tokens(t) for t in clean]
    sets = [set(t) - {NAME_PLACEHOLDER} for t in toks]
    task_set = set(tokens(strip_names(task, names))) - {NAME_PLACEHOLDER}
    holders: dict[str, list[int]] = {}  # token -> the steps holding it, in order
    for i, s in enumerate(sets):
        for w in s:
            holders.setdefault(w, []).append(i)
    common = {w for w, h in holders.items() if len(h) > max(2, n // 2)}  # boilerplate
    first_seen = {w: h[0] for w, h in holders.items()}
    answer = _answer_index(clean)
    distinctive = sets[answer] - task_set - common - set(tokens("final answer terminate"))
    numbers = {w for w in distinctive if is_number(w)}
    words = distinctive - numbers
    introduced = [[0, 0] for _ in range(n)]  # per step: answer numbers, answer words first seen there
    for w in distinctive:
        introduced[first_seen[w]][0 if is_number(w) else 1] += 1
    earlier = [i for i in range(answer) if any(introduced[i])]  # where the answer's content came from
    provenance = max(earlier, key=lambda i: (*introduced[i], -i)) if earlier else -1
    results = result_turns(clean, [str(x) for x in speakers])
    passed = [i - 1 if r > 0.5 else i for i, r in enumerate(results)]  # whose step a step's new content counts as
    passed_provenance = _introducers(distinctive, first_seen, answer, passed)
    source_of = passed_provenance  # -1 exactly when provenance is
    inputs = {w for w in sets[source_of] - task_set - common if first_seen[w] < source_of} if source_of >= 0 else set()
    inputs = {w for w in inputs if is_number(w)} or inputs  # the numbers it computed with, else its words
    source = _introducers(inputs, first_seen, source_of, passed)
    input_share = Counter(passed[first_seen[w]] for w in inputs)
    errors = [_cues(_ERROR, t) for t in clean]
    corrections = [_cues(_CORRECTION, t) for t in clean]
    longest = max(len(t) for t in toks) or 1
    counts = Counter(map(str, speakers))
    rows = []
    seen = set(task_set)
    spoken: set[str] = set()
    before: dict[str, list[int]] = {}  # token -> the steps before this one holding it
    for i, s in enumerate(sets):
        new = s - seen  # tokens first seen here: every other step holding one comes later
        later = n - i - 1
        prev = sets[i - 1] - task_set if i else set()
        shared = Counter(chain.from_iterable(before.get(w, ()) for w in s))  # earlier step -> tokens in common
        dependants = len(set(chain.from_iterable(holders[w] for w in new))) - 1  # later steps reusing a new token
        speaker = str(speakers[i])
        rows.append([
            _first_share(numbers, first_seen, i),
            _first_share(words, first_seen, i),
            len(s & distinctive) / len(distinctive) if distinctive else 0.0,
            float(i == provenance),
            float(i + 1 == provenance),
            errors[i],
            corrections[i],
            _cues(_GUESS, clean[i]),
            errors[i + 1] if i + 1 < n else 0.0,
            sum(errors[i + 1:]) / later if later else 0.0,
            sum(corrections[i + 1:]) / later if later else 0.0,
            len(new) / len(s) if s else 0.0,
            1.0 - math.exp(-sum(is_number(w) for w in new) / 2),
            sum(len(holders[w]) > 1 for w in new) / len(new) if new else 0.0,
            dependants / later if new and later else 0.0,
            len(prev & s) / len(prev) if prev else 0.0,
            max((k / (len(s) + len(sets[j]) - k) for j, k in shared.items()), default=0.0),  # Jaccard
            len(s & task_set) / len(s) if s else 0.0,
            len(toks[i]) / longest,
            counts[speaker] / n,
            float(speaker not in spoken),
            results[i],
            results[i + 1] if i + 1 < n else 0.0,
            float(i == passed_provenance),
            input_share[i] / len(inputs) if inputs else 0.0,
            float(i == source),
        ])
        seen |= s
        spoken.add(speaker)
        for w in s:
            before.setdefault(w, []).append(i)
    columns = [_COLUMN[f] for f in features]
    return [[row[c] for c in columns] for row in rows]


_COLUMN = {name: i for i, name in enumerate(ALL_FEATURES)}
