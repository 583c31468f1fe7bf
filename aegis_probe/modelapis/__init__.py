"""Wire APIs of model providers besides OpenAI chat completions, as the loopback model server
(:mod:`aegis_probe.modelserver`) speaks them, and the shapes adapters rebuild answers in."""

from __future__ import annotations

from typing import Any, Protocol


class Completer(Protocol):
    """What a wire API needs of the server it answers for (:class:`aegis_probe.modelserver.ModelServer`):
    its model name and its policy's answer to a chat-completions body (message, usage)."""

    model: str

    def complete(self, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]: ...
