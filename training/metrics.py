"""Attribution metrics: set F1 at pair / agent / mode level, exact-match accuracies, Who&When
reference-compatible scoring, and seeded bootstrap confidence intervals.

Golds and predictions are parallel lists of :class:`~aegis_probe.train.answers.Attribution`
(``None`` for a missing prediction). Agents compare with :func:`normalize_agent` (lower-case, no
whitespace); modes are ``FM-x.y`` ids.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Sequence

from .answers import Attribution, normalize_agent
from .modes import MODE_IDS

Level = str  # "pair" | "agent" | "mode"


def label_set(att: Attribution | None, level: Level) -> set:
    """The set a trace contributes at ``level``: (agent, mode) pairs, agents, or modes."""
    if att is None:
        return set()
    pairs = [(normalize_agent(a), m) for a, m in att.pairs]
    if level == "pair":
        return set(pairs)
    if level == "agent":
        return {a for a, _ in pairs}
    if level == "mode":
        return {m for _, m in pairs if m}
    raise ValueError(f"unknown level {level!r}")


def _f1(tp: int, fp: int, fn: int) -> tuple[float, float, float]:
    """Precision, recall, F1; every 0/0 is 0."""
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def set_f1(golds: Sequence[Attribution], preds: Sequence[Attribution | None], level: Level) -> dict[str, object]:
    """Micro and macro precision/recall/F1 at ``level``.

    Micro sums TP=|g∩p|, FP=|p−g|, FN=|g−p| over traces (a trace with both sets empty adds
    nothing). Macro averages per-class F1 over the classes seen in gold (pair, agent) or over all
    14 MAST ids (mode). Zero-support handling: a class with no gold instance has recall 0/0 = 0,
    so it scores F1 = 0 and pulls ``macro_f1`` down; ``macro_f1_supported`` averages only the
    classes with support, and ``zero_support`` lists the others. Predicted classes never seen in
    gold count as false positives in micro only (pair, agent).
    """
    tp = fp = fn = 0
    per_class: dict[object, list[int]] = {}
    for gold, pred in zip(golds, preds):
        g, p = label_set(gold, level), label_set(pred, level)
        tp, fp, fn = tp + len(g & p), fp + len(p - g), fn + len(g - p)
        for c in g | p:
            counts = per_class.setdefault(c, [0, 0, 0])
            counts[0] += c in g and c in p
            counts[1] += c in p and c not in g
            counts[2] += c in g and c not in p
    classes = list(MODE_IDS) if level == "mode" else sorted({c for g in golds for c in label_set(g, level)}, key=str)
    f1s = {c: _f1(*per_class.get(c, [0, 0, 0]))[2] for c in classes}
    supported = [c for c in classes if per_class.get(c, [0, 0, 0])[0] + per_class.get(c, [0, 0, 0])[2] > 0]
    micro_p, micro_r, micro_f = _f1(tp, fp, fn)
    return {
        "micro_precision": micro_p, "micro_recall": micro_r, "micro_f1": micro_f,
        "macro_f1": sum(f1s.values()) / len(classes) if classes else 0.0,
        "macro_f1_supported": sum(f1s[c] for c in supported) / len(supported) if supported else 0.0,
        "per_class_f1": {str(c): f for c, f in f1s.items()},
        "zero_support": [str(c) for c in classes if c not in supported],
    }


def _labelled(golds: Sequence[Attribution], field: str) -> list[int]:
    return [i for i, g in enumerate(golds) if getattr(g, field) is not None]


def agent_accuracy(golds: Sequence[Attribution], preds: Sequence[Attribution | None]) -> float:
    """Exact (normalised) agent matches over traces with a gold agent; a missing prediction is wrong."""
    idx = _labelled(golds, "agent")
    hits = sum(1 for i in idx if (p := preds[i]) is not None and normalize_agent(p.agent) == normalize_agent(golds[i].agent))
    return hits / len(idx) if idx else 0.0


def step_accuracy(golds: Sequence[Attribution], preds: Sequence[Attribution | None], k: int = 0) -> float:
    """Share of traces with a gold step whose predicted step is within ``k`` (0: exact)."""
    idx = _labelled(golds, "step")
    hits = sum(1 for i in idx if (p := preds[i]) is not None and p.step is not None
               and abs(p.step - int(golds[i].step or 0)) <= k)
    return hits / len(idx) if idx else 0.0


def whowhen_reference_compat(golds: Sequence[Attribution], preds: Sequence[Attribution | None],
                             n_files: int | None = None) -> dict[str, float]:
    """The Who&When reference scorer's numbers, for comparison with published tables only.

    Reproduces its behaviour: agent and step count as correct when the gold string is a
    *substring* of the predicted one (gold step "1" matches "12"), and both are divided by the
    number of files (``n_files``, default ``len(golds)``), not by the parsed predictions.
    """
    agent_hits = step_hits = 0
    for gold, pred in zip(golds, preds):
        if pred is None:
            continue
        if gold.agent is not None and pred.agent is not None and str(gold.agent) in str(pred.agent):
            agent_hits += 1
        if gold.step is not None and pred.step is not None and str(gold.step) in str(pred.step):
            step_hits += 1
    total = n_files if n_files is not None else len(golds)
    return {"agent_accuracy": agent_hits / total if total else 0.0, "step_accuracy": step_hits / total if total else 0.0}


Metric = Callable[[Sequence[Attribution], Sequence[Attribution | None]], float]


def bootstrap_ci(metric: Metric, golds: Sequence[Attribution], preds: Sequence[Attribution | None], *,
                 n_resamples: int = 1000, alpha: float = 0.05, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of ``metric`` over traces resampled with replacement (seeded)."""
    if not golds:
        return (0.0, 0.0)
    rng = random.Random(seed)
    n = len(golds)
    values = []
    for _ in range(n_resamples):
        idx = [rng.randrange(n) for _ in range(n)]
        values.append(metric([golds[i] for i in idx], [preds[i] for i in idx]))
    values.sort()
    lo = values[int(alpha / 2 * (n_resamples - 1))]
    hi = values[int((1 - alpha / 2) * (n_resamples - 1))]
    return lo, hi


def accuracy_ci(metric: Metric, field: str, golds: Sequence[Attribution], preds: Sequence[Attribution | None], *,
                n_resamples: int = 1000, alpha: float = 0.05, seed: int = 0) -> tuple[float, float] | None:
    """The bootstrap interval of an accuracy over the traces it is computed on, those with a gold
    ``field`` (``"agent"`` or ``"step"``); ``None`` when there are none. (Resampling every trace
    made resamples holding none of them, which score 0 and drag the interval down.)"""
    idx = _labelled(golds, field)
    if not idx:
        return None
    # the accuracy is the mean of each trace's hit: score every trace once, then resample the hits
    # (the same draws and values as rescoring every resample, without its cost on large sets)
    hits: Any = [metric([golds[i]], [preds[i]]) for i in idx]
    return bootstrap_ci(_mean, hits, hits, n_resamples=n_resamples, alpha=alpha, seed=seed)


def _mean(values: Sequence[Any], _: Sequence[Any]) -> float:
    """The mean of per-trace values (hits) as a metric :func:`bootstrap_ci` resamples."""
    return sum(values) / len(values) if values else 0.0


def one_answer(pred: Attribution | None) -> Attribution | None:
    """A prediction reduced to one answer per trace: its agent (else its first pair's agent), its
    step, and the single pair (agent, that agent's first predicted mode). Every metric of
    :func:`evaluate` scores this answer, so agent F1 and agent accuracy judge the same agent."""
    if pred is None:
        return None
    agent = pred.agent if pred.agent is not None else (pred.pairs[0][0] if pred.pairs else None)
    if agent is None:
        return Attribution(None, pred.step, [])
    mode = next((m for a, m in pred.pairs if normalize_agent(a) == normalize_agent(agent)), None)
    return Attribution(agent, pred.step, [(agent, mode)])


def evaluate(golds: Sequence[Attribution], preds: Sequence[Attribution | None], *, k: int = 1,
             n_resamples: int = 1000, seed: int = 0, n_files: int | None = None) -> dict[str, object]:
    """Every metric in one report, all on :func:`one_answer` of each prediction: accuracies
    (headline) with bootstrap intervals over the traces with a gold agent (step), counted in
    ``n_gold_agent`` (``n_gold_step``; none: the accuracy is ``None``), step within ``k``, set F1
    at three levels, and the reference-compatible numbers (labelled as such; over ``n_files``,
    default the number of traces)."""
    preds = [one_answer(p) for p in preds]
    labelled = {field: len(_labelled(golds, field)) for field in ("agent", "step")}
    report: dict[str, object] = {"n": len(golds), "n_predicted": sum(p is not None for p in preds),
                                 "n_gold_agent": labelled["agent"], "n_gold_step": labelled["step"]}
    headline: dict[str, tuple[str, Metric]] = {
        "agent_accuracy": ("agent", agent_accuracy),
        "step_accuracy": ("step", step_accuracy),
        f"step_accuracy_within_{k}": ("step", lambda g, p: step_accuracy(g, p, k)),
    }
    for name, (field, fn) in headline.items():  # no gold of that kind (Aegis: no steps): None, not 0
        report[name] = fn(golds, preds) if labelled[field] else None
        report[f"{name}_ci"] = accuracy_ci(fn, field, golds, preds, n_resamples=n_resamples, seed=seed)
    for level in ("pair", "agent", "mode"):
        report[f"{level}_f1"] = set_f1(golds, preds, level)
    report["whowhen_reference_compat"] = whowhen_reference_compat(golds, preds, n_files)
    return report


def agent_confusion(golds: Sequence[Attribution], preds: Sequence[Attribution | None],
                    top: int = 12) -> tuple[list[str], list[list[int]]]:
    """Gold x predicted agent counts over the ``top`` most frequent gold agents (others pooled as
    ``other``; a missing prediction is ``none``). Returns (labels, matrix rows=gold, cols=pred)."""
    from collections import Counter

    names = [n for n, _ in Counter(g.agent for g in golds if g.agent).most_common(top)]
    rows = names + ["other"]
    cols = names + ["other", "none"]
    norm = {normalize_agent(n): n for n in names}
    matrix = [[0] * len(cols) for _ in rows]
    for gold, pred in zip(golds, preds):
        if gold.agent is None:
            continue
        r = rows.index(norm.get(normalize_agent(gold.agent), "other"))
        c = cols.index("none") if pred is None or pred.agent is None else cols.index(norm.get(normalize_agent(pred.agent), "other"))
        matrix[r][c] += 1
    return cols, matrix


__all__ = ["accuracy_ci", "agent_accuracy", "agent_confusion", "bootstrap_ci", "evaluate", "label_set", "one_answer",
           "set_f1", "step_accuracy", "whowhen_reference_compat"]
