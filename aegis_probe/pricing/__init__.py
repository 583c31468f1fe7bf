"""Cost in USD of model calls, from a dated price table (``prices.json``, per provider with its
``as_of`` date and source) that the user may override.

Overrides, later ones winning per model: the file ``AEGIS_PRICES`` names, then ``instrument(...,
prices=)`` (a file, or a mapping ``{model: {"input": .., "output": .., "cache_read": ..,
"cache_write": ..}}`` in USD per million tokens). A model is found by its exact name, else with
a date or version suffix dropped (``gpt-4o-2024-08-06``, ``claude-3-5-sonnet-20241022``,
``gemini-2.0-flash-001``, ``-latest``), else without a ``provider/`` prefix
(``openai/gpt-4o``). A model not found has no cost: never a guess from a similar name.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Union

ENV_PRICES = "AEGIS_PRICES"
#: Suffixes a provider appends to a model's name for a dated snapshot or version.
_SUFFIX = re.compile(r"(-\d{4}-\d{2}-\d{2}|-\d{8}|@\d{8}|-\d{3,4}|-latest)$")

Prices = Union[str, "os.PathLike[str]", Mapping[str, Any]]


@dataclass(frozen=True)
class Price:
    """USD per million tokens; a cache tier the table does not list is charged as input."""

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> "Price":
        def rate(key: str) -> float | None:
            value = raw.get(key)
            return None if value is None else float(value)

        return cls(float(raw["input"]), float(raw["output"]), rate("cache_read"), rate("cache_write"))


def _models(data: Mapping[str, Any]) -> dict[str, Price]:
    """The models of a price file: ``{"providers": {p: {"models": ..}}}``, ``{"models": ..}`` or a plain mapping."""
    if "providers" in data:
        return {name.lower(): Price.parse(raw) for provider in data["providers"].values()
                for name, raw in provider.get("models", {}).items()}
    models = data.get("models", data)
    return {name.lower(): Price.parse(raw) for name, raw in models.items()}


class PriceTable:
    """Model prices: :meth:`cost` of a call's token counts."""

    def __init__(self, models: Mapping[str, Price]) -> None:
        self.models = dict(models)

    @classmethod
    def load(cls, prices: Prices | None = None) -> "PriceTable":
        """The built-in table, overridden by ``AEGIS_PRICES``'s file, then by ``prices``."""
        models = dict(_builtin())
        env = os.environ.get(ENV_PRICES, "").strip()
        if env:
            models.update(_models(_read(env)))
        if prices is not None:
            models.update(_models(prices if isinstance(prices, Mapping) else _read(prices)))
        return cls(models)

    def price(self, model: str | None) -> Price | None:
        """The price of ``model`` (see the module docstring for how names match), or None."""
        if not model:
            return None
        name = model.strip().lower()
        for candidate in (name, name.rpartition("/")[2]):
            found = self.models.get(candidate)
            while found is None and _SUFFIX.search(candidate):
                candidate = _SUFFIX.sub("", candidate)
                found = self.models.get(candidate)
            if found is not None:
                return found
        return None

    def cost(self, model: str | None, *, input_tokens: int | None, output_tokens: int | None,
             cache_read_input_tokens: int | None = None, cache_creation_input_tokens: int | None = None) -> float | None:
        """USD of one call (``input_tokens`` counting the cached ones); None for an unknown model
        or a call that reported no token counts."""
        price = self.price(model)
        if price is None or (input_tokens is None and output_tokens is None):
            return None
        read, written = cache_read_input_tokens or 0, cache_creation_input_tokens or 0
        plain = max(0, (input_tokens or 0) - read - written)
        usd = (plain * price.input + (output_tokens or 0) * price.output
               + read * (price.input if price.cache_read is None else price.cache_read)
               + written * (price.input if price.cache_write is None else price.cache_write))
        return round(usd / 1e6, 10)


def _read(path: str | os.PathLike[str]) -> Mapping[str, Any]:
    return json.loads(Path(path).read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def _builtin() -> dict[str, Price]:
    return _models(json.loads(resources.files(__name__).joinpath("prices.json").read_text(encoding="utf-8")))


def builtin_sources() -> dict[str, dict[str, str]]:
    """Each provider's ``as_of`` date and ``source`` in the built-in table."""
    data = json.loads(resources.files(__name__).joinpath("prices.json").read_text(encoding="utf-8"))
    return {name: {"as_of": p["as_of"], "source": p["source"]} for name, p in data["providers"].items()}
