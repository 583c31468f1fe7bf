"""``demo``: run a built-in 3-agent team, instrumented, and print its trace.

By default the team talks to the embedded OpenAI-compatible server on 127.0.0.1, whose answers
come from a deterministic script (``aegis_probe.demos.<framework>.policy``): no API key, no
network, the same trace every time. ``--base-url/--model`` run the same team against a real
endpoint, with the key read from an environment variable.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from contextlib import ExitStack
from pathlib import Path

from ..demos import FRAMEWORKS
from ..demos.task import judge


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="run a built-in instrumented multi-agent team and print its trace",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--framework", choices=FRAMEWORKS, default="autogen", help="which framework's demo team (default: autogen)")
    p.add_argument("--base-url", help="OpenAI-compatible endpoint to use instead of the embedded scripted server")
    p.add_argument("--model", default="aegis-scripted", help="model name sent to the endpoint (default: aegis-scripted)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="VAR",
                   help="environment variable holding the API key for --base-url (default: OPENAI_API_KEY)")
    p.add_argument("--trace-dir", help="trace store directory (default: $AEGIS_TRACE_DIR or ./aegis-traces)")
    p.add_argument("--report-dir", help="where to write the HTML report (default: the current directory)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import aegis_probe
    from ..modelserver import ModelServer
    from ..report import write_report
    from ..steptable import step_table, summary

    try:
        demo = importlib.import_module(f"aegis_probe.demos.{args.framework}")
    except ImportError as exc:
        print(f"error: the {args.framework} demo needs its extra: pip install 'aegis-probe[{args.framework}]' ({exc})", file=sys.stderr)
        return 2
    with ExitStack() as stack:
        if args.base_url:
            api_key = os.environ.get(args.api_key_env)
            if not api_key:
                print(f"error: --base-url needs an API key in ${args.api_key_env}", file=sys.stderr)
                return 2
            base_url, where = args.base_url, args.base_url
        else:
            server = stack.enter_context(ModelServer(demo.policy, model=args.model))
            base_url, api_key, where = server.base_url, "not-needed", f"embedded scripted model at {server.base_url}"
        app = demo.build_app(base_url, args.model, api_key)
        probe = aegis_probe.instrument(app, judge=judge, store=args.trace_dir)
        print(f"running the {args.framework} demo team ({', '.join(demo.AGENTS)}) against the {where}")
        print(f"task: {demo.TASK}\n")
        answer = demo.run_app(app, demo.TASK)
        probe.flush()
        traj = probe.trajectory()
        probe.uninstrument()
    print(summary(traj))
    print()
    print(step_table(traj))
    report = write_report(traj, Path(args.report_dir or ".") / f"aegis-report-{traj.trace_id[:12]}.html")
    print(f"\nanswer: {answer!r}")
    print(f"trace written to {probe.store.file} (python -m aegis_probe traces show {traj.trace_id[:12]})")
    print(f"report written to {report}")
    return 0
