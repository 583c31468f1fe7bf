"""Trajectories -> SFT, GRPO and DCL rows, JSON lines and Hugging Face datasets.

Row ids are the trajectory's ``run_id`` (else ``trace_id``). Prompts are rendered with
:func:`~aegis_probe.train.render.render`, so labelled steps are never cut and injection artefacts
are stripped. Targets: *pairs* is ``{"faulty_agents": [{"agent_name", "error_type"}]}`` (empty
list for a clean run); *agent_step* is ``agent|step`` of the decisive (earliest) fault, and
trajectories without an agent and step label (or whose step is outside the trace) are skipped for it.
A :func:`~aegis_probe.train.answers.recovered` run (a labelled fault, yet the run succeeded) is no
failure and no clean run: every builder skips it.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable, Iterator, Literal

from aegis_probe.trajectory import Trajectory

from .answers import decisive_fault, fault_reason, format_agent_step, format_pairs, gold_attribution, recovered
from aegis_probe.storage.jsonl import read_jsonl, write_jsonl  # noqa: F401 - re-exported: rows are read and written here
from .modes import MODES
from .render import render, step_text, strip_artefacts

Target = Literal["pairs", "agent_step"]

_MODE_LIST = "\n".join(f"- {mode}: {name}" for mode, name in MODES.items())
SYSTEM_PROMPTS: dict[str, str] = {
    "pairs": (
        "You are a failure-attribution expert for LLM multi-agent systems. Read the task and the "
        "numbered agent steps, then name every faulty agent with its failure mode, one of:\n"
        f"{_MODE_LIST}\nAnswer with JSON only: "
        '{"faulty_agents": [{"agent_name": "<agent>", "error_type": "FM-x.y"}]} '
        '(an empty list when no agent is at fault).'
    ),
    "agent_step": (
        "You are a failure-attribution expert for LLM multi-agent systems. The run below failed. "
        "Find the decisive error: the earliest step whose correction would have made the run "
        "succeed. Think inside <think></think>, then answer as <answer>agent|step</answer> with "
        "the agent's name exactly as written and the step number."
    ),
}


def row_id(traj: Trajectory) -> str:
    """A stable id for the rows of one trajectory."""
    return str(traj.run_id or traj.trace_id or traj.metadata.get("id") or id(traj))


def source_of(traj: Trajectory) -> str:
    return str(traj.labels.source or traj.source)


def group_key(traj: Trajectory) -> str:
    """The contrastive group of a run: (task, framework, benchmark)."""
    group = traj.metadata.get("group") or [traj.task, traj.framework, traj.metadata.get("benchmark")]
    return json.dumps(group, ensure_ascii=False)


def is_positive(traj: Trajectory) -> bool:
    """A clean run: no fault labelled, not known to have failed, not ended by an error, and not a
    replay unless judged a success (a replay stopped at its divergence is a partial, unjudged run)."""
    return (not traj.labels.faults and traj.outcome.success is not False and traj.error is None
            and (traj.outcome.success is True or "replay_of" not in traj.metadata))


def prompt_messages(traj: Trajectory, target: Target, *, max_tokens: int, tokenizer: Any = None) -> list[dict[str, str]]:
    """The system and user messages of one trajectory."""
    user = render(traj, max_tokens=max_tokens, tokenizer=tokenizer)
    return [{"role": "system", "content": SYSTEM_PROMPTS[target]}, {"role": "user", "content": user}]


def target_text(traj: Trajectory, target: Target, *, reasoning: bool = False) -> str | None:
    """The assistant text for ``traj``, or ``None`` when it has no label of that kind."""
    if target == "pairs":
        return format_pairs(gold_attribution(traj).pairs)
    fault = decisive_fault(traj.labels.faults)
    if fault is None or fault.agent is None or fault.step is None or not 0 <= fault.step < len(traj.steps):
        return None  # no agent|step label, or one naming a step the trace does not have (flagged on import)
    return format_agent_step(fault.agent, fault.step, fault_reason(fault) if reasoning else None)


def sft_rows(trajs: Iterable[Trajectory], target: Target = "pairs", *, max_tokens: int = 4096,
             tokenizer: Any = None, reasoning: bool = False) -> Iterator[dict[str, Any]]:
    """Chat rows ``{"id", "source", "messages": [system, user, assistant]}``, one trajectory at a time.

    ``reasoning=True`` (agent_step only) puts the label's reason in a ``<think>`` block before
    ``<answer>agent|step</answer>``, the format the AgenTracer reward checks.
    """
    for traj in trajs:
        answer = None if recovered(traj) else target_text(traj, target, reasoning=reasoning)
        if answer is None:
            continue
        messages = prompt_messages(traj, target, max_tokens=max_tokens, tokenizer=tokenizer)
        yield {"id": row_id(traj), "source": source_of(traj),
               "messages": messages + [{"role": "assistant", "content": answer}]}


def build_sft(trajs: Iterable[Trajectory], target: Target = "pairs", **options: Any) -> list[dict[str, Any]]:
    """:func:`sft_rows` as a list."""
    return list(sft_rows(trajs, target, **options))


def grpo_rows(trajs: Iterable[Trajectory], target: Target = "pairs", *, max_tokens: int = 4096,
              tokenizer: Any = None) -> Iterator[dict[str, Any]]:
    """Rows ``{"id", "source", "prompt": [system, user], "gold_pairs", "gold_agent", "gold_step"}``;
    ``gold_pairs`` is ``[[agent, mode or None], ...]``, the others come from the decisive fault. For
    ``agent_step``, trajectories without an agent and step label are skipped, as for SFT (the
    prompt says the run failed, and no answer could earn a reward). One trajectory at a time."""
    for traj in trajs:
        if recovered(traj) or (target == "agent_step" and target_text(traj, target) is None):
            continue
        gold = gold_attribution(traj)
        yield {
            "id": row_id(traj), "source": source_of(traj),
            "prompt": prompt_messages(traj, target, max_tokens=max_tokens, tokenizer=tokenizer),
            "gold_pairs": [[a, m] for a, m in gold.pairs], "gold_agent": gold.agent, "gold_step": gold.step,
        }


def build_grpo(trajs: Iterable[Trajectory], target: Target = "pairs", **options: Any) -> list[dict[str, Any]]:
    """:func:`grpo_rows` as a list."""
    return list(grpo_rows(trajs, target, **options))


def dcl_row(traj: Trajectory) -> dict[str, Any]:
    """One trajectory's DCL row (what an attributor predicts for: any run, a recovered one included)."""
    faults = traj.labels.faults
    decisive = decisive_fault(faults)
    return {
        "id": row_id(traj), "group": group_key(traj), "task": strip_artefacts(traj.task or ""),
        "turns": [{"agent": s.agent, "text": strip_artefacts(step_text(s)).strip()} for s in traj.steps],
        "label_agents": list(dict.fromkeys(f.agent for f in faults if f.agent)),
        "label_modes": list(dict.fromkeys(f.mode for f in faults if f.mode)),
        "label_pairs": ([list(p) for p in dict.fromkeys((f.agent, f.mode) for f in faults if f.agent)]
                        if all(f.mode for f in faults if f.agent) else None),
        "label_step": decisive.step if decisive else None,
        "positive": is_positive(traj),
    }


def dcl_rows(trajs: Iterable[Trajectory]) -> Iterator[dict[str, Any]]:
    """Training rows ``{"id", "group", "task", "turns": [{"agent", "text"}], "label_agents", "label_modes",
    "label_pairs", "label_step", "positive"}`` (:func:`dcl_row`; recovered runs skipped); ``label_pairs``
    are the labelled ``[agent, mode]`` pairs (an agent may have several modes; null when a faulty agent
    has no mode); ``positive`` marks clean runs, the others of a group are negatives. One
    trajectory at a time: a group is a row's field, grouped by the trainer, so nothing is held."""
    return (dcl_row(traj) for traj in trajs if not recovered(traj))


def build_dcl(trajs: Iterable[Trajectory]) -> list[dict[str, Any]]:
    """:func:`dcl_rows` as a list."""
    return list(dcl_rows(trajs))


def to_hf_dataset(rows: list[dict[str, Any]]) -> Any:
    """The rows as a ``datasets.Dataset``."""
    from datasets import Dataset

    return Dataset.from_list(rows)


BUILDERS = {"sft": build_sft, "grpo": build_grpo, "dcl": build_dcl}
#: The row generators of ``train build``, which writes rows as they are made.
ROWS: dict[str, Callable[..., Iterator[dict[str, Any]]]] = {"sft": sft_rows, "grpo": grpo_rows, "dcl": dcl_rows}
