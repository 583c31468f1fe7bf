"""Each fresh test set minus the runs that repeat a training run (same task and steps, as
``train benchmark`` compares them), written beside it as ``<campaign>-unseen.jsonl`` (one
Trajectory JSON a line, what ``train import`` writes). Prints counts only, so nothing of a test
set is read before its run: ``python scripts/results/unseen.py --train A B --fresh C D``."""

from __future__ import annotations

import argparse
from pathlib import Path

from aegis_probe.train.benchmark import content_key, labelled, load_sets
from aegis_probe.train.importers.native import write


def unseen_path(fresh: str) -> Path:
    """``runs/inject-camel-s2/traces`` -> ``runs/inject-camel-s2-unseen.jsonl``."""
    path = Path(fresh)
    campaign = path.parent if path.name == "traces" else path.with_suffix("")
    return campaign.with_name(campaign.name + "-unseen.jsonl")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", nargs="+", required=True, help="the training sets (any import format)")
    parser.add_argument("--fresh", nargs="+", required=True, help="the fresh test sets")
    args = parser.parse_args()
    seen = {content_key(t) for trajs in load_sets(args.train).values() for t in trajs}
    for path, trajs in load_sets(args.fresh).items():
        failures = labelled(trajs)
        kept = [t for t in failures if content_key(t) not in seen]
        out = unseen_path(path)
        write(kept, str(out))
        print(f"{path}: {len(failures)} labelled failures, {len(failures) - len(kept)} repeat a training run, {len(kept)} -> {out}")


if __name__ == "__main__":
    main()
