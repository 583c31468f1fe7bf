"""One module per CLI command (see :data:`aegis_probe.cli.COMMANDS`)."""
