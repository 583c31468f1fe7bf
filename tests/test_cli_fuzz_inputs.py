"""Bad input to ``inject`` found by fuzzing: task records of the wrong shape, app modules whose
contract values are of the wrong type or that raise oddly at import. Each is one ``error:`` line
naming the file (or ``--app``) and the record, exit 2, no traceback, and nothing run or written."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from aegis_probe.cli import main

#: An app without a framework: a campaign would run it, but bad input stops it before any run.
APP = """\
    def build_app(base_url, model, api_key):
        return None

    def run_app(app, task):
        return "2"
    """
GOOD = {"id": "a", "task": "What is 1 + 1?", "expected": "2"}


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


def _inject(tmp_path: Path, tasks: str, app: str = APP) -> list[str]:
    (tmp_path / "app.py").write_text(textwrap.dedent(app))
    (tmp_path / "tasks.jsonl").write_text(tasks)
    return ["inject", "--app", f"{tmp_path / 'app.py'}:build_app", "--tasks", str(tmp_path / "tasks.jsonl"),
            "--out", str(tmp_path / "out"), "--no-progress"]


@pytest.mark.parametrize(("line", "names"), [
    ('{"id": [1], "task": "x", "expected": "1"}', ("record 1", "`id` must be a non-empty string or an integer")),
    ('{"id": null, "task": "x", "expected": "1"}', ("record 1", "`id`")),
    ('{"id": " ", "task": "x", "expected": "1"}', ("record 1", "`id`")),
    ('{"id": true, "task": "x", "expected": "1"}', ("record 1", "`id`")),
    ('{"id": "a", "task": "x", "expected": "1", "type": ["math"]}', ("record 1", "`type` must be a string")),
    ('{"id": "a", "task": "x", "expected": {"a": 1}}', ("record 1", "`expected` must be a string or a number")),
    ('{"id": "a", "task": "x", "expected": [1]}', ("record 1", "`expected` must be a string or a number")),
    ('{"id": "a", "task": "x", "expected": true}', ("record 1", "`expected` must be a string or a number")),
    ('{"id": "a", "id": "b", "task": "x", "expected": "1"}', ("tasks.jsonl:1", "key 'id' given twice")),
    ('{"id": "a", "task": "x", "expected": "1", "meta": {"k": 1, "k": 2}}', ("tasks.jsonl:1", "key 'k' given twice")),
], ids=["id-list", "id-null", "id-blank", "id-bool", "type-list", "expected-object", "expected-list", "expected-bool",
        "duplicate-key", "duplicate-nested-key"])
def test_a_task_record_of_the_wrong_shape_is_refused_before_any_run(line, names, tmp_path, capsys):
    assert main(_inject(tmp_path, line + "\n")) == 2
    error = _error(capsys)
    assert str(tmp_path / "tasks.jsonl") in error
    for name in names:
        assert name in error
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("extra", "names"), [
    ("AGENTS = 5\n", ("AGENTS", "must be a list of agent names, not 5")),
    ("AGENTS = 'planner'\n", ("AGENTS", "not 'planner'")),
    ("AGENTS = ['planner', 3]\n", ("AGENTS", "list of agent names")),
    ("TERMINATION = 5\n", ("TERMINATION", "must be a string, not 5")),
    ("policy = 5\n", ("policy", "must be a function, not 5")),
    ("judge = 'exact'\n", ("judge", "must be a function, not 'exact'")),
])
def test_an_app_whose_contract_values_have_the_wrong_type_is_refused_when_loaded(extra, names, tmp_path, capsys):
    assert main(_inject(tmp_path, json.dumps(GOOD) + "\n", APP + extra)) == 2
    error = _error(capsys)
    assert f"--app {tmp_path / 'app.py'}:build_app" in error
    for name in names:
        assert name in error
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("source", "names"), [
    (b"x = 1\x00\n", ("app.py: SyntaxError", "null bytes")),
    (b"raise GeneratorExit\ndef build_app(b, m, k): pass\ndef run_app(app, task): pass\n", ("cannot import", "GeneratorExit")),
], ids=["null-bytes", "generator-exit"])
def test_an_app_file_that_cannot_import_is_one_error_line_naming_it(source, names, tmp_path, capsys):
    argv = _inject(tmp_path, json.dumps(GOOD) + "\n")
    (tmp_path / "app.py").write_bytes(source)
    assert main(argv) == 2
    error = _error(capsys)
    assert "None:None" not in error
    for name in names:
        assert name in error


@pytest.mark.parametrize("spec", ["", ":", " :calculator"])
def test_demo_inject_without_a_mode_is_refused_not_run_uninjected(spec, tmp_path, capsys):
    pytest.importorskip("autogen_agentchat")
    assert main(["demo", "--inject", spec, "--trace-dir", str(tmp_path / "t")]) == 2
    assert f"--inject {spec!r}: give a MAST failure mode, e.g. FM-2.6" in _error(capsys)
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize(("made", "names"), [
    ("traces", "traces: not a directory"), ("baselines", "baselines: not a directory"),
    ("traces/spans.jsonl/", "spans.jsonl: a directory, not a trace file"),
    ("baselines/spans.jsonl/", "spans.jsonl: a directory, not a trace file"),
])
def test_inject_into_an_out_whose_store_is_of_the_wrong_kind_runs_nothing(made, names, tmp_path, capsys):
    argv = [*_inject(tmp_path, json.dumps(GOOD) + "\n"), "--base-url", "http://127.0.0.1:9"]
    target = tmp_path / "out" / made
    target.parent.mkdir(parents=True)
    if made.endswith("/"):
        target.mkdir()
    else:
        target.write_text("notes")
    assert main(argv) == 2
    error = _error(capsys)
    assert f"error: {target}".rstrip("/") in error and names in error
    assert not (tmp_path / "out" / "runs.jsonl").exists()


def test_inject_out_that_is_a_file_is_refused_and_kept(tmp_path, capsys):
    argv = _inject(tmp_path, json.dumps(GOOD) + "\n")
    (tmp_path / "out").write_text("notes")
    assert main(argv) == 2
    assert f"error: --out {tmp_path / 'out'}: not a directory (the campaign directory" in _error(capsys)
    assert (tmp_path / "out").read_text() == "notes"


@pytest.mark.parametrize(("options", "message"), [
    (["--run-timeout", "inf"], "--run-timeout must be > 0 seconds and at most a year (31536000), not inf"),
    (["--run-timeout", "1e300"], "--run-timeout must be > 0 seconds and at most a year"),
    (["--base-url", "not a url"], "--base-url 'not a url': give the OpenAI-compatible endpoint's http(s):// URL"),
    (["--base-url", "http://127.0.0.1:99999"], "--base-url 'http://127.0.0.1:99999': Port out of range 0-65535"),
    (["--operator", "llm", "--manipulator-model", "m", "--manipulator-base-url", "localhost:8000"],
     "--manipulator-base-url 'localhost:8000': give"),
    (["--manipulator-temperature", "nan"], "--manipulator-temperature must be a number >= 0, not nan"),
    (["--modes", ","], "--modes names none"),
    (["--strategies", " "], "--strategies names none"),
])
def test_inject_option_out_of_range_is_refused_before_any_run(options, message, tmp_path, capsys):
    assert main([*_inject(tmp_path, json.dumps(GOOD) + "\n", APP + "policy = print\n"), *options]) == 2
    assert message in _error(capsys)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("argv", "message"), [
    (["demo", "--base-url", "localhost:8000/v1"], "--base-url 'localhost:8000/v1': give the OpenAI-compatible endpoint's http(s)"),
    (["blame", "--trace", "ab", "--app", "x", "--fixer", "m:f", "--base-url", "ftp://h"], "--base-url 'ftp://h': give"),
    (["blame", "--trace", "ab", "--app", "x", "--analyzer-url", "http://h:x"], "--analyzer-url 'http://h:x': Port could not be cast"),
    (["report", "ab", "--jaeger-url", "javascript:alert(1)"], "--jaeger-url 'javascript:alert(1)': give the UI's http(s):// URL"),
    (["report", "ab", "--phoenix-url", "localhost:6006"], "--phoenix-url 'localhost:6006': give"),
    (["traces", "export", "--all", "--otlp-endpoint", "http://h:70000"], "--otlp-endpoint 'http://h:70000': Port out of range"),
    (["traces", "export", "--all", "--timeout", "inf"], "--timeout must be > 0 seconds and at most a year (31536000), not inf"),
])
def test_a_url_or_timeout_option_out_of_range_names_its_option(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "S").mkdir()
    assert main([*argv, "--dir", str(tmp_path / "S")] if argv[0] != "demo" else [*argv, "--trace-dir", str(tmp_path / "S")]) == 2
    assert message in _error(capsys)
    assert [p.name for p in tmp_path.rglob("*")] == ["S"]


@pytest.mark.parametrize(("extra", "message"), [
    (', "tolerance": Infinity', "`tolerance` must be a non-negative number, not inf (finite)"),
    (', "tolerance": NaN', "`tolerance` must be a non-negative number, not nan"),
    (', "judge": "unit_tests", "tests": "assert True", "timeout": 1e300',
     "`timeout` must be a non-negative number, not 1e+300 (finite, at most 3.1536e+07)"),
    (', "judge": "unit_tests", "tests": "assert True", "timeout": Infinity', "`timeout` must be a non-negative number, not inf"),
])
def test_a_task_judge_number_that_is_not_finite_is_refused_when_read(extra, message, tmp_path, capsys):
    line = json.dumps(GOOD)[:-1] + extra + "}"
    assert main(_inject(tmp_path, line + "\n")) == 2
    error = _error(capsys)
    assert f"{tmp_path / 'tasks.jsonl'}: record 1 (id 'a'): " in error and message in error
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("app", "message"), [
    (APP.replace("def build_app(base_url, model, api_key)", "def build_app(base_url)"),
     "build_app(base_url, model, api_key): too many positional arguments"),
    (APP.replace("def run_app(app, task)", "def run_app(app)"), "run_app(app, task): too many positional arguments"),
    (APP.replace("def run_app(app, task)", "def run_app(app, task, model)"), "run_app(app, task): missing a required argument: 'model'"),
])
def test_an_app_whose_functions_take_other_arguments_is_refused_when_loaded(app, message, tmp_path, capsys):
    assert main(_inject(tmp_path, json.dumps(GOOD) + "\n", app)) == 2
    assert f"--app {tmp_path / 'app.py'}:build_app: {message}" in _error(capsys)
    assert not (tmp_path / "out").exists()


def test_an_app_factory_taking_the_task_as_well_still_loads(tmp_path):
    from aegis_probe.apps import AppSpec

    (tmp_path / "task_app.py").write_text(textwrap.dedent(APP).replace("api_key)", "api_key, task)"))
    assert AppSpec.load(f"{tmp_path / 'task_app.py'}:build_app").factory.__name__ == "build_app"


@pytest.mark.parametrize("trace_dir", ["notes.txt", "notes.txt/traces"])
def test_demo_into_an_aegis_trace_dir_that_cannot_be_a_store_runs_nothing(trace_dir, tmp_path, capsys, monkeypatch):
    pytest.importorskip("autogen_agentchat")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AEGIS_TRACE_DIR", trace_dir)
    (tmp_path / "notes.txt").write_text("notes")
    assert main(["demo"]) == 2
    out, err = capsys.readouterr()
    assert err.startswith(f"error: $AEGIS_TRACE_DIR {tmp_path / trace_dir}: ") and err.count("\n") == 1, err
    assert out == ""  # the team never ran
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"] and (tmp_path / "notes.txt").read_text() == "notes"


def test_an_unreadable_run_record_is_warned_of_once_per_campaign(tmp_path, caplog):
    argv = [*_inject(tmp_path, json.dumps(GOOD) + "\n"), "--base-url", "http://127.0.0.1:9"]
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "runs.jsonl").write_bytes(b"\x89PNG\x00\xff\n")
    main(argv)
    warned = [r.getMessage() for r in caplog.records if "unreadable run record" in r.getMessage()]
    assert warned == [f"{tmp_path / 'out' / 'runs.jsonl'}:1: unreadable run record skipped; the run will be redone"]
    assert (tmp_path / "out" / "runs.jsonl").read_bytes().startswith(b"\x89PNG\x00\xff\n")  # kept, the new records after it
