"""The command line as a user runs it: ``python -m aegis_probe demo``, the README's newcomer path
(demo -> blame -> report -> inject), the trace browser, help texts and the one-CLI conventions."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import aegis_probe
from aegis_probe.demos import FRAMEWORKS, REQUIREMENTS

REPO = Path(__file__).resolve().parents[1]


def _cli(*args: str, cwd, env_extra: dict[str, str] | None = None, module: str = "aegis_probe") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "AEGIS_TRACE_DIR"}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def _installed(framework: str) -> bool:
    return importlib.util.find_spec(REQUIREMENTS[framework][0]) is not None


@pytest.mark.parametrize("framework", [f for f in FRAMEWORKS if f in ("autogen", "camel", "metagpt")])
def test_demo_runs_offline_quietly_and_writes_trace_and_report_into_the_store(framework, tmp_path):
    if not _installed(framework):
        pytest.skip(f"{framework} is not installed")
    proc = _cli("demo", "--framework", framework, cwd=tmp_path, env_extra={"OPENAI_API_KEY": ""})
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "outcome  success" in out and "126" in out
    # The frameworks' own warnings and log lines stay out of the output.
    assert not re.search(r"warn|INFO|DEBUG", out + proc.stderr, re.IGNORECASE), (out + proc.stderr)[-2000:]
    trace_id = re.search(r"^trace\s+([0-9a-f]{32})$", out, re.MULTILINE).group(1)
    rows = re.findall(r"^\s+(\d+)\s{2}\S", out, re.MULTILINE)
    assert rows == [str(i) for i in range(len(rows))] and len(rows) >= 3, "one row per step, 0-based"
    [traj] = aegis_probe.load_trajectories(tmp_path / "aegis-traces")
    assert traj.trace_id == trace_id and traj.framework == framework and traj.outcome.success is True
    assert len(traj.steps) == len(rows)
    # The report lies next to the store, not in the working directory.
    report = Path(re.search(r"report written to (\S+)", out).group(1))
    assert report.parent == Path("aegis-traces") and "<html" in (tmp_path / report).read_text()[:200].lower()
    assert [p.name for p in tmp_path.iterdir()] == ["aegis-traces"]

    listed = _cli("traces", "ls", cwd=tmp_path)
    assert listed.returncode == 0 and trace_id in listed.stdout and framework in listed.stdout
    shown = _cli("traces", "show", trace_id[:8], cwd=tmp_path)
    assert shown.returncode == 0 and f"trace    {trace_id}" in shown.stdout


def test_demo_against_a_keyless_endpoint(model_server, tmp_path):
    from aegis_probe.demos import autogen as demo

    server = model_server(demo.policy)
    proc = _cli("demo", "--base-url", server.base_url, cwd=tmp_path, env_extra={"OPENAI_API_KEY": ""})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "outcome  success" in proc.stdout and server.requests


def test_demo_against_an_endpoint(model_server, tmp_path):
    from aegis_probe.demos import autogen as demo

    server = model_server(demo.policy)
    proc = _cli("demo", "--base-url", server.base_url, "--model", "served-model", "--api-key-env", "MY_KEY",
                cwd=tmp_path, env_extra={"MY_KEY": "sk-from-env-abcdefghijklmnop"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"against the {server.base_url}" in proc.stdout and "outcome  success" in proc.stdout
    assert server.requests and all(r["model"] == "served-model" for r in server.requests)
    assert "sk-from-env" not in (tmp_path / "aegis-traces" / "spans.jsonl").read_text()


@pytest.mark.parametrize(("blocked", "argv", "hint"), [
    ("autogen_agentchat", ["demo"], "pip install 'aegis-probe[autogen]'"),
    ("metagpt", ["demo", "--framework", "metagpt"], "README.md"),
])
def test_demo_without_its_framework_names_what_to_install(blocked, argv, hint, tmp_path):
    code = (f"import sys; sys.modules[{blocked!r}] = None\n"
            f"from aegis_probe.cli import main; raise SystemExit(main({argv!r}))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith("error: ") and blocked in line and hint in line


def _readme_block(title: str) -> list[str]:
    """The commands of the README's fenced bash block right after the heading ``title``."""
    text = (REPO / "README.md").read_text()
    section = text[text.index(title):]
    block = section[section.index("```bash") + len("```bash"):]
    block = block[: block.index("```")]
    return [line.split("#")[0].strip() for line in block.splitlines() if line.strip().startswith("python -m aegis_probe")]


def test_readme_newcomer_path_demo_blame_report_inject(tmp_path):
    """The README's path, command by command: a failed demo run, blamed with the example fixer,
    reported; then a campaign over the demo team with the documented tasks (every baseline succeeds)."""
    pytest.importorskip("autogen_agentchat")
    (tmp_path / "examples").symlink_to(REPO / "examples")
    commands = _readme_block("## From a failed run to labelled data")
    assert [c.split()[3] for c in commands] == ["demo", "blame", "report", "inject", "traces"]
    trace_id = None
    outputs = []
    for command in commands:
        argv = command.replace("ID", trace_id or "ID").split()[3:]
        proc = _cli(*argv, cwd=tmp_path)
        assert proc.returncode == 0, (command, proc.stdout[-2000:], proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr
        outputs.append(proc.stdout)
        if trace_id is None:
            trace_id = re.search(r"^trace\s+([0-9a-f]{32})$", proc.stdout, re.MULTILINE).group(1)[:12]
    demo, blamed, reported, injected, listed = outputs
    assert "outcome  failure" in demo and "mode=FM-2.6" in demo and "blame --trace" in demo
    assert "decisive error: step 1 by calculator" in blamed
    assert "written to report.html" in reported and (tmp_path / "report.html").read_text().lower().startswith("<!doctype html")
    assert "baselines: 4 attempted, 4 succeeded, 0 failed" in injected
    kept = re.search(r"^total\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)$", injected, re.M)
    assert kept and int(kept.group(4)) >= 1, injected
    assert len(re.findall(r"^[0-9a-f]{32}\s", listed, re.M)) == int(kept.group(4))


def test_inject_summary_shows_failed_baselines_with_answers_and_exits_1(tmp_path):
    pytest.importorskip("autogen_agentchat")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "riddle", "type": "math", "expected": "7",
                                 "task": "How many days does a week have?"}) + "\n")
    proc = _cli("inject", "--app", "aegis_probe.demos.autogen:build_app", "--tasks", str(tasks),
                "--out", str(tmp_path / "out"), "--no-progress", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "baselines: 1 attempted, 0 succeeded, 1 failed"
    assert lines[1].split()[0] == "riddle" and "wrong answer" in lines[1] and "(expected '7')" in lines[1]
    assert proc.stdout.index("baselines:") < proc.stdout.index("mode ")
    assert "no baseline succeeded" in proc.stderr


def test_help_is_plain_text_names_the_program_and_lists_train(tmp_path):
    script = Path(sys.executable).with_name("aegis-probe")
    if not script.exists():
        pytest.skip("the aegis-probe console script is not installed")
    run = lambda *a: subprocess.run([str(script), *a], cwd=tmp_path, capture_output=True, text=True, timeout=60)  # noqa: E731
    top = run("--help")
    assert top.returncode == 0 and top.stdout.startswith("usage: aegis-probe ")
    assert re.search(r"^\s+train\s", top.stdout, re.M)
    assert run("--version").stdout.strip() == f"aegis-probe {aegis_probe.__version__}"
    for command in ("demo", "traces", "inject", "blame", "report", "train"):
        shown = run(command, "--help")
        assert shown.returncode == 0 and "``" not in shown.stdout and ":func:" not in shown.stdout, command
        assert shown.stdout.startswith(f"usage: aegis-probe {command}"), shown.stdout[:80]
    same = subprocess.run([sys.executable, "-m", "aegis_probe.train", "--help"], capture_output=True, text=True, timeout=60)
    assert same.stdout.replace("python -m aegis_probe.train", "aegis-probe train") == run("train", "--help").stdout


def test_train_help_does_not_import_the_trainers():
    code = ("import sys\nfrom aegis_probe.train.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('trl', 'torch', 'transformers') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1] == "[]", proc.stdout[-500:]
    assert all(name in proc.stdout for name in ("import", "sft", "grpo", "dcl", "attribute"))


def test_train_through_aegis_probe_is_the_training_cli(tmp_path, capsys):
    from aegis_probe.cli import main

    source = tmp_path / "none.jsonl"
    source.write_text("not json\n")
    assert main(["train", "import", str(source), "-o", str(tmp_path / "o.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and not (tmp_path / "o.jsonl").exists()


def _store_with_one_trace(store_dir: Path) -> str:
    """A store holding one run written by a real probe (an AutoGen agent on a scripted server)."""
    from aegis_probe.modelserver import ModelServer, Reply
    from aegis_probe.demos import autogen as demo

    with ModelServer(lambda body: Reply(content="done")) as server:
        team = demo.build_app(server.base_url, "m", "k")
        probe = aegis_probe.instrument(team, store=str(store_dir))
        demo.run_app(team, "say done")
        probe.flush()
        trace_id = probe.last_trace_id
        probe.uninstrument()
    return trace_id


def test_traces_ls_into_a_closed_pipe_is_quiet(tmp_path):
    pytest.importorskip("autogen_agentchat")
    _store_with_one_trace(tmp_path / "aegis-traces")
    env = {k: v for k, v in os.environ.items() if k != "AEGIS_TRACE_DIR"}
    proc = subprocess.Popen([sys.executable, "-m", "aegis_probe", "traces", "ls"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # like `| head -0`: the reader is gone before the first line
    assert proc.wait(timeout=60) in (0, 141)
    assert proc.stderr.read() == b""


def test_traces_show_prints_an_attribution_verdict(tmp_path, capsys):
    pytest.importorskip("autogen_agentchat")
    from aegis_probe.cli import main
    from aegis_probe.storage.store import TraceStore
    from aegis_probe.trajectory import Fault, label_attributes

    store = TraceStore(tmp_path / "store")
    trace_id = _store_with_one_trace(store.path)
    assert main(["traces", "show", trace_id, "--dir", str(store.path)]) == 0
    assert "verdict" not in capsys.readouterr().out
    fault = Fault(agent="planner", step=0, mode="FM-2.6", reason="agent score 0.9100, step score 0.7300")
    store.amend(trace_id, attributes=label_attributes(store.trace(trace_id), "attribution:dcl-test", [fault]))
    assert main(["traces", "show", trace_id[:8], "--dir", str(store.path)]) == 0
    out = capsys.readouterr().out
    assert "verdict  agent=planner step=0 mode=FM-2.6 by dcl-test (agent score 0.9100, step score 0.7300)" in out
