"""DCL benchmark on Who&When Algorithm-Generated plus injected traces, in one command::

    python -m aegis_probe.train.dcl.whowhen --out runs/dcl-whowhen

Imports the shared Who&When data (``$AEGIS_SHARED_DATA``, default ``<repo>/../shared/data``) and
runs a small offline fault-injection campaign over the example apps (cached in ``OUT/injection``),
splits both deterministically (Who&When by trace, injected runs by task group), trains DCL on the
training parts and scores each held-out part beside the random and most-frequent-agent baselines
(Who&When: strict agent/step accuracy; injected: also pair/agent/mode micro-F1), with bootstrap
95% intervals and CPU attribution throughput. ``--plans-per-run 0`` leaves injection out.
The model reads the reading features only unless ``--inputs`` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any, Sequence

from aegis_probe.trajectory import Trajectory

from ..answers import Attribution, gold_attribution
from ..baselines import MostFrequentAgent, RandomBaseline
from ..builders import build_dcl, dcl_row, is_positive
from ..data import whowhen_dir
from ..importers.whowhen import load
from ..metrics import Metric, agent_accuracy, bootstrap_ci, set_f1, step_accuracy
from .attributor import DCLAttributor
from .injected import campaign, split_by_group
from .inputs import INPUTS, input_fields
from .train import DCLConfig, fit

def micro_f1(level: str) -> Metric:
    """Micro-F1 at ``level`` as a metric."""
    return lambda golds, preds: float(set_f1(golds, preds, level)["micro_f1"])  # type: ignore[arg-type]


METRICS: dict[str, Metric] = {
    "agent_accuracy": agent_accuracy,
    "step_accuracy": step_accuracy,
    **{f"{level}_micro_f1": micro_f1(level) for level in ("pair", "agent", "mode")},
}
COLUMNS = {"whowhen": ("agent_accuracy", "step_accuracy"), "injected": tuple(METRICS)}


def split_traces(trajs: Sequence[Trajectory], fraction: float, seed: int) -> tuple[list[Trajectory], list[Trajectory]]:
    """(train, held-out): a seeded shuffle of the traces sorted by id, the first ``fraction`` held out."""
    ordered = sorted(trajs, key=lambda t: str(t.run_id or t.trace_id))
    random.Random(seed).shuffle(ordered)
    n_test = round(len(ordered) * fraction)
    return ordered[n_test:], ordered[:n_test]


def dcl_attribution(pred: dict[str, Any]) -> Attribution:
    """A DCL prediction as one (agent, step, [(agent, mode)]) answer, like the baselines give."""
    return Attribution(pred["agent"], pred["step"], [(pred["agent"], pred["top_pair"]["mode"])])


def score(model: DCLAttributor, train: list[Trajectory], test: list[Trajectory], seed: int) -> dict[str, Any]:
    """DCL and the baselines (fitted on ``train``) on ``test``: every metric with its bootstrap
    95% interval, plus DCL's throughput in trajectories/s (encoding included)."""
    from ..attribute import attribute_rows

    preds, rate = attribute_rows(model, [dcl_row(t) for t in test])
    golds = [gold_attribution(t) for t in test]
    systems: dict[str, list[Attribution | None]] = {
        "DCL (this run)": [dcl_attribution(p) for p in preds],
        "random (seeded)": list(map(RandomBaseline(seed), test)),
        "most frequent agent": list(map(MostFrequentAgent(train), test)),
        "most frequent agent present": list(map(MostFrequentAgent(train, present_only=True), test)),
    }
    results = {name: {m: {"value": round(fn(golds, pr), 4),
                          "ci95": [round(x, 4) for x in bootstrap_ci(fn, golds, pr, seed=seed)]}
                      for m, fn in METRICS.items()} for name, pr in systems.items()}
    return {"train": len(train), "test": len(test), "throughput_traj_per_s": round(rate, 2), "results": results}


def table(part: dict[str, Any], columns: Sequence[str]) -> str:
    """One part's results as a Markdown table (percent, interval in brackets)."""
    cell = lambda r: f"{100 * r['value']:.1f} [{100 * r['ci95'][0]:.0f}, {100 * r['ci95'][1]:.0f}]"  # noqa: E731
    lines = ["| attributor | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    lines += [f"| {name} | " + " | ".join(cell(r[c]) for c in columns) + " |" for name, r in part["results"].items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m aegis_probe.train.dcl.whowhen", description=__doc__.split("\n\n")[0].rstrip(":") + ".",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", default="runs/dcl-whowhen", help="output directory (model, log.jsonl, report.json, injection/)")
    p.add_argument("--test-fraction", type=float, default=0.3, help="held out: of Who&When traces, of injected task groups")
    p.add_argument("--seed", type=int, default=0, help="seed of the split, the campaign and training")
    p.add_argument("--epochs", type=int, default=40, help="DCL training epochs")
    p.add_argument("--plans-per-run", type=int, default=24, help="injection plans per successful baseline (0: none)")
    p.add_argument("--inputs", default="features", choices=list(INPUTS),
                   help="what the model reads of each turn: " + "; ".join(f"{k}: {v}" for k, v in INPUTS.items()))
    p.add_argument("--embedding-cache", default="", help="safetensors file of turn embeddings reused across runs "
                                                         "(--inputs with text)")
    args = p.parse_args(argv)
    for option, bad, accepted in (("--test-fraction", not 0 < args.test_fraction < 1, "between 0 and 1"),
                                  ("--epochs", args.epochs < 1, "at least 1"), ("--plans-per-run", args.plans_per_run < 0, "at least 0"),
                                  ("--seed", args.seed < 0, "at least 0")):
        if bad:
            p.error(f"{option} must be {accepted}, not {getattr(args, option[2:].replace('-', '_'))}")

    ww_train, ww_test = split_traces(load(whowhen_dir(must_exist=True)).trajectories, args.test_fraction, args.seed)
    injected = campaign(Path(args.out, "injection"), args.plans_per_run, args.seed) if args.plans_per_run else []
    inj_train, inj_held = split_by_group(injected, args.test_fraction, args.seed)
    inj_test = [t for t in inj_held if not is_positive(t)]  # the held-out failures; their baselines stay unused
    model = fit(build_dcl(ww_train + inj_train), args.out,
                DCLConfig(epochs=args.epochs, seed=args.seed, embedding_cache=args.embedding_cache,
                          **input_fields(args.inputs)))

    parts = {"whowhen": score(model, ww_train, ww_test, args.seed)}
    if inj_test:
        parts["injected"] = score(model, [t for t in inj_train if not is_positive(t)], inj_test, args.seed)
        parts["injected"]["train_clean_baselines"] = sum(map(is_positive, inj_train))
    report = {"seed": args.seed, "test_fraction": args.test_fraction, "epochs": args.epochs, "inputs": args.inputs,
              "plans_per_run": args.plans_per_run, **parts}
    Path(args.out, "report.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    for name, part in parts.items():
        print(f"\n{name}: train {part['train']} / held-out {part['test']}; "
              f"DCL attribution {part['throughput_traj_per_s']:.1f} trajectories/s on CPU")
        print(table(part, COLUMNS[name]))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, ValueError) as exc:  # missing data, bad records: one line, no traceback
        sys.exit(f"error: {exc}")
