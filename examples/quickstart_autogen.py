"""Instrument an existing AutoGen team with one line, then read the run back.

Runs offline: the team talks to aegis-probe's embedded OpenAI-compatible server, whose answers
come from the scripted demo model. Point ``base_url`` at a real endpoint to use a real model.

    python examples/quickstart_autogen.py
"""

from __future__ import annotations

import aegis_probe
from aegis_probe.demos import autogen as demo
from aegis_probe.modelserver import ModelServer


def main() -> None:
    with ModelServer(demo.policy) as server:
        team = demo.build_app(server.base_url, "aegis-scripted", "sk-not-needed")  # any AutoGen team
        with aegis_probe.instrument(team, judge=lambda task, answer: "126" in (answer or "")) as probe:
            demo.run_app(team, demo.TASK)
        traj = probe.trajectory()
    print(f"trace {traj.trace_id}: success={traj.outcome.success}")
    for step in traj.steps:
        tools = ", ".join(t.name for t in step.tool_calls) or "-"
        print(f"  {step.index}  {step.agent:<10}  tools={tools:<10}  tokens={step.usage.input_tokens}/{step.usage.output_tokens}  {step.output[:60]!r}")


if __name__ == "__main__":
    main()
