"""A streaming MetaGPT app's token usage: the provider's count when the stream carries one (in a
chunk of its own after the finish reason, as the model server and OpenAI with ``include_usage``
send it), never metagpt's own estimate recorded as if reported (OpenAI without ``include_usage``,
which metagpt 0.8.2 never asks for, sends none)."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest

import aegis_probe
from aegis_probe.capture import semconv as sc
from aegis_probe.modelserver import ModelServer, count_tokens, prompt_text
from sse import send_events

demo = pytest.importorskip("aegis_probe.demos.metagpt")

from metagpt.actions import UserRequirement  # noqa: E402
from metagpt.config2 import Config  # noqa: E402
from metagpt.context import Context  # noqa: E402

pytestmark = pytest.mark.metagpt


@pytest.fixture(autouse=True)
def _tmp_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # metagpt writes logs/ and workspace/ into the working directory


class _OpenAIStream(BaseHTTPRequestHandler):
    """Streams the demo policy's answer as OpenAI does: a usage chunk only when ``include_usage`` is asked for."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        return None

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        text = demo.policy(body).content or ""
        base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": body["model"]}
        events = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None}]},
                  {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}]
        if (body.get("stream_options") or {}).get("include_usage"):
            prompt, completion = count_tokens(prompt_text(body)), count_tokens(text)
            events.append({**base, "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                                            "total_tokens": prompt + completion}})
        send_events(self, events)


@pytest.fixture
def openai_stream() -> Iterator[str]:
    """The base URL of a loopback server streaming like OpenAI."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _OpenAIStream)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def _streaming_role(base_url: str) -> Any:
    config = Config.from_llm_config({"api_type": "openai", "base_url": base_url, "model": "aegis-scripted",
                                     "api_key": "sk-test", "stream": True, "calc_usage": False})
    return demo.DemoRole(demo.Calculate, UserRequirement, name="Calculator", profile="Calculator", goal="compute",
                         context=Context(config=config))


def _run(role: Any) -> tuple[str, tuple[int, int]]:
    """The role's answer to the demo task and what metagpt's cost manager counted."""
    answer = asyncio.run(role.run(demo.TASK)).content
    costs = role.llm.cost_manager
    return answer, (costs.total_prompt_tokens, costs.total_completion_tokens)


def _chat(exporter) -> Any:
    (chat,) = [s for s in exporter.get_finished_spans() if s.attributes.get(sc.OPERATION) == sc.OP_CHAT]
    return chat


def test_a_usage_chunk_after_the_finish_reason_is_recorded(model_server, provider, exporter, tmp_path):
    server: ModelServer = model_server(demo.policy)
    probe = aegis_probe.instrument(role := _streaming_role(server.base_url), tracer_provider=provider,
                                   store=tmp_path / "store")
    _run(role)
    assert server.requests[0]["stream"] is True
    _, usage = server.complete(server.requests[0])  # what the server reported in its last chunk
    chat = _chat(exporter)
    assert (chat.attributes[sc.USAGE_INPUT_TOKENS], chat.attributes[sc.USAGE_OUTPUT_TOKENS]) == (
        usage["prompt_tokens"], usage["completion_tokens"])
    assert probe.trajectory().steps[0].usage.input_tokens == usage["prompt_tokens"]


def test_metagpts_own_count_of_a_stream_without_usage_is_not_recorded(openai_stream, provider, exporter, tmp_path):
    plain = _run(_streaming_role(openai_stream))  # uninstrumented: what metagpt returns and counts
    probe = aegis_probe.instrument(role := _streaming_role(openai_stream), tracer_provider=provider,
                                   store=tmp_path / "store")
    assert _run(role) == plain  # the app's answer and metagpt's own cost counts are unchanged
    chat = _chat(exporter)
    assert sc.USAGE_INPUT_TOKENS not in chat.attributes and sc.USAGE_OUTPUT_TOKENS not in chat.attributes
    assert probe.trajectory().steps[0].usage.input_tokens is None
