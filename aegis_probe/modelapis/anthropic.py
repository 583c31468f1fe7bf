"""Anthropic's Messages API (``POST /v1/messages``, streamed and not) as the loopback model server
speaks it.

The server's policies read chat-completions bodies, so a Messages request is read as one
(:func:`chat_request`: ``system`` the system message, ``text`` blocks the content, ``tool_use``
blocks an assistant's tool calls, ``tool_result`` blocks tool messages, tools as chat tools) and the
policy's answer written back as ``content`` blocks: a ``text`` block, then a ``tool_use`` block per
tool call, ``stop_reason`` ``tool_use`` or ``end_turn``, and ``usage`` as Anthropic counts it
(``input_tokens`` without the cache reads, which are ``cache_read_input_tokens``). Streamed
(``"stream": true``): the SSE events ``message_start``, per block ``content_block_start`` /
``content_block_delta`` (``text_delta`` word by word, ``input_json_delta``) / ``content_block_stop``,
``message_delta`` (stop reason, and the usage so far, cache counts included, as the API now sends it)
and ``message_stop``.
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any

from . import Completer


def _text(content: Any) -> str:
    """The text of a Messages content: a string, or its ``text`` blocks joined."""
    if isinstance(content, list):
        return "".join(str(b.get("text") or "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return "" if content is None else str(content)


def chat_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's messages as chat-completions messages."""
    out: list[dict[str, Any]] = []
    if body.get("system"):
        out.append({"role": "system", "content": _text(body["system"])})
    for m in body.get("messages") or ():
        blocks = m.get("content") if isinstance(m.get("content"), list) else [{"type": "text", "text": m.get("content")}]
        results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
        for r in results:
            out.append({"role": "tool", "tool_call_id": r.get("tool_use_id"), "content": _text(r.get("content"))})
        calls = [{"id": b.get("id"), "type": "function",
                  "function": {"name": b.get("name"), "arguments": json.dumps(b.get("input") or {})}}
                 for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"]
        text = _text(blocks)
        if text or calls or not results:
            out.append({"role": m.get("role", "user"), "content": text, **({"tool_calls": calls} if calls else {})})
    return out


def chat_request(body: dict[str, Any]) -> dict[str, Any]:
    """A Messages request as the chat-completions body the policies read."""
    tools = [{"type": "function", "function": {"name": t.get("name"), "description": t.get("description", ""),
                                               "parameters": t.get("input_schema") or {}}}
             for t in body.get("tools") or () if isinstance(t, dict)]
    return {"model": body.get("model"), "messages": chat_messages(body), **({"tools": tools} if tools else {})}


def message_body(message_id: str, model: str, message: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
    """The Messages API response carrying a chat-completions ``message`` and ``usage``."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": message["content"]}] if message.get("content") else []
    for call in message.get("tool_calls") or ():
        blocks.append({"type": "tool_use", "id": "toolu_" + call["id"], "name": call["function"]["name"],
                       "input": json.loads(call["function"]["arguments"] or "{}")})
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return {"id": message_id, "type": "message", "role": "assistant", "model": model, "content": blocks,
            "stop_reason": "tool_use" if message.get("tool_calls") else "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": usage["prompt_tokens"] - cached, "output_tokens": usage["completion_tokens"],
                      "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0}}


def stream_events(response: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(event type, data)`` of the SSE stream that carries ``response``."""
    start = {**response, "content": [], "stop_reason": None, "usage": {**response["usage"], "output_tokens": 0}}
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": start})]
    for i, block in enumerate(response["content"]):
        if block["type"] == "text":
            events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": {"type": "text", "text": ""}}))
            words = block["text"].split(" ")
            deltas = [{"type": "text_delta", "text": w if j == 0 else " " + w} for j, w in enumerate(words)]
        else:
            events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": {**block, "input": {}}}))
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
        events += [("content_block_delta", {"type": "content_block_delta", "index": i, "delta": d}) for d in deltas]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": response["stop_reason"],
                                                                        "stop_sequence": None},
                                     "usage": dict(response["usage"])}))  # cumulative, as the API sends it
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def answer(handler: BaseHTTPRequestHandler, server: Completer, body: dict[str, Any]) -> None:
    """Answer one ``POST /v1/messages`` on ``handler``."""
    try:
        message, usage = server.complete(chat_request(body))
    except Exception as exc:  # the policy failed: answer like the API would
        data = json.dumps({"type": "error", "error": {"type": "api_error", "message": f"{type(exc).__name__}: {exc}"}})
        _send(handler, 500, "application/json", data.encode())
        return
    response = message_body(f"msg_{id(message):x}", body.get("model") or server.model, message, usage)
    if not body.get("stream"):
        _send(handler, 200, "application/json", json.dumps(response).encode())
        return
    sse = "".join(f"event: {kind}\ndata: {json.dumps(data)}\n\n" for kind, data in stream_events(response))
    _send(handler, 200, "text/event-stream", sse.encode())


def _send(handler: BaseHTTPRequestHandler, status: int, content_type: str, data: bytes) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
