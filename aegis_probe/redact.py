"""Secret redaction applied to every captured string, whatever the content-capture setting."""

from __future__ import annotations

import functools
import re
from typing import Callable

REDACTED = "[REDACTED]"

_PATTERNS = [
    # OpenAI / Anthropic style keys: sk-..., sk-proj-..., sk-ant-...
    re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"),
    # Bearer / Basic tokens in header-like text.
    re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=\-]{8,}"),
    # key=value and "key": "value" forms for api keys, tokens, secrets, passwords, auth headers.
    re.compile(
        r"(?i)([\"']?(?:api[_-]?key|x-api-key|access[_-]?token|auth[_-]?token|secret|password|"
        r"authorization)[\"']?\s*[:=]\s*[\"']?)(?!(?i:bearer|basic)\s|\[REDACTED)([^\s\"',}]{6,})"
    ),
    # Common cloud keys: AWS access key ids, Google API keys, GitHub tokens.
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"),
]


# Text without any of these substrings cannot match a pattern above: one scan instead of six.
# ASCII text is scanned lower-cased, without IGNORECASE (about ten times faster); other text
# keeps the case-insensitive scan, whose Unicode case folding ``str.lower`` does not match.
_CANDIDATE = re.compile(r"(?i)sk-|bearer|basic|api|key|token|secret|password|authorization|AKIA|AIza|gh[pousr]_")
_CANDIDATE_LOWER = re.compile(r"sk-|bearer|basic|api|key|token|secret|password|authorization|akia|aiza|gh[pousr]_")
_CACHED_MAX_LEN = 8192


def redact_secrets(text: str) -> str:
    """Replace API keys, bearer tokens and ``key=value`` secrets in ``text`` with ``[REDACTED]``."""
    if text.isascii():
        if _CANDIDATE_LOWER.search(text.lower()) is None:
            return text
    elif _CANDIDATE.search(text) is None:
        return text
    if len(text) <= _CACHED_MAX_LEN:
        return _redact_cached(text)  # prompts repeat earlier messages: redact each text once
    return _redact(text)


def _redact(text: str) -> str:
    for pattern in _PATTERNS:
        if pattern.groups >= 2:
            text = pattern.sub(lambda m: m.group(1) + REDACTED, text)
        elif pattern.groups == 1:
            text = pattern.sub(lambda m: m.group(1) + " " + REDACTED, text)
        else:
            text = pattern.sub(REDACTED, text)
    return text


_redact_cached = functools.lru_cache(maxsize=2048)(_redact)


def make_redactor(extra: Callable[[str], str] | None) -> Callable[[str], str]:
    """The built-in redaction followed by the user's callback, if any."""
    if extra is None:
        return redact_secrets
    return lambda text: extra(redact_secrets(text))
