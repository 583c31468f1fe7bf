"""Wire APIs of model providers besides OpenAI chat completions, as the loopback model server
(:mod:`aegis_probe.modelserver`) speaks them, and the shapes adapters rebuild answers in."""
