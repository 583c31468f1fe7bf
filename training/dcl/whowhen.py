"""Who&When Algorithm-Generated benchmark of the DCL attributor, in one command::

    python -m aegis_probe.train.dcl.whowhen --out runs/dcl-whowhen

Imports the shared data (``$AEGIS_SHARED_DATA``, default ``<repo>/../shared/data``), splits it
by a seeded shuffle, trains DCL on the training part and reports strict agent/step accuracy on the
held-out part beside the random and most-frequent-agent baselines, plus CPU throughput.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from ..answers import Attribution, gold_attribution
from ..baselines import MostFrequentAgent, RandomBaseline
from ..builders import build_dcl
from ..data import whowhen_dir
from ..importers.whowhen import load
from ..metrics import agent_accuracy, step_accuracy
from .train import DCLConfig, fit


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m aegis_probe.train.dcl.whowhen", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/dcl-whowhen", help="output directory (model, log.jsonl, report.json)")
    p.add_argument("--test-fraction", type=float, default=0.3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=40)
    args = p.parse_args(argv)

    trajs = sorted(load(whowhen_dir()).trajectories, key=lambda t: str(t.run_id or t.trace_id))
    random.Random(args.seed).shuffle(trajs)
    n_test = round(len(trajs) * args.test_fraction)
    test, train = trajs[:n_test], trajs[n_test:]
    model = fit(build_dcl(train), args.out, DCLConfig(epochs=args.epochs, seed=args.seed))

    from ..attribute import attribute_rows

    preds, rate = attribute_rows(model, build_dcl(test))
    golds = [gold_attribution(t) for t in test]
    systems = {
        "DCL (this run)": [Attribution(p["agent"], p["step"]) for p in preds],
        "random (seeded)": list(map(RandomBaseline(args.seed), test)),
        "most frequent agent": list(map(MostFrequentAgent(train), test)),
        "most frequent agent present": list(map(MostFrequentAgent(train, present_only=True), test)),
    }
    report = {"train": len(train), "test": len(test), "throughput_traj_per_s": round(rate, 2),
              "results": {name: {"agent_accuracy": round(agent_accuracy(golds, pr), 4),
                                 "step_accuracy": round(step_accuracy(golds, pr), 4)} for name, pr in systems.items()}}
    Path(args.out, "report.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    print(f"train {len(train)} / held-out {len(test)}; DCL attribution {rate:.1f} trajectories/s on CPU")
    print("| attributor | agent acc. | step acc. |\n|---|---|---|")
    for name, r in report["results"].items():
        print(f"| {name} | {100 * r['agent_accuracy']:.1f} | {100 * r['step_accuracy']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
