"""An embedded OpenAI-compatible chat-completions server on 127.0.0.1.

The *model* behind it is a plain Python callable (a :data:`Policy`): it gets the request body and
returns a :class:`Reply` (text, or tool calls). The demo and the tests use deterministic scripted
policies, so runs need no API key and no network; every framework talks to it through its real
OpenAI client. Supports ``stream=true`` (SSE, as OpenAI streams with ``stream_options.include_usage``:
the finish reason in the last chunk with a choice, then the usage in a chunk of its own with no
choices, sent also when not asked for, so every client counts tokens) and ``GET /v1/models``.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

#: Seconds between the server loop's checks for ``stop()`` (the standard library's 0.5 made every
#: stop, a demo's end, wait up to half a second).
STOP_POLL_S = 0.05


@dataclass
class Reply:
    """What the model answers: text content and/or tool calls ``[(name, arguments_dict)]``."""

    content: str | None = None
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    #: Usage details to report: ``prompt_tokens_details.cached_tokens`` and
    #: ``completion_tokens_details.reasoning_tokens`` (left out when None, as older models do).
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None


Policy = Callable[[dict[str, Any]], Reply]


def count_tokens(text: str) -> int:
    """A deterministic stand-in token count: whitespace-separated words."""
    return len(text.split())


def prompt_text(body: dict[str, Any]) -> str:
    """All message text of a request, for token counting."""
    chunks = []
    for m in body.get("messages", []):
        content = m.get("content")
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        chunks.append(str(content or ""))
    return "\n".join(chunks)


class ModelServer:
    """Serve ``policy`` at ``http://127.0.0.1:<port>/v1``; use as a context manager.

    ``latency``: seconds each completion waits before answering, as a remote model would (requests
    wait concurrently, each in its own thread)."""

    def __init__(self, policy: Policy, *, host: str = "127.0.0.1", port: int = 0, model: str = "aegis-scripted",
                 latency: float = 0.0) -> None:
        self.policy, self.model, self.latency = policy, model, latency
        self.requests: list[dict[str, Any]] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self._server.daemon_threads = True

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start(self) -> "ModelServer":
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": STOP_POLL_S},
                         name="aegis-model-server", daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> "ModelServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def complete(self, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """Run the policy on a request; return the assistant message and usage."""
        with self._lock:
            self.requests.append(body)
            n = next(self._ids)
        reply = self.policy(body)
        if self.latency:
            time.sleep(self.latency)
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": f"call_{n}_{i}", "type": "function",
                 "function": {"name": name, "arguments": json.dumps(args)}}
                for i, (name, args) in enumerate(reply.tool_calls)
            ]
        out_text = (reply.content or "") + "".join(json.dumps(a) for _, a in reply.tool_calls)
        prompt_tokens, completion_tokens = count_tokens(prompt_text(body)), max(1, count_tokens(out_text))
        usage: dict[str, Any] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                 "total_tokens": prompt_tokens + completion_tokens}
        if reply.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": min(reply.cached_tokens, prompt_tokens)}
        if reply.reasoning_tokens is not None:
            usage["completion_tokens_details"] = {"reasoning_tokens": min(reply.reasoning_tokens, completion_tokens)}
        return message, usage

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body are two writes: without TCP_NODELAY each reply waits for the
            # client's delayed ACK (~40 ms), which made a 300-call run take 15 s instead of 1.6 s.
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:  # keep test output clean
                return None

            def _json(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._json(200, {"object": "list", "data": [{"id": server.model, "object": "model", "owned_by": "aegis"}]})
                else:
                    self._json(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                if self.path.rstrip("/").endswith("/responses"):  # the OpenAI Responses API
                    from aegis_probe.modelapis import responses

                    responses.answer(self, server, json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}"))
                    return
                if self.path.rstrip("/").endswith("/messages"):  # Anthropic's Messages API
                    from aegis_probe.modelapis import anthropic

                    anthropic.answer(self, server, json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}"))
                    return
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self.rfile.read(int(self.headers.get("Content-Length", 0)))  # read: a kept-alive connection stays in step
                    self._json(404, {"error": {"message": f"no route {self.path}"}})
                    return
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                    message, usage = server.complete(body)
                except Exception as exc:  # the policy failed: answer like an API would
                    self._json(500, {"error": {"message": f"{type(exc).__name__}: {exc}", "type": "server_error"}})
                    return
                base = {"id": f"chatcmpl-{id(message):x}", "created": int(time.time()),
                        "model": body.get("model") or server.model}
                finish = "tool_calls" if message.get("tool_calls") else "stop"
                if not body.get("stream"):
                    self._json(200, {**base, "object": "chat.completion", "usage": usage,
                                     "choices": [{"index": 0, "message": message, "finish_reason": finish}]})
                    return
                options = body.get("stream_options")
                self._stream(base, message, usage, finish, isinstance(options, dict) and bool(options.get("include_usage")))

            def _stream(self, base: dict[str, Any], message: dict[str, Any], usage: dict[str, Any], finish: str,
                        usage_asked: bool) -> None:
                """SSE chunks: the deltas, the finish reason, then the usage alone (``choices`` empty; with
                ``usage_asked`` every earlier chunk says ``"usage": null``, as OpenAI's do)."""
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                chunk: dict[str, Any] = {**base, "object": "chat.completion.chunk", **({"usage": None} if usage_asked else {})}
                deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
                if message.get("content"):
                    words = message["content"].split(" ")
                    deltas += [{"content": w if i == 0 else " " + w} for i, w in enumerate(words)]
                for i, call in enumerate(message.get("tool_calls", [])):
                    deltas.append({"tool_calls": [{"index": i, **call}]})
                events = [{**chunk, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
                events.append({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
                events.append({**chunk, "choices": [], "usage": usage})
                for event in events:
                    self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

        return Handler
