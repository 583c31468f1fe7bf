"""Stored traces whose spans are OTLP but make no trajectory (an aegis attribute of the wrong
type): ``traces show``, ``report ID`` and ``blame`` say so in one ``error:`` line naming the store
(``traces ls`` already names it when it skips the trace), exit 2, no traceback, nothing written."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from aegis_probe.capture import semconv as sc
from aegis_probe.cli import main

from test_cli_fuzz_inputs import APP, _error

TRACE = "0123456789abcdef0123456789abcdef"
FIXER = f"{Path(__file__).parents[1] / 'examples' / 'fixers.py'}:recompute"


def _store_with_bad_step_index(root: Path) -> Path:
    """A store whose one trace has a step span with ``aegis.step.index`` "zero": OTLP, but no trajectory."""
    spans = [
        {"traceId": TRACE, "spanId": "00000000000000a1", "name": "invoke_workflow team", "kind": 1,
         "startTimeUnixNano": "1", "endTimeUnixNano": "9",
         "attributes": [{"key": sc.OUTCOME_SUCCESS, "value": {"boolValue": False}},
                        {"key": sc.TASK, "value": {"stringValue": "What is 1 + 1?"}}]},
        {"traceId": TRACE, "spanId": "00000000000000a2", "parentSpanId": "00000000000000a1", "name": "invoke_agent solver",
         "kind": 1, "startTimeUnixNano": "2", "endTimeUnixNano": "8",
         "attributes": [{"key": sc.STEP_INDEX, "value": {"stringValue": "zero"}},
                        {"key": sc.OPERATION, "value": {"stringValue": sc.OP_AGENT}},
                        {"key": "gen_ai.agent.name", "value": {"stringValue": "solver"}}]},
    ]
    store = root / "S"
    store.mkdir()
    (store / "spans.jsonl").write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}) + "\n")
    return store


@pytest.mark.parametrize("command", ["traces show", "report", "blame"])
def test_a_stored_trace_that_makes_no_trajectory_is_an_error_naming_the_store(command, tmp_path, capsys):
    store = _store_with_bad_step_index(tmp_path)
    (tmp_path / "app.py").write_text(textwrap.dedent(APP))
    argv = {"traces show": ["traces", "show", TRACE[:8], "--dir", str(store)],
            "report": ["report", TRACE[:8], "--dir", str(store), "--out", str(tmp_path / "r.html")],
            "blame": ["blame", "--trace", TRACE[:8], "--dir", str(store), "--app", f"{tmp_path / 'app.py'}:build_app",
                      "--fixer", FIXER, "--expected", "2", "--no-progress"]}[command]
    before = (store / "spans.jsonl").read_bytes()
    assert main(argv) == 2
    error = _error(capsys)
    assert f"error: {store}: trace {TRACE}: malformed aegis span attributes" in error
    assert (store / "spans.jsonl").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["S", "app.py"]


def test_blame_with_dir_naming_a_trace_file_is_refused_before_any_replay(tmp_path, capsys):
    store = _store_with_bad_step_index(tmp_path)
    (tmp_path / "app.py").write_text(textwrap.dedent(APP))
    before = (store / "spans.jsonl").read_bytes()
    assert main(["blame", "--trace", TRACE[:8], "--dir", str(store / "spans.jsonl"), "--app", f"{tmp_path / 'app.py'}:build_app",
                 "--fixer", FIXER, "--expected", "2", "--no-progress"]) == 2
    assert f"error: --dir {store / 'spans.jsonl'}: a file, not a trace store directory" in _error(capsys)
    assert (store / "spans.jsonl").read_bytes() == before


@pytest.fixture(scope="module")
def failed_demo_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A store holding one failed AutoGen demo run (FM-2.6 injected), recorded with content: blame can replay it."""
    pytest.importorskip("autogen_agentchat")
    store = tmp_path_factory.mktemp("demo") / "T"
    assert main(["demo", "--inject", "FM-2.6", "--trace-dir", str(store)]) == 0
    return store, json.loads((store / "spans.jsonl").read_text().splitlines()[0])["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"]


def _first_chat_span_with(lines: list[str], key: str, value: dict) -> str:
    """The store's lines with ``key`` of its first chat span set to the OTLP ``value``."""
    out, done = [], False
    for line in lines:
        request = json.loads(line)
        for span in (s for rs in request["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]):
            attrs = {a["key"]: a for a in span.get("attributes", [])}
            if not done and attrs.get(sc.OPERATION, {}).get("value") == {"stringValue": sc.OP_CHAT} and key in attrs:
                attrs[key]["value"], done = value, True
        out.append(json.dumps(request))
    assert done
    return "\n".join(out) + "\n"


@pytest.mark.parametrize(("key", "value", "message"), [
    (sc.INPUT_MESSAGES, {"intValue": "5"}, "its recorded request is 5, not messages JSON text"),
    (sc.AGENT_CALL_INDEX, {"stringValue": "x"}, f"its {sc.AGENT_CALL_INDEX} is 'x', not a call number"),
    (sc.AGENT_CALL_INDEX, {"intValue": "-1"}, f"its {sc.AGENT_CALL_INDEX} is -1, not a call number"),
    (sc.OUTPUT_MESSAGES, {"stringValue": "{cut"}, "its recorded response is not readable messages JSON"),
], ids=["request-int", "call-index-text", "call-index-negative", "response-cut"])
def test_blame_of_a_recording_no_replay_could_match_names_the_store_and_the_call(key, value, message, failed_demo_store,
                                                                                tmp_path, capsys):
    demo, trace_id = failed_demo_store
    store = tmp_path / "T"
    store.mkdir()
    (store / "spans.jsonl").write_text(_first_chat_span_with((demo / "spans.jsonl").read_text().splitlines(), key, value))
    before = (store / "spans.jsonl").read_bytes()
    capsys.readouterr()
    assert main(["blame", "--trace", trace_id[:12], "--dir", str(store), "--app", "aegis_probe.demos.autogen",
                 "--fixer", FIXER, "--no-progress"]) == 2
    error = _error(capsys)
    assert error.startswith(f"error: {store}: trace {trace_id}: LLM call ") and message in error
    assert (store / "spans.jsonl").read_bytes() == before  # no replay ran, no label written


@pytest.mark.parametrize("argv", [["traces", "ls"], ["traces", "show", "ab"], ["traces", "export", "--all"],
                                  ["report", "ab", "--out", "r.html"],
                                  ["blame", "--trace", "ab", "--app", "app.py", "--fixer", FIXER]])
def test_a_dir_that_names_nothing_is_an_error_not_an_empty_store(argv, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "app.py").write_text(textwrap.dedent(APP))
    assert main([*argv, "--dir", "aegis-tarces"]) == 2
    assert "error: --dir aegis-tarces: no such trace store directory" in _error(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.py"]


def test_blame_fixer_taking_other_arguments_is_refused_before_any_replay(failed_demo_store, tmp_path, capsys):
    store, trace_id = failed_demo_store
    before = (store / "spans.jsonl").read_bytes()
    (tmp_path / "fix.py").write_text("def fix(trajectory):\n    return 'x'\n")
    capsys.readouterr()
    assert main(["blame", "--trace", trace_id[:12], "--dir", str(store), "--app", "aegis_probe.demos.autogen",
                 "--fixer", f"{tmp_path / 'fix.py'}:fix", "--no-progress"]) == 2
    assert f"--fixer {tmp_path / 'fix.py'}:fix: fix(trajectory, step): too many positional arguments" in _error(capsys)
    assert (store / "spans.jsonl").read_bytes() == before


def _store_with_root_attribute(root: Path, *attributes: tuple[str, dict]) -> Path:
    """A store whose one trace's root span also holds ``attributes`` (key, OTLP value)."""
    store = _store_with_bad_step_index(root)
    line = json.loads((store / "spans.jsonl").read_text())
    spans = line["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans[1]["attributes"][0]["value"] = {"intValue": "0"}  # a good step index: only the root's attribute is bad
    spans[0]["attributes"] += [{"key": key, "value": value} for key, value in attributes]
    (store / "spans.jsonl").write_text(json.dumps(line) + "\n")
    return store


@pytest.mark.parametrize("command", ["traces show", "report"])
def test_a_label_nested_too_deeply_names_the_store_and_trace(command, tmp_path, capsys):
    store = _store_with_root_attribute(tmp_path, (sc.LABEL_FAULTS, {"stringValue": "[" * 100_000 + "]" * 100_000}))
    argv = ["traces", "show", TRACE[:8]] if command == "traces show" else ["report", TRACE[:8], "--out", str(tmp_path / "r.html")]
    assert main([*argv, "--dir", str(store)]) == 2
    assert _error(capsys) == f"error: {store}: trace {TRACE}: an aegis attribute holds JSON nested too deeply to read"
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize(("attributes", "reason"), [
    ([(sc.LABEL_FAULTS, {"stringValue": "[" * 100_000 + "]" * 100_000})], "an aegis attribute holds JSON nested too deeply to read"),
    ([(sc.LABEL_FAULTS, {"stringValue": '[{"agent": "solver", "step": 0}]'}), (sc.LABEL_SOURCE, {"intValue": "3"})],
     "malformed aegis span attributes (LabelSet: source: Input should be a valid string)"),  # pydantic's own spans lines
], ids=["nested-too-deeply", "label-source-a-number"])
def test_traces_ls_skips_a_malformed_trace_with_a_one_line_warning(attributes, reason, tmp_path, capsys, caplog):
    store = _store_with_root_attribute(tmp_path, *attributes)
    assert main(["traces", "ls", "--dir", str(store)]) == 0
    assert f"no traces in {store}" in capsys.readouterr().out
    warned = [r.getMessage() for r in caplog.records if "trace skipped" in r.getMessage()]
    assert len(warned) == 1 and "\n" not in warned[0] and reason in warned[0], warned
    assert warned[0].startswith(f"{store}: trace {TRACE}: ") and "errors.pydantic.dev" not in warned[0]
