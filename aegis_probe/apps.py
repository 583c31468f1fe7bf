"""``AppSpec``: how campaigns, replay and blame build and run a user's app.

A spec is loaded from ``module`` or ``module:attribute``. The module (or the object the attribute
names, or what a zero-argument factory at that attribute returns) provides
``build_app(base_url, model, api_key) -> app`` and ``run_app(app, task) -> answer``; the built-in
demos (``aegis_probe.demos.autogen`` ...) are valid specs.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class AppSpec:
    """Builds an app wired to an OpenAI-compatible endpoint, and runs it on one task."""

    build_app: Callable[[str, str, str], Any]
    run_app: Callable[[Any, str], "str | None"]
    name: str = "app"

    @classmethod
    def load(cls, target: str) -> "AppSpec":
        """Resolve ``module[:attribute]``; ``ValueError`` explains what is missing."""
        module_name, _, attr = target.partition(":")
        try:
            obj: Any = importlib.import_module(module_name)
        except ImportError as exc:
            raise ValueError(f"--app {target}: cannot import {module_name!r} ({exc})") from exc
        if attr:
            if not hasattr(obj, attr):
                raise ValueError(f"--app {target}: {module_name!r} has no attribute {attr!r}")
            obj = getattr(obj, attr)
            if callable(obj) and not hasattr(obj, "build_app"):
                obj = obj()
        if isinstance(obj, AppSpec):
            return obj
        missing = [n for n in ("build_app", "run_app") if not callable(getattr(obj, n, None))]
        if missing:
            raise ValueError(f"--app {target}: needs callables build_app(base_url, model, api_key) and run_app(app, task); missing {missing}")
        return cls(obj.build_app, obj.run_app, name=target)
