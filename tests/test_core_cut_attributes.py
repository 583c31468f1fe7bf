"""Stores written under OTel's attribute limits, or holding one malformed trace (real-use sweep):
the runs stay readable and listable."""

from __future__ import annotations

import json
import logging

import pytest
from opentelemetry.sdk.trace import TracerProvider

import aegis_probe
from aegis_probe import cli
from aegis_probe.capture import semconv as sc
from aegis_probe.apps import AppSpec
from aegis_probe.counterfactual import RecordingError
from aegis_probe.storage.store import TraceStore
from toyrun import StepSpec, make_probe, run_script

LONG = "word " * 100


def test_messages_cut_by_the_attribute_length_limit_still_read(tmp_path, monkeypatch, capsys):
    """OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT cuts the messages' JSON: the trace still shows, its cut
    content as text (was: 'malformed aegis span attributes' for traces show, report, replay)."""
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "200")
    provider = TracerProvider()  # reads the limit, as the SDK's configurator's would
    store = TraceStore(tmp_path / "store")
    probe = make_probe(provider, store)
    steps = [StepSpec("planner", "plan " + LONG, "short"), StepSpec("coder", "code", "out " + LONG, usage=[(3, 4)])]
    trace_id = run_script(probe, "task", steps).trace_id
    provider.shutdown()
    stored = store.trace(trace_id)
    assert any(len(s.attributes.get(sc.INPUT_MESSAGES, "")) == 200 for s in stored), "the SDK cut the JSON"
    traj = aegis_probe.load_trajectories(store.path)[0]
    assert [s.agent for s in traj.steps] == ["planner", "coder"]
    cut_input = traj.steps[0].input_messages
    assert len(cut_input) == 1 and cut_input[0].role == "" and "plan word" in cut_input[0].content
    assert traj.steps[0].output == "short"
    assert traj.steps[1].output.startswith('[{"role": "assistant"') and "out word" in traj.steps[1].output
    assert cli.main(["traces", "show", trace_id, "--dir", str(store.path)]) == 0
    assert "planner" in capsys.readouterr().out
    # Its model calls' responses were cut too: replay says which call cannot be read (was a bare JSON error).
    chat = next(s for s in stored if s.attributes.get(sc.OPERATION) == sc.OP_CHAT)
    with pytest.raises(RecordingError, match=rf"trace {trace_id}: LLM call [0-9a-f]{{16}}: .*not readable messages JSON"):
        aegis_probe.replay(trace_id, AppSpec.load("aegis_probe.demos.autogen"), store=store)
    assert len(chat.attributes[sc.OUTPUT_MESSAGES]) == 200


def test_traces_ls_leaves_out_a_malformed_trace_and_lists_the_rest(tmp_path, caplog, capsys):
    store = TraceStore(tmp_path / "store")
    provider = TracerProvider()
    good = run_script(make_probe(provider, store), "task", [StepSpec("planner", "in", "out")]).trace_id
    provider.shutdown()
    bad = "0123456789abcdef0123456789abcdef"
    attrs = [{"key": sc.LABEL_FAULTS, "value": {"stringValue": "not json"}}]
    line = {"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": bad, "spanId": "0123456789abcdef",
                                                           "name": "x", "attributes": attrs}]}]}]}
    store.write_line(json.dumps(line))
    with caplog.at_level(logging.WARNING, logger="aegis_probe"):
        assert cli.main(["traces", "ls", "--dir", str(store.path)]) == 0
    out = capsys.readouterr().out
    assert good in out and bad not in out
    assert f"trace {bad}: malformed aegis span attributes" in caplog.text and "trace skipped" in caplog.text
