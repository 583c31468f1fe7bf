"""Neutral requests and answers in the OpenAI chat-completions shape, for the adapters whose
framework takes that shape (ag2's model clients, CrewAI's LLMs, CAMEL's model backends)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from .messages import ChatMessage

if TYPE_CHECKING:
    from .interception import LLMResponse


def openai_tool_calls(calls: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """Neutral tool calls (``{"id", "name", "arguments"}``) as OpenAI's; a call without an id gets ``call_<i>``."""
    return [{"id": c.get("id") or f"call_{i}", "type": "function",
             "function": {"name": c.get("name"), "arguments": c.get("arguments") or "{}"}}
            for i, c in enumerate(calls)]


def openai_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """Neutral chat messages as OpenAI's (``name``, ``tool_call_id`` and ``tool_calls`` when set)."""
    out = []
    for m in messages:
        msg: dict[str, Any] = {"role": m.get("role", "user"), "content": m.get("content") or ""}
        for key in ("name", "tool_call_id"):
            if m.get(key):
                msg[key] = m[key]
        if m.get("tool_calls"):
            msg["tool_calls"] = openai_tool_calls(m["tool_calls"])
        out.append(msg)
    return out


def completion_usage(response: LLMResponse) -> dict[str, Any] | None:
    """``response``'s usage as a ``ChatCompletion``'s (cached and reasoning tokens in their details);
    None when it has no token counts."""
    i, o = response.input_tokens, response.output_tokens
    if i is None and o is None:
        return None
    usage: dict[str, Any] = {"prompt_tokens": i or 0, "completion_tokens": o or 0, "total_tokens": (i or 0) + (o or 0)}
    if response.cache_read_input_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": response.cache_read_input_tokens}
    if response.reasoning_output_tokens is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": response.reasoning_output_tokens}
    return usage
