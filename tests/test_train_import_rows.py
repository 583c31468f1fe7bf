"""``train import``'s fast path (structs written by msgspec, no pydantic models) writes what the
models write, byte for byte, and keeps their duplicate check; a record with values the models
convert or refuse is built by the models, with their conversions and their errors."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from test_realuse_store import copies, real_line

from aegis_probe.capture import semconv as sc
from aegis_probe.capture import session as ss
from aegis_probe.storage import fastjson
from aegis_probe.storage.otlp_json import SpanRecord, decode_request
from aegis_probe.storage.store import SPANS_FILE, merge_records
from aegis_probe.trajectory import messages_from_json
from aegis_probe.train import cli
from aegis_probe.train.importers import load, rows
from aegis_probe.train.importers.base import drop_duplicates, identity, row
from aegis_probe.train.importers.otlp import _trajectory


@pytest.fixture(scope="module")
def spans(tmp_path_factory: pytest.TempPathFactory) -> list[SpanRecord]:
    """The spans of one real run (an AutoGen team of 3 steps, as the store holds them)."""
    line, _ = real_line(tmp_path_factory.mktemp("run"), 3)
    return next(iter(merge_records(decode_request(fastjson.loads(line))).values()))


def _attrs(spans: list[SpanRecord], op: str) -> dict[str, Any]:
    return next(s.attributes for s in spans if s.attributes.get(sc.OPERATION) == op)


def _step(spans: list[SpanRecord]) -> SpanRecord:
    return next(s for s in spans if sc.STEP_INDEX in s.attributes)


def _root(spans: list[SpanRecord]) -> dict[str, Any]:
    ids = {s.span_id for s in spans}
    return next(s for s in spans if s.parent_span_id not in ids).attributes


#: name -> (change made to a copy of the run's spans, whether the structs can hold it as it is)
ODD: dict[str, tuple[Any, bool]] = {
    "as stored": (lambda s: None, True),
    "priced calls": (lambda s: _attrs(s, "chat").update({sc.COST_USD: 1.25e-07}), True),
    "a cost that is an integer": (lambda s: _attrs(s, "chat").update({sc.COST_USD: 2}), False),
    "a cost that is not finite": (lambda s: _attrs(s, "chat").update({sc.COST_USD: float("inf")}), False),
    "token counts as text": (lambda s: _attrs(s, "chat").update({sc.USAGE_INPUT_TOKENS: "20"}), False),
    "a role that is a number": (lambda s: _step(s).attributes.update({sc.AGENT_ROLE: 7}), False),
    "success as text": (lambda s: _root(s).update({sc.OUTCOME_SUCCESS: "true"}), False),
    "odd event values": (lambda s: _step(s).events.append(
        {"name": "e", "time_ns": 1, "attributes": {"nested": {"a": [1, 2.5, None, True]}, "nan": float("nan")}}), False),
    "unicode, control characters": (lambda s: _step(s).attributes.update(
        {sc.OUTPUT_MESSAGES: json.dumps([{"role": "assistant", "parts": [
            {"type": "text", "content": "é 😀 \u2028 \x00\x1f \"q\" \\"}]}])}), True),
    "a lone surrogate": (lambda s: _step(s).attributes.update({sc.AGENT_ROLE: "x\ud800"}), True),
    "labels": (lambda s: _root(s).update({sc.LABEL_FAULTS: json.dumps([{"agent": "bob", "step": 1}]),
                                          sc.LABEL_SOURCE: "injection"}), True),
    "a session": (lambda s: _root(s).update({ss.SESSION_ID: "s1", ss.TAGS: ["a"],
                                             ss.METADATA: '{"k": null}'}), True),
    "a failed step": (lambda s: setattr(_step(s), "status", "ERROR"), True),
}


def _models(spans: list[SpanRecord]) -> Any:
    """What the models' path makes of a trace: (identity, JSON line), or the error it raises."""
    try:
        traj = _trajectory(spans, "store")
        return identity(traj), traj.model_dump_json(exclude_none=True)
    except ValueError as exc:
        return f"ValueError: {exc}"


def _fast(spans: list[SpanRecord]) -> Any:
    try:
        return row(_trajectory(spans, "store", fast=True))
    except ValueError as exc:
        return f"ValueError: {exc}"


@pytest.mark.parametrize("name", list(ODD))
def test_the_fast_path_writes_what_the_models_write(spans, name):
    change, held = ODD[name]
    odd = copy.deepcopy(spans)
    change(odd)
    assert (rows.trajectory(copy.deepcopy(odd)) is not None) == held  # what the structs cannot hold as it is, the models build
    assert _fast(copy.deepcopy(odd)) == _models(copy.deepcopy(odd))


def test_a_role_that_is_a_number_is_still_the_models_error(spans):
    odd = copy.deepcopy(spans)
    ODD["a role that is a number"][0](odd)
    assert _fast(odd).startswith(f"ValueError: trace {spans[0].trace_id}: malformed aegis span attributes (Step: role: ")


def test_the_structs_have_the_models_fields_in_order():
    assert len(rows._STRUCTS) == 7
    for model, struct in rows._STRUCTS.items():
        assert struct.__struct_fields__ == tuple(model.model_fields)


def test_import_writes_a_store_as_the_models_do(tmp_path: Path, capsys):
    """A store of real runs, two with token counts as text, given twice: ``train import`` (structs
    where they can be) writes the lines the models write, in order, each record once."""
    line, trace_id = real_line(tmp_path, 2)
    store = tmp_path / "store"
    store.mkdir()
    copies(store / SPANS_FILE, line, trace_id, iter(range(1, 4)))
    odd = line.replace(b'"gen_ai.usage.input_tokens","value":{"intValue":"', b'"gen_ai.usage.input_tokens","value":{"stringValue":"')
    assert odd != line
    copies(store / SPANS_FILE, odd, trace_id, iter(range(4, 6)))
    out = tmp_path / "out.jsonl"
    assert cli.main(["import", str(store), str(store), "-o", str(out), "--no-progress"]) == 0
    models, dropped = drop_duplicates(load(store).trajectories * 2)
    assert out.read_text().splitlines() == [t.model_dump_json(exclude_none=True) for t in models]
    assert len(models) == dropped == 5 and "wrote 5 trajectories" in capsys.readouterr().out


def _span(**fields: Any) -> dict[str, Any]:
    return {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "invoke_agent a", "startTimeUnixNano": "5",
            "endTimeUnixNano": "9", "attributes": [{"key": "k", "value": {"stringValue": "v"}}], **fields}


def _request(*spans: dict[str, Any], **rs: Any) -> dict[str, Any]:
    return {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "s"}}]},
                               "scopeSpans": [{"scope": {"name": "aegis_probe"}, "spans": list(spans)}], **rs}]}


#: Lines as the store writes them, and as other writers (or damage) make them.
LINES: dict[str, bytes] = {
    "as stored": json.dumps(_request(_span(), _span(spanId="ef" * 8, parentSpanId="cd" * 8))).encode(),
    "every kind of value": json.dumps(_request(_span(attributes=[
        {"key": "i", "value": {"intValue": 3}}, {"key": "s", "value": {"intValue": " 12"}},
        {"key": "d", "value": {"doubleValue": "-Infinity"}}, {"key": "f", "value": {"doubleValue": 2}},
        {"key": "b", "value": {"boolValue": False}}, {"key": "n", "value": {}}, {"key": "e"},
        {"key": "a", "value": {"arrayValue": {"values": [{"stringValue": "x"}, {"intValue": "1"}]}}},
        {"key": "kv", "value": {"kvlistValue": {"values": [{"key": "z", "value": {"boolValue": True}}]}}},
        {"key": "by", "value": {"bytesValue": "AAE="}}, {"key": "two", "value": {"stringValue": "é", "intValue": 1}},
        {"key": "k", "value": {"stringValue": "again"}}]))).encode(),
    "names of enums, base64 and upper-case ids": json.dumps(_request(_span(
        kind="SPAN_KIND_CLIENT", status={"code": "STATUS_CODE_ERROR", "message": "boom"}, traceId="q83vEjRWeJCrze8SNFZ4kA==",
        spanId="ABCDEF0123456789", events=[{"name": 3, "timeUnixNano": 7, "attributes": None}, {}]))).encode(),
    "a legacy request": json.dumps({"resourceSpans": [{"instrumentationLibrarySpans": [
        {"instrumentationLibrary": {"name": "old"}, "spans": [_span()]}]}]}).encode(),
    "no scope, extra fields": json.dumps(_request(_span(flags=1, traceState=""), schemaUrl="u") | {"x": 1}).encode()
    .replace(b'"scope": {"name": "aegis_probe"}, ', b''),
    "a lone surrogate, non-ASCII text": json.dumps(_request(_span(name="invoke_agent \ud800 é"))).encode(),
    "a float where an integer goes": json.dumps(_request(_span(startTimeUnixNano=1.5))).encode(),
    "an integer too large": json.dumps(_request(_span(startTimeUnixNano=10**30))).encode(),
    "an unknown status code": json.dumps(_request(_span(status={"code": 7}))).encode(),
    "a key that is not text": json.dumps(_request(_span(attributes=[{"key": 1, "value": {"stringValue": "v"}}]))).encode(),
    "a null where an object goes": json.dumps(_request(_span(status=None))).encode(),
    "a bad id": json.dumps(_request(_span(traceId="xyz"))).encode(),
    "no resourceSpans": b'{"resourceSpan": []}',
    "not an object": b"[1, 2]",
}


def _decoded(body: Any) -> Any:
    try:
        return decode_request(body)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"{type(exc).__name__}: {exc}"


@pytest.mark.parametrize("name", list(LINES))
def test_a_line_decoded_into_structs_is_the_line_decoded_into_dicts(name):
    line = LINES[name]
    assert _decoded(line) == _decoded(json.loads(line))


#: Message attributes as the capture writes them, and odd ones.
MESSAGES = [
    [{"role": "user", "parts": [{"type": "text", "content": "hi"}], "name": "bob"}],
    [{"role": "assistant", "parts": [{"type": "tool_call", "name": "add", "arguments": {"a": [1, 2.5, None]}},
                                     {"type": "tool_call_response", "response": {"r": 3}}, {"type": "text"},
                                     {"type": "text", "content": None}, {"type": "image"}, {"content": 5}]}],
    [{"parts": []}, {"role": None, "name": 3}],
    [{"role": "user", "parts": None}],
    [{"role": "user", "parts": ["text"]}],
    ["a message that is text"],
    {"role": "user"},
    [{"role": "user", "parts": [{"type": "text", "content": "\ud800"}]}],
]


@pytest.mark.parametrize("data", MESSAGES, ids=range(len(MESSAGES)))
def test_messages_decoded_into_structs_are_the_messages_decoded_into_dicts(data):
    def messages(raw: Any) -> Any:
        try:
            return messages_from_json(raw)
        except (ValueError, TypeError, AttributeError) as exc:
            return f"{type(exc).__name__}: {exc}"

    assert messages(json.dumps(data)) == messages(data)
