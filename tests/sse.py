"""Test servers' shared answer: a chat completion stream as OpenAI sends it (server-sent events)."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any


def send_events(handler: BaseHTTPRequestHandler, events: list[dict[str, Any]]) -> None:
    """Answer ``handler``'s request with ``events`` as ``data:`` lines, then ``[DONE]``, and close."""
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Connection", "close")
    handler.end_headers()
    for event in events:
        handler.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
    handler.wfile.write(b"data: [DONE]\n\n")
    handler.close_connection = True
