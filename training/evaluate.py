"""``eval`` command: score an attributor (a baseline, an LLM judge, or saved predictions) on
trajectories; print a table, write JSON, save PNG plots (per-mode F1, agent confusion)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Sequence

from .answers import Attribution
from .importers.base import step_number
from .files import plain_stem, read_rows, replacing

METHODS = ["random", "majority", "majority-present", "majority-step", "all-at-once", "step-by-step", "binary-search"]
FITTED = {"majority": "most frequent agent", "majority-present": "most frequent agent present",
          "majority-step": "most frequent step"}


def _pair(raw: Any) -> tuple[Any, Any]:
    """``[agent, mode]`` or ``{"agent", "mode", ...}`` (as ``attribute`` writes) as a pair."""
    if isinstance(raw, dict):
        return raw.get("agent"), raw.get("mode")
    agent, mode = raw
    return agent, mode


def prediction_rows(path: str | Path) -> dict[str, dict[str, Any]]:
    """Prediction JSON lines by id (the last line of an id wins)."""
    return {str(row["id"]): row for row in read_rows(path, required=("id",))}


def to_attribution(row: dict[str, Any], path: str | Path = "predictions") -> Attribution:
    """One prediction row ``{"id", "agent", "step", "pairs" | "top_pair"}`` as an answer; pairs are
    ``[agent, mode]`` lists or ``{"agent", "mode"}`` objects (the output of ``attribute``), and
    ``top_pair`` (the predicted agent's best mode) wins over ``pairs`` when given."""
    where = f"{path}: prediction {row['id']!r}"
    if not isinstance(row.get("agent"), (str, type(None))):
        raise ValueError(f"{where}: agent must be a name or null, got {row['agent']!r}")
    try:
        raw = [row["top_pair"]] if row.get("top_pair") else row.get("pairs") or ([[row["agent"], None]] if row.get("agent") else [])
        pairs = [_pair(p) for p in raw]
    except (TypeError, ValueError):
        raise ValueError(f"{where}: pairs must be [agent, mode] or {{agent, mode}}") from None
    if not all(isinstance(x, (str, type(None))) for pair in pairs for x in pair):
        raise ValueError(f"{where}: a pair's agent and mode must be names or null")
    try:
        step = step_number(row.get("step"))  # also "3" (a parsed answer) or 3.0 (a float column)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return Attribution(row.get("agent"), step, pairs)


def turns_read(row: dict[str, Any], path: str | Path = "predictions") -> int | None:
    """How many turns the attributor read of the trace (``attribute``'s ``turns_read``; null: all)."""
    value = row.get("turns_read")
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"{path}: prediction {row['id']!r}: turns_read must be a count of turns or null, got {value!r}")
    return value


def match_predictions(trajs: Sequence[Any], rows: dict[str, dict[str, Any]], path: str | Path) -> list[dict[str, Any] | None]:
    """Each trajectory's prediction row: by its id, else by its trace id (``attribute --trace`` keys
    its output so), else by the file it was imported from when that file holds it alone (``1.json``
    or ``1``, as Who&When scripts key predictions). Says on stderr
    how many predictions match no trajectory; none matching is an error (a wrong file). An id that
    several trajectories share (records of two files numbered alike) and a prediction names is an
    error: which of them it answers is unknown."""
    from collections import Counter

    from .builders import row_id

    ids = [row_id(t) for t in trajs]
    counts = Counter(ids)
    shared = next((i for i, n in counts.items() if n > 1 and i in rows), None)
    if shared is not None:
        raise ValueError(f"{path}: prediction {shared!r} matches {counts[shared]} "
                         "trajectories sharing that id; score the sources one at a time, or give their records "
                         "distinct ids")
    files = [t.metadata.get("file") for t in trajs]
    single = {f for f, n in Counter(files).items() if f and n == 1}
    found: list[dict[str, Any] | None] = []
    used: set[str] = set()
    for traj, rid, file in zip(trajs, ids, files):
        keys = [rid, *([traj.trace_id] if traj.trace_id else []), *((file, plain_stem(file)) if file in single else ())]
        key = next((k for k in keys if k in rows), None)
        found.append(rows[key] if key is not None else None)
        used.update([key] if key is not None else [])
    unmatched = [k for k in rows if k not in used]
    if rows and not used:  # every answer would be scored missing: a wrong file, not a bad attributor
        raise ValueError(f"{path}: none of its {len(rows)} predictions matches a trajectory (e.g. {unmatched[0]!r}; "
                         f"trajectory ids look like {ids[0]!r}); nothing written")
    if unmatched:
        print(f"{path}: {len(unmatched)} of {len(rows)} predictions match no trajectory (e.g. {unmatched[0]!r}; "
              f"trajectory ids look like {ids[0]!r})", file=sys.stderr)
    return found


def read_predictions(path: str | Path) -> dict[str, Attribution]:
    """Predictions by id (see :func:`to_attribution`)."""
    return {rid: to_attribution(row, path) for rid, row in prediction_rows(path).items()}


def unreachable_steps(golds: Sequence[Attribution], turns_read: Sequence[int | None], lengths: Sequence[int]) -> int:
    """Gold steps an attributor could not predict because it read only the first ``turns_read``
    turns of a trace of ``lengths`` steps (``None``: the whole trace). A gold step outside its
    trace (a flagged label) is no step a cut hid."""
    return sum(1 for g, n, length in zip(golds, turns_read, lengths)
               if g.step is not None and n is not None and n <= g.step < length)


def floor_scores(golds: Sequence[Attribution], trajs: Sequence[Any], args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Agent and step accuracy of each structural floor (:func:`baselines.structural_floors`), its
    median position fit on ``--fit-on``, else on the evaluation set itself (labelled oracle)."""
    from .baselines import structural_floors
    from .cli import load_source
    from .metrics import agent_accuracy, step_accuracy

    fit = (load_source(argparse.Namespace(source=args.fit_on, format="auto", no_progress=True)).trajectories
           if args.fit_on else trajs)
    floors = structural_floors(fit, args.fit_on or "the evaluation set: oracle")
    return {name: {"agent_accuracy": agent_accuracy(golds, preds), "step_accuracy": step_accuracy(golds, preds)}
            for name, floor in floors.items() for preds in [[floor(t) for t in trajs]]}


def format_table(report: dict[str, Any]) -> str:
    """The headline numbers as an aligned text table."""
    rows = [("traces", str(report["n"]), ""), ("predicted", str(report["n_predicted"]), ""),
            ("with a gold agent / step", f"{report['n_gold_agent']} / {report['n_gold_step']}", ""),
            ("gold steps unreachable (trace cut)", str(report.get("unreachable_gold_steps", 0)), "")]
    for key in [k for k in report if k.endswith("accuracy") or "accuracy_within" in k]:
        if key.endswith("_ci"):
            continue
        if report[key] is None:
            rows.append((key, "n/a", "(no gold label of this kind)"))
            continue
        lo, hi = report[f"{key}_ci"]
        rows.append((key, f"{100 * report[key]:.2f}", f"[{100 * lo:.2f}, {100 * hi:.2f}]"))
    for level in ("pair", "agent", "mode"):
        f1 = report[f"{level}_f1"]
        rows.append((f"{level} micro-F1 / macro-F1", f"{100 * f1['micro_f1']:.2f} / {100 * f1['macro_f1']:.2f}", ""))
    compat = report["whowhen_reference_compat"]
    rows.append(("whowhen_reference_compat agent/step", f"{100 * compat['agent_accuracy']:.2f} / {100 * compat['step_accuracy']:.2f}", "(substring, /files)"))
    width = max(len(r[0]) for r in rows)
    lines = [f"{'metric'.ljust(width)}  {'value':>15}  95% CI", "-" * (width + 30)]
    lines += [f"{name.ljust(width)}  {value:>15}  {ci}" for name, value, ci in rows]
    floors = [(f"floor: {name} agent/step", f"{100 * f['agent_accuracy']:.2f} / {100 * f['step_accuracy']:.2f}")
              for name, f in report.get("floors", {}).items()]  # the structural heuristics, beside every method
    if floors:
        wide = max(len(name) for name, _ in floors)
        lines += ["", *(f"{name.ljust(wide)}  {value:>15}" for name, value in floors)]
    return "\n".join(lines)


def save_plots(report: dict[str, Any], confusion: tuple[list[str], list[list[int]]], mode_png: Path,
               conf_png: Path) -> None:
    """Save the per-mode F1 bars to ``mode_png`` and the agent confusion matrix to ``conf_png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per_mode = report["mode_f1"]["per_class_f1"]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.bar(list(per_mode), list(per_mode.values()), color="#4472c4")
    ax.set_ylim(0, 1)
    ax.set_ylabel("F1")
    ax.set_title("Per-mode F1")
    ax.tick_params(axis="x", rotation=60)
    fig.tight_layout()
    fig.savefig(mode_png, dpi=110, format="png")
    plt.close(fig)

    cols, matrix = confusion
    rows = cols[:-1]
    fig, ax = plt.subplots(figsize=(1 + 0.55 * len(cols), 1 + 0.5 * len(rows)))
    ax.imshow(matrix, cmap="Blues")
    ax.set_xticks(range(len(cols)), cols, rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(len(rows)), rows, fontsize=7)
    for r, row in enumerate(matrix):
        for c, v in enumerate(row):
            if v:
                ax.text(c, r, str(v), ha="center", va="center", fontsize=7)
    ax.set_xlabel("predicted agent")
    ax.set_ylabel("gold agent")
    fig.tight_layout()
    fig.savefig(conf_png, dpi=110, format="png")
    plt.close(fig)


def add_eval(subparsers: Any) -> None:
    from .cli import add_progress_arg, add_source_args, positive_int, seed_int

    p = subparsers.add_parser("eval", help="score a baseline, an LLM judge, or saved predictions",
                              description=f"Score an attributor on labelled trajectories. Methods: {', '.join(METHODS)}; "
                                          "or --predictions FILE (JSON lines {id, agent, step, pairs}).")
    add_source_args(p)
    p.add_argument("--method", choices=METHODS, default="random", help="attributor (ignored with --predictions; default: %(default)s)")
    p.add_argument("--predictions", help="JSON lines of predictions to score instead of running a method")
    p.add_argument("--fit-on", metavar="TRAIN", help="fit the majority baselines on these labelled trajectories "
                                                     "(any import format); without it they are fit on the evaluation "
                                                     "set itself and labelled 'oracle'")
    p.add_argument("--base-url", help="OpenAI-compatible endpoint for the LLM judges")
    p.add_argument("--model", default="gpt-4o", help="judge model name (default: %(default)s)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="VAR",
                   help="environment variable with the judge's API key (default: %(default)s; unset: no key)")
    # a key on the command line is visible to every process: refused, saying what to give instead
    p.add_argument("--api-key", dest="api_key_given", help=argparse.SUPPRESS)
    p.add_argument("--seed", type=seed_int, default=0, help="seed for random and the bootstrap (default: %(default)s)")
    p.add_argument("--k", type=positive_int, default=1, help="tolerance for step accuracy within +-k, at least 1 "
                                                             "(default: %(default)s)")
    p.add_argument("--bootstrap", type=positive_int, default=1000, help="bootstrap resamples (default: %(default)s)")
    p.add_argument("--out-dir", default="eval-out", help="where metrics.json and the PNG plots go (default: %(default)s)")
    add_progress_arg(p)
    p.set_defaults(func=run_eval)


def run_eval(args: argparse.Namespace) -> int:
    from . import baselines
    from .answers import gold_attribution, recovered
    from .builders import row_id
    from .cli import load_source
    from .metrics import agent_confusion, evaluate, one_answer

    if args.api_key_given is not None:  # the key itself is never repeated
        raise ValueError("--api-key is no longer taken (a key on the command line is visible to every process): put "
                         "the key in an environment variable and give its name with --api-key-env VAR")
    imported = load_source(args)
    trajs = [t for t in imported.trajectories if not recovered(t)]
    if len(trajs) < len(imported.trajectories):
        print(f"{args.source}: {len(imported.trajectories) - len(trajs)} recovered runs left out (a labelled fault, "
              "yet the run succeeded: no failure to attribute)", file=sys.stderr)
    if not trajs:
        raise ValueError(f"{args.source}: every trajectory is a recovered run; nothing to score")
    golds = [gold_attribution(t) for t in trajs]
    preds: Sequence[Attribution | None]
    read: list[int | None] = [None] * len(trajs)
    if args.predictions:
        rows = prediction_rows(args.predictions)
        if not rows:
            raise ValueError(f"{args.predictions}: no predictions to score; nothing written")
        matched = match_predictions(trajs, rows, args.predictions)
        preds = [to_attribution(row, args.predictions) if row else None for row in matched]
        read = [turns_read(row, args.predictions) if row else None for row in matched]
        method = f"predictions:{args.predictions}"
    else:
        method = args.method
        attributor: Any
        if method == "random":
            attributor = baselines.RandomBaseline(args.seed)
        elif method in FITTED:
            fit = (load_source(argparse.Namespace(source=args.fit_on, format="auto", no_progress=args.no_progress)).trajectories
                   if args.fit_on else trajs)
            field = "step" if method == "majority-step" else "agent"
            if not any(getattr(gold_attribution(t), field) is not None for t in fit):  # it would answer nothing
                raise ValueError(f"{args.fit_on or args.source}: no trajectory has a gold {field} to fit the "
                                 f"{FITTED[method]} on")
            attributor = (baselines.MostFrequentStep(fit) if method == "majority-step"
                          else baselines.MostFrequentAgent(fit, present_only=method == "majority-present"))
            method = f"{FITTED[method]} (fit on {args.fit_on})" if args.fit_on else f"{FITTED[method]} (oracle: fit on the evaluation set)"
        else:
            attributor = baselines.JUDGES[method](base_url=args.base_url, model=args.model,
                                                  api_key=os.environ.get(args.api_key_env) or None)
        preds = baselines.predict(attributor, trajs, progress=not args.no_progress)
    # the reference scorer divides by every file of the data set, those it could not read included
    report = evaluate(golds, preds, k=args.k, n_resamples=args.bootstrap, seed=args.seed,
                      n_files=len(trajs) + len(imported.errors))
    report["method"] = method
    report["floors"] = floor_scores(golds, trajs, args)
    report["unreachable_gold_steps"] = unreachable_steps(golds, read, [len(t.steps) for t in trajs])
    preds = [one_answer(p) for p in preds]
    report["predictions"] = [
        {"id": row_id(t), "agent": p.agent, "step": p.step, "pairs": [list(x) for x in p.pairs]} if p else {"id": row_id(t)}
        for t, p in zip(trajs, preds)
    ]
    out_dir = Path(args.out_dir)
    outputs = [out_dir / name for name in ("metrics.json", "mode_f1.png", "agent_confusion.png")]
    with ExitStack() as done:  # the three files take their places once all are written
        metrics_tmp, mode_tmp, conf_tmp = (done.enter_context(replacing(path)) for path in outputs)
        metrics_tmp.write_text(json.dumps(report, indent=2, default=list), encoding="utf-8")
        save_plots(report, agent_confusion(golds, preds), mode_tmp, conf_tmp)
    print(f"method: {method}\n{format_table(report)}")
    print(f"wrote {', '.join(map(str, outputs))}")
    return 0
