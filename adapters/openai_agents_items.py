"""The OpenAI Agents SDK's Responses-format items (the input a ``Model`` gets, the output it gives)
in neutral message form, shared by the adapter's steps and its model-call seam."""

from __future__ import annotations

from typing import Any, Sequence

from aegis_probe.capture.jsontext import json_text
from aegis_probe.capture.messages import SharedMessage, content_text
from aegis_probe.capture.spans import current_run


#: Responses-format content parts that carry text, and the field that holds it.
_TEXT_PARTS = {"input_text": "text", "output_text": "text", "text": "text", "refusal": "refusal"}


def _text(content: Any) -> str:
    """Text of a Responses-format content: a string, or a list of parts read by the rule every adapter
    shares (:func:`~aegis_probe.capture.messages.content_text`: one part per line, a part without text, an
    image or a file, as ``[its type]``); text parts (``input_text``, ``output_text``) and a refusal
    by their text."""
    if not isinstance(content, list):
        return "" if content is None else str(content)
    parts: list[Any] = []
    for part in content:
        if isinstance(part, str):
            parts.append(part)
            continue
        kind = _field(part, "type")
        field = _TEXT_PARTS.get(kind) if isinstance(kind, str) else None
        parts.append({"type": "text", "text": str(_field(part, field) or "")} if field else {"type": kind or type(part).__name__})
    return content_text(parts)


def _field(part: Any, name: str) -> Any:
    """A field of a content part, a dict or the SDK's pydantic object."""
    return part.get(name) if isinstance(part, dict) else getattr(part, name, None)


#: The types of the content parts a tool may return (``ToolOutputText``, ``ToolOutputImage``,
#: ``ToolOutputFileContent``) and of the input items the SDK makes of them.
_PART_TYPES = frozenset({"text", "image", "file", "input_text", "input_image", "input_file"})


def _parts(output: Any) -> bool:
    """Whether a tool's output is a list of content parts, not other data that is a list."""
    if not isinstance(output, (list, tuple)) or not output:
        return False
    kinds = [_field(p, "type") for p in output]
    return all(isinstance(k, str) and k in _PART_TYPES for k in kinds)


def _output_text(output: Any) -> str:
    """Text of a tool's output: a string as it is, content parts by :func:`_text`, other data as JSON."""
    if isinstance(output, str):
        return output
    if _parts(output):
        return _text(list(output))
    return json_text(output)


def item_message(item: Any) -> dict[str, Any] | None:
    """A neutral message of one Responses-format input item (a dict), or None for other kinds."""
    if not isinstance(item, dict):
        return None
    kind = item.get("type")
    if kind == "function_call":
        return {"role": "assistant", "content": "", "tool_calls": [
            {"id": item.get("call_id"), "name": item.get("name"), "arguments": item.get("arguments")}]}
    if kind == "function_call_output":
        return {"role": "tool", "content": _output_text(item.get("output")), "tool_call_id": item.get("call_id")}
    if "role" in item:
        role = "system" if item["role"] == "developer" else item["role"]
        return {"role": role, "content": _text(item.get("content"))}
    return None


def input_messages(items: Sequence[Any]) -> list[dict[str, Any]]:
    """Neutral messages of a model call's input items. The SDK sends the conversation so far again on
    every call, as new dicts: inside a run, the items equal to the start of the run's last call's
    keep that call's :class:`SharedMessage`s, so a call converts its new items only and its
    prompt's JSON extends the last one's (messages.encode_messages)."""
    run = current_run()
    if run is None:
        return [m for m in map(item_message, items) if m is not None]
    last_items, last = run.caches.get("openai-agents.input") or ((), ())
    most = min(len(items), len(last_items))
    done = most if list(items[:most]) == last_items[:most] else 0  # the usual case in one comparison
    while done < most and items[done] == last_items[done]:
        done += 1
    converted = [*last[:done], *(_shared(item_message(i)) for i in items[done:])]
    run.caches["openai-agents.input"] = (list(items), converted)
    return [m for m in converted if m is not None]


#: The most run items a run remembers converted (then it starts again).
_ITEMS_MAX = 4096


def run_item_messages(items: Sequence[Any]) -> list[dict[str, Any]]:
    """Neutral messages of run items (``RunItem``s, or input item dicts); inside a run each ``RunItem``
    is converted once (its ``to_input_item`` dumps a pydantic model), as a :class:`SharedMessage`."""
    run = current_run()
    seen = None if run is None else run.caches.get("openai-agents.items")
    if seen is None and run is not None:
        seen = run.caches["openai-agents.items"] = {}
    if seen is not None and len(seen) > _ITEMS_MAX:
        seen.clear()
    out = []
    for item in items:
        if getattr(item, "type", None) == "tool_approval_item":  # a tool call awaiting approval: no message
            continue
        if not hasattr(item, "to_input_item"):
            message = item_message(item)
        elif seen is None:
            message = item_message(item.to_input_item())
        else:
            hit = seen.get(id(item))
            if hit is None or hit[0] is not item:
                hit = seen[id(item)] = (item, _shared(item_message(item.to_input_item())))
            message = hit[1]
        if message is not None:
            out.append(message)
    return out


def _shared(message: dict[str, Any] | None) -> dict[str, Any] | None:
    """``message`` as a :class:`SharedMessage` (its JSON kept on it) when its fields are strings, its
    tool calls' too."""
    if message is None or not all(type(v) is str for k, v in message.items() if k != "tool_calls"):
        return message
    calls = message.get("tool_calls") or ()
    if not all(type(v) is str for call in calls for v in call.values()):
        return message
    return SharedMessage(message)
