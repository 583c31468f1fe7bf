"""demo: run a built-in 3-agent team, instrumented, and print its trace.

By default the team talks to the embedded OpenAI-compatible server on 127.0.0.1, whose answers
come from a deterministic script (aegis_probe.demos.<framework>.policy): no API key, no
network, the same trace every time. --base-url/--model run the same team against a real
endpoint (key from --api-key-env if set; a keyless local server needs none). --inject MODE
plants a MAST failure mode (e.g. FM-2.6) in one agent's step, for a failed run to blame.
The trace goes to the trace store, the HTML report next to it.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
from contextlib import ExitStack
from pathlib import Path
from types import ModuleType
from typing import Any

from .common import add_examples, check_place, http_url, quiet_frameworks, quiet_imports
from ..demos import FRAMEWORKS, REQUIREMENTS, TEAMS, demo_module
from ..demos.task import judge
from ..storage.store import SPANS_FILE


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="run a built-in instrumented multi-agent team and print its trace",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--framework", choices=FRAMEWORKS, help="which framework's demo team (default: autogen)")
    p.add_argument("--team", choices=sorted(TEAMS),
                   help="an AutoGen team type's own demo instead (magentic-one, a MagenticOneGroupChat; selector, "
                        "a SelectorGroupChat; nested, a team and a SocietyOfMindAgent inside a team); "
                        "with --framework, only autogen (default: the framework's 3-agent team)")
    p.add_argument("--base-url", help="OpenAI-compatible endpoint to use instead of the embedded scripted server "
                                      "(default: the scripted server, on a free port of 127.0.0.1)")
    p.add_argument("--model", default="aegis-scripted", help="model name sent to the endpoint (default: aegis-scripted)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="VAR",
                   help="environment variable holding the API key for --base-url (default: OPENAI_API_KEY; "
                        "unset: no key, for a keyless local server)")
    p.add_argument("--inject", metavar="MODE[:AGENT]",
                   help="inject a MAST failure mode (e.g. FM-2.6) into an agent's first model call "
                        "(default agent: the one doing the work), to get a failed run")
    p.add_argument("--trace-dir", help="trace store directory (default: $AEGIS_TRACE_DIR or ./aegis-traces)")
    p.add_argument("--report-dir", help="where to write the HTML report (default: the trace store directory)")
    add_examples(p, "", "--framework langgraph", "--team magentic-one", "--inject FM-2.6    # a failed run, to blame",
                 "--base-url http://127.0.0.1:8000/v1 --model qwen    # a real model (key: $OPENAI_API_KEY)")
    p.set_defaults(func=run)


def load_demo(framework: str, quiet: bool = False) -> ModuleType:
    """The demo module of ``framework`` (imported without the framework's log lines when
    ``quiet``); ``ValueError`` names what to install when it is missing."""
    needed, how = REQUIREMENTS.get(framework, (None, f"pip install 'aegis-probe[{framework}]'"))
    try:
        with quiet_imports(quiet):
            if needed:
                importlib.import_module(needed)
            return importlib.import_module(demo_module(framework))
    except ModuleNotFoundError as exc:
        raise ValueError(f"the {framework} demo needs {exc.name}, which is not installed: {how}") from exc


def _plan(spec: str, demo: ModuleType) -> Any:
    """The one-target injection plan of ``--inject MODE[:AGENT]``."""
    from ..injection import MODES, InjectionPlan, Target

    mode, _, agent = spec.partition(":")
    if not mode.strip():
        raise ValueError(f"--inject {spec!r}: give a MAST failure mode, e.g. FM-2.6 or FM-2.6:{demo.AGENTS[0]}")
    if mode not in MODES:
        raise ValueError(f"--inject {spec}: unknown failure mode {mode!r}; one of {', '.join(MODES)}")
    agent = agent or getattr(demo, "WORKER", demo.AGENTS[0])
    if agent not in demo.AGENTS:
        raise ValueError(f"--inject {spec}: no agent {agent!r} in the {demo.FRAMEWORK} demo ({', '.join(demo.AGENTS)})")
    return InjectionPlan(targets=[Target(agent=agent, mode=mode, strategy="response_corruption")])


def demo_name(framework: str | None, team: str | None) -> str:
    """The demo ``--framework``/``--team`` name: the team's, else the framework's (default autogen).

    ``ValueError`` for a team type with a framework that has no such team (every team is AutoGen's).
    """
    if team is None:
        return framework or "autogen"
    if framework not in (None, "autogen"):
        raise ValueError(f"--team {team} is an AutoGen team type: the {framework} demo has no --team "
                         f"(drop --framework {framework}, or --team)")
    return TEAMS[team]


def run(args: argparse.Namespace) -> int:
    import aegis_probe

    from ..config import ENV_TRACE_DIR, ProbeConfig
    from ..modelserver import ModelServer
    from ..report.html import write_report
    from ..report.steptable import step_table, summary

    args.framework = demo_name(args.framework, args.team)
    if args.base_url is not None:
        http_url("--base-url", args.base_url, "the OpenAI-compatible endpoint's http(s):// URL, e.g. http://localhost:8000/v1")
    trace_dir = Path(args.trace_dir or ProbeConfig.resolve().trace_dir)
    if args.trace_dir is None:  # --trace-dir was checked with the other options; the default now, before the run
        check_place(f"${ENV_TRACE_DIR}" if os.environ.get(ENV_TRACE_DIR) else "the default trace store",
                    trace_dir.absolute(), directory=True)
    with ExitStack() as stack:
        stack.enter_context(quiet_frameworks(not args.verbose))
        demo = load_demo(args.framework, quiet=not args.verbose)
        plan = _plan(args.inject, demo) if args.inject is not None else None
        if args.base_url:
            api_key = os.environ.get(args.api_key_env) or "not-needed"
            base_url, where = args.base_url, args.base_url
        else:
            server = stack.enter_context(ModelServer(demo.policy, model=args.model))
            base_url, api_key, where = server.base_url, "not-needed", f"embedded scripted model at {server.base_url}"
        try:
            app = demo.build_app(base_url, args.model, api_key)
        except ModuleNotFoundError as exc:
            raise ValueError(f"the {args.framework} demo needs {exc.name}, which is not installed: "
                             f"{REQUIREMENTS.get(args.framework, ('', 'see README.md'))[1]}") from exc
        probe = stack.enter_context(aegis_probe.instrument(app, judge=judge, store=str(trace_dir)))
        if plan is not None:
            stack.enter_context(probe.inject(plan, agents=tuple(demo.AGENTS), task_type="math",
                                             termination=getattr(demo, "TERMINATION", "TERMINATE")))
        print(f"running the {args.framework} demo team ({', '.join(demo.AGENTS)}) against the {where}")
        if plan is not None:
            target = plan.targets[0]
            print(f"injecting {target.mode} into {target.agent}'s first model call")
        print(f"task: {demo.TASK}\n", flush=True)
        answer = demo.run_app(app, demo.TASK)
        probe.flush()
        traj = probe.trajectory()
    print(summary(traj))
    print()
    print(step_table(traj))
    short = (traj.trace_id or "trace")[:12]
    report = write_report(traj, Path(args.report_dir or trace_dir) / f"aegis-report-{short}.html")
    print(f"\nanswer: {answer if answer is None else probe.redact(answer)!r}")  # as the trace has it
    in_dir = f" --dir {args.trace_dir}" if args.trace_dir else ""  # else the default store, as the commands' own
    print(f"trace written to {trace_dir / SPANS_FILE} (python -m aegis_probe traces show {short}{in_dir})")
    print(f"report written to {report}")
    if plan is not None and traj.outcome.success:
        print(f"the team recovered from {plan.targets[0].mode}: the run still succeeded (try another mode or agent)")
    if traj.outcome.success is False and traj.task is not None:  # blame replays the recorded content
        print(f"blame it: python -m aegis_probe blame --trace {short} --app {demo_module(args.framework)} "
              f"--fixer examples/fixers.py:recompute{in_dir}")
    return 0
