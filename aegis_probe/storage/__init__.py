"""Storage and export: the embedded trace store (OTLP/JSON lines, its writer thread and delta
coding), OTLP encoding, exporters to collectors, and the GenAI metrics."""
