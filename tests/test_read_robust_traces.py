"""Reading stored traces that another tool or a hand edit made odd: a parent cycle among spans, an
OTLP value of the wrong JSON type, a str enum attribute, a gzipped JSON-lines file. Each reads as
the OTLP spec and the SDK's exporters say, or is one clear warning/error naming where; none hangs
or reads a wrong value silently."""

from __future__ import annotations

import enum
import gzip
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from aegis_probe.capture import semconv as sc
from aegis_probe.cli import main
from aegis_probe.counterfactual.recording import load_recording
from aegis_probe.storage.jsonl import read_jsonl
from aegis_probe.storage.store import StoreSpanProcessor, TraceStore, read_span_file

from test_cli_fuzz_inputs import _error


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A store holding one AutoGen demo run (planner, calculator, reviewer), one line."""
    pytest.importorskip("autogen_agentchat")
    store = tmp_path_factory.mktemp("demo") / "T"
    assert main(["demo", "--trace-dir", str(store)]) == 0
    lines = (store / "spans.jsonl").read_text().splitlines()
    assert len(lines) == 1
    return store, _spans(json.loads(lines[0]))[0]["traceId"]


def _spans(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for rs in request["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]


def _op(span: dict[str, Any]) -> str | None:
    return next((a["value"].get("stringValue") for a in span.get("attributes", []) if a["key"] == sc.OPERATION), None)


def _edited(demo: Path, tmp_path: Path, edit: Any) -> Path:
    """A copy of the demo store whose one line's spans ``edit`` changed in place."""
    request = json.loads((demo / "spans.jsonl").read_text())
    edit(_spans(request))
    store = tmp_path / "S"
    store.mkdir()
    (store / "spans.jsonl").write_text(json.dumps(request) + "\n")
    return store


def _self_parent(spans: list[dict[str, Any]]) -> None:
    chat = next(s for s in spans if _op(s) == sc.OP_CHAT)
    chat["parentSpanId"] = chat["spanId"]


def _two_naming_each_other(spans: list[dict[str, Any]]) -> None:
    first, second = [s for s in spans if _op(s) == sc.OP_CHAT][:2]
    first["parentSpanId"], second["parentSpanId"] = second["spanId"], first["spanId"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("edit", [_self_parent, _two_naming_each_other], ids=["own-parent", "two-each-other"])
def test_a_parent_cycle_is_read_as_outside_any_step_with_a_warning(edit, demo_store, tmp_path, capsys, caplog):
    """``traces show`` of a trace whose chat span(s) are their own ancestors returns (it looped
    forever): the run's steps are shown, the cyclic spans counted in none, one warning names them."""
    demo, trace_id = demo_store
    store = _edited(demo, tmp_path, edit)
    spans = _spans(json.loads((store / "spans.jsonl").read_text()))
    chats = {s["spanId"] for s in spans if _op(s) == sc.OP_CHAT}
    cyclic = [s["spanId"] for s in spans if s.get("parentSpanId") in chats]
    capsys.readouterr()
    with caplog.at_level(logging.WARNING):
        assert main(["traces", "show", trace_id[:12], "--dir", str(store)]) == 0
    out = capsys.readouterr().out
    assert trace_id in out and "planner" in out and "reviewer" in out
    warnings = [r.getMessage() for r in caplog.records if "cycle" in r.getMessage()]
    assert warnings == [f"trace {trace_id}: span {cyclic[0]}{' and 1 more' if len(cyclic) == 2 else ''}: "
                        "its parents form a cycle; read as outside any step"]
    assert "36/13" not in out  # the planner's chat span, now in no step, adds no tokens to it


@pytest.mark.timeout(60)
def test_a_recording_with_a_parent_cycle_loads_its_call_in_no_step(demo_store, tmp_path):
    """blame's recording reader walks the same parents: the cyclic call is loaded, in no step."""
    demo, trace_id = demo_store
    store = _edited(demo, tmp_path, _self_parent)
    calls = load_recording(list(read_span_file(store / "spans.jsonl")))
    assert sorted(c.step_index for c in calls.values() if c.step_index is not None) == [1, 2]
    assert [c.step_index for c in calls.values()].count(None) == 1


def _set_root(key: str, value: Any) -> Any:
    def edit(spans: list[dict[str, Any]]) -> None:
        root = next(s for s in spans if "parentSpanId" not in s)
        if key in ("kind", "status"):
            root[key] = value
        else:
            next(a for a in root["attributes"] if a["key"] == key)["value"] = value
    return edit


@pytest.mark.parametrize(("key", "value", "reason"), [
    (sc.OUTCOME_SUCCESS, {"boolValue": "false"}, "boolValue is not a boolean: 'false'"),
    (sc.OUTCOME_SUCCESS, {"boolValue": 0}, "boolValue is not a boolean: '0'"),
    (sc.TASK, {"stringValue": 5}, "stringValue is not a string: '5'"),
    ("status", {"code": "WHAT"}, "unknown status.code 'WHAT' (expected 0-2 or STATUS_CODE_*)"),
    ("status", {"code": 7}, "unknown status.code '7' (expected 0-2 or STATUS_CODE_*)"),
    ("kind", "server", "unknown kind 'server' (expected 0-5 or SPAN_KIND_*)"),
    ("kind", True, "kind is not an integer: 'True'"),
], ids=["bool-text", "bool-number", "string-number", "status-text", "status-7", "kind-text", "kind-bool"])
def test_a_value_of_the_wrong_json_type_makes_its_line_unreadable_naming_file_and_line(key, value, reason, demo_store,
                                                                                       tmp_path, capsys, caplog):
    """It was read silently as another value (``"false"`` as success); now the line is unreadable,
    as other bad store lines are: skipped with a warning naming file and line, nothing written."""
    demo, trace_id = demo_store
    store = _edited(demo, tmp_path, _set_root(key, value))
    before = (store / "spans.jsonl").read_bytes()
    capsys.readouterr()
    with caplog.at_level(logging.WARNING):
        assert main(["traces", "show", trace_id[:12], "--dir", str(store)]) == 2
    assert _error(capsys) == f"error: no trace matching '{trace_id[:12]}' in {store}"
    assert f"{store / 'spans.jsonl'}:1: not an OTLP/JSON trace record ({reason})" in caplog.text
    assert (store / "spans.jsonl").read_bytes() == before


def test_a_bad_value_on_one_line_skips_that_line_with_a_warning_naming_it(demo_store, tmp_path, capsys, caplog):
    demo, trace_id = demo_store
    store = _edited(demo, tmp_path, _set_root(sc.OUTCOME_SUCCESS, {"boolValue": "false"}))
    good = (demo / "spans.jsonl").read_text()
    with open(store / "spans.jsonl", "a") as fh:
        fh.write(good)
    capsys.readouterr()
    with caplog.at_level(logging.WARNING):
        assert main(["traces", "show", trace_id[:12], "--dir", str(store)]) == 0
    assert f"{store / 'spans.jsonl'}:1: not an OTLP/JSON trace record (boolValue is not a boolean: 'false'); line skipped" \
        in caplog.text
    assert "success" in capsys.readouterr().out


@pytest.mark.parametrize(("key", "value", "number"), [
    ("kind", "SPAN_KIND_CLIENT", 3), ("status", {"code": "STATUS_CODE_ERROR"}, None)])
def test_enum_names_of_the_proto3_json_mapping_are_read(key, value, number, demo_store, tmp_path):
    demo, trace_id = demo_store
    store = _edited(demo, tmp_path, _set_root(key, value))
    root = next(r for r in read_span_file(store / "spans.jsonl") if r.parent_span_id is None)
    assert (root.kind == number) if number else root.status == "ERROR"


class Tag(str, enum.Enum):
    ONE = "one"


def test_a_str_enum_attribute_is_stored_as_the_sdk_exporters_write_it(tmp_path):
    """Its text value ('one'), as the SDK's OTLP encoder writes it, not ``str()`` ('Tag.ONE')."""
    store = TraceStore(tmp_path / "s")
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(StoreSpanProcessor(store))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    span = provider.get_tracer("t").start_span("invoke_workflow t", attributes={"tag": Tag.ONE, "tags": (Tag.ONE, "two")})
    span.add_event("e", {"tag": Tag.ONE})
    span.end()
    provider.shutdown()
    sdk = MessageToDict(encode_spans(memory.get_finished_spans()))
    sdk_span = sdk["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    stored = _spans(json.loads(store.file.read_text()))[0]
    assert stored["attributes"] == sdk_span["attributes"]
    assert stored["events"][0]["attributes"] == sdk_span["events"][0]["attributes"]
    assert [r.attributes for r in read_span_file(store.file)] == [{"tag": "one", "tags": ["one", "two"]}]


def test_read_jsonl_reads_a_gzipped_file(tmp_path):
    path = tmp_path / "rows.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"id": 1}\n\n{"id": 2}\n'))
    assert read_jsonl(path, required=("id",)) == [{"id": 1}, {"id": 2}]


@pytest.mark.parametrize("data", [b'{"id": 1}\n', gzip.compress(b'{"id": 1}\n' * 50)[:-12]], ids=["not-gzip", "truncated"])
def test_read_jsonl_names_a_gzip_file_it_cannot_read(data, tmp_path):
    path = tmp_path / "rows.jsonl.gz"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=r"^" + str(path).replace(".", r"\.") + r": not a readable gzip file \("):
        read_jsonl(path)


def test_read_jsonl_names_a_bad_line_of_a_gzipped_file(tmp_path):
    path = tmp_path / "rows.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"id": 1}\n[2]\n'))
    with pytest.raises(ValueError, match=r"rows\.jsonl\.gz:2: expected a JSON object, got list$"):
        read_jsonl(path)
