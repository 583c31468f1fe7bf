"""Semantic-convention compliance: every name aegis-probe emits is OpenTelemetry's or documented as its own.

Names are gathered from real runs (a framework-free script and each installed framework's demo
team), from the ``aegis_probe.capture.semconv`` constants and from the metrics; OpenTelemetry's names come
from the ``opentelemetry-semantic-conventions`` package, aegis-probe's own from docs/otel.md. The
Phoenix test checks that a real Phoenix shows the steps, model calls and tool calls as AGENT, LLM
and TOOL spans from the GenAI attributes alone.
"""

from __future__ import annotations

import importlib
import re
import uuid
from pathlib import Path
from typing import Any, Iterable

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.semconv._incubating.attributes.gen_ai_attributes import GenAiOperationNameValues

import aegis_probe
from aegis_probe.capture import semconv as sc
from aegis_probe.capture.probe import ProbeSetup
from aegis_probe.storage.store import TraceStore
from toyrun import ToyAdapter, ToyApp, run_script, sample_steps

DOC = Path(__file__).resolve().parent.parent / "docs" / "otel.md"
OWN_NAMESPACE = "aegis."
_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$")


def otel_names() -> set[str]:
    """Every attribute and metric name the semantic-conventions package defines."""
    import opentelemetry.semconv as root

    names: set[str] = set()
    for base in map(Path, root.__path__):  # _incubating has no __init__: walk the files
        for path in [*base.rglob("*_attributes.py"), *base.rglob("*_metrics.py")]:
            module = importlib.import_module(".".join((root.__name__, *path.relative_to(base).with_suffix("").parts)))
            names.update(v for k, v in vars(module).items() if k.isupper() and isinstance(v, str) and _NAME.match(v))
    return names


def documented_names() -> tuple[set[str], set[str]]:
    """aegis-probe's own names in docs/otel.md, and those it takes from other conventions (that
    section's table): exact ones, and prefixes (``aegis.labels.<source>``)."""
    text = DOC.read_text()
    exact = set(re.findall(r"`(aegis\.[a-z0-9_.]+)`", text))
    borrowed = text.split("### Names from other conventions", 1)[1].split("\n#", 1)[0]
    first_cells = re.findall(r"^\| (`[^|]+) \|", borrowed, re.M)  # the table's name column
    exact |= {name for cell in first_cells for name in re.findall(r"`([a-z0-9_.]+)`", cell)}
    prefixes = {p + "." for p in re.findall(r"`(aegis\.[a-z0-9_.]+)\.<[a-z_]+>`", text)}
    return exact, prefixes


def uncovered(names: Iterable[str]) -> list[str]:
    """Names neither OpenTelemetry's nor documented as aegis-probe's own."""
    known, (exact, prefixes) = otel_names(), documented_names()
    return sorted(n for n in set(names)
                  if n not in known and n not in exact and not any(n.startswith(p) for p in prefixes))


def emitted(spans: Iterable[Any]) -> tuple[set[str], set[str], set[str]]:
    """Attribute keys (spans and events), event names and span-name operations of SDK spans."""
    keys, events, ops = set(), set(), set()
    for span in spans:
        keys.update(span.attributes)
        ops.add(span.name.split(" ", 1)[0])
        for event in span.events:
            events.add(event.name)
            keys.update(event.attributes)
    return keys, events, ops


def _demo_spans(framework: str, model_server, provider, exporter) -> list[Any]:
    pytest.importorskip({"autogen": "autogen_agentchat", "camel": "camel", "metagpt": "metagpt", "langgraph": "langgraph",
                         "openai_agents": "agents"}[framework])
    demo = importlib.import_module(f"aegis_probe.demos.{framework}")
    server = model_server(demo.policy)
    app = demo.build_app(server.base_url, "aegis-scripted", "sk-test-not-a-secret-000000000")
    aegis_probe.instrument(app, tracer_provider=provider, store=False, judge=lambda task, answer: True)
    demo.run_app(app, demo.TASK)
    return list(exporter.get_finished_spans())


def test_semconv_constants_are_otel_names_or_documented():
    constants = {v for k, v in vars(sc).items() if k.isupper() and isinstance(v, str) and _NAME.match(v)}
    assert any(c.startswith("gen_ai.") for c in constants) and any(c.startswith(OWN_NAMESPACE) for c in constants)
    assert uncovered(constants) == []
    assert {sc.OP_WORKFLOW, sc.OP_AGENT, sc.OP_CHAT, sc.OP_TOOL} <= {v.value for v in GenAiOperationNameValues}


def test_toy_run_emits_only_known_names(provider, exporter):
    reader = InMemoryMetricReader()
    setup = ProbeSetup.resolve(tracer_provider=provider, meter_provider=MeterProvider(metric_readers=[reader]))
    probe = setup.probe(ToyAdapter())
    probe.apps.append(probe.adapter.register(ToyApp(), probe))
    run_script(probe, "t", sample_steps(), answer="42", outcome=True)
    keys, events, ops = emitted(exporter.get_finished_spans())
    assert sc.CONVERSATION_ID in keys and sc.WORKFLOW_NAME in keys and sc.OUTCOME_SUCCESS in keys
    assert uncovered(keys) == []
    assert events <= {"exception", "gen_ai.evaluation.result"} and ops <= {v.value for v in GenAiOperationNameValues}
    metrics = {m.name for rm in reader.get_metrics_data().resource_metrics for s in rm.scope_metrics for m in s.metrics}
    assert metrics == {"gen_ai.client.operation.duration", "gen_ai.client.token.usage", "aegis.agent.steps"}
    assert uncovered(metrics) == []


@pytest.mark.parametrize("framework", ["autogen", "camel", "metagpt", "langgraph", "openai_agents"])
def test_framework_runs_emit_only_known_names(framework, model_server, provider, exporter, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # metagpt writes its workspace into the working directory
    spans = _demo_spans(framework, model_server, provider, exporter)
    keys, events, ops = emitted(spans)
    gen_ai = {k for k in keys if k.startswith("gen_ai.")}
    assert {sc.OPERATION, sc.PROVIDER, sc.REQUEST_MODEL, sc.CONVERSATION_ID, sc.SERVER_ADDRESS} <= keys
    assert uncovered(keys) == [], f"{framework}: undocumented or non-OTel names"
    assert len(gen_ai) >= 8
    assert uncovered(e for e in events if e not in ("exception", "gen_ai.evaluation.result")) == []  # OTel's events
    assert ops <= {v.value for v in GenAiOperationNameValues}


@pytest.mark.phoenix
def test_phoenix_shows_agent_llm_and_tool_spans(phoenix, tmp_path, monkeypatch):
    """Phoenix derives its span kinds from the GenAI attributes; no OpenInference attribute is needed."""
    project = f"aegis-kinds-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", f"openinference.project.name={project}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", phoenix.base)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL", raising=False)
    setup = ProbeSetup.resolve(store=TraceStore(tmp_path / "store"), service_name=f"kinds-{project}")
    probe = setup.probe(ToyAdapter())
    probe.apps.append(probe.adapter.register(ToyApp(), probe))
    run = run_script(probe, "t", sample_steps())
    assert probe.flush(10_000)
    local = setup.store.trace(run.trace_id)  # type: ignore[union-attr]
    remote = phoenix.spans(project, len(local))
    kinds = {s["name"].split(" ", 1)[0]: set() for s in remote}
    for s in remote:
        kinds[s["name"].split(" ", 1)[0]].add(s["span_kind"])
    assert not any(k.startswith("openinference.") for s in local for k in s.attributes)
    assert kinds[sc.OP_AGENT] == {"AGENT"} and kinds[sc.OP_CHAT] == {"LLM"} and kinds[sc.OP_TOOL] == {"TOOL"}
    assert kinds[sc.OP_WORKFLOW] == {"UNKNOWN"}  # Phoenix has no kind for invoke_workflow (docs/otel.md)
