"""``AppSpec`` and ``Endpoint``: how campaigns, replay and blame build and run a user's app.

``--app module:factory`` or ``path/to/file.py:factory`` (the factory defaults to ``build_app``;
the demo modules in ``aegis_probe.demos`` are valid specs). ``factory(base_url, model, api_key)``
returns the framework's app wired to an OpenAI-compatible endpoint (it also gets ``task=``,
``temperature=`` and ``seed=`` when its signature has them: apps whose task is fixed when built
take ``task``). The module defines ``run_app(app, task) -> str | None`` (sync, one run, the final
answer), and optionally ``AGENTS`` (agent names), ``policy`` (a scripted model for the embedded
server, used when no endpoint is given), ``TERMINATION`` (default "TERMINATE") and ``judge``.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from .modelserver import Policy


def load_module(target: str, what: str) -> ModuleType:
    """Import a module by name, or a ``file.py`` (its folder goes on ``sys.path``, as ``python
    file.py`` would); anything going wrong while importing it (a missing file or module, a syntax
    error, an exception or ``sys.exit`` at import) is a ``ValueError`` starting with ``what``."""
    if target.endswith(".py") and not Path(target).is_file():
        raise ValueError(f"{what}: no file {target}")
    try:
        if not target.endswith(".py"):
            return importlib.import_module(target)
        sys.path.insert(0, str(Path(target).resolve().parent))
        spec = importlib.util.spec_from_file_location(Path(target).stem, target)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[spec.name] = module  # type: ignore[union-attr]
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        return module
    except SyntaxError as exc:  # null bytes in the source: no line, and the file is ``target``
        where = f"{exc.filename}:{exc.lineno}" if exc.filename and exc.lineno else target
        raise ValueError(f"{what}: {where}: SyntaxError: {exc.msg}") from exc
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - whatever the module does at import (sys.exit too)
        reason = f"exited with sys.exit({exc.code!r})" if isinstance(exc, SystemExit) else f"{type(exc).__name__}: {exc}"
        raise ValueError(f"{what}: cannot import {target!r} ({reason})") from exc


def undefined(target: str, names: tuple[str, ...]) -> list[str]:
    """Those of ``names`` that the source of module (or ``file.py``) ``target`` certainly does not
    define at its top level, read without running it (no ``def``, assignment or import binds them,
    and no ``import *`` or module ``__getattr__`` could); ``[]`` when its source cannot be read."""
    try:
        origin = target if target.endswith(".py") else getattr(importlib.util.find_spec(target), "origin", None)
        tree = ast.parse(Path(origin).read_bytes()) if origin and origin.endswith(".py") else None
    except (ImportError, ValueError, OSError, SyntaxError, RecursionError):  # loading it says why
        return []
    if tree is None:
        return []
    bound: set[str] = set()
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).partition(".")[0] for a in node.names)
        elif not isinstance(node, (ast.Expr, ast.Pass, ast.Return)):  # assignments, if/try/with/for blocks
            bound.update(n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
            todo.extend(child for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt))
    if "*" in bound or "__getattr__" in bound or "globals" in {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}:
        return []
    return [name for name in names if name not in bound]


def check_signature(func: Callable[..., Any], args: int, what: str, more: bool = False) -> None:
    """``ValueError`` starting with ``what`` when ``func`` cannot be called with ``args`` positional
    arguments (``more``: and others by keyword, as :meth:`AppSpec.build` passes ``task``); a
    callable whose signature cannot be read is taken as it is."""
    try:
        signature = inspect.signature(func)
    except (ValueError, TypeError):  # no signature to read (some builtins): it will tell when called
        return
    try:
        (signature.bind_partial if more else signature.bind)(*[None] * args)
    except TypeError as exc:
        raise ValueError(f"{what}: {exc}") from None


def split_ref(ref: str) -> tuple[str, str]:
    """``module[:attr]`` or ``file.py[:attr]`` as ``(target, attr)`` (attr empty when not given)."""
    target, _, attr = ref.rpartition(":") if ref.count(":") else (ref, "", "")
    return target, attr


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible model endpoint."""

    base_url: str
    model: str
    api_key: str


@dataclass(frozen=True)
class AppSpec:
    """How to build, run and describe the app under test."""

    factory: Callable[..., Any]
    run_app: Callable[[Any, str], "str | None"]
    agents: tuple[str, ...] = ()
    policy: Policy | None = None
    termination: str = "TERMINATE"
    judge: Callable[..., Any] | None = None
    ref: str | None = None  # what it was loaded from: how it travels to worker processes

    @classmethod
    def load(cls, ref: str) -> "AppSpec":
        """Resolve ``module[:factory]`` or ``file.py[:factory]``; ``ValueError`` says what is missing."""
        target, attr = split_ref(ref)
        missing = f"--app {ref}: needs a factory {attr or 'build_app'}(base_url, model, api_key) and run_app(app, task) in {target}"
        if undefined(target, (attr or "build_app", "run_app")):  # said before the module's code runs
            raise ValueError(missing)
        module = load_module(target, f"--app {ref}")
        factory = getattr(module, attr or "build_app", None)
        if not callable(factory) or not callable(getattr(module, "run_app", None)):
            raise ValueError(missing)
        check_signature(factory, 3, f"--app {ref}: {attr or 'build_app'}(base_url, model, api_key)", more=True)
        check_signature(module.run_app, 2, f"--app {ref}: run_app(app, task)")
        agents = getattr(module, "AGENTS", ())
        if isinstance(agents, str) or not isinstance(agents, (list, tuple)) or not all(isinstance(a, str) for a in agents):
            raise ValueError(f"--app {ref}: AGENTS in {target} must be a list of agent names, not {agents!r}"[:300])
        termination = getattr(module, "TERMINATION", "TERMINATE")
        if not isinstance(termination, str):
            raise ValueError(f"--app {ref}: TERMINATION in {target} must be a string, not {termination!r}"[:300])
        for name in ("policy", "judge"):
            value = getattr(module, name, None)
            if value is not None and not callable(value):
                raise ValueError(f"--app {ref}: {name} in {target} must be a function, not {value!r}"[:300])
        return cls(
            factory=factory,
            run_app=module.run_app,
            agents=tuple(agents),
            policy=getattr(module, "policy", None),
            termination=termination,
            judge=getattr(module, "judge", None),
            ref=ref,
        )

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (for a worker process) as its reference; a ``file.py`` app as its module name,
        imported from the folder the executor ships (see :mod:`aegis_probe.executors`)."""
        if self.ref is None:
            raise TypeError("an AppSpec not loaded from a reference (module:factory or file.py:factory) "
                            "cannot be sent to worker processes")
        target, attr = split_ref(self.ref)
        if target.endswith(".py"):
            target = Path(target).stem
        return (AppSpec.load, (f"{target}:{attr}" if attr else target,))

    def build(self, endpoint: Endpoint, *, task: str | None = None, temperature: float = 0.0, seed: int = 0) -> Any:
        """A fresh app on ``endpoint`` (frameworks' apps are not reusable across event loops)."""
        params = inspect.signature(self.factory).parameters
        extra = {k: v for k, v in (("task", task), ("temperature", temperature), ("seed", seed)) if k in params}
        return self.factory(endpoint.base_url, endpoint.model, endpoint.api_key, **extra)
