"""Diagnosis of a failed run without a fixer: the Who&When LLM judges on a stored trace
(:mod:`.judges`) and spectrum-based fault localisation over live re-runs (:mod:`.spectrum`).
``blame --method judge|spectrum`` runs them; ``--method replay`` is :mod:`aegis_probe.counterfactual`."""
