"""Bad input to every command, as a table: broken stores, task files, apps, fixers, datasets and
outputs. Each case gives the exit status it must end with and what its one ``error:`` line (or,
for a store with bad lines, its warning) must name; no case may raise, and no input or store file
may change."""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from aegis_probe.capture import semconv as sc
from aegis_probe.cli import main
from aegis_probe.demos import FRAMEWORKS, TEAMS

TRACE = "0123456789abcdef0123456789abcdef"
DEEP = "[" * 100_000 + "]" * 100_000
#: An app module's functions, after the code that fails at import (else it is refused before it is imported).
FUNCS = "def build_app(base_url, model, api_key): return None\ndef run_app(app, task): return None\n"


def _span_line(success: bool | None = False) -> str:
    """One valid store line: a root span (outcome ``success``) and one agent step under it."""
    attrs = [{"key": sc.OUTCOME_SUCCESS, "value": {"boolValue": success}}] if success is not None else []
    attrs.append({"key": sc.TASK, "value": {"stringValue": "What is 1 + 1?"}})  # recorded with content: blame can replay it
    spans = [
        {"traceId": TRACE, "spanId": "00000000000000a1", "name": "invoke_workflow team", "kind": 1,
         "startTimeUnixNano": "1", "endTimeUnixNano": "9", "attributes": attrs},
        {"traceId": TRACE, "spanId": "00000000000000a2", "parentSpanId": "00000000000000a1", "name": "invoke_agent solver",
         "kind": 1, "startTimeUnixNano": "2", "endTimeUnixNano": "8",
         "attributes": [{"key": sc.STEP_INDEX, "value": {"intValue": "0"}},
                        {"key": sc.OPERATION, "value": {"stringValue": sc.OP_AGENT}},
                        {"key": "gen_ai.agent.name", "value": {"stringValue": "solver"}}]},
    ]
    return json.dumps({"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"scope": {"name": "t"}, "spans": spans}]}]})


def _huge_kind_line() -> str:
    return _span_line().replace('"kind": 1', '"kind": 1.5e400', 1)


@dataclass
class Env:
    """A case's working directory: a store ``S`` with one failed trace, a tasks file, helpers to write files."""

    root: Path

    @property
    def store(self) -> Path:
        return self.root / "S"

    def file(self, name: str, text: str) -> str:
        path = self.root / name
        path.write_text(textwrap.dedent(text))
        return str(path)

    def store_with(self, *extra: str, success: bool | None = False) -> str:
        self.store.mkdir(exist_ok=True)
        (self.store / "spans.jsonl").write_text("\n".join([_span_line(success), *extra]) + "\n")
        return str(self.store)

    def tasks(self, *rows: dict | str) -> str:
        return self.file("tasks.jsonl", "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))

    def app(self, name: str, *parts: str) -> str:
        return self.file(f"{name}.py", "".join(textwrap.dedent(part) for part in parts)) + ":build_app"


TRAJECTORY = json.dumps({"trace_id": "t1", "task": "x", "outcome": {"success": False},
                         "steps": [{"index": 0, "agent": "a", "output": "x"}, {"index": 1, "agent": "b", "output": "y"}],
                         "labels": {"faults": [{"agent": "a", "step": 0}]}}) + "\n"
GOOD_TASK = {"id": "pens", "type": "math", "expected": "126",
             "task": "A shop sells pens at 17 coins and notebooks at 25 coins. What do 3 pens and 3 notebooks cost in total?"}
DEMO_APP = """\
    from aegis_probe.demos.autogen import AGENTS, policy, run_app
    from aegis_probe.demos.autogen import build_app as demo_build_app
    """


def _inject(env: Env, app: str, tasks: str | None = None) -> list[str]:
    return ["inject", "--app", app, "--tasks", tasks or env.tasks(GOOD_TASK), "--out", str(env.root / "out"),
            "--plans-per-run", "1", "--no-progress"]


def _campaign_folder(env: Env) -> list[str]:
    """Import of a folder like an injection campaign's output: its runs.jsonl is no data set, its store is."""
    env.store_with()
    env.file("runs.jsonl", '{"key": "k", "trace_id": "t"}\n')
    return ["train", "import", str(env.root), "-o", str(env.root / "o.jsonl")]


@dataclass
class Case:
    id: str
    argv: Callable[[Env], list[str]]
    status: int
    names: tuple[str, ...]  # what the error line (status 2/1) or the warnings (status 0) must contain
    needs: str | None = None  # a module the case needs installed


CASES = [
    # -- stores with bad lines stay readable; bad lines are named -------------------------------
    Case("traces-ls-deep-line", lambda e: ["traces", "ls", "--dir", e.store_with(DEEP)], 0, ("spans.jsonl:2", "nested too deeply")),
    Case("traces-show-huge-number", lambda e: ["traces", "show", TRACE[:8], "--dir", e.store_with(_huge_kind_line())], 0,
         ("spans.jsonl:2", "kind is not an integer")),
    Case("traces-ls-not-json", lambda e: ["traces", "ls", "--dir", e.store_with("not json", '{"hello": 1}')], 0,
         ("spans.jsonl:2", "spans.jsonl:3")),
    Case("report-store-with-bad-lines", lambda e: ["report", TRACE[:8], "--dir", e.store_with(DEEP), "--out", str(e.root / "r.html")],
         0, ("spans.jsonl:2",)),
    Case("traces-show-unknown-id", lambda e: ["traces", "show", "ffff", "--dir", e.store_with()], 2, ("no trace matching 'ffff'",)),
    Case("traces-show-in-a-campaign-folder", lambda e: ["traces", "show", TRACE[:8], "--dir", str(Path(e.store_with()).parent)], 2,
         ("no trace matching", "(its folders S are trace stores: give one of them)")),
    Case("traces-show-empty-id", lambda e: ["traces", "show", "", "--dir", e.store_with()], 2, ("an empty trace id names no trace",)),
    Case("report-empty-target", lambda e: ["report", "", "--dir", e.store_with(), "--out", str(e.root / "r.html")], 2,
         ("TRACE_ID|FILE is empty",)),
    Case("report-empty-trace-of-a-file", lambda e: ["report", f"{e.store_with()}/spans.jsonl", "--trace", "",
                                                    "--out", str(e.root / "r.html")], 2, ("--trace is empty",)),
    Case("report-file-with-no-trace", lambda e: ["report", e.file("bad.jsonl", '{"hello": 1}\n' + DEEP + "\n")], 2,
         ("bad.jsonl:1", "not an OTLP/JSON trace record")),
    Case("report-file-only-deep", lambda e: ["report", e.file("deep.jsonl", DEEP + "\n")], 2, ("deep.jsonl:1", "nested too deeply")),
    # -- outputs never overwrite inputs or store files -------------------------------------------
    Case("report-out-store-file", lambda e: ["report", TRACE[:8], "--dir", e.store_with(), "--out", str(e.store / "spans.jsonl")], 2,
         ("--out", "spans.jsonl", "trace store")),
    Case("report-out-new-file-in-store", lambda e: ["report", TRACE[:8], "--dir", e.store_with(), "--out", str(e.store / "r.jsonl")],
         2, ("--out", "r.jsonl", "trace store")),
    Case("report-out-is-its-input", lambda e: ["report", e.file("x.jsonl", _span_line() + "\n"), "--out", str(e.root / "x.jsonl")], 2,
         ("--out", "x.jsonl", "is an input")),
    Case("report-out-is-a-directory", lambda e: ["report", TRACE[:8], "--dir", e.store_with(), "--out", str(e.root)], 2,
         ("--out", "a directory; give the report's file name")),
    Case("report-out-under-a-file", lambda e: ["report", TRACE[:8], "--dir", e.store_with(), "--out",
                                              e.file("notes.txt", "x") + "/r.html"], 2, ("--out", "notes.txt is not a directory")),
    Case("train-import-out-under-a-file", lambda e: ["train", "import", e.store_with(), "-o", e.file("notes.txt", "x") + "/o.jsonl"], 2,
         ("--out", "notes.txt is not a directory")),
    Case("demo-trace-dir-is-a-file", lambda e: ["demo", "--trace-dir", e.file("notes.txt", "x")], 2,
         ("--trace-dir", "notes.txt: not a directory")),
    Case("demo-report-dir-is-a-file", lambda e: ["demo", "--trace-dir", str(e.root / "t"), "--report-dir", e.file("notes.txt", "x")], 2,
         ("--report-dir", "notes.txt: not a directory")),
    Case("inject-out-is-a-store", lambda e: [*_inject(e, "aegis_probe.demos.autogen:build_app")[:-5], "--out", e.store_with()], 2,
         ("--out", "trace store")),
    Case("train-import-out-is-input", lambda e: ["train", "import", e.store_with(), "-o", str(e.store / "spans.jsonl")], 2,
         ("--out", "spans.jsonl")),
    Case("train-build-out-in-store", lambda e: ["train", "build", "dcl", e.store_with(), "-o", str(e.store / "rows.jsonl")], 2,
         ("--out", "rows.jsonl", "trace store")),
    # -- apps that do not load -------------------------------------------------------------------
    Case("inject-app-missing-file", lambda e: _inject(e, str(e.root / "nope.py") + ":build_app"), 2, ("--app", "no file", "nope.py")),
    Case("inject-app-import-error", lambda e: _inject(e, e.app("app_imports_missing", "import no_such_module_for_aegis\n" + FUNCS)), 2,
         ("--app", "app_imports_missing", "no_such_module_for_aegis")),
    Case("inject-app-syntax-error", lambda e: _inject(e, e.app("app_bad_syntax", "def build_app(:\n")), 2,
         ("--app", "app_bad_syntax.py:1", "SyntaxError")),
    Case("inject-app-exits-at-import", lambda e: _inject(e, e.app("app_exits", "import sys\nsys.exit(5)\n" + FUNCS)), 2,
         ("--app", "app_exits", "sys.exit(5)")),
    Case("inject-app-raises-at-import", lambda e: _inject(e, e.app("app_raises", "raise RuntimeError('boom at import')\n" + FUNCS)), 2,
         ("--app", "app_raises", "boom at import")),
    Case("inject-app-without-run-app", lambda e: _inject(e, e.app("app_no_run", "def build_app(b, m, k): return None\n")), 2,
         ("--app", "run_app")),
    Case("inject-module-not-found", lambda e: _inject(e, "no_such_pkg_for_aegis.app:build_app"), 2, ("--app", "no_such_pkg_for_aegis")),
    # -- apps that load but cannot run: exit 1, the reason per task ------------------------------
    Case("inject-factory-raises", lambda e: _inject(e, e.app("app_factory_raises", DEMO_APP, """\
         def build_app(base_url, model, api_key):
             raise RuntimeError("factory exploded")
         """)), 1, ("no baseline succeeded", "pens  the run raised RuntimeError: factory exploded"), needs="autogen_agentchat"),
    Case("inject-run-app-raises", lambda e: _inject(e, e.app("app_run_raises", DEMO_APP, """\
         build_app = demo_build_app
         def run_app(app, task):
             raise RuntimeError("run_app exploded")
         """)), 1, ("no baseline succeeded", "pens  the run raised RuntimeError: run_app exploded"), needs="autogen_agentchat"),
    Case("inject-factory-returns-non-app", lambda e: _inject(e, e.app("app_not_an_app", DEMO_APP, """\
         def build_app(base_url, model, api_key):
             return object()
         """)), 1, ("no baseline succeeded", "pens  the run raised TypeError"), needs="autogen_agentchat"),
    Case("inject-run-timeout", lambda e: [*_inject(e, e.app("app_slow", DEMO_APP, """\
         import time
         build_app = demo_build_app
         def run_app(app, task):
             time.sleep(2)
             return "126"
         """)), "--run-timeout", "0.3"], 1, ("no baseline succeeded", "pens  the run raised RunTimeout", "longer than 0.3 s"),
         needs="autogen_agentchat"),
    Case("inject-run-timeout-not-positive", lambda e: [*_inject(e, "aegis_probe.demos.autogen:build_app"), "--run-timeout", "0"], 2,
         ("--run-timeout must be > 0 seconds and at most a year (31536000), not 0.0",)),
    Case("inject-no-agents-no-plans", lambda e: _inject(e, e.app("app_no_agents", """\
         from aegis_probe.demos.autogen import policy, run_app
         from aegis_probe.demos.autogen import build_app
         """)), 1, ("no injected run could be made", "AGENTS"), needs="autogen_agentchat"),
    # -- task files ------------------------------------------------------------------------------
    Case("inject-tasks-missing", lambda e: _inject(e, "aegis_probe.demos.autogen:build_app", str(e.root / "none.jsonl")), 2,
         ("--tasks", "none.jsonl: no such file")),
    Case("inject-tasks-empty", lambda e: _inject(e, "aegis_probe.demos.autogen:build_app", e.tasks()), 2, ("tasks.jsonl", "no tasks")),
    Case("inject-tasks-no-expected", lambda e: _inject(e, "aegis_probe.demos.autogen:build_app",
                                                     e.tasks({"id": "a", "task": "What is 1 + 1?"})), 2,
         ("tasks.jsonl", "record 1", "expected")),
    Case("inject-tasks-duplicate-ids", lambda e: _inject(e, "aegis_probe.demos.autogen:build_app", e.tasks(GOOD_TASK, GOOD_TASK)), 2,
         ("tasks.jsonl", "record 2", "duplicate id")),
    Case("inject-tasks-not-json", lambda e: _inject(e, "aegis_probe.demos.autogen:build_app", e.tasks(GOOD_TASK, "not json")), 2,
         ("tasks.jsonl:2", "invalid JSON")),
    Case("inject-tasks-deep", lambda e: _inject(e, "aegis_probe.demos.autogen:build_app", e.tasks(DEEP)), 2,
         ("tasks.jsonl", "nested too deeply")),
    Case("inject-tasks-no-id", lambda e: _inject(e, "aegis_probe.demos.autogen:build_app", e.tasks({"task": "x", "expected": "1"})), 2,
         ("tasks.jsonl:1", "missing field(s) id")),
    Case("inject-unknown-mode", lambda e: [*_inject(e, "aegis_probe.demos.autogen:build_app"), "--modes", "FM-9.9"], 2,
         ("unknown mode/strategy: FM-9.9",)),
    # -- blame -----------------------------------------------------------------------------------
    Case("blame-fixer-missing-file", lambda e: ["blame", "--trace", TRACE[:8], "--dir", e.store_with(), "--app", "aegis_probe.demos.autogen",
                                                "--expected", "1", "--fixer", str(e.root / "nope.py") + ":fix"], 2,
         ("--fixer", "no file", "nope.py"), needs="autogen_agentchat"),
    Case("blame-fixer-syntax-error", lambda e: ["blame", "--trace", TRACE[:8], "--dir", e.store_with(), "--app", "aegis_probe.demos.autogen",
                                                "--expected", "1", "--fixer", e.file("bad_fixer.py", "def fix(:\n") + ":fix"], 2,
         ("--fixer", "bad_fixer.py:1", "SyntaxError"), needs="autogen_agentchat"),
    Case("blame-trace-succeeded", lambda e: ["blame", "--trace", TRACE[:8], "--dir", e.store_with(success=True),
                                             "--app", "aegis_probe.demos.autogen", "--fixer", "aegis_probe.demos.task:solve",
                                             "--no-progress"], 2,
         (TRACE, "succeeded", "failed run"), needs="autogen_agentchat"),
    Case("blame-unknown-trace", lambda e: ["blame", "--trace", "ffff", "--dir", e.store_with(), "--app", "aegis_probe.demos.autogen",
                                           "--fixer", "aegis_probe.demos.task:solve"], 2, ("no trace matching 'ffff'",),
         needs="autogen_agentchat"),
    # -- demo ------------------------------------------------------------------------------------
    Case("demo-unknown-failure-mode", lambda e: ["demo", "--inject", "FM-9.9", "--trace-dir", str(e.root / "t")], 2,
         ("--inject FM-9.9", "unknown failure mode 'FM-9.9'; one of FM-1.1,"), needs="autogen_agentchat"),
    Case("demo-inject-unknown-agent", lambda e: ["demo", "--inject", "FM-2.6:nobody", "--trace-dir", str(e.root / "t")], 2,
         ("--inject FM-2.6:nobody", "no agent 'nobody'"), needs="autogen_agentchat"),
    # -- training data -----------------------------------------------------------------------------
    Case("train-import-deep-line", lambda e: ["train", "import", e.file("deep.jsonl", DEEP + "\n"), "-o", str(e.root / "o.jsonl")], 2,
         ("deep.jsonl",)),
    Case("train-build-deep-line", lambda e: ["train", "build", "dcl", e.file("deep.jsonl", DEEP + "\n"), "--format", "otlp",
                                             "-o", str(e.root / "o.jsonl")], 2, ("deep.jsonl", "line 1", "invalid JSON")),
    Case("train-import-huge-number", lambda e: ["train", "import", e.file("h.jsonl", _huge_kind_line() + "\n"), "-o", str(e.root / "o.jsonl")],
         2, ("h.jsonl", "line 1", "kind is not an integer")),
    Case("train-import-store-with-bad-lines", lambda e: ["train", "import", e.store_with(DEEP, _huge_kind_line()),
                                                         "-o", str(e.root / "o.jsonl")], 0,
         ("1 imported, 2 errors", "spans.jsonl [line 2]", "spans.jsonl [line 3]", "kind is not an integer")),
    Case("train-import-format-mismatch", lambda e: ["train", "import", e.store_with(), "--format", "whowhen", "-o", str(e.root / "o.jsonl")],
         2, ("spans.jsonl",)),
    Case("train-import-format-finds-nothing", lambda e: ["train", "import", str(Path(e.file("t.parquet", "PAR1")).parent),
                                                         "--format", "whowhen", "-o", str(e.root / "o.jsonl")], 2,
         ("no whowhen records found; nothing imported",)),
    Case("train-build-no-row-for-the-target", lambda e: ["train", "build", "sft", e.file("t.jsonl", TRAJECTORY.replace(
        '"step": 0', '"mode": "FM-1.1"')), "--target", "agent_step", "-o", e.file("sft.jsonl", '{"id": "kept"}\n')], 2,
         ("t.jsonl: no trajectory has an agent and step label for --target agent_step", "sft.jsonl not written")),
    Case("train-import-campaign-folder", lambda e: _campaign_folder(e), 2,
         ("cannot tell the format of", "give its folders holding data (S) as sources")),
    Case("train-import-folder-of-subsets", lambda e: ["train", "import", str(Path(e.store_with()).parent), "-o", str(e.root / "o.jsonl")], 2,
         ("no data files at", "give its folders holding data (S) as sources")),
    Case("train-build-missing-source", lambda e: ["train", "build", "sft", str(e.root / "none.jsonl"), "-o", str(e.root / "o.jsonl")], 2,
         ("none.jsonl",)),
    Case("train-eval-bad-predictions", lambda e: ["train", "eval", e.file("traj.jsonl", TRAJECTORY), "--predictions",
                                                  e.file("p.jsonl", "{}\nnot json\n"), "--out-dir", str(e.root / "ev")], 2,
         ("p.jsonl:1", "missing field(s) id")),
    Case("train-eval-predictions-of-a-shared-id", lambda e: ["train", "eval", e.file("traj.jsonl", TRAJECTORY + TRAJECTORY.replace(
        '"agent": "a", "step": 0', '"agent": "b", "step": 1')), "--predictions", e.file("p.jsonl", '{"id": "t1", "agent": "a"}\n'),
        "--out-dir", str(e.root / "ev")], 2, ("p.jsonl: prediction 't1' matches 2 trajectories",)),
    Case("train-import-labels-dir-not-trail", lambda e: ["train", "import", e.file("traj.jsonl", TRAJECTORY), "--labels-dir", str(e.root),
                                                         "-o", str(e.root / "o.jsonl")], 2,
         ("--labels-dir", "TRAIL traces only", "traj.jsonl is trajectories")),
    Case("train-eval-fit-on-bad-records", lambda e: ["train", "eval", e.file("traj.jsonl", TRAJECTORY), "--method", "majority",
                                                     "--fit-on", e.file("fit.jsonl", TRAJECTORY + "not json\n"),
                                                     "--out-dir", str(e.root / "ev"), "--bootstrap", "10"], 0,
         ("fit.jsonl: 1 imported, 1 errors", "fit.jsonl [line 2]: invalid JSON")),
    Case("train-eval-fit-on-no-labels", lambda e: ["train", "eval", e.file("traj.jsonl", TRAJECTORY), "--method", "majority",
                                                   "--fit-on", e.file("clean.jsonl", TRAJECTORY.replace('{"agent": "a", "step": 0}', "")),
                                                   "--out-dir", str(e.root / "ev")], 2,
         ("clean.jsonl: no trajectory has a gold agent to fit the most frequent agent on",)),
    Case("train-benchmark-out-holds-a-run", lambda e: ["train", "benchmark", "--train", e.file("traj.jsonl", TRAJECTORY), "--test",
                                                       e.file("test.jsonl", TRAJECTORY.replace("t1", "t2")), "--out",
                                                       str(Path(e.file("benchmark.json", "{}")).parent)], 2,
         ("holds an earlier benchmark run (benchmark.json)", "choose another --out"), needs="torch"),
    Case("train-dcl-bad-rows", lambda e: ["train", "dcl", "--data", e.file("rows.jsonl", '{"a": 1}\n'), "--out", str(e.root / "dcl")], 2,
         ("rows.jsonl:1", "missing field"), needs="torch"),
    Case("train-dcl-row-without-turns", lambda e: ["train", "dcl", "--data", e.file("rows.jsonl", '{"id": "r1", "turns": []}\n'),
                                                   "--out", str(e.root / "dcl"), "--no_text_embeddings"], 2,
         ("rows.jsonl: DCL row 'r1' has no turns",), needs="torch"),
    Case("train-dcl-corrupt-embedding-cache", lambda e: ["train", "dcl", "--data", e.file("rows.jsonl", json.dumps(
        {"id": "r1", "turns": [{"agent": "a", "text": "x"}], "label_agents": ["a"], "positive": False}) + "\n"),
        "--out", str(e.root / "dcl"), "--embedding_cache", e.file("cache.safetensors", "garbage")], 2,
        ("cache.safetensors: not an embedding cache",), needs="torch"),
    Case("train-dcl-empty-data", lambda e: ["train", "dcl", "--data", e.file("rows.jsonl", "\n"), "--out", str(e.root / "dcl")], 2,
         ("rows.jsonl: no rows to train on",), needs="torch"),
    Case("train-sft-empty-data", lambda e: ["train", "sft", "--data", e.file("rows.jsonl", ""), "--model", str(e.root / "m"),
                                            "--out", str(e.root / "sft")], 2, ("rows.jsonl: no rows to train on",), needs="trl"),
    Case("train-sft-messages-not-a-list", lambda e: ["train", "sft", "--data", e.file("rows.jsonl", '{"id": "r1", "messages": "hi"}\n'),
                                                     "--model", str(e.root / "m"), "--out", str(e.root / "sft")], 2,
         ("rows.jsonl: SFT row 'r1': 'messages' must be a list",), needs="trl"),
    Case("train-import-errors-into-new-folder", lambda e: ["train", "import", e.file("t.jsonl", TRAJECTORY + "not json\n"), "-o",
                                                           str(e.root / "o.jsonl"), "--errors", str(e.root / "new" / "err.json")], 0,
         ("t.jsonl: 1 imported, 1 errors",)),
    Case("train-attribute-no-model", lambda e: ["train", "attribute", "--model", str(e.root / "nomodel"), "--data",
                                                e.file("rows.jsonl", '{"a": 1}\n')], 2, ("nomodel",), needs="torch"),
]


def _snapshot(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, tmp_path, capsys, caplog, monkeypatch):
    if case.needs:
        pytest.importorskip(case.needs)
    monkeypatch.chdir(tmp_path)
    env = Env(tmp_path)
    argv = case.argv(env)
    before = _snapshot(tmp_path)
    status = main(argv)
    out, err = capsys.readouterr()
    assert status == case.status, (argv, out[-1500:], err[-1500:])
    assert "Traceback" not in err
    if status:
        errors = [line for line in err.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1, err[-2000:]
        shown = errors[0] + "\n" + out  # inject's reasons per task are on stdout
    else:
        shown = err + caplog.text
    for name in case.names:
        assert name in shown, (name, shown[-2000:])
    after = _snapshot(tmp_path)
    changed = [p for p, data in before.items() if after.get(p) != data]
    assert not changed, f"inputs changed: {changed}"


def test_failed_baselines_are_explained_per_task(tmp_path, capsys, monkeypatch):
    """inject says for each task why its baseline did not succeed, before the mode table."""
    pytest.importorskip("autogen_agentchat")
    monkeypatch.chdir(tmp_path)
    env = Env(tmp_path)
    app = env.app("app_run_raises_too", DEMO_APP, """\
        build_app = demo_build_app
        def run_app(app, task):
            raise RuntimeError("run_app exploded")
        """)
    assert main(_inject(env, app, env.tasks(GOOD_TASK, {**GOOD_TASK, "id": "again"}))) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "baselines: 2 attempted, 0 succeeded, 2 failed"
    for task_id in ("pens", "again"):
        assert any(line.split()[0] == task_id and "RuntimeError: run_app exploded" in line for line in out.splitlines()[1:3])
    assert out.index("baselines:") < out.index("mode ")


@pytest.mark.parametrize("framework", [f for f in FRAMEWORKS if f != "autogen"])
@pytest.mark.parametrize("team", sorted(TEAMS))
def test_demo_team_of_another_framework_is_a_usage_error(framework, team, tmp_path, capsys, monkeypatch):
    """Every team type is AutoGen's: ``--framework camel --team selector`` is refused before anything
    runs (it ran AutoGen's selector demo under the camel name)."""
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--framework", framework, "--team", team, "--trace-dir", str(tmp_path / "t")]) == 2
    out, err = capsys.readouterr()
    assert err.splitlines() == [f"error: --team {team} is an AutoGen team type: the {framework} demo has no --team "
                                f"(drop --framework {framework}, or --team)"]
    assert out == "" and not (tmp_path / "t").exists()


def test_traces_ls_help_names_its_columns_in_order(tmp_path, capsys):
    """``traces --help`` lists the columns ``traces ls`` prints (it named 'id, start, app, steps,
    outcome': no framework column, app last in fact)."""
    with pytest.raises(SystemExit):
        main(["traces", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert main(["traces", "--dir", Env(tmp_path).store_with(), "ls"]) == 0
    columns = re.split(r"\s{2,}", capsys.readouterr().out.splitlines()[0].strip())
    assert f"one line per trace: {', '.join(columns)}" in help_text


def test_traces_ls_of_a_campaign_folder_names_its_stores(tmp_path, capsys):
    """An injection campaign's folder holds its stores (traces/, baselines/): ls said only 'no traces'."""
    env = Env(tmp_path)
    env.store_with()
    assert main(["traces", "--dir", str(tmp_path), "ls"]) == 0
    assert capsys.readouterr().out == f"no traces in {tmp_path} (its folders S are trace stores: give one of them)\n"
