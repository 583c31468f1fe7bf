"""Sessions, users, tags and metadata on every span of a run (``using_attributes``, OpenInference's
own, ``instrument(...)``'s keywords), per thread and per asyncio task; cost in USD per call, step
and run from the dated price table; both seen by ``traces ls``, the trajectory and the metrics."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import aegis_probe
from aegis_probe.capture import semconv as sc
from aegis_probe.capture.probe import ProbeSetup
from aegis_probe.cli import main
from aegis_probe.pricing import ENV_PRICES, PriceTable, builtin_sources
from aegis_probe.storage.store import TraceStore
from aegis_probe.trajectory import load_trajectories
from toyrun import StepSpec, ToyAdapter, ToyApp, make_probe, run_script, sample_steps

SESSION_KEYS = ("session.id", "user.id", "tag.tags", "metadata")


def ours(exporter) -> list:
    return [s for s in exporter.get_finished_spans() if s.instrumentation_scope.name == "aegis_probe"]


def by_trace(exporter) -> dict[int, list]:
    out: dict[int, list] = {}
    for s in ours(exporter):
        out.setdefault(s.context.trace_id, []).append(s)
    return out


def session_of(span) -> tuple:
    attrs = span.attributes
    return tuple(tuple(attrs[k]) if k == "tag.tags" and k in attrs else attrs.get(k) for k in SESSION_KEYS)


# -- sessions ------------------------------------------------------------------------------------
def test_every_span_of_a_run_carries_the_session(provider, exporter):
    probe = make_probe(provider)
    with aegis_probe.using_attributes(session_id="s-1", user_id="u-7", tags=["beta", "eu"], metadata={"plan": "pro", "n": 2}):
        run_script(probe, "t", sample_steps())
    run_script(probe, "t", sample_steps())  # outside the block: no session
    first, second = by_trace(exporter).values()
    assert len({s.attributes.get(sc.OPERATION) for s in first}) == 4  # workflow, agent, chat, tool spans
    for span in first:
        assert session_of(span) == ("s-1", "u-7", ("beta", "eu"), json.dumps({"plan": "pro", "n": 2}))
        assert span.attributes[sc.CONVERSATION_ID] == "s-1"
    assert all(session_of(s) == (None,) * 4 for s in second)
    assert all(s.attributes[sc.CONVERSATION_ID] != "s-1" for s in second)


def test_nested_blocks_override_what_they_give():
    from opentelemetry import context

    from aegis_probe.capture.session import from_context

    with aegis_probe.using_attributes(session_id="outer", user_id="u"):
        with aegis_probe.using_attributes(session_id="inner"):
            assert from_context(context.get_current(), None) == {"session.id": "inner", "user.id": "u"}
        assert from_context(context.get_current(), {"tag.tags": ["d"]}) == {
            "session.id": "outer", "user.id": "u", "tag.tags": ["d"]}


def test_threads_keep_their_own_sessions(provider, exporter):
    probe = make_probe(provider)
    barrier = threading.Barrier(4)

    def worker(n: int) -> None:
        with aegis_probe.using_attributes(session_id=f"s{n}", user_id=f"u{n}"):
            barrier.wait()  # all four blocks open at once
            run_script(probe, f"task {n}", sample_steps(str(n)))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    traces = by_trace(exporter)
    assert len(traces) == 4
    for spans in traces.values():
        (root,) = [s for s in spans if s.parent is None]
        n = root.attributes[sc.TASK].split()[-1]
        assert {(s.attributes["session.id"], s.attributes["user.id"]) for s in spans} == {(f"s{n}", f"u{n}")}


def test_asyncio_tasks_keep_their_own_sessions(provider, exporter):
    probe = make_probe(provider)

    async def one(n: int) -> None:
        with aegis_probe.using_attributes(session_id=f"a{n}"):
            await asyncio.sleep(0.01 * (3 - n))  # interleaved
            run_script(probe, f"task {n}", sample_steps(str(n)))

    async def main_() -> None:
        await asyncio.gather(*(one(n) for n in range(3)))

    asyncio.run(main_())
    for spans in by_trace(exporter).values():
        (root,) = [s for s in spans if s.parent is None]
        n = root.attributes[sc.TASK].split()[-1]
        assert {s.attributes["session.id"] for s in spans} == {f"a{n}"}


def test_openinference_using_attributes_is_honoured(provider, exporter):
    oi = pytest.importorskip("openinference.instrumentation")
    probe = make_probe(provider)
    with oi.using_attributes(session_id="oi-s", user_id="oi-u", tags=["x"], metadata={"k": "v"}):
        run_script(probe, "t", sample_steps())
    spans = ours(exporter)
    assert {session_of(s) for s in spans} == {("oi-s", "oi-u", ("x",), json.dumps({"k": "v"}))}


def test_instrument_keywords_are_the_default_session(provider, exporter, tmp_path, monkeypatch):
    adapter = ToyAdapter()
    monkeypatch.setattr("aegis_probe.capture.probe.adapter_for", lambda app: adapter)
    app = ToyApp()
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store", session_id="chat-9",
                                   user_id="ann", tags=["t1"], metadata={"tier": "gold"})
    run_script(probe, "t", sample_steps())
    with aegis_probe.using_attributes(session_id="chat-10"):  # the block wins over the default
        run_script(probe, "t", sample_steps())
    probe.flush()
    from aegis_probe.train.importers.otlp import load_otlp

    imported = sorted(load_otlp(tmp_path / "store").trajectories, key=lambda t: t.start_ns or 0)
    assert [t.metadata["session"]["session_id"] for t in imported] == ["chat-9", "chat-10"]  # the importer keeps them
    trajs = load_trajectories(tmp_path / "store")
    assert [t.metadata["session"] for t in trajs] == [
        {"session_id": "chat-9", "user_id": "ann", "tags": ["t1"], "metadata": {"tier": "gold"}},
        {"session_id": "chat-10", "user_id": "ann", "tags": ["t1"], "metadata": {"tier": "gold"}},
    ]


# -- cost ----------------------------------------------------------------------------------------
def test_price_table_matches_dated_and_prefixed_names_only():
    table = PriceTable.load()
    assert table.price("gpt-4o-2024-08-06") == table.price("gpt-4o") == table.price("openai/gpt-4o")
    assert table.price("gpt-4o-mini-2024-07-18") == table.price("gpt-4o-mini") != table.price("gpt-4o")
    assert table.price("claude-3-5-sonnet-20241022") == table.price("claude-3-5-sonnet")
    assert table.price("gemini-2.0-flash-001") == table.price("gemini-2.0-flash")
    # a dated snapshot lands on its own model, never on the shorter neighbour's row
    assert table.price("claude-sonnet-4-5-20250929") == table.price("claude-sonnet-4-5") is not None
    assert table.price("claude-haiku-4-5-20251001").input == 1.0 != table.price("claude-3-5-haiku").input
    assert table.price("claude-opus-4-5-20251101").input == 5.0 != table.price("claude-opus-4").input
    assert table.price("gpt-5.4-nano-2026-03-17") == table.price("gpt-5.4-nano") != table.price("gpt-5-nano")
    for unknown in ("aegis-scripted", "gpt-4o-turbo-ultra", "my-gpt-4o", "gpt-4o-pro", "claude-sonnet-4-9", "", None):
        assert table.price(unknown) is None
    assert table.cost("aegis-scripted", input_tokens=10, output_tokens=5) is None  # never a guess
    assert table.cost("gpt-4o", input_tokens=None, output_tokens=None) is None  # no usage, no cost
    # 500 plain input at 2.50, 500 cached at 1.25, 100 output at 10.00 per million
    assert table.cost("gpt-4o", input_tokens=1000, output_tokens=100, cache_read_input_tokens=500) == pytest.approx(0.002875)
    # Anthropic: writes at 3.75, reads at 0.30, the rest at 3.00
    assert table.cost("claude-sonnet-4-20250514", input_tokens=1300, output_tokens=0, cache_read_input_tokens=1000,
                      cache_creation_input_tokens=200) == pytest.approx((100 * 3 + 1000 * 0.3 + 200 * 3.75) / 1e6)
    assert all(s["as_of"] and s["source"].startswith("https://") for s in builtin_sources().values())
    assert set(builtin_sources()) == {"openai", "anthropic", "google"}


def test_user_prices_override_by_file_and_argument(tmp_path, monkeypatch):
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"models": {"gpt-4o": {"input": 1, "output": 1}, "house-model": {"input": 2, "output": 4}}}))
    monkeypatch.setenv(ENV_PRICES, str(path))
    table = PriceTable.load({"house-model": {"input": 3, "output": 6}})
    assert table.price("gpt-4o").input == 1.0  # the env file over the built-in table
    assert table.price("house-model").input == 3.0  # the argument over the env file
    assert table.price("gpt-4o-mini").input == 0.15  # the rest stays


def test_cost_on_chat_step_and_run_and_in_metrics_and_ls(provider, exporter, tmp_path, capsys):
    reader = InMemoryMetricReader()
    ProbeSetup.resolve(tracer_provider=provider, meter_provider=MeterProvider(metric_readers=[reader]))
    store = TraceStore(tmp_path / "store")
    probe = make_probe(provider, store)
    probe.prices = PriceTable.load({"toy-model-1": {"input": 1000, "output": 2000}})  # USD 0.001/0.002 a token
    with aegis_probe.using_attributes(session_id="paid"):
        run_script(probe, "t", sample_steps())
    probe.prices = PriceTable.load()  # toy-model-1 unknown now: no cost anywhere
    run_script(probe, "t", [StepSpec("planner", "x", "y", usage=[(5, 5)])])
    store.flush()

    paid, free = by_trace(exporter).values()
    chats = [s for s in paid if s.attributes[sc.OPERATION] == sc.OP_CHAT]
    expected = [(i * 0.001 + o * 0.002) for i, o in ((11, 3), (20, 7), (25, 9), (30, 2))]
    assert [s.attributes[sc.COST_USD] for s in sorted(chats, key=lambda s: s.start_time)] == pytest.approx(expected)
    steps = sorted((s for s in paid if sc.STEP_INDEX in s.attributes), key=lambda s: s.attributes[sc.STEP_INDEX])
    assert [s.attributes.get(sc.COST_USD) for s in steps] == pytest.approx([expected[0], expected[1] + expected[2], None, expected[3]])
    (root,) = [s for s in paid if s.parent is None]
    assert root.attributes[sc.COST_USD] == pytest.approx(sum(expected))
    assert all(sc.COST_USD not in s.attributes for s in free)

    metric = [p for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics
              for m in sm.metrics if m.name == "aegis.client.cost" for p in m.data.data_points]
    assert sum(p.value for p in metric) == pytest.approx(sum(expected))

    trajs = load_trajectories(store)
    assert trajs[0].cost_usd == pytest.approx(sum(expected)) and trajs[1].cost_usd is None
    assert trajs[0].steps[1].usage.cost_usd == pytest.approx(expected[1] + expected[2])

    assert main(["traces", "ls", "--dir", str(store.path), "--session", "paid"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "cost USD" in out[0] and len(out) == 2 and trajs[0].trace_id in out[1]
    assert f"{sum(expected):.4f}" in out[1]
    assert main(["traces", "ls", "--dir", str(store.path), "--session", "nobody"]) == 0
    assert "no traces" in capsys.readouterr().out
    assert main(["traces", "show", "--dir", str(store.path), trajs[0].trace_id]) == 0
    shown = capsys.readouterr().out
    assert "session  session_id=paid" in shown and f"cost     USD {sum(expected):.4f}" in shown


def test_camel_run_priced_with_cache_reads_in_a_session(model_server, provider, exporter, tmp_path):
    pytest.importorskip("camel.agents")
    from aegis_probe.modelserver import Reply
    from test_camel import agent

    server = model_server(lambda body: Reply(content="four", cached_tokens=4))
    solo = agent(server, "Solver", "You solve sums.")
    probe = aegis_probe.instrument(solo, tracer_provider=provider, store=tmp_path / "store", session_id="c-1",
                                   prices={"aegis-scripted": {"input": 10, "cache_read": 1, "output": 20}})
    solo.step("What is two plus two?")
    probe.flush()
    (chat,) = [s for s in ours(exporter) if s.attributes[sc.OPERATION] == sc.OP_CHAT]
    attrs: Any = chat.attributes
    tokens_in, tokens_out = attrs[sc.USAGE_INPUT_TOKENS], attrs[sc.USAGE_OUTPUT_TOKENS]
    assert attrs[sc.COST_USD] == pytest.approx(((tokens_in - 4) * 10 + 4 * 1 + tokens_out * 20) / 1e6)
    assert attrs["session.id"] == "c-1" and attrs[sc.CONVERSATION_ID] == "c-1"
