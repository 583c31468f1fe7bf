#!/usr/bin/env bash
# The injection campaigns of docs/results.md (round 4), from the repository root: the training
# campaigns (long-horizon team seeds 0 and 1) and the fresh test campaigns (long-horizon seed 3;
# MetaGPT, CAMEL and LangGraph math teams seed 2). Writes runs/inject-*.
set -euo pipefail
cd "$(dirname "$0")/../.."
for s in 0 1 3; do
  out=runs/inject-longhorizon$([[ $s == 0 ]] || echo "-s$s")
  python -m aegis_probe inject --app examples/longhorizon/team.py:build_app \
      --tasks examples/longhorizon/tasks.jsonl --plans-per-run 8 --seed "$s" --out "$out"
done
for fw in metagpt camel langgraph; do
  python -m aegis_probe inject --app "examples/injection/${fw}_math.py:build_app" \
      --tasks examples/injection/math_tasks.jsonl --plans-per-run 24 --seed 2 --out "runs/inject-$fw-s2"
done
