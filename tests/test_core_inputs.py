"""Bad input a user hands the core command line (real-use sweep): each is one ``error:`` line
naming the file and record, exit status 2, and nothing already written is touched."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from aegis_probe import cli

REPO = Path(__file__).resolve().parents[1]

TASK = {"id": "a", "task": "What is 2 + 3?", "type": "math", "expected": "5"}


def test_tasks_file_with_bytes_that_are_not_utf8_names_file_and_line(tmp_path, capsys):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_bytes(json.dumps(TASK).encode() + b"\n\n{\"id\": \"b\", \"task\": \"caf\xe9\"}\n")
    code = cli.main(["inject", "--app", "aegis_probe.demos.autogen:build_app", "--tasks", str(tasks),
                     "--out", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert f"{tasks}:3: not UTF-8 text (byte 0xe9" in err, err
    assert not (tmp_path / "out").exists()


def test_jsonl_reader_ignores_a_byte_order_mark(tmp_path):
    from aegis_probe.storage.jsonl import read_jsonl

    tasks = tmp_path / "tasks.jsonl"  # as PowerShell's Out-File -Encoding utf8 writes it
    tasks.write_bytes(b"\xef\xbb\xbf" + json.dumps(TASK).encode() + b"\r\n")
    assert read_jsonl(tasks, required=("task",)) == [TASK]


def test_report_of_a_json_file_that_is_not_otlp_says_which_field_is_missing(tmp_path, capsys):
    other = tmp_path / "metrics.json"  # valid JSON, some other tool's output
    other.write_text('{"hello": 1}\n')
    assert cli.main(["report", str(other), "--out", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {other}:1: not an OTLP/JSON trace record (missing field 'resourceSpans')\n"
    assert not (tmp_path / "r.html").exists()


def test_report_of_a_missing_file_says_the_file_is_missing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["report", "run.jsonl"]) == 2
    assert capsys.readouterr().err == "error: no file run.jsonl (and not a trace id: those are hexadecimal)\n"


SECRET = "sk-proj-" + "Q7xVb2Lm9Tz4Rk8Wn3Hd6Jf1Pc5Ys0Ga"


def test_blame_with_a_fixer_of_the_wrong_kind_is_one_line_and_secrets_stay_out(tmp_path, capsys):
    assert cli.main(["demo", "--inject", "FM-2.6"]) == 0
    trace_id = re.search(r"^trace\s+([0-9a-f]{32})$", capsys.readouterr().out, re.MULTILINE).group(1)
    fixers = tmp_path / "fixers.py"
    fixers.write_text("def number(traj, step):\n    return 126\n\n"
                      f"def broken(traj, step):\n    raise RuntimeError('analyzer refused key {SECRET}')\n")
    store = (tmp_path / "aegis-traces" / "spans.jsonl")
    before = store.read_bytes()

    def blame(fixer: str) -> tuple[int, str]:
        code = cli.main(["blame", "--trace", trace_id, "--app", "aegis_probe.demos.autogen",
                         "--fixer", f"{fixers}:{fixer}", "--no-progress"])
        return code, capsys.readouterr().err

    code, err = blame("number")  # was: a pydantic traceback per agent, then "no correction flipped the run"
    assert code == 2 and err == ("error: the fixer returned int 126 for step 0; it must return the corrected "
                                 "text (str) or None\n"), err
    code, err = blame("broken")
    assert code == 1 and err.startswith("error: RuntimeError: analyzer refused key [REDACTED]"), err
    assert SECRET not in err
    assert store.read_bytes() == before, "a failed blame writes nothing onto the trace"


def test_demo_against_an_endpoint_that_fails_is_one_redacted_line(model_server, tmp_path, capsys, monkeypatch):
    def refuse(body):
        raise PermissionError(f"Incorrect API key provided: {SECRET}")

    server = model_server(refuse)
    monkeypatch.setenv("DEMO_KEY", SECRET)
    code = cli.main(["demo", "--base-url", server.base_url, "--model", "m", "--api-key-env", "DEMO_KEY"])
    err = capsys.readouterr().err.splitlines()[-1]
    assert code == 1 and err.startswith("error: RuntimeError: InternalServerError: Error code: 500"), err
    assert "Incorrect API key provided: [REDACTED]" in err and SECRET not in err
    assert "Traceback" not in err and err.endswith("(run with -v for the traceback)"), err
    stored = (tmp_path / "aegis-traces" / "spans.jsonl").read_text()
    assert "Incorrect API key provided: [REDACTED]" in stored and SECRET not in stored


def test_traces_show_prints_a_blame_label_without_none():
    from aegis_probe.capture import semconv as sc
    from aegis_probe.storage.otlp_json import SpanRecord
    from aegis_probe.report.steptable import summary
    from aegis_probe.trajectory import Fault, Trajectory, label_attributes

    root = SpanRecord("ab" * 16, "cd" * 8, None, "invoke_workflow team", 1, 2, attributes={sc.OUTCOME_SUCCESS: False})
    root.attributes.update(label_attributes([root], "blame:scan", [Fault(agent="calculator", step=1)]))
    text = summary(Trajectory.from_spans([root]))
    assert "fault    agent=calculator step=1 mode=- strategy=- source=blame:scan" in text, text


def test_blame_refuses_budgets_and_concurrency_out_of_range(capsys):
    for option, low in ((["--concurrency", "0"], 1), (["--max-replays", "-1"], 0), (["--max-tokens", "-5"], 0)):
        code = cli.main(["blame", "--trace", "ab", "--app", "aegis_probe.demos.autogen", "--fixer", "x.py:f", *option])
        err = capsys.readouterr().err
        assert code == 2 and err == f"error: {option[0]} must be >= {low}, not {option[1]}\n", err


def test_a_run_recorded_without_content_is_not_offered_to_blame_and_blame_says_why(capsys, monkeypatch):
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "false")
    assert cli.main(["demo", "--inject", "FM-2.6"]) == 0
    out = capsys.readouterr().out
    assert "outcome  failure" in out and "blame it" not in out, out
    trace_id = re.search(r"^trace\s+([0-9a-f]{32})$", out, re.MULTILINE).group(1)
    code = cli.main(["blame", "--trace", trace_id, "--app", "aegis_probe.demos.autogen", "--fixer", "x.py:f"])
    assert code == 2 and capsys.readouterr().err == (  # was: "no judge: give --expected ..."
        f"error: trace {trace_id} was recorded without message content (capture_content off); "
        "blame replays the run and needs it\n")


def test_campaign_records_with_bytes_that_are_not_utf8_skip_that_line_only(tmp_path, caplog):
    from aegis_probe.injection.campaign import RUNS_FILE, read_records

    good = {"key": "pens/baseline", "kind": "baseline", "success": True, "agent_steps": {"planner": 1}, "trace_id": "ab"}
    (tmp_path / RUNS_FILE).write_bytes(b'{"key": "x/plan-0", "answer": "\xff"}\n' + json.dumps(good).encode() + b"\n")
    assert read_records(tmp_path) == {"pens/baseline": good}  # was: UnicodeDecodeError for the whole file
    assert f"{RUNS_FILE}:1: unreadable run record skipped" in caplog.text


def test_a_pretty_printed_otlp_json_file_is_read_as_one_document(tmp_path, capsys):
    import aegis_probe

    assert cli.main(["demo"]) == 0
    trace_id = re.search(r"^trace\s+([0-9a-f]{32})$", capsys.readouterr().out, re.MULTILINE).group(1)
    [line] = (tmp_path / "aegis-traces" / "spans.jsonl").read_text().splitlines()
    pretty = tmp_path / "run.json"  # as `python -m json.tool` or a collector's debug output writes it
    pretty.write_text(json.dumps(json.loads(line), indent=2))
    [traj] = aegis_probe.load_trajectories(pretty)
    assert traj.trace_id == trace_id and len(traj.steps) == 3
    (tmp_path / "list.json").write_text(json.dumps([json.loads(line)], indent=1))
    assert cli.main(["report", str(tmp_path / "list.json"), "--out", str(tmp_path / "r.html")]) == 0
    not_otlp = tmp_path / "other.json"
    not_otlp.write_text(json.dumps({"data": [1, 2]}, indent=2))
    assert cli.main(["report", str(not_otlp), "--out", str(tmp_path / "r2.html")]) == 2
    assert capsys.readouterr().err.endswith(f"error: {not_otlp}:1: not an OTLP/JSON trace record (a JSON document "
                                            "that is not an export request: missing field 'resourceSpans')\n")


def test_inject_against_a_dead_endpoint_gives_each_task_one_line(tmp_path, capsys):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({**TASK, "task": "What is 2 + 3? Use the calculator."}) + "\n")
    code = cli.main(["inject", "--app", "aegis_probe.demos.autogen:build_app", "--tasks", str(tasks), "--out",
                     str(tmp_path / "out"), "--no-progress", "--base-url", "http://127.0.0.1:9/v1", "--model", "m"])
    captured = capsys.readouterr()
    [reason] = [line for line in captured.out.splitlines() if line.startswith("  a  ")]
    assert code == 1 and reason.startswith("  a  the run raised RuntimeError: APIConnectionError: Connection error"), reason
    assert "Traceback" not in captured.out + captured.err  # was: autogen's embedded traceback on the line


def test_blame_against_a_dead_endpoint_blames_no_step(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    assert cli.main(["demo", "--inject", "FM-2.6"]) == 0
    trace_id = re.search(r"^trace\s+([0-9a-f]{32})$", capsys.readouterr().out, re.MULTILINE).group(1)
    store = tmp_path / "aegis-traces" / "spans.jsonl"
    labels = store.read_text().count("blame:")
    for concurrency in ("1", "2"):
        code = cli.main(["blame", "--trace", trace_id, "--app", "aegis_probe.demos.autogen",
                         "--fixer", "examples/fixers.py:recompute", "--no-progress", "--concurrency", concurrency,
                         "--base-url", "http://127.0.0.1:9/v1", "--model", "m"])
        out = capsys.readouterr().out
        # was: step 1's replay failed on the dead endpoint, so the scan went on and blamed step 2 (the last one,
        # which makes no live call), writing that label onto the trace
        assert code == 1 and "decisive error" not in out and "Traceback" not in out, out
        assert "  step   1 calculator       -> inconclusive (RuntimeError: APIConnectionError: Connection error.)" in out
        assert "search ended early: the replay of step 1 could not reach the model (RuntimeError: " \
               "APIConnectionError: Connection error.)" in out, out
    assert store.read_text().count("blame:") == labels


def test_single_step_injection_against_a_dead_endpoint_keeps_no_run(tmp_path, capsys):
    from aegis_probe.apps import AppSpec, Endpoint
    from aegis_probe.counterfactual import inject_step
    from aegis_probe.demos.task import judge
    from aegis_probe.storage.store import TraceStore

    assert cli.main(["demo"]) == 0
    trace_id = re.search(r"^trace\s+([0-9a-f]{32})$", capsys.readouterr().out, re.MULTILINE).group(1)
    store = TraceStore(tmp_path / "aegis-traces")
    result = inject_step(trace_id, AppSpec.load("aegis_probe.demos.autogen"), 0, "FM-2.4",
                         endpoint=Endpoint("http://127.0.0.1:9/v1", "m", "k"), judge=judge, store=store)
    assert result.result.live_failed and not result.kept  # was: kept, labelled FM-2.4 at step 0
    assert "replay-injection" not in store.file.read_text()


def test_demo_prints_the_answer_redacted_as_the_trace_has_it(model_server, tmp_path, capsys):
    from aegis_probe.demos.autogen import policy as demo_policy
    from aegis_probe.modelserver import Reply

    def leaky(body):  # the team's model repeats a key it saw somewhere
        reply = demo_policy(body)
        return Reply(reply.content + f" (used key {SECRET})", reply.tool_calls) if reply.content else reply

    server = model_server(leaky)
    assert cli.main(["demo", "--base-url", server.base_url, "--model", "aegis-scripted"]) == 0
    out = capsys.readouterr().out
    assert "answer: " in out and SECRET not in out, out  # was: the answer line printed the key
    assert "(used key [REDACTED])" in out


def test_one_trace_is_read_without_decoding_the_others_and_as_before(tmp_path, capsys):
    from aegis_probe.storage.store import TraceStore

    ids = []
    for _ in range(2):
        assert cli.main(["demo"]) == 0
        ids.append(re.search(r"^trace\s+([0-9a-f]{32})$", capsys.readouterr().out, re.MULTILINE).group(1))
    store = TraceStore(tmp_path / "aegis-traces")
    first = store.file.read_text().splitlines()[0]
    assert ids[0] in first
    # Another writer's file in the store: the first trace's root again, ids in upper case, one more attribute.
    body = json.loads(first)
    spans = body["resourceSpans"][0]["scopeSpans"][0]["spans"]
    root = next(s for s in spans if not s.get("parentSpanId"))
    root["attributes"].append({"key": "collector.note", "value": {"stringValue": "seen"}})
    for key in ("traceId", "spanId"):
        root[key] = root[key].upper()
    body["resourceSpans"][0]["scopeSpans"][0]["spans"] = [root]
    (store.path / "collector.jsonl").write_text(json.dumps(body, indent=None) + "\n")
    # A third trace sharing the first trace's first 8 hex digits (not only the letters the two
    # random ids happen to share, which may be none: an empty prefix is an error of its own).
    twin = dict(root, traceId=ids[0][:8] + ("0" if ids[0][8] != "0" else "1") * 24, attributes=[])
    body["resourceSpans"][0]["scopeSpans"][0]["spans"] = [twin]
    with (store.path / "collector.jsonl").open("a") as f:
        f.write(json.dumps(body) + "\n")
    whole = store.traces()
    for trace_id in ids:
        spans = store.trace(trace_id[:12])  # past the twin's shared 8
        assert sorted((s.span_id, sorted(s.attributes.items())) for s in spans) == sorted(
            (s.span_id, sorted(s.attributes.items())) for s in whole[trace_id])
    assert any(s.attributes.get("collector.note") == "seen" for s in store.trace(ids[0]))
    with pytest.raises(KeyError, match="2 traces matching"):
        store.trace(ids[0][:8])
    with pytest.raises(KeyError, match="empty trace id"):
        store.trace("")


@pytest.mark.parametrize("in_task", [False, True], ids=["baseline-succeeds", "baseline-raises"])
def test_inject_with_a_lone_surrogate_in_a_task_id_finishes_and_prints_it_escaped(tmp_path, capsys, in_task):
    odd = dict(TASK, id="odd\ud800", task=TASK["task"] + ("\ud800" if in_task else ""))
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(odd) + "\n")  # json escapes the surrogate as \ud800 on disk
    code = cli.main(["inject", "--app", "aegis_probe.demos.autogen:build_app", "--tasks", str(tasks),
                     "--out", str(tmp_path / "out"), "--plans-per-run", "1", "--no-progress"])
    out, err = capsys.readouterr()
    assert "error: 'utf-8' codec" not in err, err  # was: the campaign ran, then printing it failed
    assert code == (1 if in_task else 0), err  # 1: no baseline succeeded, nothing to inject into
    assert "baselines: 1 attempted" in out
    assert ("odd\\ud800" in out) == in_task  # a failed baseline's id is printed, escaped
    assert (tmp_path / "out" / "runs.jsonl").exists()


def test_verbose_traceback_is_redacted_like_the_error_line(tmp_path, capsys):
    app = tmp_path / "keyed_app.py"
    app.write_text(f"raise RuntimeError('could not connect with key {SECRET}')\n"
                   "def build_app(base_url, model, api_key): return None\ndef run_app(app, task): return None\n")
    (tmp_path / "t.jsonl").write_text(json.dumps(TASK) + "\n")
    code = cli.main(["-v", "inject", "--app", f"{app}:build_app", "--tasks", str(tmp_path / "t.jsonl"),
                     "--out", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback (most recent call last)" in err, err
    assert SECRET not in err and "[REDACTED]" in err, err


def test_another_writers_trace_with_lone_surrogate_escapes_shows_as_json(tmp_path, capsys):
    """Another writer's OTLP/JSON with "\\ud800" escapes (json.dumps of os.fsdecode text), in the
    task, an agent name, a span name and inside a step's messages JSON: read as this store
    writes them (escaped text), so ``traces show --json`` and ``report`` work (were: 'Error
    serializing to JSON: ... surrogates not allowed')."""
    trace_id = "ab" * 16

    def kv(key: str, value: object) -> dict:
        return {"key": key, "value": {"stringValue": value} if isinstance(value, str) else {"intValue": str(value)}}

    messages = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "out\udc80put"}]}])
    spans = [
        {"traceId": trace_id, "spanId": "1" * 16, "name": "invoke_workflow te\ud800am", "startTimeUnixNano": "1",
         "attributes": [kv("gen_ai.operation.name", "invoke_workflow"), kv("aegis.task", "ta\ud800sk")]},
        {"traceId": trace_id, "spanId": "2" * 16, "parentSpanId": "1" * 16, "name": "invoke_agent a",
         "startTimeUnixNano": "2", "attributes": [kv("gen_ai.operation.name", "invoke_agent"), kv("aegis.step.index", 0),
                                                  kv("gen_ai.agent.name", "a\udc80b"), kv("gen_ai.output.messages", messages)]},
    ]
    store = tmp_path / "store"
    store.mkdir()
    (store / "spans.jsonl").write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}) + "\n")
    assert cli.main(["traces", "show", trace_id, "--dir", str(store), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["task"], shown["app"]) == ("ta\\ud800sk", "te\\ud800am")
    assert [(s["agent"], s["output"]) for s in shown["steps"]] == [("a\\udc80b", "out\\udc80put")]
    assert cli.main(["report", trace_id, "--dir", str(store), "--out", str(tmp_path / "r.html")]) == 0


def test_traces_ls_refuses_a_negative_limit(tmp_path, capsys):
    """--limit -1 listed every trace but the oldest (a slice), silently."""
    assert cli.main(["traces", "ls", "--dir", str(tmp_path), "--limit", "-1"]) == 2
    err = capsys.readouterr().err
    assert err == "error: --limit must be >= 0 (0: all), not -1\n", err


def test_traces_print_terminal_control_characters_escaped(tmp_path, capsys):
    """A model's output (or another writer's trace) holding terminal escape sequences or bidi
    overrides is printed escaped by traces ls/show: raw, they recoloured, retitled or rewrote
    the user's terminal."""
    from opentelemetry.sdk.trace import TracerProvider

    from aegis_probe.storage.store import TraceStore
    from toyrun import StepSpec, make_probe, run_script

    store = TraceStore(tmp_path / "store")
    provider = TracerProvider()
    evil = "\x1b]0;pwned\x07\x1b[2J\u202eevil\x9b"
    trace_id = run_script(make_probe(provider, store), "task " + evil,
                          [StepSpec("agent" + evil, "in", "out " + evil)]).trace_id
    provider.shutdown()
    assert cli.main(["traces", "show", trace_id, "--dir", str(store.path)]) == 0
    assert cli.main(["traces", "ls", "--dir", str(store.path)]) == 0
    out = capsys.readouterr().out
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]", out), repr(out)
    assert "out \\x1b]0;pwned" in out and "agent\\x1b]0;pwned" in out and "task \\x1b]0;pwned\\x07\\x1b[2J\\u202eevil\\x9b" in out
