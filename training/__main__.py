"""``python -m aegis_probe.train``."""

import sys

from .cli import main

sys.exit(main(prog="python -m aegis_probe.train"))
