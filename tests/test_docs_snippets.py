"""The Python in README.md and docs/*.md names what exists: each ``python`` block imports every
class it uses (a CapWords name) from where it is, and every dotted ``aegis_probe.x.y`` the text
names resolves to a module or an attribute."""

from __future__ import annotations

import ast
import builtins
import importlib
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(first line number, code) of each fenced ``python`` block."""
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in re.finditer(r"```python\n(.*?)```", text, re.S)]


def unbound_classes(code: str) -> list[tuple[int, str]]:
    """(line in the block, name) of each CapWords name the block uses but never imports or defines."""
    tree = ast.parse(code)
    bound = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
    return [(node.lineno, node.id) for node in ast.walk(tree)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id[:1].isupper()
            and node.id not in bound]


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` (``aegis_probe.a.b``) is a module, or an attribute chain below one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: ModuleType | object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def imports(code: str) -> list[tuple[str, str]]:
    """(module, name) of each ``from aegis_probe... import name`` of a block."""
    return [(node.module, alias.name) for node in ast.walk(ast.parse(code))
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "aegis_probe"
            for alias in node.names]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_python_blocks_import_what_they_use_from_where_it_is(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    problems = []
    for start, code in python_blocks(text):
        problems += [f"{path.name}:{start + line - 1}: {name} is used but not imported" for line, name in unbound_classes(code)]
        problems += [f"{path.name}:{start}: from {module} import {name}: no such name"
                     for module, name in imports(code) if not resolves(f"{module}.{name}")]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_dotted_aegis_probe_name_resolves(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    missing = [f"{path.name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(1)}"
               for m in re.finditer(r"`(aegis_probe(?:\.[A-Za-z_]\w*)+)", text) if not resolves(m.group(1))]
    assert not missing, "\n".join(missing)


def test_the_checks_find_what_is_missing() -> None:
    """The replay.md blame block used Endpoint(...) without importing it (NameError when pasted)."""
    assert unbound_classes("from aegis_probe import blame\nblame(t, s, endpoint=Endpoint('u', 'm', 'k'))\n") == [
        (2, "Endpoint")]
    assert imports("from aegis_probe.apps import Endpoint\n") == [("aegis_probe.apps", "Endpoint")]
    assert resolves("aegis_probe.apps.Endpoint") and not resolves("aegis_probe.Endpoint")
    assert not resolves("aegis_probe.nonexistent_module")
