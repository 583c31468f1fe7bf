"""``benchmark``: out-of-domain evaluation of a DCL attributor beside the trivial floors.

``python -m aegis_probe.train benchmark --train A [B ...] --test C [D ...]`` trains a DCL
attributor on the training sets (or loads one with ``--model``), then scores it on each test set,
which it never saw, next to floors fit on the training data (most frequent agent, most frequent
agent present in the trace, most frequent step; the structural heuristics: first speaker, last
speaker before the final answer, most talkative agent, last step, step at the median gold
position), a seeded random draw, the expected accuracy of a
uniformly random acting agent and step, and the *oracle* majorities fit on the test set itself
(in-sample, labelled as such). Every number has a percentile bootstrap 95% interval; "above every
floor" means the model's interval lies entirely above each floor's. Nothing is selected on a test
set: the configuration is fixed before any test set is read.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable, Sequence

from aegis_probe.trajectory import Trajectory

from .answers import Attribution, gold_attribution
from .baselines import MostFrequentAgent, MostFrequentStep, RandomBaseline, expected_random, structural_floors
from .builders import build_dcl, dcl_row, row_id
from .dcl.inputs import DEFAULT_ENSEMBLE, INPUTS, input_fields
from .evaluate import unreachable_steps
from .metrics import Metric, accuracy_ci, agent_accuracy, bootstrap_ci, step_accuracy

METRICS: dict[str, Metric] = {
    "agent": agent_accuracy,
    "step": step_accuracy,
    "step±1": lambda g, p: step_accuracy(g, p, 1),
}
#: the gold label each metric is computed over (traces without it are not resampled for its interval)
FIELDS = {"agent": "agent", "step": "step", "step±1": "step"}
MODEL = "DCL (trained on the training sets)"


def load_sets(paths: Sequence[str], fmt: str = "auto", labels_dir: str | None = None,
              progress: bool = False) -> dict[str, list[Trajectory]]:
    """Each path's trajectories (any import format; ``labels_dir`` is read for TRAIL sources), with
    the import summary and the first records that failed on stderr; a trajectory without steps is
    an error naming it."""
    from .cli import load_source
    from .importers import detect

    sets = {}
    for path in paths:
        kind = detect(path) if fmt == "auto" else fmt  # detected once: load_source reads it as given
        trail = labels_dir if kind == "trail" else None
        trajs = load_source(argparse.Namespace(source=path, format=kind, labels_dir=trail,
                                               no_progress=not progress)).trajectories
        empty = next((t for t in trajs if not t.steps), None)
        if empty is not None:
            raise ValueError(f"{path}: trajectory {row_id(empty)!r} has no steps to attribute")
        sets[path] = trajs
    return sets


def content_key(traj: Trajectory) -> str:
    """What makes two imported trajectories the same run: their task and what each step's agent
    said, as an attributor reads them (not their ids, which repeat across data sets: Who&When's
    subsets both name their files ``1.json``, ...; nor what a format keeps beside the text, such
    as span ids, times and roles, so a stored trace and its Who&When export are the same run)."""
    return json.dumps([traj.task or "", [(s.agent, s.output or "") for s in traj.steps]], ensure_ascii=False)


def labelled(trajs: Sequence[Trajectory]) -> list[Trajectory]:
    """The trajectories with a gold agent or step (the failures an attributor is scored on)."""
    return [t for t in trajs if (g := gold_attribution(t)).agent is not None or g.step is not None]


def dcl_predictions(model: Any, trajs: Sequence[Trajectory], progress: bool = True) -> tuple[list[Attribution], list[int]]:
    """The model's joint (agent, step) answer per trajectory, and how many turns it read of each."""
    preds = model.predict_many([dcl_row(t) for t in trajs], progress=progress)
    answers = [Attribution(p["agent"], p["step"], [(p["agent"], p["top_pair"]["mode"])]) for p in preds]
    return answers, [p["turns_read"] for p in preds]


def _interval(metric: Metric, field: str, golds: Sequence[Attribution], preds: Sequence[Attribution | None],
              n_resamples: int, seed: int) -> dict[str, Any]:
    lo, hi = accuracy_ci(metric, field, golds, preds, n_resamples=n_resamples, seed=seed) or (0.0, 0.0)
    return {"value": metric(golds, preds), "ci95": [lo, hi]}


def _expected(values: list[float], n_resamples: int, seed: int) -> dict[str, Any]:
    mean: Callable[[Sequence[Any], Sequence[Any]], float] = lambda v, _: sum(v) / len(v) if v else 0.0  # noqa: E731
    samples: Any = values  # the bootstrap resamples any per-trace sequence
    lo, hi = bootstrap_ci(mean, samples, samples, n_resamples=n_resamples, seed=seed)
    return {"value": mean(values, values), "ci95": [lo, hi]}


def score_set(train: Sequence[Trajectory], test: Sequence[Trajectory], model_preds: Sequence[Attribution],
              turns_read: Sequence[int], *, n_resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """The model and every floor on ``test`` (labelled failures), with 95% intervals."""
    golds = [gold_attribution(t) for t in test]
    fitted = labelled(train)
    floors: dict[str, Callable[[Trajectory], Attribution | None]] = {
        "most frequent agent (fit on train)": MostFrequentAgent(fitted),
        "most frequent agent present (fit on train)": MostFrequentAgent(fitted, present_only=True),
        "most frequent step (fit on train)": MostFrequentStep(fitted),
        **structural_floors(fitted, "train"),
        "random draw (seeded)": RandomBaseline(seed),  # one generator for the whole set
        "oracle: most frequent agent present (fit on this test set)": MostFrequentAgent(test, present_only=True),
        "oracle: most frequent step (fit on this test set)": MostFrequentStep(test),
    }
    systems: dict[str, list[Attribution | None]] = {MODEL: list(model_preds),
                                                    **{name: list(map(floor, test)) for name, floor in floors.items()}}
    results = {name: {m: _interval(fn, FIELDS[m], golds, preds, n_resamples, seed) for m, fn in METRICS.items()}
               for name, preds in systems.items()}
    chance = [expected_random(t, g) for t, g in zip(test, golds)]
    results["expected random (acting agent, step)"] = {  # over the traces with that label, as the accuracies
        "agent": _expected([a for (a, _), g in zip(chance, golds) if g.agent is not None], n_resamples, seed),
        "step": _expected([s for (_, s), g in zip(chance, golds) if g.step is not None], n_resamples, seed),
    }
    unreachable = unreachable_steps(golds, turns_read, [len(t.steps) for t in test])
    others = [r for name, r in results.items() if name != MODEL]
    above = {m: all(results[MODEL][m]["ci95"][0] > f[m]["ci95"][1] for f in others if m in f) for m in ("agent", "step")}
    steps = sorted(len(t.steps) for t in test)
    return {"n": len(test), "steps_min_median_max": [steps[0], steps[len(steps) // 2], steps[-1]],
            "unreachable_gold_steps": unreachable, "above_every_floor": above, "results": results}


def table(part: dict[str, Any]) -> str:
    """One test set's results as a Markdown table (percent, interval in brackets)."""
    cell = lambda r: f"{100 * r['value']:.1f} [{100 * r['ci95'][0]:.1f}, {100 * r['ci95'][1]:.1f}]" if r else "-"  # noqa: E731
    lines = ["| attributor | " + " | ".join(f"{m} acc. [95% CI]" for m in METRICS) + " |", "|---" * (len(METRICS) + 1) + "|"]
    lines += [f"| {name} | " + " | ".join(cell(r.get(m)) for m in METRICS) + " |" for name, r in part["results"].items()]
    return "\n".join(lines)


def check_fresh_out(out: Path, model: str | None) -> None:
    """Refuse an ``--out`` that holds an earlier run's results (or, when training, its model); a
    model whose run failed after training is reused with ``--model OUT/model``, not retrained over."""
    trained = out / "model"
    if (out / "benchmark.json").exists():
        held = ", ".join(p.name for p in (out / "benchmark.json", trained) if p.exists())
        raise ValueError(f"{out} holds an earlier benchmark run ({held}): choose another --out, or remove it")
    if model is None and trained.exists():
        raise ValueError(f"{out} holds the trained model of an earlier benchmark run that did not finish ({trained}): "
                         f"score it without training again with --model {trained}, or choose another --out, "
                         "or remove it")


def run(args: argparse.Namespace) -> int:
    from .dcl.attributor import DCLAttributor
    from .dcl.reading import FEATURES, check_features
    from .dcl.train import DCLConfig, fit
    from .files import replacing_dir, write_text

    out = Path(args.out)
    check_fresh_out(out, args.model)
    if args.features and not args.model:
        check_features(args.features)  # before anything is read or written
    train_sets = load_sets(args.train, args.format, args.labels_dir, progress=not args.no_progress)
    test_sets = load_sets(args.test, args.format, args.labels_dir, progress=not args.no_progress)
    tests = {path: labelled(trajs) for path, trajs in test_sets.items()}  # what is scored
    unlabelled = [path for path, test in tests.items() if not test]
    if unlabelled:  # before any training
        raise ValueError(f"{unlabelled[0]}: no labelled failures to score")
    train = [t for ts in train_sets.values() for t in ts]
    seen = {content_key(t) for t in train}
    for path, test in tests.items():
        overlap = sum(content_key(t) in seen for t in test)
        if overlap:
            raise ValueError(f"{path}: {overlap} of its labelled failures are also in the training sets (same task "
                             "and steps); a test set must be unseen")
    if args.model:
        model = DCLAttributor.load(args.model)
        if args.embedding_cache:
            model.load_cache(args.embedding_cache)
    else:
        cfg = DCLConfig(epochs=args.epochs, seed=args.seed, anonymise_agents=not args.keep_agent_names,
                        **input_fields(args.inputs), features=args.features or list(FEATURES),
                        train_encoder=args.train_encoder, embedding_cache=args.embedding_cache or "",
                        ensemble=args.ensemble)
        with replacing_dir(out / "model") as partial:  # out/model appears only once complete
            model = fit(build_dcl(train), partial, cfg, progress=not args.no_progress)
    report: dict[str, Any] = {"train": {p: len(ts) for p, ts in train_sets.items()},
                              "model": str(args.model or out / "model"), "seed": args.seed,
                              "inputs": {k: model.spec.get(k) for k in ("reading_features", "features", "text_embeddings",
                                                                         "anonymise_agents", "members")},
                              "tests": {}}
    for path, test in tests.items():
        preds, turns_read = dcl_predictions(model, test, progress=not args.no_progress)
        if args.embedding_cache:
            model.save_cache(args.embedding_cache)
        part = score_set(train, test, preds, turns_read, n_resamples=args.bootstrap, seed=args.seed)
        part["predictions"] = [{"id": row_id(t), "agent": p.agent, "step": p.step, "gold_agent": g.agent, "gold_step": g.step}
                               for t, p, g in zip(test, preds, map(gold_attribution, test))]
        report["tests"][path] = part
        lo, mid, hi = part["steps_min_median_max"]
        print(f"\ntest {path}: {part['n']} labelled failures ({len(test_sets[path]) - part['n']} unlabelled left out), "
              f"{lo}-{hi} steps (median {mid}); gold steps unreachable: {part['unreachable_gold_steps']}")
        print(table(part))
        verdict = ", ".join(f"{m}: {'yes' if ok else 'no'}" for m, ok in part["above_every_floor"].items())
        print(f"above every floor (intervals do not overlap): {verdict}")
    write_text(out / "benchmark.json", json.dumps(report, indent=2))
    print(f"\nwrote {out / 'benchmark.json'}")
    return 0


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """The ``benchmark`` subcommand."""
    from .cli import add_progress_arg, positive_int, seed_int
    from .importers import FORMATS

    p = subparsers.add_parser("benchmark", help="train (or load) a DCL attributor and score it on unseen test sets "
                                                "beside the floors", description=__doc__.split("\n\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train", nargs="+", required=True, metavar="SOURCE", help="training sets (any import format)")
    p.add_argument("--test", nargs="+", required=True, metavar="SOURCE", help="test sets, each scored on its own")
    p.add_argument("--format", default="auto", choices=["auto", *FORMATS], help="input format (default: sniffed)")
    p.add_argument("--labels-dir", help="TRAIL sources: directory of label files")
    p.add_argument("--model", help="a trained DCL directory to score instead of training one (floors still fit on --train)")
    p.add_argument("--out", default="runs/benchmark", help="output directory (model/, benchmark.json; default: "
                                                       "%(default)s); one holding an earlier run is refused")
    p.add_argument("--epochs", type=positive_int, default=30, help="DCL training epochs (default: %(default)s)")
    p.add_argument("--seed", type=seed_int, default=0, help="seed of training, the random draw and the bootstrap (default: %(default)s)")
    p.add_argument("--ensemble", type=positive_int, default=DEFAULT_ENSEMBLE, metavar="K",
                   help="train K models, seeds seed .. seed+K-1, and average their joint (agent, step) log-scores "
                        "(default: %(default)s)")
    p.add_argument("--bootstrap", type=positive_int, default=1000, help="bootstrap resamples (default: %(default)s)")
    p.add_argument("--inputs", default="features", choices=list(INPUTS),
                   help="what the model reads of each turn: " + "; ".join(f"{k}: {v}" for k, v in INPUTS.items()))
    p.add_argument("--features", nargs="+", metavar="NAME", help="the reading features read (default: "
                   "training/dcl/reading.py's FEATURES; round 2 read ROUND2)")
    p.add_argument("--keep-agent-names", action="store_true", help="ablation: let the encoder read agent names")
    p.add_argument("--train-encoder", action="store_true", help="fine-tune the encoder too (slow on CPU)")
    p.add_argument("--embedding-cache", metavar="FILE", help="safetensors file of turn embeddings shared between "
                                                            "runs (same encoder; created if missing)")
    add_progress_arg(p)
    p.set_defaults(func=run)
    return p
