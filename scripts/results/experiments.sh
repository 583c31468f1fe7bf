#!/usr/bin/env bash
# The registered test runs of docs/results.md (round 4), after scripts/results/campaigns.sh:
# AG + LH -> the fresh sets, and LH -> AG, with seeds 0, 1 and 2. Needs AEGIS_SHARED_DATA (the
# folder holding whowhen/Algorithm-Generated, docs/training-data.md). Writes runs/r4-*.
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${AEGIS_SHARED_DATA:?set AEGIS_SHARED_DATA to the folder holding whowhen/Algorithm-Generated}"
AG=$AEGIS_SHARED_DATA/whowhen/Algorithm-Generated
LH="runs/inject-longhorizon/traces runs/inject-longhorizon/baselines runs/inject-longhorizon-s1/traces runs/inject-longhorizon-s1/baselines"
FRESH="runs/inject-longhorizon-s3/traces runs/inject-metagpt-s2/traces runs/inject-camel-s2/traces runs/inject-langgraph-s2/traces"
# shellcheck disable=SC2086  # the sets are lists of paths
python scripts/results/unseen.py --train $AG $LH --fresh $FRESH   # -> each fresh set minus repeats, *-unseen.jsonl
UNSEEN="runs/inject-longhorizon-s3-unseen.jsonl runs/inject-metagpt-s2-unseen.jsonl runs/inject-camel-s2-unseen.jsonl runs/inject-langgraph-s2-unseen.jsonl"
for seed in 0 1 2; do
  python -m aegis_probe.train benchmark --train $AG $LH --test $UNSEEN --out "runs/r4-aglh-to-fresh-s$seed" --seed "$seed"
  python -m aegis_probe.train benchmark --train $LH --test $AG --out "runs/r4-lh-to-ag-s$seed" --seed "$seed"
done
