"""``blame``: which agent, at which step, caused a failed stored run; three methods.

- ``replay`` (default): counterfactual replay. Steps before t come from the run's recording, step
  t is replaced by a fixer's corrected action, the rest runs live, and the run judge scores the
  result; the earliest step whose correction flips the run to success is the decisive error
  (``--search scan``: exact, t = 0, 1, ...; ``bisect``: heuristic binary search). Needs the app.
- ``judge``: the Who&When LLM judges (all-at-once, step-by-step, binary-search) read the stored
  trace on any OpenAI-compatible endpoint (--base-url); no app needed. With ``--verify`` (and the
  app, a fixer), the judge's top-k candidate steps are replayed: the earliest that flips wins.
- ``spectrum``: no fixer and no judge model: the app is re-run live N times (its own model,
  sampled), each run judged pass/fail by the run judge, and (agent, action) events ranked by a
  spectrum score (Ochiai; Tarantula, DStar) over passing and failing runs.

Each method writes its verdict onto the trace as the label set of its own source
(``blame:replay:<search>``, ``blame:judge:<judge>``, ``blame:judge+replay:<judge>``,
``blame:spectrum:<formula>``), next to every other label, never over one.
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import ExitStack
from typing import Any

from ..apps import AppSpec, Endpoint, check_signature, load_module
from .common import add_examples, http_url, quiet_frameworks, quiet_imports
from ..errors import one_line
from ..executors import add_executor_arguments, executor_from_args
from ..trajectory import Trajectory
from .traces import store_at, stored

METHODS = ("replay", "judge", "spectrum")


def add_parser(sub: argparse._SubParsersAction) -> None:
    from ..diagnosis.judges import JUDGES
    from ..diagnosis.spectrum import ACTIONS, DEFAULT_ACTIONS, FORMULAS, SIMILARITY

    p = sub.add_parser("blame", help="find which agent, at which step, caused a failed run (replay, judge, spectrum)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", required=True, metavar="ID", help="trace id (or unique prefix) in the store")
    p.add_argument("--method", choices=METHODS, default="replay",
                   help="replay: counterfactual replay with a fixer; judge: an LLM judge on the stored trace; "
                        "spectrum: live re-runs ranked by a spectrum score (default: replay)")
    p.add_argument("--app", metavar="MODULE[:ATTR]",
                   help="app spec with build_app(base_url, model, api_key) and run_app(app, task), e.g. "
                        "aegis_probe.demos.autogen (replay, spectrum and judge --verify need it)")
    p.add_argument("--dir", help="trace store directory (default: $AEGIS_TRACE_DIR or ./aegis-traces)")
    p.add_argument("--base-url", help="replay, spectrum: the app's live model endpoint (default: the app's embedded "
                                      "scripted policy, when it has one); judge: the judge's endpoint (required)")
    p.add_argument("--model", default="aegis-scripted", help="model name at --base-url (default: aegis-scripted)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="VAR",
                   help="environment variable with the API key (default: OPENAI_API_KEY; unset: no key)")
    fix = p.add_mutually_exclusive_group()
    fix.add_argument("--fixer", metavar="MODULE:FUNC",
                     help="replay, judge --verify: fixer(trajectory, step) -> corrected text; MODULE may be a file.py "
                          "(e.g. examples/fixers.py:recompute)")
    fix.add_argument("--analyzer-url", metavar="URL", help="replay, judge --verify: OpenAI-compatible endpoint of an "
                                                           "analyzer LLM that proposes fixes")
    p.add_argument("--analyzer-model", default="gpt-4o-mini",
                   help="analyzer model name (with --analyzer-url; default: gpt-4o-mini)")
    p.add_argument("--show-expected", action="store_true", help="let the analyzer see the expected answer")
    p.add_argument("--expected", help="expected answer for the default run judge (default: the one recorded on the trace)")
    p.add_argument("--search", choices=("scan", "bisect"), default="scan",
                   help="replay: scan: exact, t = 0, 1, ...; bisect: heuristic binary search (see docs/replay.md; "
                        "default: scan)")
    p.add_argument("--judge", choices=tuple(JUDGES), default="all-at-once",
                   help="judge: which Who&When judge (default: all-at-once)")
    p.add_argument("--verify", action="store_true",
                   help="judge: replay the judge's top-k candidate steps (needs --app and a fixer); the earliest "
                        "whose correction flips the run wins")
    p.add_argument("--top-k", type=int, default=3, metavar="K", help="judge --verify: candidate steps (default 3)")
    p.add_argument("--app-url", metavar="URL", help="judge --verify: the app's live model endpoint (default: the "
                                                    "app's embedded policy)")
    p.add_argument("--app-model", default="aegis-scripted", help="model name at --app-url (default: aegis-scripted)")
    p.add_argument("--runs", type=int, default=10, metavar="N", help="spectrum: live re-runs (default 10)")
    p.add_argument("--formula", choices=tuple(FORMULAS), default="ochiai", help="spectrum: score (default: ochiai)")
    p.add_argument("--actions", choices=ACTIONS, default=DEFAULT_ACTIONS,
                   help="spectrum: exact: text actions are one event when their normalised texts are equal; similar: "
                        "one agent's texts holding the same numbers cluster by word similarity (default: "
                        f"{DEFAULT_ACTIONS})")
    p.add_argument("--similarity", type=float, default=SIMILARITY, metavar="J",
                   help=f"spectrum --actions similar: word-set Jaccard at which texts are one event (default {SIMILARITY})")
    p.add_argument("--temperature", type=float, default=1.0,
                   help="spectrum: sampling temperature of the re-runs, for apps whose build_app takes one (default 1.0)")
    p.add_argument("--max-replays", type=int, default=20, help="replay budget (default 20)")
    p.add_argument("--max-tokens", type=int, default=None, help="budget of live model tokens (default: no limit)")
    p.add_argument("--concurrency", type=int, metavar="N",
                   help="replay scan, spectrum: runs at a time (default 1; with --executor ray, the cluster's CPUs)")
    add_executor_arguments(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar (drawn on a terminal only)")
    add_examples(p, "--trace 3f2a --app aegis_probe.demos.autogen --fixer examples/fixers.py:recompute",
                 "--trace 3f2a --app myapp --base-url http://127.0.0.1:8000/v1 --model qwen "
                 "--analyzer-url http://127.0.0.1:8000/v1 --analyzer-model qwen --search bisect",
                 "--trace 3f2a --method judge --judge step-by-step --base-url http://127.0.0.1:8000/v1 --model qwen",
                 "--trace 3f2a --method spectrum --app aegis_probe.demos.autogen --runs 20 --concurrency 4")
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
    for option, value, low in (("--max-replays", args.max_replays, 0), ("--max-tokens", args.max_tokens, 0),
                               ("--concurrency", args.concurrency, 1), ("--top-k", args.top_k, 1),
                               ("--runs", args.runs, 1)):
        if value is not None and value < low:
            raise ValueError(f"{option} must be >= {low}, not {value}")
    for option, url in (("--base-url", args.base_url), ("--analyzer-url", args.analyzer_url), ("--app-url", args.app_url)):
        if url is not None:
            http_url(option, url, "the OpenAI-compatible endpoint's http(s):// URL, e.g. http://localhost:8000/v1")
    needs_app = args.method != "judge" or args.verify
    if needs_app and not args.app:
        raise ValueError(f"--method {args.method}{' --verify' if args.verify else ''} needs --app "
                         "(build_app/run_app; see docs/replay.md)")
    if (args.method == "replay" or args.verify) and not (args.fixer or args.analyzer_url):
        raise ValueError(f"--method {args.method}{' --verify' if args.verify else ''} needs a fixer: "
                         "--fixer MODULE:FUNC or --analyzer-url URL")
    if args.method == "judge" and not args.base_url:
        raise ValueError("--method judge needs --base-url: the judge's OpenAI-compatible endpoint")
    app = None
    if args.app:
        with quiet_imports(not getattr(args, "verbose", False)):
            app = AppSpec.load(args.app)
    store = store_at(args.dir)
    if store.path.is_file():  # read as a trace file, but the replays and the label are written into a store
        raise ValueError(f"--dir {store.path}: a file, not a trace store directory (blame writes its "
                         f"label into the store: give {store.path.parent})")
    original = stored(store, args.trace)
    if original.outcome.success is True:
        raise ValueError(f"trace {original.trace_id} succeeded: blame needs a failed run "
                         "(make one with: demo --inject FM-2.6)")
    if original.task is None:  # without content there is nothing to judge or replay
        raise ValueError(f"trace {original.trace_id} was recorded without message content (capture_content off); "
                         + ("the judge reads the run and needs it" if args.method == "judge" else "blame replays the run and needs it"))
    if args.method == "judge":
        return _judge(args, original, app, store)
    assert app is not None
    if args.method == "spectrum":
        return _spectrum(args, original, app, store)
    return _replay(args, original, app, store, None, f"blame:replay:{args.search}")


def _api_key(args: argparse.Namespace) -> str:
    return os.environ.get(args.api_key_env) or "not-needed"  # a keyless local server needs none


def _run_judge(args: argparse.Namespace, original: Trajectory, app: AppSpec | None) -> Any:
    """The app's judge, else one for the expected answer; None (after saying so) without either."""
    from ..injection.judges import judge_for

    expected = args.expected or original.outcome.expected
    judge = (app.judge if app else None) or (judge_for({"expected": expected}) if expected else None)
    if judge is None:
        print("error: no run judge: give --expected, or define judge(task, answer) in the app module", file=sys.stderr)
    return judge


def _live_endpoint(stack: ExitStack, app: AppSpec, url: str | None, model: str, api_key: str) -> Endpoint | None:
    """The app's live model: ``url``, else its embedded policy served here; None without either."""
    from ..modelserver import ModelServer

    if url:
        return Endpoint(url, model, api_key)
    if app.policy is not None:
        server = stack.enter_context(ModelServer(app.policy))
        return Endpoint(server.base_url, model, "not-needed")
    print("error: the app's live model endpoint is needed: the app has no embedded policy", file=sys.stderr)
    return None


def _replay(args: argparse.Namespace, original: Trajectory, app: AppSpec, store: Any, candidates: list[int] | None,
            source: str) -> int:
    from tqdm import tqdm

    from ..counterfactual import AnalyzerFixer, RecordingError, blame

    judge = _run_judge(args, original, app)
    if judge is None:
        return 2
    api_key = _api_key(args)
    verifying = candidates is not None
    url, model = (args.app_url, args.app_model) if verifying else (args.base_url, args.model)
    with ExitStack() as stack:
        stack.enter_context(quiet_frameworks(not getattr(args, "verbose", False)))
        endpoint = _live_endpoint(stack, app, url, model, api_key)
        if endpoint is None:
            return 2
        fixer = (_load_fixer(args.fixer) if args.fixer
                 else AnalyzerFixer(args.analyzer_url, args.analyzer_model, api_key, show_expected=args.show_expected))
        total = len(candidates) if verifying else len(original.steps)  # type: ignore[arg-type]
        bar = stack.enter_context(tqdm(total=min(total, args.max_replays), desc="replays", unit="replay",
                                       disable=args.no_progress))
        parallel = (executor_from_args(args) if not verifying and (args.executor == "ray" or (args.concurrency or 1) > 1)
                    else None)
        try:
            report = blame(args.trace, app, fixer=fixer, judge=judge, endpoint=endpoint,
                           search="candidates" if verifying else args.search, candidates=candidates or (),
                           source=source, max_replays=args.max_replays, max_tokens=args.max_tokens, store=store,
                           on_attempt=lambda a: bar.update(1), executor=parallel)
        except RecordingError as exc:  # the stored trace cannot be replayed: name the store it is in
            raise RecordingError(f"{store.path}: {exc}") from None
    for a in report.attempts:
        verdict = "inconclusive" if a.inconclusive else {True: "success", False: "failure", None: "not judged"}[a.success]
        print(f"  step {a.step:>3} {a.agent:<16} -> {verdict}" + (f" ({one_line(a.error)})" if a.error else ""))
    if report.found:
        print(f"decisive error: step {report.step} by {report.agent} (replays: {len(report.attempts)}); "
              f"label {source} written to trace {report.trace_id}")
    else:
        print("no correction flipped the run" + (f"; search ended early: {report.exhausted}" if report.exhausted else ""))
    return 0 if report.found else 1


def _judge(args: argparse.Namespace, original: Trajectory, app: AppSpec | None, store: Any) -> int:
    from ..diagnosis.judges import JUDGES
    from ..diagnosis.verdicts import write_verdict

    judge = JUDGES[args.judge](base_url=args.base_url, model=args.model, api_key=_api_key(args))
    found = [c for c in judge.candidates(original, args.top_k if args.verify else 1)
             if c.step is not None and 0 <= c.step < len(original.steps)]
    source = f"blame:judge:{args.judge}"
    for rank, c in enumerate(found, 1):
        print(f"  candidate {rank}: step {c.step} by {original.steps[c.step].agent}"  # type: ignore[index]
              + (f" (the judge named {c.agent})" if c.agent != original.steps[c.step].agent else ""))  # type: ignore[index]
    if not found:
        print(f"the judge named no step of the run ({judge.calls} calls to {args.model})")
        return 1
    top = found[0].step
    assert top is not None
    write_verdict(store, original, source, top, f"{args.judge} judge ({args.model}, {judge.calls} calls)")
    print(f"judged: step {top} by {original.steps[top].agent} ({judge.calls} calls); "
          f"label {source} written to trace {original.trace_id}")
    if not args.verify:
        return 0
    assert app is not None
    return _replay(args, original, app, store, [c.step for c in found if c.step is not None],
                   f"blame:judge+replay:{args.judge}")


def _spectrum(args: argparse.Namespace, original: Trajectory, app: AppSpec, store: Any) -> int:
    from tqdm import tqdm

    from ..diagnosis.spectrum import spectrum
    from ..diagnosis.verdicts import write_verdict
    from ..executors import ThreadExecutor

    judge = _run_judge(args, original, app)
    if judge is None:
        return 2
    with ExitStack() as stack:
        stack.enter_context(quiet_frameworks(not getattr(args, "verbose", False)))
        endpoint = _live_endpoint(stack, app, args.base_url, args.model, _api_key(args))
        if endpoint is None:
            return 2
        bar = stack.enter_context(tqdm(total=args.runs, desc="runs", unit="run", disable=args.no_progress))
        executor = executor_from_args(args) if args.executor == "ray" else ThreadExecutor(args.concurrency or 1)
        report = spectrum(original.trace_id or args.trace, app, judge=judge, endpoint=endpoint, store=store,
                          runs=args.runs, formula=args.formula, actions=args.actions, similarity=args.similarity,
                          temperature=args.temperature, executor=executor,
                          on_run=lambda: bar.update(1))
    print(f"runs: {report.passed} passed, {report.failed} failed (the diagnosed run included)"
          + (f", {len(report.errors)} raised ({one_line(report.errors[0])})" if report.errors else "")
          + f"; {report.model_calls} model calls")
    for e in report.ranking[:5]:
        print(f"  {e.score:6.3f}  ef={e.ef:<3} ep={e.ep:<3} {one_line(e.key)[:100]}")
    if not report.found:
        print(f"no step singled out: {report.why_not}")
        return 1
    source = f"blame:spectrum:{args.formula}"
    assert report.step is not None
    write_verdict(store, original, source, report.step,
                  f"{args.formula} {report.score:.3f} ({args.actions} actions) over {report.passed} passing, "
                  f"{report.failed} failing runs")
    print(f"most suspicious: step {report.step} by {report.agent} ({args.formula} {report.score:.3f}); "
          f"label {source} written to trace {original.trace_id}")
    return 0
