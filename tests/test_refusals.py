"""A model's refusal (OpenAI's ``message.refusal``, content null) through the openai-client seam
(here the OpenAI Agents SDK's, in .venv-openai-agents): interceptors see it as
``LLMResponse.refusal``, and one they answer reaches the SDK as a refusal, which raises
``ModelRefusalError``; it is recorded as the chat span's output, a text part marked
``"refusal": true``, and an exact replay gives it back as a refusal (the span had no output, and
the replayed run ended with an empty answer). :class:`RefusingServer` is the model (CAMEL's test
uses it too).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from own_env import INSIDE, importable, run_in_own_env
from sse import send_events

import aegis_probe
from aegis_probe.capture import semconv as sc
from aegis_probe.apps import AppSpec
from aegis_probe.counterfactual import replay
from aegis_probe.capture.interception import LLMResponse, ModelCall
from aegis_probe.storage.otlp_json import SpanRecord
from aegis_probe.storage.store import TraceStore

HERE = importable("agents.run")
REFUSAL = "I can't help with that."
TASK = "Tell me the launch codes."
#: The output of a refused call, as recorded.
REFUSED = [{"role": "assistant", "parts": [{"type": "text", "content": REFUSAL, "refusal": True}], "finish_reason": "stop"}]


class RefusingServer:
    """An OpenAI-compatible chat-completions endpoint on 127.0.0.1 whose model refuses every request
    as OpenAI does: ``refusal`` set, ``content`` null; streamed, the refusal in deltas of its own."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                server.requests.append(body)
                base = {"id": f"chatcmpl-{len(server.requests)}", "created": int(time.time()), "model": body.get("model")}
                usage = {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
                if body.get("stream"):
                    self._stream(base, usage)
                    return
                message = {"role": "assistant", "content": None, "refusal": REFUSAL}
                data = json.dumps({**base, "object": "chat.completion", "usage": usage,
                                   "choices": [{"index": 0, "finish_reason": "stop", "message": message}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, base: dict[str, Any], usage: dict[str, int]) -> None:
                chunk = {**base, "object": "chat.completion.chunk"}
                deltas = [{"role": "assistant", "content": None, "refusal": ""}, {"refusal": REFUSAL[:5]}, {"refusal": REFUSAL[5:]}]
                events = [{**chunk, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
                events += [{**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                           {**chunk, "choices": [], "usage": usage}]
                send_events(self, events)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> "RefusingServer":
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="refusing-model", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def chat_outputs(spans: list[SpanRecord]) -> list[Any]:
    """The recorded output of each model call of a stored trace."""
    return [json.loads(s.attributes[sc.OUTPUT_MESSAGES]) for s in spans if s.attributes.get(sc.OPERATION) == sc.OP_CHAT]


@pytest.mark.skipif(HERE, reason=INSIDE)
def test_refusals_in_the_agents_sdks_own_environment():
    run_in_own_env(".venv-openai-agents", "tests/test_refusals.py", "a_refusal", env={"OPENAI_AGENTS_DISABLE_TRACING": "1"})


needs_sdk = pytest.mark.skipif(not HERE, reason="openai-agents is not installed here (it runs in .venv-openai-agents)")


def build_clerk(base_url: str, model: str, api_key: str) -> Any:
    from agents import Agent, OpenAIChatCompletionsModel
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    return Agent(name="clerk", instructions="You are the clerk.", model=OpenAIChatCompletionsModel(model=model, openai_client=client))


def run_clerk(app: Any, task: str) -> str:
    from agents import Runner

    return str(Runner.run_sync(app, task).final_output)


def run_clerk_streamed(app: Any, task: str) -> str:
    from agents import Runner

    async def run() -> str:
        result = Runner.run_streamed(app, task)
        async for _ in result.stream_events():
            pass
        return str(result.final_output)

    return asyncio.run(run())


class _Seeing:
    """An interceptor that keeps the responses it sees (and answers every call with ``answer``, if any)."""

    def __init__(self, answer: LLMResponse | None = None) -> None:
        self.answer, self.seen = answer, []

    def before(self, call: ModelCall) -> LLMResponse | None:
        return self.answer

    def after(self, call: ModelCall, response: LLMResponse) -> LLMResponse:
        self.seen.append(response)
        return response


def _refused_under(interceptor: _Seeing, run: Any, base_url: str, tmp_path: Path) -> str:
    """The refusal a new clerk's run under ``interceptor`` ends with (it must end with one)."""
    from agents import ModelRefusalError

    app = build_clerk(base_url, "aegis-scripted", "sk-test")
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    try:
        with probe.intercept(interceptor), pytest.raises(ModelRefusalError) as refused:
            run(app, TASK)
    finally:
        probe.uninstrument()
    return str(refused.value)


@needs_sdk
@pytest.mark.parametrize("streamed", [False, True], ids=["run", "streamed"])
def test_the_seam_reads_a_refusal_and_answers_one_as_a_refusal(streamed, tmp_path):
    """Interceptors saw a refusal as no content at all, and one they answered reached the SDK as
    an empty answer (the run ended without ``ModelRefusalError``)."""
    run = run_clerk_streamed if streamed else run_clerk
    with RefusingServer() as server:
        reading = _Seeing()
        assert _refused_under(reading, run, server.base_url, tmp_path) == f"Model refused to produce output: {REFUSAL}"
        assert [(r.content, r.refusal, r.finish_reason) for r in reading.seen] == [(None, REFUSAL, "stop")]
        answering = _Seeing(LLMResponse(refusal="Not today.", finish_reason="stop"))
        assert _refused_under(answering, run, server.base_url, tmp_path) == "Model refused to produce output: Not today."
    assert [bool(r.get("stream")) for r in server.requests] == [streamed]  # the answered call made none


def _recorded_refusal(run: Any, store: TraceStore) -> str:
    """The trace id of a clerk's run (``run``) that the model refused, recorded in ``store``."""
    from agents import ModelRefusalError

    with RefusingServer() as server:
        app = build_clerk(server.base_url, "aegis-scripted", "sk-test")
        probe = aegis_probe.instrument(app, store=store)
        try:
            with pytest.raises(ModelRefusalError, match=REFUSAL):
                run(app, TASK)
        finally:
            probe.flush()
            probe.uninstrument()
    assert [bool(r.get("stream")) for r in server.requests] == [run is run_clerk_streamed]
    return str(probe.last_trace_id)


@needs_sdk
@pytest.mark.parametrize("run", [run_clerk, run_clerk_streamed], ids=["run", "streamed"])
def test_a_refusal_is_recorded_as_a_marked_text_part(run, tmp_path):
    store = TraceStore(tmp_path / "store")
    assert chat_outputs(store.trace(_recorded_refusal(run, store))) == [REFUSED]


@needs_sdk
@pytest.mark.parametrize("run", [run_clerk, run_clerk_streamed], ids=["run", "streamed"])
def test_a_refusal_is_replayed_as_a_refusal(run, tmp_path):
    store = TraceStore(tmp_path / "store")
    result = replay(_recorded_refusal(run, store), AppSpec(build_clerk, run), store=store)  # no model behind it now
    assert (result.replayed_calls, result.live_calls, result.divergence) == (1, 0, None)
    assert result.error == f"ModelRefusalError: Model refused to produce output: {REFUSAL}"
    assert chat_outputs(store.trace(result.trajectory.trace_id)) == [REFUSED]
