"""``python -m aegis_probe``: see :mod:`aegis_probe.cli`."""

from .cli import main

raise SystemExit(main(prog="python -m aegis_probe"))
