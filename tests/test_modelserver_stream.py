"""The embedded model server's streamed answers, read as raw SSE: OpenAI's chunk shape (the finish
reason, then the usage alone), whatever ``stream_options`` a client sends."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from aegis_probe.modelserver import Reply


def _chunks(base_url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``data:`` events of one streamed completion, ``[DONE]`` last (as the string)."""
    request = urllib.request.Request(f"{base_url}/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        lines = response.read().decode().split("\n\n")
    data = [line.removeprefix("data: ") for line in lines if line]
    return [json.loads(d) for d in data[:-1]] + [data[-1]]


@pytest.mark.parametrize("options", [None, {"include_usage": True}, {"include_usage": False}, True, ["x"]])
def test_usage_comes_alone_after_the_finish_reason(model_server, options):
    """The last chunk with a choice carries the finish reason and no usage; then one chunk with no
    choices carries the usage, then ``[DONE]``. With ``include_usage`` asked, earlier chunks say
    ``"usage": null``, as OpenAI's do; ``stream_options`` that is no object is not asked (the server
    answered nothing, the connection dropped)."""
    server = model_server(lambda body: Reply(content="Two words."))
    body: dict[str, Any] = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "Say it."}]}
    if options is not None:
        body["stream_options"] = options
    *chunks, done = _chunks(server.base_url, body)
    assert done == "[DONE]"
    *answer, finish, usage = chunks
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in answer) == "Two words."
    assert finish["choices"] == [{"index": 0, "delta": {}, "finish_reason": "stop"}] and finish.get("usage") is None
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4}
    asked = isinstance(options, dict) and options["include_usage"]
    assert all(("usage" in c) == asked for c in [*answer, finish])
