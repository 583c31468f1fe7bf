"""The OpenAI Agents SDK's Responses-format items (the input a ``Model`` gets, the output it gives)
in neutral message form, shared by the adapter's steps and its model-call seam."""

from __future__ import annotations

from typing import Any

from aegis_probe.capture.jsontext import json_text
from aegis_probe.capture.messages import content_text


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
