"""inject: a verified fault-injection campaign over a tasks file (see docs/injection.md).

Runs a deterministic baseline per task, then K sampled injection plans per successful baseline,
keeps the runs whose outcome flipped from success to failure (labelled by construction), and
prints how the baselines went (failed tasks with their answers) and a summary per failure mode
and strategy. Re-running the same command resumes. Exits 1 when no baseline succeeded or no
injected run could be made, 2 on bad input (app, tasks file, options).
"""

from __future__ import annotations

import argparse
import os
import sys

from .common import add_examples, http_url, quiet_frameworks, quiet_imports, seconds
from ..errors import one_line
from ..executors import add_executor_arguments, executor_from_args


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inject", help="run a verified fault-injection campaign (labelled failing runs)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--app", required=True, metavar="MODULE:FACTORY",
                   help="app factory: module:function or path/to/file.py:function (e.g. aegis_probe.demos.autogen:build_app)")
    p.add_argument("--tasks", required=True, help="JSON-lines tasks file ({id, task, type, expected | tests, ...})")
    p.add_argument("--plans-per-run", type=int, default=3, metavar="K", help="plans sampled per successful baseline (default 3)")
    p.add_argument("--out", required=True, metavar="DIR", help="campaign directory (runs.jsonl, traces/, baselines/)")
    p.add_argument("--concurrency", type=int, metavar="N",
                   help="runs at a time (default 1 thread; with --executor ray, the cluster's CPUs)")
    add_executor_arguments(p)
    p.add_argument("--run-timeout", type=float, metavar="SECONDS",
                   help="longest a run may take; a run still going is recorded as timed out (never kept) and "
                        "retried on resume (default: no limit)")
    p.add_argument("--seed", type=int, default=0, help="seed for plan sampling and the app's model, >= 0 (default 0)")
    p.add_argument("--modes", help="comma-separated FM ids to sample from (default: all 14)")
    p.add_argument("--strategies", help="comma-separated: prompt_injection,response_corruption (default both)")
    p.add_argument("--base-url", help="the app's OpenAI-compatible endpoint (default: embedded server with the module's policy)")
    p.add_argument("--model", default="aegis-scripted", help="the app's model name (default: aegis-scripted)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="VAR",
                   help="env var with the API key for --base-url (default: OPENAI_API_KEY; unset: no key, for a "
                        "keyless local server)")
    p.add_argument("--operator", choices=("deterministic", "llm"), default="deterministic", help="manipulator kind (default deterministic)")
    p.add_argument("--manipulator-base-url", help="OpenAI-compatible endpoint of the LLM manipulator (for --operator llm)")
    p.add_argument("--manipulator-model", help="model of the LLM manipulator")
    p.add_argument("--manipulator-api-key-env", default="OPENAI_API_KEY", metavar="VAR",
                   help="env var with its API key (default: OPENAI_API_KEY)")
    p.add_argument("--manipulator-temperature", type=float, default=0.7, help="LLM manipulator temperature (default 0.7)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (drawn on a terminal only)")
    add_examples(p, "--app aegis_probe.demos.autogen:build_app --tasks examples/injection/math_tasks.jsonl "
                    "--plans-per-run 2 --out inject-out",
                 "--app examples/injection/autogen_math.py:build_app --tasks examples/injection/math_tasks.jsonl "
                 "--out inject-out --modes FM-2.6,FM-3.3 --concurrency 4")
    p.set_defaults(func=run)


def _csv(value: str | None, default: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip()) if value else default


def run(args: argparse.Namespace) -> int:
    from ..apps import AppSpec, Endpoint
    from ..injection import MODES, STRATEGIES, LLMManipulator
    from ..injection.campaign import baselines, format_baselines, format_summary, load_tasks, read_records, run_campaign

    for option, url in (("--base-url", args.base_url), ("--manipulator-base-url", args.manipulator_base_url)):
        if url is not None:
            http_url(option, url, "the OpenAI-compatible endpoint's http(s):// URL, e.g. http://localhost:8000/v1")
    endpoint = None
    if args.base_url:  # a keyless local server needs no key
        endpoint = Endpoint(args.base_url, args.model, os.environ.get(args.api_key_env) or "not-needed")
    manipulators = {}
    if args.operator == "llm":
        if not (args.manipulator_base_url and args.manipulator_model):
            raise ValueError("--operator llm needs --manipulator-base-url and --manipulator-model")
        manipulators["llm"] = LLMManipulator(args.manipulator_model, args.manipulator_base_url,
                                             os.environ.get(args.manipulator_api_key_env, "not-needed"),
                                             temperature=args.manipulator_temperature)
    modes, strategies = _csv(args.modes, tuple(MODES)), _csv(args.strategies, STRATEGIES)
    for option, given, known in (("--modes", modes, tuple(MODES)), ("--strategies", strategies, STRATEGIES)):
        unknown = [v for v in given if v not in known]
        if unknown:
            raise ValueError(f"unknown mode/strategy: {', '.join(unknown)} ({option} takes a comma-separated list "
                             f"of {', '.join(known)})")
    if not modes or not strategies:
        raise ValueError(f"--{'modes' if not modes else 'strategies'} names none: give a comma-separated list, or leave it out for all")
    if args.plans_per_run < 0:
        raise ValueError(f"--plans-per-run must be >= 0 (0: the baselines only), not {args.plans_per_run}")
    if args.concurrency is not None and args.concurrency < 1:
        raise ValueError(f"--concurrency must be >= 1, not {args.concurrency}")
    if args.seed < 0:
        raise ValueError(f"--seed must be >= 0, not {args.seed}")
    if args.run_timeout is not None:
        seconds("--run-timeout", args.run_timeout)
    if not 0 <= args.manipulator_temperature < float("inf"):
        raise ValueError(f"--manipulator-temperature must be a number >= 0, not {args.manipulator_temperature}")
    if not os.path.exists(args.tasks) or os.path.isdir(args.tasks):  # before the app is imported
        what = "a directory, not a tasks file" if os.path.isdir(args.tasks) else "no such file"
        raise ValueError(f"--tasks {args.tasks}: {what} (a JSON-lines tasks file, e.g. examples/injection/math_tasks.jsonl)")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise ValueError(f"--out {args.out}: not a directory (the campaign directory: runs.jsonl, traces/, baselines/)")
    with quiet_imports(not getattr(args, "verbose", False)):
        app = AppSpec.load(args.app)
    tasks = load_tasks(args.tasks)
    with quiet_frameworks(not getattr(args, "verbose", False)):
        rows = run_campaign(app, tasks, args.out, plans_per_run=args.plans_per_run, seed=args.seed,
                            executor=executor_from_args(args), endpoint=endpoint, manipulators=manipulators,
                            operator=args.operator, modes=modes, strategies=strategies, progress=not args.no_progress,
                            run_timeout=args.run_timeout)
    base = baselines(args.out, tasks)
    print(format_baselines(base))
    print()
    print(format_summary(rows))
    print(f"\nkept runs (labelled): {args.out}/traces   records: {args.out}/runs.jsonl")
    if not any(b["state"] == "succeeded" for b in base):
        print("error: no baseline succeeded, so there was nothing to inject into (see the reasons above)", file=sys.stderr)
        return 1
    if args.plans_per_run and not sum(r["attempted"] for r in rows):
        errors = [r["error"] for r in read_records(args.out, errors=True).values() if "error" in r]
        why = f"every injected run raised (first: {one_line(errors[0])})" if errors else "no plan could be sampled (does the app module define AGENTS?)"
        print(f"error: no injected run could be made: {why}", file=sys.stderr)
        return 1
    return 0
