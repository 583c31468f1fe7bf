"""``aegis_probe.train``: trajectories -> attribution training sets, metrics, rewards and baselines.

Importers (:mod:`.importers`) turn public datasets and traces into :class:`aegis_probe.Trajectory`;
:mod:`.render` and :mod:`.builders` turn trajectories into SFT / GRPO / DCL rows; :mod:`.metrics`,
:mod:`.rewards` and :mod:`.baselines` score attributors. Run ``python -m aegis_probe.train --help``.
"""
