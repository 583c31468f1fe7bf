"""The hot path's process-wide caches under real use: concurrent growing conversations, odd
characters at a long text's seam, a long stored run read back through delta hints, and a secret
in an app's exception with and without sampling. Each test compares with an uncached reference."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON

import aegis_probe
from aegis_probe.capture import semconv as sc
from aegis_probe.storage import delta as store_delta
from aegis_probe.capture.messages import SharedMessage, _encode_message, encode_messages
from aegis_probe.storage.otlp_encode import encode_request
from aegis_probe.storage.otlp_json import SpanRecord
from aegis_probe.redact import REDACTED, encodable, make_redactor, redact_secrets
from aegis_probe.storage.store import TraceStore
from aegis_probe.trajectory import load_trajectories

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.apps import camel_app  # noqa: E402

GH = "ghp_" + "Zq8Rt5Lm2Np7Xw4Kv9Hb3Jd6Fc1Gs0Ty5Ue"  # GitHub classic token shape
SK = "sk-" + "proj-Qw3Er5Ty7Ui9Op1As3Df5Gh7"  # OpenAI key shape
SECRETS = (GH[4:], SK[3:])


def reference(messages: list[Any]) -> str:
    """The documented encoding with no caching (as tests/test_messages.py builds it)."""
    return "[" + ", ".join(json.dumps(_encode_message(m, redact_secrets), ensure_ascii=False) for m in messages) + "]"


def _no_secret(text: str) -> bool:
    return not any(core in text for core in SECRETS)


# -- 1. threads and asyncio side by side --------------------------------------------------------
_SHARED_SYSTEM = SharedMessage(role="system", content="You are a helpful agent.")  # one object, many conversations


def _conversation(worker: int, steps: int, secret_at: int) -> list[tuple[list[Any], str]]:
    """(prompt, reference) per step of one growing conversation: shared messages (CAMEL/AutoGen
    style), and a long single message holding the conversation so far (MetaGPT style)."""
    history: list[Any] = [_SHARED_SYSTEM if worker % 2 else SharedMessage(role="system", content=f"You are w{worker}.")]
    long_text = f"Conversation {worker}:\n" + "".join(f"w{worker}: line {i} of the history, nothing here\n" for i in range(250))
    out = []
    for step in range(steps):
        said = f"w{worker} turn {step} \"quoted\"\n"
        if step == secret_at:
            said += GH if worker % 2 else f"my key is {SK}"
        history.append(SharedMessage(role="user" if step % 2 else "assistant", content=said, name=f"agent{step % 2}"))
        long_text += said
        for prompt in (list(history), [{"role": "user", "content": long_text}]):
            out.append((prompt, reference(prompt)))
    return out


def test_growing_conversations_from_threads_and_tasks_equal_the_uncached_encoding():
    redact = make_redactor(None)  # the probe's redactor without a user callback
    plans = [_conversation(w, 24, secret_at=5 + w) for w in range(12)]
    barrier = threading.Barrier(8 + 1)
    failures: list[str] = []

    def check(worker: int, prompt: list[Any], want: str, step: int) -> None:
        got = encode_messages(prompt, redact)
        if got != want or not _no_secret(got):
            failures.append(f"worker {worker} step {step}")

    def threaded(worker: int) -> None:
        barrier.wait()
        for step, (prompt, want) in enumerate(plans[worker]):
            check(worker, prompt, want, step)

    async def task(worker: int) -> None:
        for step, (prompt, want) in enumerate(plans[worker]):
            check(worker, prompt, want, step)
            await asyncio.sleep(0)  # interleave with the other tasks

    async def in_loop() -> None:
        barrier.wait()
        await asyncio.gather(*(task(w) for w in range(8, 12)))

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(threaded, w) for w in range(8)]
        asyncio.run(in_loop())
        for f in futures:
            f.result()
    assert failures == []
    # Again, single-threaded, with every cache warm: still exact.
    for worker, plan in enumerate(plans):
        for step, (prompt, want) in enumerate(plan):
            check(worker, prompt, want, step)
    assert failures == []


# -- 2. odd characters at the seam of a long growing text ---------------------------------------
# Once a lone surrogate is in a text, redaction escapes it (a new string), so the whole is quoted.
ODD = {"seam": ["\x00", "\u2028", "\u00e9\u4e2d", "\x01\x1b\x7f", "\"\\\n\t", "\u2029\ufeff", "plain"],
       "surrogates": ["\udcff", "\x00", "\ud83d", "\u2028"]}


@pytest.mark.parametrize("kind", list(ODD))
def test_odd_characters_in_the_new_part_of_a_long_text_are_quoted_exactly(kind):
    """Past the long-text threshold a prompt is quoted from the last one's JSON plus its new part:
    NUL, LINE SEPARATOR, non-ASCII and control characters in that part (and at the seam) give
    the same text as quoting the whole; lone surrogates come out escaped."""
    odd = ODD[kind]
    text = f"History {kind}:\n" + "".join(f"alice: reply number {i}, all good\n" for i in range(300))
    assert len(text) > 8192
    for i in range(3 * len(odd)):
        text += odd[i % len(odd)] + f" step {i} "
        prompt = [{"role": "user", "content": text}]
        got = encode_messages(prompt, redact_secrets)
        assert got == reference(prompt), (i, repr(odd[i % len(odd)]))
        assert json.loads(got)[0]["parts"][0]["content"] == encodable(text)
    assert ("\\udcff" in got) == (kind == "surrogates") and "\udcff" not in got and "\ud83d" not in got


@pytest.mark.parametrize("odd", ["\x00", "\x01\x1b", "\x7f", "\u2028", "\udcff", "\u00e9"])
@pytest.mark.parametrize("secret", [GH, SK])
def test_a_secret_straddling_the_end_of_a_remembered_clean_text_is_redacted(odd, secret):
    """The memo of trigger-free long texts scans an extension only from the old end: a token
    whose trigger is split by that end, with odd characters around it, is still redacted."""
    base = "Conversation:\n" + "".join(f"bob: message {i}, ok{odd if odd.isascii() else ''}\n" for i in range(80))
    for cut in (1, 2, 3):
        old = base + odd + secret[:cut] if odd.isascii() else base + secret[:cut]
        assert redact_secrets(old) == old  # a clean long text: remembered (if ASCII)
        grown = old + secret[cut:] + odd + " and more\n"
        got = redact_secrets(grown)
        assert secret[4:] not in got and REDACTED in got, (cut, repr(odd))
        prompt = [{"role": "user", "content": grown * 3}]  # also the long-message JSON path
        assert encode_messages(prompt, redact_secrets) == reference(prompt)
        assert secret[4:] not in encode_messages(prompt, redact_secrets)


# -- 3. a long run through CAMEL, stored with delta hints, read back exactly ---------------------
def test_a_long_camel_run_reads_back_from_the_store_as_the_spans_recorded(tmp_path, monkeypatch):
    """100 agent steps of a RolePlaying society: the store writes prompts as deltas (from the
    producers' hints); load_trajectories of the store equals that of the same spans written whole."""
    monkeypatch.setenv("CAMEL_WORKDIR", str(tmp_path / "camel"))
    app, steps = camel_app(), 100
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    society = app.build(steps)
    probe = aegis_probe.instrument(society, tracer_provider=provider, store=tmp_path / "store")
    try:
        app.play(society, probe, steps)
    finally:
        probe.uninstrument()
    provider.shutdown()
    whole = tmp_path / "whole.jsonl"
    whole.write_text(encode_request([SpanRecord.from_readable(s) for s in exporter.get_finished_spans()]) + "\n")
    raw = "".join(p.read_text() for p in (tmp_path / "store").glob("*.jsonl"))
    assert raw.count(store_delta.DELTA_PREFIX) > steps // 2, "prompts were stored as deltas"
    stored, spans_only = load_trajectories(tmp_path / "store"), load_trajectories(whole)
    assert len(stored) == 1 and len(stored[0].steps) >= steps  # camel adds summary steps when its context fills
    assert [t.model_dump() for t in stored] == [t.model_dump() for t in spans_only]
    # Every attribute of every span, prompts (the delta-coded values) included, as recorded.
    recorded = {format(s.context.span_id, "016x"): {k: list(v) if isinstance(v, tuple) else v for k, v in s.attributes.items()}
                for s in exporter.get_finished_spans()}  # OTLP arrays read back as lists
    read = {r.span_id: dict(r.attributes) for r in TraceStore(tmp_path / "store").trace(stored[0].trace_id)}
    assert read == recorded
    assert max(len(a.get(sc.INPUT_MESSAGES, "")) for a in read.values()) > 50 * steps, "prompts hold the conversation"


# -- 4. a secret in the app's own exception, sampled or not --------------------------------------
class Rejected(RuntimeError):
    pass


@pytest.mark.parametrize("sampler", [ALWAYS_ON, ALWAYS_OFF], ids=["sampled", "not-sampled"])
def test_a_secret_in_the_apps_exception_is_never_written(sampler, tmp_path, monkeypatch):
    monkeypatch.setenv("CAMEL_WORKDIR", str(tmp_path / "camel"))
    app = camel_app()
    error = Rejected(f"upstream refused api_key={SK} and {GH}")
    society = app.build(2)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise error

    society.assistant_agent.model_backend.models[0]._run = refuse  # the model fails inside camel's step
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    probe = aegis_probe.instrument(society, tracer_provider=provider, store=tmp_path / "store")
    try:
        with pytest.raises(Rejected) as raised:
            app.play(society, probe, 2)
    finally:
        probe.uninstrument()
    provider.shutdown()
    assert raised.value is error and str(error).count(SK) == 1, "the app's exception passes through unchanged"
    spans = exporter.get_finished_spans()
    written = "".join(p.read_text() for p in (tmp_path / "store").rglob("*") if p.is_file())
    exported = json.dumps([[s.status.description, [(e.name, dict(e.attributes or {})) for e in s.events],
                            dict(s.attributes or {})] for s in spans], default=str)
    assert _no_secret(written) and _no_secret(exported)
    if sampler is ALWAYS_ON:
        failed = [s for s in spans if s.status.status_code.name == "ERROR"]
        assert failed and all("Rejected" in (s.status.description or "") for s in failed)
        assert any(e.name == "exception" for s in failed for e in s.events)
        assert "upstream refused" in written and REDACTED in written
    else:
        assert spans == () or not spans
