"""Runs that are not stored (real-use sweep): dropped by a sampler (``OTEL_TRACES_SAMPLER``) or
written to a full disk. The host app is never broken by them, reading one back says why it is
missing, and an injection campaign records every run whatever the sampler. Also the content
switch: a value it does not know records no content (privacy fails closed)."""

from __future__ import annotations

import json
import os

import pytest

import aegis_probe
from aegis_probe.demos import autogen as demo
from aegis_probe.injection.campaign import read_records, run_campaign
from aegis_probe.modelserver import ModelServer

TASK = "A shop sells pens at 17 coins and notebooks at 25 coins. What do 3 pens and 3 notebooks cost in total?"


def test_a_dropped_run_leaves_the_app_alone_and_reading_it_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    with ModelServer(demo.policy) as server:
        app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
        probe = aegis_probe.instrument(app, store=tmp_path / "store")
        answer = demo.run_app(app, TASK)
    assert "126" in answer and probe.last_trace_id
    probe.set_outcome(True, answer=answer)  # was: KeyError "no trace matching ..." raised into the app
    with pytest.raises(LookupError, match=r"was not recorded: the tracer provider's sampler dropped it "
                                          r"\(OTEL_TRACES_SAMPLER=always_off\)"):
        probe.trajectory()
    assert not (tmp_path / "store").exists()


def test_campaign_records_every_run_whatever_the_env_sampler(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "pens", "type": "math", "task": TASK, "expected": "126"}) + "\n")
    out = tmp_path / "campaign"
    run_campaign("aegis_probe.demos.autogen:build_app", tasks, out, plans_per_run=2, seed=0, progress=False,
                 modes=("FM-2.6",), strategies=("response_corruption",))
    records = list(read_records(out).values())
    assert [r["success"] for r in records if r["kind"] == "baseline"] == [True]  # was: "the run produced no trace"
    injected = [r for r in records if r["kind"] == "injected"]
    assert injected and all(r.get("error") is None for r in injected), injected
    kept = {t.trace_id for t in aegis_probe.load_trajectories(out / "traces")}
    assert kept == {r["trace_id"] for r in injected if r["kept"]} and kept


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full to fill the disk")
def test_a_store_on_a_full_disk_leaves_the_app_alone_and_says_why_a_run_is_missing(tmp_path, caplog):
    store = tmp_path / "store"
    store.mkdir()
    (store / "spans.jsonl").symlink_to("/dev/full")  # every write: ENOSPC, as on a full disk
    with ModelServer(demo.policy) as server:
        app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
        probe = aegis_probe.instrument(app, store=store)
        assert "126" in demo.run_app(app, TASK)
    with pytest.raises(KeyError, match=r"no trace matching '\w+' in .*store \(the last write to it failed: "
                                       r"OSError: \[Errno 28\] No space left on device\)"):
        probe.trajectory()
    [logged] = [r for r in caplog.records if "could not write" in r.getMessage()]
    assert logged.exc_info is None and "No space left on device" in logged.getMessage()


def test_a_run_with_the_sdk_disabled_says_tracing_is_off(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    with ModelServer(demo.policy) as server:
        app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
        probe = aegis_probe.instrument(app, store=tmp_path / "store")
        assert "126" in demo.run_app(app, TASK)
    probe.set_outcome(True)
    with pytest.raises(LookupError, match=r"was not recorded: tracing is off \(OTEL_SDK_DISABLED=true\)"):
        probe.trajectory()


@pytest.mark.parametrize("raw,expected", [("NO_CONTENT", False), ("disabled", False), ("Yes", True), ("OFF", False)])
def test_aegis_capture_variable_fails_closed_on_values_it_does_not_know(monkeypatch, caplog, raw, expected):
    from aegis_probe.config import ProbeConfig

    monkeypatch.setenv("AEGIS_CAPTURE_CONTENT", raw)  # was: any value but false/0/no/off captured content
    assert ProbeConfig.resolve().capture_content is expected
    known = raw.lower() in ("yes", "off")
    assert any(f"AEGIS_CAPTURE_CONTENT={raw!r} is not a valid value" in r.getMessage() for r in caplog.records) is not known


def test_campaign_run_the_endpoint_failed_is_an_error_record_not_a_label(tmp_path):
    from aegis_probe.apps import AppSpec
    from aegis_probe.injection.campaign import RUNS_FILE

    calls = []

    def policy_until_down(body):  # the baseline's 3 calls and 2 more answer; then the endpoint is down
        calls.append(1)
        if len(calls) > 5:
            raise ConnectionError("upstream model is down")
        return demo.policy(body)

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "pens", "type": "math", "task": TASK, "expected": "126"}) + "\n")
    app = AppSpec(demo.build_app, demo.run_app, policy=policy_until_down, agents=tuple(demo.AGENTS))
    run_campaign(app, tasks, tmp_path / "out", plans_per_run=1, seed=0, progress=False,
                 modes=("FM-2.6",), strategies=("response_corruption",))
    records = [json.loads(line) for line in (tmp_path / "out" / RUNS_FILE).read_text().splitlines()]
    [injected] = [r for r in records if r["key"] != "pens/baseline"]
    assert injected["agent"] in ("planner", "calculator"), "the fault is applied before the endpoint goes down"
    # was: the app's connection error counted as the fault's failure: flipped, kept and labelled FM-2.6
    assert "the model endpoint failed 1 call(s) of the run" in injected["error"], injected
    assert not (tmp_path / "out" / "traces").exists() or not aegis_probe.load_trajectories(tmp_path / "out" / "traces")
