"""``import aegis_probe`` loads only what ``instrument()`` needs; every public name still resolves."""

from __future__ import annotations

import subprocess
import sys

import aegis_probe

#: modules that must not load with the package: replay, blame, injection, model server, report, HTTP
LAZY_MODULES = ("aegis_probe.counterfactual", "aegis_probe.injection", "aegis_probe.modelserver",
                "aegis_probe.report.html", "aegis_probe.capture.instrumentor", "http.server")


def test_import_loads_only_the_instrumentation_core() -> None:
    code = f"import sys, aegis_probe; print([m for m in {LAZY_MODULES!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_public_name_resolves() -> None:
    for name in aegis_probe.__all__:
        assert getattr(aegis_probe, name) is not None, name
    assert set(aegis_probe.__all__) <= set(dir(aegis_probe))


def test_unknown_name_is_an_attribute_error() -> None:
    try:
        aegis_probe.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


def test_all_lists_exactly_the_lazy_names_and_the_core() -> None:
    assert set(aegis_probe.__all__) == set(aegis_probe._LAZY) | {"Probe", "instrument", "uninstrument"}
