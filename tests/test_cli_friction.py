"""The first hour's friction points (issue 34), each run as a user types it: the train commands
without the train extra, ``-v`` after a command, outputs that are not ours, options naming what
is not there, an unset data variable, a trajectories file given to a trainer, an app module that
lacks its functions, ``train eval``'s key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aegis_probe.capture import semconv as sc
from aegis_probe.cli import main
from aegis_probe.train import cli as train_cli

REPO = Path(__file__).resolve().parents[1]
TRACE = "0123456789abcdef0123456789abcdef"
OTHER = "0123ffffffffffffffffffffffffffff"  # shares the prefix "0" (and "0123") with TRACE

#: ``python -c`` code that runs the train command line as if the train extra were not installed:
#: importing torch, transformers or TRL fails as it does when they are missing.
NO_EXTRA = """
import sys
class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {"torch", "transformers", "trl"}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Hide())
from aegis_probe.train.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _run(*argv: str, code: str | None = None, cwd: Path = REPO, **env: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", code, *argv] if code else [sys.executable, "-m", *argv]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO), **env})


def _store(root: Path, *trace_ids: str) -> Path:
    store = root / "S"
    store.mkdir()
    lines = []
    for n, trace_id in enumerate(trace_ids):
        spans = [{"traceId": trace_id, "spanId": f"{n:015x}1", "name": "invoke_workflow team", "kind": 1,
                  "startTimeUnixNano": "1", "endTimeUnixNano": "9",
                  "attributes": [{"key": sc.OUTCOME_SUCCESS, "value": {"boolValue": False}}]},
                 {"traceId": trace_id, "spanId": f"{n:015x}2", "parentSpanId": f"{n:015x}1", "name": "invoke_agent solver",
                  "kind": 1, "startTimeUnixNano": "2", "endTimeUnixNano": "8",
                  "attributes": [{"key": sc.STEP_INDEX, "value": {"intValue": "0"}},
                                 {"key": sc.OPERATION, "value": {"stringValue": sc.OP_AGENT}},
                                 {"key": "gen_ai.agent.name", "value": {"stringValue": "solver"}}]}]
        lines.append(json.dumps({"resourceSpans": [{"resource": {"attributes": []},
                                                    "scopeSpans": [{"scope": {"name": "t"}, "spans": spans}]}]}))
    (store / "spans.jsonl").write_text("\n".join(lines) + "\n")
    return store


# -- the train commands without the train extra ----------------------------------------------
@pytest.mark.parametrize("command", ["dcl", "sft", "grpo", "attribute"])
def test_without_the_train_extra_help_shows_the_options_and_running_names_what_to_install(command):
    shown = _run(command, "--help", code=NO_EXTRA)
    assert shown.returncode == 0, shown.stderr
    assert "--data" in shown.stdout and ("--out" in shown.stdout or "--output" in shown.stdout), shown.stdout
    options = ["--output", "p.jsonl"] if command == "attribute" else ["--out", "runs/x", "--epochs", "1"]
    ran = _run(command, "--data", "rows.jsonl", "--model", "m", *options, code=NO_EXTRA)
    assert ran.returncode == 2 and ran.stdout == ""
    assert ran.stderr.count("\n") == 1 and ran.stderr.startswith(f"error: train {command} needs the train extra ("), ran.stderr
    assert "pip install -e '.[train]'" in ran.stderr


def test_without_the_train_extra_an_option_no_command_has_is_still_refused():
    ran = _run("import", "x.jsonl", "-o", "y.jsonl", "--epochs", "1", code=NO_EXTRA)
    assert ran.returncode == 2 and "unrecognized arguments: --epochs 1" in ran.stderr


@pytest.mark.train
def test_train_dcl_prints_its_summary_when_its_output_is_piped(tmp_path):
    from test_train_data import whowhen_record

    src = tmp_path / "ww.jsonl"
    src.write_text("".join(json.dumps(whowhen_record(mistake_step=str(s), question_ID=f"q{s}")) + "\n" for s in (0, 1, 2)))
    built = _run("aegis_probe.train", "build", "dcl", str(src), "-o", str(tmp_path / "dcl.jsonl"))
    assert built.returncode == 0, built.stderr
    ran = _run("aegis_probe.train", "dcl", "--data", str(tmp_path / "dcl.jsonl"), "--out", str(tmp_path / "run"),
               "--epochs", "1", "--hidden_size", "8", "--ensemble", "2")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == f"trained a DCL attributor (2 seeds) on 3 rows for 1 epochs; written to {tmp_path / 'run'}\n"


@pytest.mark.train
def test_a_trajectories_file_given_to_train_dcl_says_to_build_the_rows_first(tmp_path, capsys):
    store = _store(tmp_path, TRACE)
    trajs = tmp_path / "all.jsonl"
    assert train_cli.main(["import", str(store), "-o", str(trajs), "--no-progress"]) == 0
    capsys.readouterr()
    assert train_cli.main(["dcl", "--data", str(trajs), "--out", str(tmp_path / "run"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"error: {trajs}: trajectories, not dcl training rows: make the rows first with train build dcl {trajs}" in err
    assert not (tmp_path / "run").exists()


# -- -v after a command --------------------------------------------------------------------
@pytest.mark.parametrize("argv", [["aegis_probe", "traces", "show", "f00d", "-v"], ["aegis_probe", "traces", "-v", "ls"],
                                  ["aegis_probe", "train", "import", "missing.jsonl", "-o", "x.jsonl", "-v"],
                                  ["aegis_probe.train", "import", "--verbose", "missing.jsonl", "-o", "x.jsonl"]])
def test_verbose_is_taken_after_the_command_too(argv, tmp_path):
    ran = _run(*argv, cwd=tmp_path, AEGIS_TRACE_DIR=str(tmp_path / "T"))
    assert "unrecognized arguments" not in ran.stderr, ran.stderr
    if ran.returncode:  # an error shows its traceback, as -v before the command does
        assert "Traceback (most recent call last)" in ran.stderr and ran.returncode == 2, ran.stderr


# -- outputs and stores ---------------------------------------------------------------------
def test_report_out_does_not_replace_a_file_that_is_not_a_report_unless_forced(tmp_path, capsys):
    store = _store(tmp_path, TRACE)
    readme = tmp_path / "README.md"
    readme.write_text("# my project\n")
    assert main(["report", TRACE[:6], "--dir", str(store), "--out", str(readme)]) == 2
    assert "not an aegis-probe report; not replaced (choose another path, or give --force" in capsys.readouterr().err
    assert readme.read_text() == "# my project\n"
    assert main(["report", TRACE[:6], "--dir", str(store), "--out", str(readme), "--force"]) == 0
    assert readme.read_text().startswith("<!DOCTYPE html>")
    assert main(["report", TRACE[:6], "--dir", str(store), "--out", str(readme)]) == 0  # ours now: rewritten


def test_traces_export_out_does_not_replace_a_file_of_something_else(tmp_path, capsys):
    store, notes = _store(tmp_path, TRACE), tmp_path / "notes.txt"
    notes.write_text("keep me\n")
    assert main(["traces", "export", TRACE[:6], "--dir", str(store), "--out", str(notes)]) == 2
    assert "not OTLP/JSON lines; not replaced" in capsys.readouterr().err and notes.read_text() == "keep me\n"
    out = tmp_path / "t.jsonl"
    for _ in range(2):  # an export of ours is replaced
        assert main(["traces", "export", TRACE[:6], "--dir", str(store), "--out", str(out)]) == 0


def test_report_out_naming_a_directory_is_one_error_line(tmp_path, capsys):
    store = _store(tmp_path, TRACE)
    assert main(["report", TRACE[:6], "--dir", str(store), "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"error: --out {tmp_path}: a directory; give the report's file name "
                                       f"(e.g. {tmp_path / 'report.html'})\n")


def test_inject_tasks_missing_names_the_option_and_the_file(tmp_path, capsys):
    assert main(["inject", "--app", "aegis_probe.demos.autogen:build_app", "--tasks", str(tmp_path / "missing.jsonl"),
                 "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.startswith(f"error: --tasks {tmp_path / 'missing.jsonl'}: no such file")


def test_traces_show_an_ambiguous_prefix_lists_the_matching_traces(tmp_path, capsys):
    store = _store(tmp_path, TRACE, OTHER)
    assert main(["traces", "show", "0", "--dir", str(store)]) == 2
    err = capsys.readouterr().err
    assert f"2 traces matching '0' in {store}: {TRACE}, {OTHER}; give more of the id" in err


def test_traces_ls_dir_naming_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "README.md").write_text("hi\n")
    ran = _run("aegis_probe", "traces", "ls", "--dir", "README.md", cwd=tmp_path)
    assert ran.returncode == 2 and ran.stdout == ""
    assert ran.stderr == f"error: --dir {tmp_path / 'README.md'}: a file, not a trace store directory\n"


# -- inputs that are not what they seem ----------------------------------------------------
def test_train_import_of_a_path_whose_variable_is_unset_says_so(tmp_path):
    ran = _run("aegis_probe.train", "import", "/whowhen-nonexistent/Algorithm-Generated", "-o", "ww.jsonl", cwd=tmp_path)
    assert ran.returncode == 2 and ran.stderr.count("\n") == 1
    assert "no file or directory at /whowhen-nonexistent/Algorithm-Generated (there is no /whowhen-nonexistent:" in ran.stderr
    assert '"$AEGIS_SHARED_DATA/whowhen-nonexistent/...", that variable is unset)' in ran.stderr


def test_blame_app_module_without_its_functions_is_refused_before_it_runs(tmp_path):
    (tmp_path / "mymodule.py").write_text("from pathlib import Path\nPath('ran').write_text('yes')\n\n"
                                          "def build_app(base_url, model, api_key):\n    return None\n")
    ran = _run("aegis_probe", "blame", "--trace", "0123", "--app", "mymodule", "--fixer", "examples/fixers.py:recompute",
               cwd=tmp_path, PYTHONPATH=f"{REPO}:{tmp_path}")
    assert ran.returncode == 2, ran.stderr
    assert ran.stderr == ("error: --app mymodule: needs a factory build_app(base_url, model, api_key) and "
                          "run_app(app, task) in mymodule\n")
    assert not (tmp_path / "ran").exists()


def test_an_app_module_that_defines_its_functions_in_branches_still_loads():
    from aegis_probe.apps import undefined

    assert undefined("aegis_probe.demos.autogen", ("build_app", "run_app")) == []
    assert undefined(str(REPO / "examples/injection/autogen_math.py"), ("build_app", "run_app")) == []
    assert undefined(str(REPO / "tests/zerocode_app.py"), ("nothing_of_that_name",)) == ["nothing_of_that_name"]


def test_train_eval_takes_the_name_of_the_key_variable_and_refuses_a_key(tmp_path, capsys):
    store = _store(tmp_path, TRACE)
    secret = "sk-not-a-real-key-1234567890"
    assert train_cli.main(["eval", str(store), "--method", "all-at-once", "--api-key", secret, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--api-key is no longer taken" in err and "--api-key-env VAR" in err and secret not in err
    help_text = subprocess.run([sys.executable, "-m", "aegis_probe.train", "eval", "--help"], capture_output=True,
                               text=True, cwd=REPO, timeout=120).stdout
    assert "--api-key-env VAR" in help_text and "--api-key " not in help_text


def test_train_import_that_skips_bad_records_calls_them_warnings_and_exits_0(tmp_path):
    from test_train_data import whowhen_record

    (tmp_path / "ww").mkdir()
    (tmp_path / "ww" / "1.json").write_text(json.dumps(whowhen_record()))
    (tmp_path / "ww" / "2.json").write_text("{broken")
    ran = _run("aegis_probe.train", "import", "ww", "-o", "all.jsonl", cwd=tmp_path)
    assert ran.returncode == 0 and ran.stdout == "wrote 1 trajectories to all.jsonl\n"
    assert "  warning: record skipped: ww/2.json [file]: invalid JSON" in ran.stderr and "error:" not in ran.stderr
