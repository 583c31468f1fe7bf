"""The OpenAI Agents SDK's Responses-format items (the input a ``Model`` gets, the output it gives)
in neutral message form, shared by the adapter's steps and its model-call seam."""

from __future__ import annotations

from typing import Any, Sequence

from aegis_probe.capture.jsontext import json_text
from aegis_probe.capture.messages import SharedMessage, content_text
from aegis_probe.capture.spans import RunScope


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


def input_messages(items: Sequence[Any], run: RunScope | None) -> list[dict[str, Any]]:
    """Neutral messages of a model call's input items. The SDK sends the conversation so far again on
    every call, as new dicts: inside a run, the items equal to the start of the run's last call's
    keep that call's messages, and a new item is the run's :class:`SharedMessage` of its content
    (the one its run item gave the step that made it: see :func:`run_item_messages`), so a call
    converts its new items only and encodes none the run has encoded (messages.encode_messages)."""
    if run is None:
        return [m for m in map(item_message, items) if m is not None]
    caches = run.caches
    last_items, last = caches.get("openai-agents.input") or ((), [])
    most = min(len(items), len(last_items))
    done = most if list(items[:most]) == last_items[:most] else 0  # the usual case in one comparison
    while done < most and items[done] == last_items[done]:
        done += 1
    messages = _messages(caches)
    converted: list[dict[str, Any] | None] = last[:done]  # a new list
    for item in items[done:]:
        converted.append(_interned(messages, item_message(item)))
    caches["openai-agents.input"] = (list(items), converted)
    return [m for m in converted if m is not None]


#: The most run items, and distinct messages, a run remembers converted (then it starts again).
_ITEMS_MAX = 4096
#: Run items an agent's own model produced (what it has seen); its tools' outputs are new to its next turn.
OWN_ITEMS = frozenset({"message_output_item", "tool_call_item", "handoff_call_item", "reasoning_item",
                       "tool_search_call_item"})
#: A run item as converted once per run: (the item, its message or None, the agent whose model produced it or None).
_Entry = tuple[Any, "dict[str, Any] | None", "str | None"]


def _messages(caches: dict[str, Any]) -> dict[tuple[Any, ...], SharedMessage]:
    """The run's shared messages by content."""
    messages = caches.get("openai-agents.messages")
    if messages is None or len(messages) > _ITEMS_MAX:
        messages = caches["openai-agents.messages"] = {}
    return messages  # type: ignore[no-any-return]


def _entries(caches: dict[str, Any] | None) -> dict[int, _Entry] | None:
    """The run's converted run items by ``id``, or None outside a run."""
    if caches is None:
        return None
    seen = caches.get("openai-agents.items")
    if seen is None or len(seen) > _ITEMS_MAX:
        seen = caches["openai-agents.items"] = {}
    return seen  # type: ignore[no-any-return]


def _entry(item: Any, seen: dict[int, _Entry] | None, messages: dict[tuple[Any, ...], SharedMessage] | None) -> _Entry:
    """``item`` (a ``RunItem``, or an input item dict) converted: inside a run once per ``RunItem``
    (its ``to_input_item`` dumps a pydantic model, and each attribute read of it is a Python call)."""
    hit = None if seen is None else seen.get(id(item))
    if hit is not None and hit[0] is item:
        return hit
    kind = getattr(item, "type", None)
    if not hasattr(item, "to_input_item"):  # an input item dict: not remembered by id (the app may change it)
        message = item_message(item)
        return item, message if messages is None else _interned(messages, message), None
    if kind == "tool_approval_item":  # a tool call awaiting approval: no message
        message = None
    else:
        message = item_message(item.to_input_item())
        message = message if messages is None else _interned(messages, message)
    owner = getattr(item.agent, "name", None) if kind in OWN_ITEMS else None
    entry = (item, message, owner)
    if seen is not None:
        seen[id(item)] = entry
    return entry


def run_item_messages(items: Sequence[Any], run: RunScope | None) -> list[dict[str, Any]]:
    """Neutral messages of run items (``RunItem``s, or input item dicts); inside ``run`` each ``RunItem``
    is converted once, and a message is the run's :class:`SharedMessage` of its content."""
    caches = None if run is None else run.caches
    seen, messages = _entries(caches), None if caches is None else _messages(caches)
    out = []
    for item in items:
        message = _entry(item, seen, messages)[1]
        if message is not None:
            out.append(message)
    return out


def unseen_messages(original_input: Any, generated_items: Sequence[Any], agent: str, run: RunScope | None) -> list[dict[str, Any]]:
    """Neutral messages of what a turn of ``agent`` in ``run`` gets that it has not seen: the run's items
    after the last one its model produced, else (its first turn in the run) the run's input and every item so far."""
    caches = None if run is None else run.caches
    seen, messages = _entries(caches), None if caches is None else _messages(caches)
    items = generated_items if isinstance(generated_items, list) else list(generated_items)
    unseen = []
    for i in range(len(items) - 1, -1, -1):  # back to the last item of its own (each converted once per run)
        entry = _entry(items[i], seen, messages)
        if entry[2] == agent:
            break
        unseen.append(entry[1])
    else:
        from agents.items import ItemHelpers

        unseen.extend(_entry(item, None, messages)[1] for item in reversed(ItemHelpers.input_to_new_input_list(original_input)))
    unseen.reverse()
    return [m for m in unseen if m is not None]


def _interned(messages: dict[tuple[Any, ...], SharedMessage], message: dict[str, Any] | None) -> dict[str, Any] | None:
    """The run's :class:`SharedMessage` of ``message``'s content (its JSON kept on it), made on first
    sight, when its fields are strings (its one tool call's too); else ``message`` as it is."""
    if message is None:
        return None
    for name, value in message.items():
        if type(value) is not str and name != "tool_calls":
            return message
    calls: list[dict[str, Any]] = message.get("tool_calls") or []
    call = calls[0] if calls else None
    if call is not None:
        if len(calls) > 1:  # (item_message makes one per function call)
            return message
        for value in call.values():
            if type(value) is not str:
                return message
    key = (message["role"], message["content"], message.get("tool_call_id"),
           None if call is None else (call["id"], call["name"], call["arguments"]))
    shared = messages.get(key)
    if shared is None:
        shared = messages[key] = SharedMessage(message)
    return shared
