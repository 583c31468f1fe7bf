"""The OpenAI Responses API (``POST /v1/responses``, streamed and not) as the loopback model server
speaks it, and the shape of its stream.

The server's policies read chat-completions bodies, so a Responses request is read as one
(:func:`chat_request`: ``instructions`` the system message, ``input`` items the messages, function
tools as chat tools) and the policy's answer written back as Responses ``output`` items: a
``message`` with one ``output_text`` part, then a ``function_call`` per tool call.
:func:`stream_events` is the event sequence a streamed response is sent as (text and argument
deltas, usage in the last event, ``response.completed``); adapters rebuild a replayed or injected
answer to a streamed call with it too.
"""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

from . import Completer


def _text(content: Any) -> str:
    """Text of an input item's content: a string, or its text parts joined."""
    if isinstance(content, list):
        return "".join(str(p.get("text") or p.get("refusal") or "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def chat_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A Responses request's ``instructions`` and ``input`` as chat-completions messages (a
    ``function_call`` joins the assistant message before it, as the Agents SDK's converter does)."""
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": body["instructions"]})
    items = body.get("input") or []
    for item in [{"role": "user", "content": items}] if isinstance(items, str) else items:
        kind = item.get("type", "message")
        if kind == "function_call":
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments") or "{}"}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": _text(item.get("output"))})
        elif kind == "message" and "role" in item:
            role = "system" if item["role"] == "developer" else item["role"]
            messages.append({"role": role, "content": _text(item.get("content"))})
    return messages


def chat_request(body: dict[str, Any]) -> dict[str, Any]:
    """The chat-completions body a policy reads for a Responses request."""
    tools = [{"type": "function", "function": {"name": t.get("name"), "description": t.get("description"),
                                                "parameters": t.get("parameters")}}
             for t in body.get("tools") or () if t.get("type") == "function"]
    return {"model": body.get("model"), "messages": chat_messages(body), **({"tools": tools} if tools else {}),
            "stream": bool(body.get("stream"))}


def output_items(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A chat-completions assistant ``message`` as Responses output items."""
    items: list[dict[str, Any]] = []
    calls = message.get("tool_calls") or []
    if message.get("content"):
        stem = calls[0]["id"] if calls else f"{id(message):x}"
        items.append({"id": f"msg_{stem}", "type": "message", "role": "assistant", "status": "completed",
                      "content": [{"type": "output_text", "text": message["content"], "annotations": [], "logprobs": []}]})
    for call in calls:
        items.append({"id": f"fc_{call['id']}", "type": "function_call", "status": "completed", "call_id": call["id"],
                      "name": call["function"]["name"], "arguments": call["function"]["arguments"]})
    return items


def usage_body(input_tokens: int, output_tokens: int, cached: int = 0, cache_write: int = 0,
               reasoning: int = 0) -> dict[str, Any]:
    """A Responses ``usage`` object."""
    return {"input_tokens": input_tokens, "output_tokens": output_tokens, "total_tokens": input_tokens + output_tokens,
            "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": cache_write},
            "output_tokens_details": {"reasoning_tokens": reasoning}}


def response_body(response_id: str, model: str, output: list[dict[str, Any]], usage: dict[str, Any] | None,
                  status: str = "completed") -> dict[str, Any]:
    """A Responses ``response`` object."""
    return {"id": response_id, "object": "response", "created_at": time.time(), "model": model, "status": status,
            "output": output, "usage": usage, "error": None, "incomplete_details": None, "instructions": None,
            "metadata": {}, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "temperature": None,
            "top_p": None}


def _pieces(text: str) -> list[str]:
    """``text`` in word-sized deltas (each word with the space before it), as a model streams it."""
    words = text.split(" ")
    return [w if i == 0 else " " + w for i, w in enumerate(words)] if text else []


def _message_events(index: int, item: dict[str, Any]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [{"type": "response.output_item.added", "output_index": index,
                                     "item": {**item, "status": "in_progress", "content": []}}]
    at = {"item_id": item["id"], "output_index": index}
    for c, part in enumerate(item.get("content") or ()):
        field, kind = ("refusal", "refusal") if part.get("type") == "refusal" else ("text", "output_text")
        extra: dict[str, Any] = {} if field == "refusal" else {"logprobs": []}
        events.append({"type": "response.content_part.added", **at, "content_index": c, "part": {**part, field: ""}})
        events += [{"type": f"response.{kind}.delta", **at, "content_index": c, "delta": d, **extra}
                   for d in _pieces(part.get(field) or "")]
        events.append({"type": f"response.{kind}.done", **at, "content_index": c, field: part.get(field) or "", **extra})
        events.append({"type": "response.content_part.done", **at, "content_index": c, "part": part})
    return events


def _call_events(index: int, item: dict[str, Any]) -> list[dict[str, Any]]:
    at = {"item_id": item.get("id") or item.get("call_id") or "", "output_index": index}
    arguments = item.get("arguments") or ""
    return [{"type": "response.output_item.added", "output_index": index,
             "item": {**item, "status": "in_progress", "arguments": ""}},
            *({"type": "response.function_call_arguments.delta", **at, "delta": d} for d in _pieces(arguments)),
            {"type": "response.function_call_arguments.done", **at, "arguments": arguments, "name": item.get("name")}]


def stream_events(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The events a streamed ``response`` arrives as: ``response.created``, per output item its
    ``added`` event, its text (or refusal, or function-call argument) deltas and ``done`` events,
    then ``response.completed`` with the whole response and its usage; numbered in order."""
    events: list[dict[str, Any]] = [{"type": "response.created",
                                     "response": {**response, "status": "in_progress", "output": [], "usage": None}}]
    for index, item in enumerate(response.get("output") or ()):
        if item.get("type") == "message":
            events += _message_events(index, item)
        elif item.get("type") == "function_call":
            events += _call_events(index, item)
        else:
            events.append({"type": "response.output_item.added", "output_index": index, "item": item})
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append({"type": "response.completed", "response": response})
    return [{**event, "sequence_number": n} for n, event in enumerate(events)]


def _send(handler: BaseHTTPRequestHandler, status: int, content_type: str, data: bytes) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def answer(handler: BaseHTTPRequestHandler, server: Completer, body: dict[str, Any]) -> None:
    """Answer ``handler``'s ``POST /responses`` request (``body``) with ``server``'s policy."""
    try:
        message, usage = server.complete(chat_request(body))
    except Exception as exc:  # the policy failed: answer like an API would
        _send(handler, 500, "application/json", json.dumps({"error": {"message": f"{type(exc).__name__}: {exc}",
                                                                     "type": "server_error"}}).encode())
        return
    response = response_body(f"resp_{id(message):x}", body.get("model") or server.model, output_items(message),
                             usage_body(usage["prompt_tokens"], usage["completion_tokens"]))
    if not body.get("stream"):
        _send(handler, 200, "application/json", json.dumps(response).encode())
        return
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Connection", "close")
    handler.end_headers()
    for event in stream_events(response):
        handler.wfile.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
    handler.wfile.flush()
    handler.close_connection = True
