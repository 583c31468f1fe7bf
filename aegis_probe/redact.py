"""Secret redaction applied to every string the probe writes, whatever the content-capture setting.

Detected forms: provider keys and tokens by their shape (OpenAI, Anthropic, DeepSeek, OpenRouter
``sk-``; Groq, xAI, Perplexity, Replicate, Together, Fireworks, NVIDIA, Hugging Face, LangSmith;
AWS key ids, the secret key beside one and session tokens; Google API keys, OAuth tokens and
client secrets; Azure's identifiable keys (Azure OpenAI, storage, Cosmos DB, ...) and Entra ID
client secrets; GitHub, GitLab, Slack, Stripe, npm; JWTs, PEM private keys), bearer/basic credentials, ``name = value`` / ``"name": "value"`` pairs whose name says
secret (also with the escaped quotes of JSON inside a JSON string), secret URL query parameters
and the password of ``user:pass@host`` URLs; and, whatever their shape, the values of the
process's environment variables whose names say secret (``ACME_API_KEY``, ``DB_PASSWORD``: see
:func:`remember_environment_secrets`). Each form is searched only when one of its literal trigger
substrings occurs (substring scans in C), and results are cached, since prompts repeat earlier
messages.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

REDACTED = "[REDACTED]"


@dataclass(frozen=True)
class _Detector:
    """One secret form: a pattern whose ``secret`` group is replaced, run only when a trigger occurs
    (:func:`_redact` checks the triggers of all forms at once).

    ``lower`` detectors are case-insensitive: their lower-case pattern runs on the lower-cased
    text (same offsets for ASCII). Each pattern starts with a literal, so a search is a fast scan.
    """

    triggers: tuple[str, ...]
    pattern: re.Pattern[str]
    lower: bool = False
    check: Callable[[str], bool] | None = None  # on the secret as written, e.g. "looks base64"

    def spans(self, text: str, low: str | None) -> list[tuple[int, int]]:
        """``(start, end)`` of each secret in ``text``; ``low`` is ``text.lower()`` (None: not offset-true)."""
        haystack: str = text
        pattern = self.pattern
        if self.lower and low is None:
            pattern = _insensitive(pattern)
        elif self.lower:
            haystack = low  # type: ignore[assignment]
        check = self.check
        return [m.span("secret") for m in pattern.finditer(haystack)
                if check is None or check(text[m.start("secret"):m.end("secret")])]


@functools.cache
def _insensitive(pattern: re.Pattern[str]) -> re.Pattern[str]:
    return re.compile(pattern.pattern, pattern.flags | re.IGNORECASE)


# The value of ``name: value``/``"name": "value"``/``name=value`` (also ``\\"name\\": \\"value\\"``
# of JSON inside a JSON string): a quoted value runs to its closing quote at the same escaping level.
_VALUE = (
    r"(?![\w-])(?:\\*[\"'])?\s*[:=]\s*(?P<vq>\\*[\"'])?(?!bearer\s|basic\s|\[redacted)"
    r"(?P<secret>(?(vq)(?:(?!(?P=vq)).){3,}?(?=(?P=vq)|\Z)|[^\s\"'\\,;&}\]]{4,}))"
)


def _pair(trigger: str, name: str) -> _Detector:
    """``name`` (a lower-case regex) is the end of a key whose value is a secret."""
    return _Detector((trigger,), re.compile(name + _VALUE, re.DOTALL), lower=True)


def _shape(triggers: str, regex: str) -> _Detector:
    """A token recognised by its shape, case-sensitively (``|``-separated literal triggers)."""
    return _Detector(tuple(triggers.split("|")), re.compile(f"(?P<secret>{regex})", re.DOTALL))


def _base64ish(token: str) -> bool:
    """A Basic credential (base64 of ``user:pass``): a digit, ``+/=`` or an inner capital, not a word."""
    return any(c.isdigit() or c in "+/=" for c in token) or any(c.isupper() for c in token[1:])


def _mixed(token: str) -> bool:
    """A generated key, not an identifier: letters and digits both after its prefix."""
    body = token[3:]
    return any(c.isdigit() for c in body) and any(c.isalpha() for c in body)


_DETECTORS: tuple[_Detector, ...] = (
    # Key/value pairs whose key ends with a secret's name (``aws_secret_access_key``, ``GITHUB_TOKEN``,
    # ``db.password``, ``"token"``), not ``max_tokens``.
    _pair("key", r"(?:api[_-]?|access[_-]?|secret[_-]?|private[_-]?|subscription[_-]?|account[_-]?)key"),
    _Detector(("key1", "key2"), re.compile(r"key[12](?<![a-z0-9_.-]key[12])" + _VALUE, re.DOTALL), lower=True),  # Azure
    # Azure's "primaryKey"/"secondaryMasterKey" (not ``primary_key=True``): a long value only.
    _Detector(("primarykey", "secondarykey", "masterkey"), re.compile(
        r"(?:primary|secondary)(?:readonly)?(?:master)?key\W{1,12}(?P<secret>[a-z0-9+/=_-]{20,})"), lower=True),
    _pair("secret", r"secret"),
    _pair("token", r"token"),
    _pair("passw", r"passw(?:or)?d"),
    _pair("pwd", r"pwd"),
    _pair("credential", r"credentials?"),
    _pair("auth", r"auth(?:orization)?"),
    # Secret URL query parameters (``?key=``, ``&sig=``) and the password of ``user:pass@host``.
    _Detector(("=",), re.compile(
        r"[?&;](?:key|api[_-]?key|apikey|token|access[_-]?token|auth|sig|signature|secret|password|code|"
        r"x-amz-signature|x-amz-credential)=(?P<secret>[^&#\s\"'\\]+)"), lower=True),
    _Detector(("://",), re.compile(r"://[^\s/:@\"'\\]*:(?P<secret>[^\s/@\"'\\]+)@"), lower=True),
    # Authorization header values.
    _Detector(("bearer",), re.compile(r"bearer\s+(?P<secret>[a-z0-9._~+/=-]{8,})"), lower=True),
    _Detector(("basic",), re.compile(r"basic\s+(?P<secret>[a-z0-9+/]{8,}={0,2})"), lower=True, check=_base64ish),
    # Tokens recognised by their shape.
    _shape("-----BEGIN", r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----.*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|\Z)"),
    # OpenAI (sk-, sk-proj-, sk-svcacct-, sk-admin-), Anthropic (sk-ant-), DeepSeek, OpenRouter (sk-or-), Langfuse (sk-lf-)
    _shape("sk-", r"sk-[A-Za-z0-9_-]{16,}"),
    _shape("k_live_|k_test_", r"[sr]k_(?:live|test)_[A-Za-z0-9]{16,}"),  # Stripe secret and restricted keys
    _shape("github_pat_", r"github_pat_[A-Za-z0-9_]{22,}"),  # GitHub fine-grained tokens
    _shape("ghp_|gho_|ghu_|ghs_|ghr_", r"gh[pousr]_[A-Za-z0-9]{30,}"),  # GitHub classic tokens
    _shape("glpat-", r"glpat-[A-Za-z0-9_-]{20,}"),  # GitLab
    _shape("xox", r"xox[abposr]-[A-Za-z0-9-]{10,}"),  # Slack
    _shape("hf_", r"hf_[A-Za-z0-9]{30,}"),  # Hugging Face
    _shape("npm_", r"npm_[A-Za-z0-9]{36}"),  # npm
    _shape("gsk_", r"gsk_[A-Za-z0-9]{40,}"),  # Groq
    _shape("xai-", r"xai-[A-Za-z0-9]{40,}"),  # xAI
    _shape("pplx-", r"pplx-[A-Za-z0-9]{40,}"),  # Perplexity
    _shape("r8_", r"r8_[A-Za-z0-9]{30,}"),  # Replicate
    _shape("tgp_v1_", r"tgp_v1_[A-Za-z0-9_-]{30,}"),  # Together
    _shape("nvapi-", r"nvapi-[A-Za-z0-9_-]{30,}"),  # NVIDIA
    _shape("lsv2_|ls__", r"(?:lsv2_[a-z]{2}_|ls__)[A-Za-z0-9_]{24,}"),  # LangSmith
    _Detector(("fw_",), re.compile(r"(?P<secret>fw_[A-Za-z0-9]{20,})"), check=_mixed),  # Fireworks, not fw_identifiers
    _shape("AKIA|ASIA", r"(?:AKIA|ASIA)[0-9A-Z]{16}"),  # AWS access key ids
    # An AWS secret access key right after its key id (a credentials CSV, "id:secret", "id secret").
    _Detector(("AKIA", "ASIA"), re.compile(
        r"(?:AKIA|ASIA)[0-9A-Z]{16}[\s\"',:;=|]{1,8}(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])")),
    _shape("FwoGZXIvYXdz|IQoJb3JpZ2luX2Vj", r"(?:FwoGZXIvYXdz|IQoJb3JpZ2luX2Vj)[A-Za-z0-9/+=]{40,}"),  # AWS session tokens
    _shape("AIza", r"AIza[0-9A-Za-z_-]{35}"),  # Google API keys
    _shape("ya29.", r"ya29\.[0-9A-Za-z_-]{20,}"),  # Google OAuth access tokens
    _shape("1//0", r"1//0[0-9A-Za-z_-]{30,}"),  # Google OAuth refresh tokens
    _shape("GOCSPX-", r"GOCSPX-[0-9A-Za-z_-]{20,}"),  # Google OAuth client secrets
    # Azure's identifiable keys: AI services / Azure OpenAI (84 characters, JQQJ99 at 52), storage, Cosmos DB,
    # Event Hubs, Service Bus, Relay, Container Registry, API Management, Functions, AI Search; Entra ID client secrets.
    # (A key at a line's start in JSON-escaped text follows ``\\n``.)
    _shape("JQQJ99", r"(?:(?<![A-Za-z0-9])|(?<=\\[nrt]))[A-Za-z0-9]{52}JQQJ99[A-Za-z0-9]{26}(?![A-Za-z0-9])"),
    _shape("+ASt|ACDb|+AEh|+ASb|+ARm|+ACR|APIM", r"(?:(?<![A-Za-z0-9+/])|(?<=\\[nrt]))[A-Za-z0-9+/]{76}(?:\+ASt|ACDb|\+AEh|\+ASb|\+ARm|"
           r"\+ACR|APIM)[A-Za-z0-9+/]{5}[AQgw]=="),
    _shape("AzFu", r"(?:(?<![A-Za-z0-9_-])|(?<=\\[nrt]))[A-Za-z0-9_-]{44}AzFu[A-Za-z0-9_-]{5}[AQgw]=="),
    _shape("AzSe", r"(?:(?<![A-Za-z0-9])|(?<=\\[nrt]))[A-Za-z0-9]{42}AzSe[A-D][A-Za-z0-9]{5}(?![A-Za-z0-9])"),
    _shape("Q~", r"(?:(?<![A-Za-z0-9_~.-])|(?<=\\[nrt]))[A-Za-z0-9_~.-]{3}[0-9]Q~[A-Za-z0-9_~.-]{31,34}(?![A-Za-z0-9_~.-])"),
    _shape("eyJ", r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"),  # JWTs
)
_CACHED_MAX_LEN = 8192


#: Case-sensitive triggers, in groups scanned only when the group's gate is in the text: one scan
#: for those holding ``_`` or ``-``, one regex search for those that start with no lower-case
#: letter (the regex skips ahead to such a character in C), and the rest each on its own.
_Group = tuple["Callable[[str], object] | None", tuple[tuple[str, int], ...]]


def _groups(cased: tuple[tuple[str, int], ...]) -> tuple[_Group, ...]:
    by_char = {c: tuple((t, i) for t, i in cased if c in t and (c == "_" or "_" not in t)) for c in "_-"}
    rest = [(t, i) for t, i in cased if "_" not in t and "-" not in t]
    rare = tuple((t, i) for t, i in rest if not ("a" <= t[0] <= "z"))
    groups: list[_Group] = [(functools.partial(_has, c), members) for c, members in by_char.items() if members]
    if rare:
        groups.append((re.compile("|".join(sorted({re.escape(t) for t, _ in rare}))).search, rare))
    return (*groups, *((None, ((t, i),)) for t, i in rest if "a" <= t[0] <= "z"))


def _has(char: str, text: str) -> bool:
    return char in text


@dataclass(frozen=True)
class _Tables:
    """The detectors and their triggers, replaced whole (readers in other threads keep a consistent
    set): (trigger, index of its form) for the case-sensitive forms, looked for in the text (in
    gated groups: :func:`_groups`), and for the others, looked for in its lower-case form. A
    substring scan is C-speed; one regex alternation of all triggers tries each of them at every
    position (~15x slower on a 250-character text)."""

    detectors: tuple[_Detector, ...]
    cased: tuple[_Group, ...]
    uncased: tuple[tuple[str, int], ...]
    all_uncased: frozenset[int]
    trigger_max: int

    @classmethod
    def of(cls, detectors: tuple[_Detector, ...]) -> "_Tables":
        cased = tuple((t, i) for i, d in enumerate(detectors) if not d.lower for t in d.triggers)
        uncased = tuple((t, i) for i, d in enumerate(detectors) if d.lower for t in d.triggers)
        return cls(detectors, _groups(cased), uncased, frozenset(i for i, d in enumerate(detectors) if d.lower),
                   max(len(t) for t, _ in cased + uncased))

    def cased_found(self, text: str) -> list[int]:
        """Indexes of the case-sensitive forms whose trigger occurs in ``text``."""
        return [i for gate, members in self.cased if gate is None or gate(text) for t, i in members if t in text]


_TABLES = _Tables.of(_DETECTORS)

#: Parts of an environment variable's name (split at ``_``, ``-``, ``.``) that say its value is a
#: secret, and the part endings that do (``APIKEY``, ``ACCESSTOKEN``).
_SECRET_PARTS = frozenset({"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PWD", "PASS", "PASSPHRASE",
                           "CREDENTIAL", "CREDENTIALS", "AUTH", "PAT", "SAS", "SIGNATURE"})
_SECRET_ENDINGS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
_NOT_SECRET_NAMES = frozenset({"PWD", "OLDPWD"})  # the shell's working directories
_KNOWN_MIN_LEN = 8


def _secret_name(name: str) -> bool:
    parts = re.split(r"[_.-]", name.upper())
    return name.upper() not in _NOT_SECRET_NAMES and any(
        p in _SECRET_PARTS or (len(p) > 6 and p.endswith(_SECRET_ENDINGS)) for p in parts)


def _secret_value(value: str) -> bool:
    """Whether ``value`` can be a secret worth looking for in text: 8+ characters, no space, not a
    number, path or URL, not a short lower-case word (``disabled``)."""
    return (len(value) >= _KNOWN_MIN_LEN and not any(c.isspace() for c in value) and not value.isdigit()
            and not value.startswith(("/", "~", ".")) and "://" not in value
            and not (len(value) < 12 and value.isalpha() and value.islower()))


def environment_secrets(environ: Mapping[str, str]) -> frozenset[str]:
    """The values of ``environ``'s variables whose names say secret (see :data:`_SECRET_PARTS`)."""
    return frozenset(v for k, v in environ.items() if _secret_name(k) and _secret_value(v))


def _known_detector(values: frozenset[str]) -> _Detector:
    """Any of ``values`` as written (the longest first, so one that contains another is redacted whole)."""
    ordered = sorted(values, key=lambda v: (-len(v), v))
    return _Detector(tuple(ordered), re.compile("(?P<secret>" + "|".join(map(re.escape, ordered)) + ")"))


_KNOWN: frozenset[str] = frozenset()


def remember_environment_secrets(environ: Mapping[str, str] | None = None) -> bool:
    """Redact, from now on, the secret values of the process's environment (``os.environ``) as well
    as the forms found by shape; True when that set changed (then every remembered redaction was
    let go of). Read when this module is imported and each time a probe is made, so keys an app
    loads (``load_dotenv``) before ``instrument`` are known."""
    global _KNOWN, _TABLES
    known = environment_secrets(os.environ if environ is None else environ)
    if known == _KNOWN:
        return False
    _KNOWN = known
    _TABLES = _Tables.of(_DETECTORS + ((_known_detector(known),) if known else ()))
    forget()
    return True


# Recent long ASCII texts in which no trigger occurs, newest last: a prompt that repeats the
# conversation so far in one text (MetaGPT) extends the last one, and only its new part (plus the
# last ``trigger_max`` - 1 characters before it) can hold a trigger.
_CLEAN: tuple[str, ...] = ()  # replaced whole: readers in other threads keep a consistent snapshot
_CLEAN_MAX = 8
_CLEAN_MIN_LEN = 1024


def _trigger_free(text: str, tables: _Tables) -> bool:
    """Whether no form's trigger occurs in ASCII ``text`` (then none can match)."""
    if tables.cased_found(text):
        return False
    low = text.lower()
    return not any(trigger in low for trigger, _ in tables.uncased)


def _clean_extension(text: str) -> bool:
    """Whether long ASCII ``text`` is trigger-free, scanning only what it adds to a recent clean text."""
    global _CLEAN
    tables = _TABLES
    for old in reversed(_CLEAN):
        if text.startswith(old):
            free = _trigger_free(text[max(len(old) - tables.trigger_max + 1, 0):], tables)
            break
    else:
        free = _trigger_free(text, tables)
    if free:
        _CLEAN = (*_CLEAN[1 - _CLEAN_MAX:], text)
    return free


def _redact(text: str) -> str:
    tables = _TABLES
    lowered = text.lower()
    low = lowered if len(lowered) == len(text) else None  # offsets must match the text's
    found = set(tables.cased_found(text))
    if low is None:  # case-insensitive forms then search the text itself, whatever the triggers
        found |= tables.all_uncased
    else:
        found.update([i for trigger, i in tables.uncased if trigger in low])
    if not found:
        return text
    spans: list[tuple[int, int]] = []
    for i in sorted(found):
        spans += tables.detectors[i].spans(text, low)
    if not spans:
        return text
    spans.sort()
    out, pos = [], 0
    for start, end in spans:
        if end <= pos:
            continue
        out.append(text[pos:max(start, pos)])
        if start >= pos:
            out.append(REDACTED)
        pos = end
    out.append(text[pos:])
    return "".join(out)


_redact_cached = functools.lru_cache(maxsize=2048)(_redact)


def forget() -> None:
    """Let go of the texts remembered to redact repeated ones once (the apps' messages)."""
    global _CLEAN
    _CLEAN = ()
    _redact_cached.cache_clear()


def forget_long_texts() -> None:
    """Let go of the recent long texts known to be clean (a run ended: they may be its prompts)."""
    global _CLEAN
    _CLEAN = ()


def redact_secrets(text: str) -> str:
    """``text`` with API keys, tokens, passwords and private keys replaced by ``[REDACTED]``
    (and lone surrogates escaped: see :func:`encodable`)."""
    if not text.isascii():
        text = encodable(text)
    elif len(text) >= _CLEAN_MIN_LEN and _clean_extension(text):
        return text
    if len(text) <= _CACHED_MAX_LEN:
        return _redact_cached(text)  # prompts repeat earlier messages: redact each text once
    return _redact(text)


@contextmanager
def redacted_log_records() -> Iterator[None]:
    """Meanwhile every log record made in the process holds its text with secrets redacted (its
    message, traceback and stack): a command's output, a Ray task's forwarded log, where a
    framework logs an error whose traceback quotes the key a provider echoed back."""
    make = logging.getLogRecordFactory()

    def redacted(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        try:
            record.msg, record.args = redact_secrets(record.getMessage()), ()
            if record.exc_info and record.exc_info[0] is not None:  # as logging.Formatter.formatException writes it
                record.exc_text = redact_secrets("".join(traceback.format_exception(*record.exc_info)).rstrip("\n"))
            if record.stack_info:
                record.stack_info = redact_secrets(record.stack_info)
        except Exception:  # noqa: BLE001 - a message that does not format: logging reports it as usual
            pass
        return record

    logging.setLogRecordFactory(redacted)
    try:
        yield
    finally:
        logging.setLogRecordFactory(make)


def make_redactor(extra: Callable[[str], str] | None) -> Callable[[str], str]:
    """The built-in redaction, then the user's callback (its output made encodable), if any."""
    if extra is None:
        return redact_secrets

    def redact(text: str) -> str:
        return encodable(str(extra(redact_secrets(text))))

    return redact


def encodable(text: str) -> str:
    """``text`` with lone surrogates (undecodable bytes of ``os.fsdecode``) escaped as ``\\udcxx``."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


remember_environment_secrets()
