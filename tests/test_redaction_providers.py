"""Key and token formats of the model providers and clouds the adapters reach: one test per form,
alone, in JSON and in a log line, and ordinary text (hashes, UUIDs, SHAs, identifiers) left alone.

``PROVIDER_FORMS`` also runs in test_redaction's end-to-end check (spans, span events, exception
messages and the OTLP payload of a real agent run).
"""

from __future__ import annotations

import json
import logging
from typing import Callable

import pytest

from aegis_probe.redact import REDACTED, redact_secrets, redacted_log_records


def _fit(core: str, n: int, pad: str = "x") -> str:
    """``core`` cut or padded to ``n`` characters (formats of a fixed length)."""
    return (core + pad * n)[:n]


def _azure_identifiable(core: str, signature: str, head: int, tail: str) -> tuple[str, str]:
    key = _fit(core, head) + signature + "AbCd9" + tail
    return key, _fit(core, head)


#: form -> secret text made from a unique alphanumeric core (the part that must never appear).
PROVIDER_FORMS: dict[str, Callable[[str], tuple[str, str]]] = {
    "openai sk-svcacct": lambda c: (f"sk-svcacct-{c}T3BlbkFJ", c),
    "openai sk-admin": lambda c: (f"sk-admin-{c}", c),
    "deepseek sk- hex": lambda c: ("sk-" + c.encode().hex()[:32], c.encode().hex()[:32]),
    "openrouter sk-or-v1": lambda c: (f"sk-or-v1-{c}", c),
    "langfuse sk-lf": lambda c: (f"sk-lf-{c}", c),
    "groq gsk_": lambda c: ("gsk_" + _fit(c, 52, "Q"), _fit(c, 52, "Q")),
    "xai xai-": lambda c: ("xai-" + _fit(c, 80, "Q"), _fit(c, 80, "Q")),
    "perplexity pplx-": lambda c: ("pplx-" + _fit(c, 48, "Q"), _fit(c, 48, "Q")),
    "replicate r8_": lambda c: ("r8_" + _fit(c, 37, "Q"), _fit(c, 37, "Q")),
    "together tgp_v1_": lambda c: ("tgp_v1_" + _fit(c, 43, "Q"), _fit(c, 43, "Q")),
    "fireworks fw_": lambda c: ("fw_" + _fit(c, 24, "Q"), _fit(c, 24, "Q")),
    "nvidia nvapi-": lambda c: ("nvapi-" + _fit(c, 64, "Q"), _fit(c, 64, "Q")),
    "langsmith lsv2_pt_": lambda c: (f"lsv2_pt_{c}_0a1b2c3d4e", c),
    "langsmith lsv2_sk_": lambda c: (f"lsv2_sk_{c}_0a1b2c3d4e", c),
    "google oauth ya29.": lambda c: (f"ya29.a0AfH6SM{c}", c),
    "google refresh 1//0": lambda c: (f"1//0gLZ{c}CgYIARAAGBASNwF-L9Ir", c),
    "google client secret GOCSPX-": lambda c: (f"GOCSPX-{c}", c),
    "gcp service-account JSON": lambda c: (json.dumps({
        "type": "service_account", "project_id": "demo", "private_key":
        f"-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC{c}\n-----END PRIVATE KEY-----\n"}), c),
    "aws session id ASIA": lambda c: ("ASIA" + _fit(c.upper(), 16, "Q"), _fit(c.upper(), 16, "Q")),
    "aws secret key beside its id (CSV)": lambda c: (
        "Access key ID,Secret access key\nAKIAIOSFODNN7EXAMPLE," + _fit(c, 40, "/"), _fit(c, 40, "/")),
    "aws secret key beside its id (colon)": lambda c: ("AKIAIOSFODNN7EXAMPLE:" + _fit(c, 40, "+"), _fit(c, 40, "+")),
    "aws SecretAccessKey JSON": lambda c: (f'{{"AccessKeyId": "ASIAXXX", "SecretAccessKey": "{c}/Kx+"}}', c),
    "aws session token FwoG": lambda c: (f"FwoGZXIvYXdzEBYaDH{c}" + "A" * 40, c),
    "aws session token IQoJ": lambda c: (f"IQoJb3JpZ2luX2VjEBYaCXVz{c}" + "B" * 40, c),
    "aws X-Amz-Security-Token": lambda c: (f"https://s3.amazonaws.com/b/o?X-Amz-Security-Token={c}&X-Amz-Date=1", c),
    "azure openai key (84, JQQJ99)": lambda c: _azure_identifiable(c, "JQQJ99", 52, "BACOGcvT7Ab1cd2Ef3Gh4Ij5Kl"[:21]),
    "azure storage key (+ASt)": lambda c: _azure_identifiable(c, "+ASt", 76, "A=="),
    "azure cosmos key (ACDb)": lambda c: _azure_identifiable(c, "ACDb", 76, "w=="),
    "azure service bus key (+ASb)": lambda c: _azure_identifiable(c, "+ASb", 76, "g=="),
    "azure function key (AzFu)": lambda c: _azure_identifiable(c, "AzFu", 44, "Q=="),
    "azure search key (AzSe)": lambda c: (_fit(c, 42) + "AzSeB" + "Xy12Z", _fit(c, 42)),
    "azure storage connection string": lambda c: (
        f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={c}+/=;EndpointSuffix=core.windows.net", c),
    "azure SAS token": lambda c: (f"https://acct.blob.core.windows.net/c?sv=2022-11-02&ss=b&sp=r&sig={c}%3D", c),
    "azure SharedAccessKey": lambda c: (f"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=R;"
                                        f"SharedAccessKey={c}=", c),
    "azure api-key header (32 hex)": lambda c: ("api-key: " + c.encode().hex()[:32], c.encode().hex()[:32]),
    'azure keys list "key1"': lambda c: (json.dumps({"key1": c.encode().hex()[:32]}), c.encode().hex()[:32]),
    'azure "primaryKey"': lambda c: (json.dumps({"primaryKey": c}), c),
    "azure entra client secret (Q~)": lambda c: ("abc8Q~" + _fit(c, 34, "_"), _fit(c, 34, "_")),
    "cohere CO_API_KEY": lambda c: (f"CO_API_KEY={c}", c),
    "mistral Bearer": lambda c: (f"curl -H 'Authorization: Bearer {c}' https://api.mistral.ai", c),
    "together legacy 64 hex in TOGETHER_API_KEY": lambda c: (f"TOGETHER_API_KEY={c.encode().hex()}", c.encode().hex()),
    "anthropic x-api-key header": lambda c: (f"x-api-key: sk-ant-api03-{c}", c),
    "github gho_": lambda c: (f"gho_{c}0123456789", c),
}


@pytest.mark.parametrize(("form", "make"), list(PROVIDER_FORMS.items()), ids=list(PROVIDER_FORMS))
def test_each_provider_form_is_redacted(form, make):
    text, core = make("Ab12Cd34Ef56Gh78Ij90")
    for wrapped in (text, f"prefix {text} suffix", json.dumps({"arguments": text}), json.dumps(json.dumps({"x": text})),
                    json.dumps({"note": f"line\n{text}\nline"})):
        out = redact_secrets(wrapped)
        assert core not in out and REDACTED in out, wrapped


@pytest.mark.parametrize(("form", "make"), list(PROVIDER_FORMS.items()), ids=list(PROVIDER_FORMS))
def test_each_provider_form_is_redacted_in_a_log_line(form, make, caplog):
    text, core = make("Zy98Xw76Vu54Ts32Rq10")
    log = logging.getLogger("aegis_probe.test.providers")
    with caplog.at_level(logging.INFO, logger="aegis_probe.test.providers"), redacted_log_records():
        log.info("calling the provider with %s", text)
        try:
            raise PermissionError(f"rejected: {text}")
        except PermissionError:
            log.exception("call failed")
    assert caplog.records and all(core not in caplog.text for _ in caplog.records)
    assert "calling the provider with" in caplog.text and "rejected:" in caplog.text


@pytest.mark.parametrize("text", [
    "commit 3f2a9c1e7b4d5a6f8e9d0c1b2a3f4e5d6c7b8a90 fixed it",  # git SHA
    "md5 d41d8cd98f00b204e9800998ecf8427e, sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "run id 123e4567-e89b-12d3-a456-426614174000",  # UUID
    "id = models.AutoField(primary_key=True)", "for key1, key2 in pairs: pass", "the monkey1: jumped",
    "fw_version_string_for_the_device", "ASIAN markets", "AKIA is not a key", "the primary key is the id",
    "gsk_short", "pplx-docs", "a 1//0 fraction", "see docs/sk-learn", "return APIM",
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
])
def test_ordinary_text_survives(text):
    assert redact_secrets(text) == text
