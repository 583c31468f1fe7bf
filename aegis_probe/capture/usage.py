"""Token usage as providers report it, read into :class:`~.interception.LLMResponse`'s usage fields.

Each function returns the keyword arguments of ``LLMResponse`` for one provider's usage shape
(an object or a dict), so a codec writes ``LLMResponse(..., **openai_usage(raw.usage))``. As the
GenAI conventions ask, ``input_tokens`` counts every input token, cached ones included;
``cache_read_input_tokens``/``cache_creation_input_tokens`` and ``reasoning_output_tokens`` are
parts of the input and output counts. A count the provider did not report stays None.
"""

from __future__ import annotations

from typing import Any, TypedDict


class UsageCounts(TypedDict):
    """The usage keyword arguments of ``LLMResponse``."""

    input_tokens: int | None
    output_tokens: int | None
    cache_read_input_tokens: int | None
    cache_creation_input_tokens: int | None
    reasoning_output_tokens: int | None


def _get(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def _count(obj: Any, *path: str) -> int | None:
    """The integer at ``path`` inside ``obj`` (attributes or keys), or None."""
    for name in path:
        if obj is None:
            return None
        obj = _get(obj, name)
    return int(obj) if isinstance(obj, (int, float)) and not isinstance(obj, bool) else None


def openai_usage(usage: Any) -> UsageCounts:
    """OpenAI chat completions' ``usage`` (``prompt_tokens`` already counts the cached tokens)."""
    return {
        "input_tokens": _count(usage, "prompt_tokens"),
        "output_tokens": _count(usage, "completion_tokens"),
        "cache_read_input_tokens": _count(usage, "prompt_tokens_details", "cached_tokens"),
        "cache_creation_input_tokens": None,
        "reasoning_output_tokens": _count(usage, "completion_tokens_details", "reasoning_tokens"),
    }


def openai_responses_usage(usage: Any) -> UsageCounts:
    """OpenAI Responses API's ``usage`` (``input_tokens`` with ``input_tokens_details.cached_tokens``)."""
    return {
        "input_tokens": _count(usage, "input_tokens"),
        "output_tokens": _count(usage, "output_tokens"),
        "cache_read_input_tokens": _count(usage, "input_tokens_details", "cached_tokens"),
        "cache_creation_input_tokens": None,
        "reasoning_output_tokens": _count(usage, "output_tokens_details", "reasoning_tokens"),
    }


def anthropic_usage(usage: Any) -> UsageCounts:
    """Anthropic's ``usage``, whose ``input_tokens`` leaves out the cache reads and writes (added here)."""
    plain = _count(usage, "input_tokens")
    read = _count(usage, "cache_read_input_tokens")
    created = _count(usage, "cache_creation_input_tokens")
    total = None if plain is None and read is None and created is None else (plain or 0) + (read or 0) + (created or 0)
    return {
        "input_tokens": total,
        "output_tokens": _count(usage, "output_tokens"),
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": created,
        "reasoning_output_tokens": None,
    }


def langchain_usage(usage: Any) -> UsageCounts:
    """LangChain's ``usage_metadata`` (``input_tokens`` counts cached tokens; details by kind)."""
    return {
        "input_tokens": _count(usage, "input_tokens"),
        "output_tokens": _count(usage, "output_tokens"),
        "cache_read_input_tokens": _count(usage, "input_token_details", "cache_read"),
        "cache_creation_input_tokens": _count(usage, "input_token_details", "cache_creation"),
        "reasoning_output_tokens": _count(usage, "output_token_details", "reasoning"),
    }


def provider_usage(usage: Any) -> UsageCounts:
    """Usage in whichever shape ``usage`` has (OpenAI chat completions', OpenAI Responses' or
    Anthropic's), for a framework passing a provider's usage on as it came (e.g. MetaGPT)."""
    if _get(usage, "prompt_tokens") is not None or _get(usage, "input_tokens") is None:
        return openai_usage(usage)
    if _get(usage, "input_tokens_details") is not None or _get(usage, "output_tokens_details") is not None:
        return openai_responses_usage(usage)
    return anthropic_usage(usage)
