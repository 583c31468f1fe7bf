"""The embedded trace store: spans written through a real SDK provider read back as trajectories."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import logging
import threading
from pathlib import Path

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider

import aegis_probe
from aegis_probe.capture import semconv as sc
from aegis_probe.capture.spans import start_llm, start_run, start_step
from aegis_probe.storage.store import SPANS_FILE, TraceFileError, TraceStore
from toyrun import StepSpec, make_probe, run_script, sample_steps


@pytest.fixture
def store(tmp_path: Path) -> TraceStore:
    return TraceStore(tmp_path / "store")


@pytest.fixture
def probe(store: TraceStore):
    provider = TracerProvider()
    yield make_probe(provider, store)
    provider.shutdown()


def assert_matches(traj: aegis_probe.Trajectory, task: str, steps: list[StepSpec], trace_id: str) -> None:
    """The trajectory holds exactly what the script wrote, in order."""
    assert traj.trace_id == trace_id
    assert traj.task == task and traj.framework == "toy" and traj.app == "toy-team"
    assert [s.index for s in traj.steps] == list(range(len(steps)))
    assert [s.agent for s in traj.steps] == [s.agent for s in steps]
    assert traj.agents == list(dict.fromkeys(s.agent for s in steps))
    for got, want in zip(traj.steps, steps):
        assert got.trace_id == trace_id and got.role == "assistant"
        assert [(m.role, m.content) for m in got.input_messages] == [("user", want.input)]
        assert got.output == want.output
        assert [c.output for c in got.llm_calls] == [f"{want.output} #{i}" for i in range(len(want.usage))]
        assert all(c.model == "toy-model-1" and c.provider == "toy" for c in got.llm_calls)
        assert [(c.input_tokens, c.output_tokens) for c in got.llm_calls] == want.usage
        expect_usage = (sum(u[0] for u in want.usage), sum(u[1] for u in want.usage)) if want.usage else (None, None)
        assert (got.usage.input_tokens, got.usage.output_tokens) == expect_usage
        assert [(t.name, t.call_id, json.loads(t.arguments), t.result, t.error is not None) for t in got.tool_calls] == [
            (t.name, f"call-{t.name}", t.arguments, t.result, t.error) for t in want.tools
        ]


def test_round_trip_equals_what_was_written(probe, store):
    steps = sample_steps()
    run = run_script(probe, "add six sevens", steps, answer="42", outcome=True)
    [traj] = aegis_probe.load_trajectories(store.path)
    assert_matches(traj, "add six sevens", steps, run.trace_id)
    assert traj.run_id == run.run_id
    assert traj.outcome == aegis_probe.Outcome(success=True, answer="42")
    assert traj.error is None
    # Same result through every reader: the store object, the file, and the probe.
    assert aegis_probe.load_trajectories(store) == [traj]
    assert aegis_probe.load_trajectories(store.file) == [traj]
    assert probe.trajectory() == traj


def test_one_line_per_run_in_start_order(probe, store):
    runs = [run_script(probe, f"task {i}", sample_steps(str(i))) for i in range(3)]
    assert store.flush()  # the writer thread writes the lines; reads through the store wait for it
    assert len(store.file.read_text().splitlines()) == 3
    trajs = aegis_probe.load_trajectories(store.path)
    assert [t.trace_id for t in trajs] == [r.trace_id for r in runs]
    for i, traj in enumerate(trajs):
        assert_matches(traj, f"task {i}", sample_steps(str(i)), runs[i].trace_id)


def test_outcome_reported_after_the_run_is_an_amendment(probe, store):
    first = run_script(probe, "t1", sample_steps("a"), answer="41")
    second = run_script(probe, "t2", sample_steps("b"), answer="42")
    probe.set_outcome(True, answer="42", expected="42")  # default: the most recent run
    probe.set_outcome(False, expected="42", trace_id=first.trace_id[:12])  # a unique prefix
    lines = store.file.read_text().splitlines()
    assert len(lines) == 4, "amendments are appended, nothing rewritten"
    by_id = {t.trace_id: t for t in aegis_probe.load_trajectories(store.path)}
    assert by_id[second.trace_id].outcome == aegis_probe.Outcome(success=True, answer="42", expected="42")
    assert by_id[first.trace_id].outcome == aegis_probe.Outcome(success=False, expected="42")
    assert_matches(by_id[first.trace_id], "t1", sample_steps("a"), first.trace_id)


def test_amend_merges_attributes_and_events_of_any_span(probe, store):
    run = run_script(probe, "t", sample_steps())
    traj = probe.trajectory()
    step = traj.steps[2]
    store.amend(run.trace_id, step.span_id, attributes={"aegis.note": "blamed"},
                events=[{"name": sc.EVENT_INJECTION, "time_ns": 5, "attributes": {"mode": "FM-1.3"}}])
    store.amend(run.trace_id, attributes={sc.LABEL_SOURCE: "test", sc.LABEL_FAULTS: json.dumps([{"agent": "critic", "step": 2}])})
    spans = {s.span_id: s for s in store.trace(run.trace_id)}
    assert spans[step.span_id].attributes["aegis.note"] == "blamed"
    assert spans[step.span_id].attributes[sc.AGENT_NAME] == "critic", "amendment keeps earlier attributes"
    [traj2] = aegis_probe.load_trajectories(store.path)
    injection, verdict = traj2.steps[2].events  # the amended event, then the labelled fault as an evaluation
    assert injection == {"name": sc.EVENT_INJECTION, "time_ns": 5, "attributes": {"mode": "FM-1.3"}}
    assert verdict["name"] == "gen_ai.evaluation.result" and verdict["attributes"]["gen_ai.evaluation.explanation"] == "critic@2"
    assert traj2.labels.source == "test" and traj2.labels.faults[0].agent == "critic"
    assert traj2.steps[:2] == traj.steps[:2]
    with pytest.raises(KeyError):
        store.amend(run.trace_id, "0" * 16, attributes={"x": 1})
    with pytest.raises(KeyError):
        store.amend("f" * 32, attributes={"x": 1})


def test_outcome_reported_during_the_run_lands_on_that_run(probe, store):
    first = run_script(probe, "t1", sample_steps("a"), answer="a", outcome=False)
    second = run_script(probe, "t2", sample_steps("b"), answer="b", outcome=True)
    store.flush()
    by_id = {t.trace_id: t for t in aegis_probe.load_trajectories(store.path)}
    assert by_id[first.trace_id].outcome.success is False
    assert by_id[second.trace_id].outcome.success is True
    assert len(store.file.read_text().splitlines()) == 2, "no amendment needed while the run is open"


def test_app_exception_marks_run_and_step(probe, store):
    from aegis_probe.capture.spans import start_run, start_step

    run = start_run(probe, "toy-team", framework="toy", task="t")
    token = run.attach()
    step = start_step(probe, "planner", run=run)
    run.detach(token)
    err = RuntimeError("model fell over")
    step.fail(err)
    run.finish(err)
    [traj] = aegis_probe.load_trajectories(store.path)
    assert traj.error == "RuntimeError: model fell over"
    assert traj.steps[0].error == "RuntimeError: model fell over"


def _write_runs(probe, n: int) -> list[str]:
    ids = [run_script(probe, f"t{i}", sample_steps(str(i))).trace_id for i in range(n)]
    assert probe.store.flush()
    return ids


@pytest.mark.parametrize("cut", ["1/3", "1/2", "-1", "after-brace", "no-newline-complete"])
def test_truncated_last_line_is_skipped_with_warning(probe, store, caplog, cut):
    ids = _write_runs(probe, 3)
    data = store.file.read_bytes()
    start = data.rstrip(b"\n").rfind(b"\n") + 1
    last = data[start:].rstrip(b"\n")
    if cut == "after-brace":  # a cut right after some inner object closes: ends with '}'
        pos = last.rfind(b"}", 0, len(last) - 5) + 1
    elif cut == "no-newline-complete":  # the record made it, its newline did not: still readable
        pos = len(last)
    elif cut == "-1":
        pos = len(last) - 1
    else:
        a, b = cut.split("/")
        pos = len(last) * int(a) // int(b)
    store.file.write_bytes(data[:start] + last[:pos])
    with caplog.at_level(logging.WARNING, logger="aegis_probe.storage.store"):
        trajs = aegis_probe.load_trajectories(store.path)
    if cut == "no-newline-complete":
        assert [t.trace_id for t in trajs] == ids
        return
    assert [t.trace_id for t in trajs] == ids[:2], "nothing before the truncated line is lost"
    for i, traj in enumerate(trajs):
        assert_matches(traj, f"t{i}", sample_steps(str(i)), ids[i])
    assert any("truncated last line" in r.getMessage() and f"{SPANS_FILE}:3" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("lost", [40, 1])  # 1: only the newline was lost, the record is whole
def test_store_keeps_working_after_a_crash_mid_write(probe, store, lost):
    """A run appended after a crash's truncated line is readable, and so is everything before."""
    ids = _write_runs(probe, 2)
    data = store.file.read_bytes()
    store.file.write_bytes(data[: len(data) - lost])  # crash: the second run's line is cut short
    later = run_script(probe, "after crash", sample_steps("x")).trace_id
    trajs = aegis_probe.load_trajectories(store.path)
    assert [t.trace_id for t in trajs] == (ids if lost == 1 else ids[:1]) + [later]
    assert_matches(trajs[-1], "after crash", sample_steps("x"), later)


@pytest.mark.parametrize("tail", ['{"otherProducer": {"spans": []}}', "[" * 100_000 + "]" * 100_000, "[" * 100_000])
def test_a_last_line_without_newline_that_is_not_a_crash_is_kept(probe, store, caplog, tail):
    """A complete last line without its newline (another producer's JSON, one nested too deeply
    to parse) is kept, not cut as a crash's, and the store keeps taking runs after it (a line too
    deep to parse made every later write fail)."""
    first = _write_runs(probe, 1)
    data = store.file.read_bytes() + tail.encode()
    store.file.write_bytes(data)
    with caplog.at_level(logging.ERROR, logger="aegis_probe.storage.store"):
        later = run_script(probe, "after", sample_steps("x")).trace_id
        assert probe.store.flush()
    assert "could not write" not in caplog.text
    assert store.file.read_bytes().startswith(data + b"\n"), "nothing already written is lost"
    assert [t.trace_id for t in aegis_probe.load_trajectories(store.path)] == first + [later]


def test_malformed_lines_are_skipped_with_a_warning_naming_file_and_line(probe, store, caplog):
    """A bad line never makes the rest of the store unreadable: it is skipped, with file:line."""
    ids = _write_runs(probe, 3)
    lines = store.file.read_text().splitlines()
    lines[1] = lines[1][: len(lines[1]) // 2]
    store.file.write_text("\n".join(lines) + "\n")
    assert [t.trace_id for t in aegis_probe.load_trajectories(store.path)] == [ids[0], ids[2]]
    assert f"{store.file}:2: not an OTLP/JSON trace record" in caplog.text
    # Valid JSON that is not an export request, a finished last line that is wrong, a line nested
    # too deeply for the JSON parser, a number out of range: all skipped the same way.
    lines[1] = json.dumps({"hello": "world"})
    lines.append('{"resourceSpans": 7}')
    lines.append("[" * 100_000 + "]" * 100_000)
    lines.append(re.sub(r'"kind":\d+', '"kind":1.5e400', lines[0], count=1))
    assert "1.5e400" in lines[-1]
    store.file.write_text("\n".join(lines) + "\n")
    caplog.clear()
    assert [t.trace_id for t in aegis_probe.load_trajectories(store.path)] == [ids[0], ids[2]]
    for no in (2, 4, 5, 6):
        assert f"spans.jsonl:{no}: not an OTLP/JSON trace record" in caplog.text
    assert "nested too deeply" in caplog.text


def test_a_file_with_no_valid_line_is_an_error(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_text('{"resourceSpans": 7}\nnot json\n')
    with pytest.raises(TraceFileError, match=r"run\.jsonl:1: .*resourceSpans is not a list") as info:
        aegis_probe.load_trajectories(path)
    assert info.value.path == path and info.value.line_no == 1


def _line(spans: list[dict]) -> str:
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]})


def test_bad_ids_and_non_objects_name_file_line_and_reason(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_text(_line([{"traceId": "zz", "spanId": "0123456789abcdef", "name": "x"}]) + "\n")
    with pytest.raises(TraceFileError, match=r"run\.jsonl:1: .*bad trace/span id 'zz'"):
        aegis_probe.load_trajectories(path)
    path.write_text("[1, 2]\n")
    with pytest.raises(TraceFileError, match=r"run\.jsonl:1: .*not an object"):
        aegis_probe.load_trajectories(path)


def test_malformed_aegis_attribute_names_file_and_trace(tmp_path):
    """A well-formed record whose labels attribute is not JSON: a ValueError naming file and trace."""
    trace_id = "0123456789abcdef0123456789abcdef"
    attrs = [{"key": sc.LABEL_FAULTS, "value": {"stringValue": "not json"}}]
    path = tmp_path / "run.jsonl"
    path.write_text(_line([{"traceId": trace_id, "spanId": "0123456789abcdef", "name": "x", "attributes": attrs}]) + "\n")
    with pytest.raises(ValueError, match=rf"run\.jsonl: trace {trace_id}: malformed aegis span attributes"):
        aegis_probe.load_trajectories(path)


def test_cli_errors_are_one_line_exit_2(probe, store, tmp_path, capsys):
    from aegis_probe.cli import main

    trace_id = run_script(probe, "cli", sample_steps("c")).trace_id
    assert main(["traces", "ls", "--dir", str(store.path)]) == 0  # --dir after the action too
    assert trace_id in capsys.readouterr().out
    assert main(["traces", "--dir", str(store.path), "show", trace_id[:8]]) == 0
    assert "cli" in capsys.readouterr().out
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"hello": 1}\n')
    assert main(["report", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {bad}:1: not an OTLP/JSON trace record") and err.count("\n") == 1
    assert main(["report", trace_id, "--dir", str(store.path), "--out", str(tmp_path)]) == 2  # a directory
    assert capsys.readouterr().err.startswith(f"error: --out {tmp_path}: a directory")
    assert main(["blame", "--trace", trace_id, "--dir", str(store.path), "--app", "aegis_probe.demos.autogen",
                 "--expected", "126", "--fixer", "aegis_probe.demos.task:no_such"]) == 2
    assert capsys.readouterr().err.startswith("error: --fixer aegis_probe.demos.task:no_such: module")


@pytest.mark.parametrize("stores", ["one", "per-thread"])
def test_concurrent_runs_from_many_threads(store, stores):
    """Runs in 8 threads x 5 each: every line is one intact export request; every trace is whole."""
    provider = TracerProvider()
    probes = [make_probe(provider, store if stores == "one" else TraceStore(store.path)) for _ in range(8)]
    results: dict[str, str] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(probes))

    def worker(t: int) -> None:
        try:
            barrier.wait()
            for i in range(5):
                tag = f"{t}.{i}"
                results[run_script(probes[t], f"task {tag}", sample_steps(tag)).trace_id] = tag
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(len(probes))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    provider.shutdown()
    assert not errors
    for line in store.file.read_text().splitlines():
        json.loads(line)
    trajs = aegis_probe.load_trajectories(store.path)
    assert len(trajs) == len(results) == 40
    for traj in trajs:
        tag = results[traj.trace_id]
        assert_matches(traj, f"task {tag}", sample_steps(tag), traj.trace_id)


def _hex_ids_to_base64(obj):
    """OTLP/JSON writes ids as hex; the proto3 JSON mapping of ``bytes`` is base64."""
    if isinstance(obj, dict):
        return {
            k: base64.b64encode(bytes.fromhex(v)).decode() if k in {"traceId", "spanId", "parentSpanId"} else _hex_ids_to_base64(v)
            for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [_hex_ids_to_base64(v) for v in obj]
    return obj


def test_lines_are_valid_otlp_json(probe, store):
    run = run_script(probe, "t", sample_steps(), answer="42")
    probe.set_outcome(True, answer="42")
    lines = store.file.read_text().splitlines()
    assert len(lines) == 2
    spans = []
    for line in lines:
        body = json.loads(line)
        for rs in body["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for sp in ss["spans"]:
                    assert len(sp["traceId"]) == 32 and len(sp["spanId"]) == 16
                    assert sp["traceId"] == sp["traceId"].lower() and int(sp["traceId"], 16)
                    assert isinstance(sp["startTimeUnixNano"], str) and isinstance(sp["endTimeUnixNano"], str)
                    for kv in sp["attributes"]:
                        if "intValue" in kv["value"]:
                            assert isinstance(kv["value"]["intValue"], str)
        request = json_format.Parse(json.dumps(_hex_ids_to_base64(body)), ExportTraceServiceRequest())
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                assert ss.scope.name == "aegis_probe"
                spans.extend(ss.spans)
    assert {sp.trace_id.hex() for sp in spans} == {run.trace_id}
    by_id = {sp.span_id.hex(): sp for sp in spans}
    root = by_id[format(run.span.get_span_context().span_id, "016x")]
    assert root.name == "invoke_workflow toy-team" and not root.parent_span_id
    steps = [sp for sp in spans if sp.name.startswith("invoke_agent ")]
    assert len(steps) == 4 and all(sp.parent_span_id == root.span_id for sp in steps)
    chats = [sp for sp in spans if sp.name == "chat toy-model"]
    assert len(chats) == 4 and all(by_id[sp.parent_span_id.hex()].name.startswith("invoke_agent ") for sp in chats)
    chat_attrs = {kv.key: kv.value for kv in chats[0].attributes}
    assert chat_attrs[sc.USAGE_INPUT_TOKENS].int_value == 11
    assert chats[0].kind == chats[0].SPAN_KIND_CLIENT and root.kind == root.SPAN_KIND_INTERNAL
    failed = [sp for sp in spans if sp.name == "execute_tool search"]
    assert failed and failed[0].status.code == failed[0].status.STATUS_CODE_ERROR
    assert sum(sp.end_time_unix_nano >= sp.start_time_unix_nano > 0 for sp in spans) == len(spans)


# -- the background writer ------------------------------------------------------------------------
def _tiny_run(probe) -> str:
    run = start_run(probe, "toy-team", framework="toy", task="tiny")
    run.finish()
    return run.trace_id


def test_full_queue_drops_and_counts_never_blocks(store, caplog):
    """A writer stuck on a slow disk: the app goes on, the spans beyond the bound are dropped and counted."""
    from aegis_probe.storage.store import StoreSpanProcessor

    entered, release = threading.Event(), threading.Event()
    write_line = store.write_line

    def slow_write(line):
        entered.set()
        assert release.wait(10)
        write_line(line)

    store.write_line = slow_write
    provider = TracerProvider()
    processor = StoreSpanProcessor(store, max_queue=2)
    probe = make_probe(provider, None, extra=processor)
    first = _tiny_run(probe)
    assert entered.wait(10), "the writer took the first trace and is stuck writing it"
    with caplog.at_level(logging.WARNING, logger="aegis_probe.storage.store"):
        second = run_script(probe, "t", sample_steps())  # 11 spans: 2 queued, 9 dropped (the root among them)
    assert processor.dropped_spans == 9
    assert any("queue full" in r.getMessage() for r in caplog.records)
    release.set()
    assert processor.force_flush()
    provider.shutdown()
    traces = TraceStore(store.path).traces()
    assert len(traces[first]) == 1 and len(traces[second.trace_id]) == 2, "what was queued is written"


def test_run_returns_before_the_write_and_reads_wait_for_it(store):
    """Encoding and writing happen on the writer thread; a read in the same process waits for them."""
    written = threading.Event()
    write_line = store.write_line

    def slow_write(line):
        assert not written.wait(0.3)
        write_line(line)
        written.set()

    store.write_line = slow_write
    provider = TracerProvider()
    probe = make_probe(provider, store)
    run = run_script(probe, "t", sample_steps())
    assert not written.is_set() and not store.file.exists(), "the app thread did not write"
    assert probe.trajectory().trace_id == run.trace_id  # flush-before-read
    assert written.is_set()
    assert [t.trace_id for t in aegis_probe.load_trajectories(store.path)] == [run.trace_id]
    provider.shutdown()


def _conversation(store: TraceStore, turns: int):
    """A two-agent run whose every prompt repeats the conversation so far; returns the run and
    the spans as the SDK had them."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    probe = make_probe(provider, store, extra=SimpleSpanProcessor(exporter))
    run = start_run(probe, "toy-team", framework="toy", task="talk")
    token = run.attach()
    history: list[dict] = [{"role": "system", "content": "You are a careful agent. " * 20}]
    for i in range(turns):
        agent = ("alice", "bob")[i % 2]
        step = start_step(probe, agent, run=run, input_messages=history[-1:])
        step_token = step.attach()
        llm = start_llm(probe, "toy-model", provider="toy", agent=agent, input_messages=history)
        reply = {"role": "assistant", "content": f"message-{i:03d} " + "words " * 30, "name": agent}
        llm.finish([reply])
        step.detach(step_token)
        step.finish([reply])
        history = history + [reply]
    run.detach(token)
    run.finish()
    provider.shutdown()
    return run, exporter.get_finished_spans()


def test_long_conversation_stores_each_message_once(tmp_path):
    """Prompts that repeat the conversation are stored as deltas; readers get every prompt whole."""
    store = TraceStore(tmp_path / "a")
    run, spans = _conversation(store, 40)
    raw = store.file.read_text()
    # A message is in its step's output and its chat's output, the next step's input, and the
    # new tail of each agent's next prompt: never in the prompts after those.
    assert raw.count("message-020 ") == 5
    want = {format(s.context.span_id, "016x"): dict(s.attributes) for s in spans}
    got = {s.span_id: s.attributes for s in store.trace(run.trace_id)}
    assert got == want, "every attribute read back exactly as the span had it"
    twice = TraceStore(tmp_path / "b")
    _conversation(twice, 80)
    assert twice.file.stat().st_size < 2.2 * store.file.stat().st_size, "size grows linearly with length"


def test_delta_whose_base_is_missing_is_left_out_with_warning(tmp_path, caplog):
    from aegis_probe.storage.delta import DELTA_PREFIX

    trace_id = "0123456789abcdef0123456789abcdef"
    attrs = [{"key": sc.AGENT_NAME, "value": {"stringValue": "a"}},
             {"key": DELTA_PREFIX + sc.INPUT_MESSAGES, "value": {"arrayValue": {"values": [
                 {"stringValue": "00000000000000ff"}, {"intValue": "300"}, {"stringValue": "tail"}]}}}]
    path = tmp_path / "run.jsonl"
    path.write_text(_line([{"traceId": trace_id, "spanId": "0123456789abcdef", "name": "chat m", "attributes": attrs}]) + "\n")
    from aegis_probe.storage.store import merge_records, read_span_file

    with caplog.at_level(logging.WARNING, logger="aegis_probe.storage.delta"):
        [span] = merge_records(read_span_file(path))[trace_id]
    assert span.attributes == {sc.AGENT_NAME: "a"}
    assert any("not stored" in r.getMessage() for r in caplog.records)


def test_process_exit_writes_queued_traces(tmp_path):
    """A script that ends without flushing still leaves its runs in the store (atexit)."""
    import subprocess
    import sys

    code = ("import sys; sys.path.insert(0, %r)\n"
            "from opentelemetry.sdk.trace import TracerProvider\n"
            "from aegis_probe.storage.store import TraceStore\n"
            "from toyrun import make_probe, run_script, sample_steps\n"
            "probe = make_probe(TracerProvider(shutdown_on_exit=False), TraceStore(%r))\n"
            "for i in range(5): print(run_script(probe, 't', sample_steps(str(i))).trace_id)\n"
            % (str(Path(__file__).parent), str(tmp_path / "s")))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ids = proc.stdout.split()
    assert [t.trace_id for t in aegis_probe.load_trajectories(tmp_path / "s")] == ids and len(ids) == 5


def test_a_run_left_unfinished_at_exit_has_no_app_taken_from_a_step(tmp_path):
    """The process exits mid-run: its finished steps are written without the run's root span. The
    run is listed with its steps and no app (was: its first step's agent as the app)."""
    import subprocess
    import sys

    code = ("import sys; sys.path.insert(0, %r)\n"
            "from opentelemetry.sdk.trace import TracerProvider\n"
            "from aegis_probe.storage.store import TraceStore\n"
            "from aegis_probe.capture.spans import start_run, start_step\n"
            "from toyrun import make_probe\n"
            "probe = make_probe(TracerProvider(shutdown_on_exit=False), TraceStore(%r))\n"
            "run = start_run(probe, 'toy-team', framework='toy', task='t')\n"
            "run.attach()\n"
            "for agent in ('planner', 'coder'):\n"
            "    start_step(probe, agent, run=run, role='assistant').finish([{'role': 'assistant', 'content': 'x'}])\n"
            "sys.exit(0)\n"
            % (str(Path(__file__).parent), str(tmp_path / "s")))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (traj,) = aegis_probe.load_trajectories(tmp_path / "s")
    assert [s.agent for s in traj.steps] == ["planner", "coder"] and traj.framework == "toy"
    assert traj.app is None and traj.error is None


def test_a_relative_store_stays_where_it_was_named_when_the_app_changes_directory(tmp_path, monkeypatch):
    """A relative store (the default ./aegis-traces) is the directory it named when it was made:
    the writer thread wrote each run into whatever directory the app had changed to by then
    (a scratch directory removed after: the run lost, 'no trace matching')."""
    monkeypatch.chdir(tmp_path)
    provider = TracerProvider()
    probe = make_probe(provider, TraceStore("aegis-traces"))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.chdir(scratch)  # e.g. a tool working in a scratch directory
    trace_id = run_script(probe, "t", sample_steps("c")).trace_id
    assert probe.store.flush()
    monkeypatch.chdir(tmp_path)
    provider.shutdown()
    assert not (scratch / "aegis-traces").exists()
    assert [t.trace_id for t in aegis_probe.load_trajectories(tmp_path / "aegis-traces")] == [trace_id]


_HALF_WRITER = """
import fcntl, os, sys
path, line = sys.argv[1], open(sys.argv[2], "rb").read()
fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)  # as TraceStore writes: the file's lock until the line is whole
os.write(fd, line[: len(line) // 2])
print("half", flush=True)
sys.stdin.readline()
os.write(fd, line[len(line) // 2:] + b"\\n")
"""


@pytest.mark.parametrize("earlier", [2, 0])
def test_a_line_another_process_is_writing_is_no_truncated_line(probe, store, tmp_path, caplog, earlier):
    """Reading a store while another process writes a long line into it: the half-written last
    line is passed over quietly (it was a warning about a line 'truncated' by a crash), and read
    once it is whole."""
    ids = _write_runs(probe, earlier + 1)
    data = store.file.read_bytes()
    start = data.rstrip(b"\n").rfind(b"\n") + 1
    (tmp_path / "line").write_bytes(data[start:].rstrip(b"\n"))
    store.file.write_bytes(data[:start])
    writer = subprocess.Popen([sys.executable, "-c", _HALF_WRITER, str(store.file), str(tmp_path / "line")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline() == "half\n"
        with caplog.at_level(logging.DEBUG, logger="aegis_probe.storage.store"):
            assert [t.trace_id for t in aegis_probe.load_trajectories(store.path)] == ids[:earlier]
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
        assert "being written" in caplog.text
        writer.communicate("go\n", timeout=30)
    finally:
        writer.kill()
    assert writer.returncode == 0
    assert [t.trace_id for t in aegis_probe.load_trajectories(store.path)] == ids
