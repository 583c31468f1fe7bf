"""``blame``: find the decisive error of a failed stored run by counterfactual replay.

Steps before t come from the run's recording, step t is replaced by a corrected action, the
rest runs live against the model endpoint, and a judge scores the result. The earliest step
whose correction flips the run to success is reported and written onto the trace as a label.
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import ExitStack

from ..apps import AppSpec, Endpoint, check_signature, load_module
from .common import add_examples, http_url, quiet_frameworks, quiet_imports
from ..errors import one_line
from ..executors import add_executor_arguments, executor_from_args
from .traces import store_at, stored


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("blame", help="find the earliest step whose correction flips a failed run",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", required=True, metavar="ID", help="trace id (or unique prefix) in the store")
    p.add_argument("--app", required=True, metavar="MODULE[:ATTR]",
                   help="app spec with build_app(base_url, model, api_key) and run_app(app, task), e.g. aegis_probe.demos.autogen")
    p.add_argument("--dir", help="trace store directory (default: $AEGIS_TRACE_DIR or ./aegis-traces)")
    p.add_argument("--base-url", help="live model endpoint for the steps after the correction "
                                      "(default: the app's embedded scripted policy, when it has one)")
    p.add_argument("--model", default="aegis-scripted", help="live model name (default: aegis-scripted)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="VAR",
                   help="environment variable with the API key (default: OPENAI_API_KEY; unset: no key)")
    fix = p.add_mutually_exclusive_group(required=True)
    fix.add_argument("--fixer", metavar="MODULE:FUNC",
                     help="fixer(trajectory, step) -> corrected text; MODULE may be a file.py (e.g. examples/fixers.py:recompute)")
    fix.add_argument("--analyzer-url", metavar="URL", help="OpenAI-compatible endpoint of an analyzer LLM that proposes fixes")
    p.add_argument("--analyzer-model", default="gpt-4o-mini",
                   help="analyzer model name (with --analyzer-url; default: gpt-4o-mini)")
    p.add_argument("--show-expected", action="store_true", help="let the analyzer see the expected answer")
    p.add_argument("--expected", help="expected answer for the default judge (default: the one recorded on the trace)")
    p.add_argument("--mode", choices=("scan", "bisect"), default="scan",
                   help="scan: exact, t = 0, 1, ...; bisect: heuristic binary search (see docs/replay.md; "
                        "default: scan)")
    p.add_argument("--max-replays", type=int, default=20, help="replay budget (default 20)")
    p.add_argument("--max-tokens", type=int, default=None, help="budget of live model tokens (default: no limit)")
    p.add_argument("--concurrency", type=int, metavar="N",
                   help="scan: replays at a time (default 1; with --executor ray, the cluster's CPUs)")
    add_executor_arguments(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar (drawn on a terminal only)")
    add_examples(p, "--trace 3f2a --app aegis_probe.demos.autogen --fixer examples/fixers.py:recompute",
                 "--trace 3f2a --app myapp --base-url http://127.0.0.1:8000/v1 --model qwen "
                 "--analyzer-url http://127.0.0.1:8000/v1 --analyzer-model qwen --mode bisect")
    p.set_defaults(func=run)


def _load_fixer(target: str):
    module, _, func = target.rpartition(":")
    if not module or not func:
        raise ValueError(f"--fixer {target}: expected MODULE:FUNC or path/to/file.py:FUNC")
    try:
        fixer = getattr(load_module(module, f"--fixer {target}"), func)
    except AttributeError as exc:
        raise ValueError(f"--fixer {target}: {exc}") from exc
    if not callable(fixer):
        raise ValueError(f"--fixer {target}: {func} is not callable")
    check_signature(fixer, 2, f"--fixer {target}: {func}(trajectory, step)")
    return fixer


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ..counterfactual import AnalyzerFixer, RecordingError, blame
    from ..injection.judges import judge_for
    from ..modelserver import ModelServer

    for option, value, low in (("--max-replays", args.max_replays, 0), ("--max-tokens", args.max_tokens, 0),
                               ("--concurrency", args.concurrency, 1)):
        if value is not None and value < low:
            raise ValueError(f"{option} must be >= {low}, not {value}")
    for option, url in (("--base-url", args.base_url), ("--analyzer-url", args.analyzer_url)):
        if url is not None:
            http_url(option, url, "the OpenAI-compatible endpoint's http(s):// URL, e.g. http://localhost:8000/v1")
    with quiet_imports(not getattr(args, "verbose", False)):
        app = AppSpec.load(args.app)
    api_key = os.environ.get(args.api_key_env) or "not-needed"  # a keyless local server needs none
    store = store_at(args.dir)
    if store.path.is_file():  # read as a trace file, but the replays and the label are written into a store
        raise ValueError(f"--dir {store.path}: a file, not a trace store directory (blame writes its replays and "
                         f"label into the store: give {store.path.parent})")
    original = stored(store, args.trace)
    if original.outcome.success is True:
        raise ValueError(f"trace {original.trace_id} succeeded: blame needs a failed run "
                         "(make one with: demo --inject FM-2.6)")
    if original.task is None:  # before the judge: without content there is nothing to replay
        raise ValueError(f"trace {original.trace_id} was recorded without message content (capture_content off); "
                         "blame replays the run and needs it")
    expected = args.expected or original.outcome.expected
    judge = app.judge or (judge_for({"expected": expected}) if expected else None)
    if judge is None:
        print("error: no judge: give --expected, or define judge(task, answer) in the app module", file=sys.stderr)
        return 2
    n_steps = len(original.steps)
    with ExitStack() as stack:
        stack.enter_context(quiet_frameworks(not getattr(args, "verbose", False)))
        if args.base_url:
            endpoint = Endpoint(args.base_url, args.model, api_key)
        elif app.policy is not None:
            server = stack.enter_context(ModelServer(app.policy))
            endpoint = Endpoint(server.base_url, args.model, "not-needed")
        else:
            print("error: --base-url is needed: the app has no embedded policy", file=sys.stderr)
            return 2
        fixer = (_load_fixer(args.fixer) if args.fixer
                 else AnalyzerFixer(args.analyzer_url, args.analyzer_model, api_key, show_expected=args.show_expected))
        bar = stack.enter_context(tqdm(total=min(n_steps, args.max_replays), desc="replays", unit="replay",
                                               disable=args.no_progress))
        parallel = executor_from_args(args) if args.executor == "ray" or (args.concurrency or 1) > 1 else None
        try:
            report = blame(args.trace, app, fixer=fixer, judge=judge, endpoint=endpoint, mode=args.mode,
                           max_replays=args.max_replays, max_tokens=args.max_tokens, store=store,
                           on_attempt=lambda a: bar.update(1), executor=parallel)
        except RecordingError as exc:  # the stored trace cannot be replayed: name the store it is in
            raise RecordingError(f"{store.path}: {exc}") from None
    for a in report.attempts:
        verdict = "inconclusive" if a.inconclusive else {True: "success", False: "failure", None: "not judged"}[a.success]
        print(f"  step {a.step:>3} {a.agent:<16} -> {verdict}" + (f" ({one_line(a.error)})" if a.error else ""))
    if report.found:
        print(f"decisive error: step {report.step} by {report.agent} (mode {report.mode}); label written to trace {report.trace_id}")
    else:
        print("no correction flipped the run" + (f"; search ended early: {report.exhausted}" if report.exhausted else ""))
    return 0 if report.found else 1
