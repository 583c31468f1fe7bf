"""Use a trained DCL attributor: predict (agent, step, modes) with scores for rows or for stored
traces, and add a trace's verdict to it (the label set ``attribution:<model>``, and an
``aegis.attribution`` event on the blamed step's span) so that trace viewers show it."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aegis_probe.capture import semconv as sc
from aegis_probe.config import ProbeConfig
from aegis_probe.storage.store import TraceStore
from aegis_probe.redact import redact_secrets
from aegis_probe.trajectory import ATTRIBUTION_SOURCE, Fault, Trajectory

from .builders import dcl_row
from .files import read_rows, write_rows

if TYPE_CHECKING:  # torch: imported when the command runs, so that --help works without the train extra
    from .dcl.attributor import DCLAttributor


def verdict(pred: dict[str, Any]) -> Fault:
    """One prediction as a fault: the blamed agent and step, the top mode, the scores as reason."""
    modes = [m["mode"] for m in pred["modes"]]
    return Fault(agent=pred["agent"], step=pred["step"], mode=modes[0] if modes else None,
                 reason=f"agent score {pred['agent_score']:.4f}, step score {pred['step_score']:.4f}; "
                        f"modes {', '.join(modes) or '-'}")


def stored_trajectory(store: TraceStore, trace_id: str) -> tuple[list[Any], Trajectory]:
    """The spans and trajectory of one stored trace (a unique id prefix); an error when there is no
    such trace or it has no agent steps."""
    spans = store.trace(trace_id)
    traj = Trajectory.from_spans(spans)
    if not traj.steps:
        raise ValueError(f"trace {trace_id} has no agent steps to attribute")
    return spans, traj


def attribute_trace(model: DCLAttributor, store: TraceStore, trace_id: str, model_name: str,
                    loaded: tuple[list[Any], Trajectory] | None = None) -> dict[str, Any]:
    """Predict for one stored trace and add the verdict to it; returns the prediction. ``loaded``:
    its spans and trajectory when already read (:func:`stored_trajectory`).

    The verdict is the label set ``attribution:<model_name>`` plus an ``aegis.attribution`` event on
    the blamed step's span. One verdict per trace per attributor: a rerun's verdict takes the place
    of that set (the store keeps the earlier records, append-only), and an unchanged verdict writes
    nothing. Only that set's attribute is written: an injection label, a blame finding or another
    model's verdict is never touched.
    """
    spans, traj = loaded or stored_trajectory(store, trace_id)
    pred = model.predict(dcl_row(traj))
    full_id = traj.trace_id or trace_id
    pred["id"], pred["trace_id"] = full_id, full_id
    step = traj.steps[pred["step"]]
    pred["step_span_id"] = step.span_id
    key = sc.LABELS_PREFIX + f"{ATTRIBUTION_SOURCE}:{model_name}"
    label = redact_secrets(json.dumps([verdict(pred).model_dump()], ensure_ascii=False))
    attributes = {"model": model_name, "agent": pred["agent"], "step": pred["step"],
                  "agent_score": round(pred["agent_score"], 4), "step_score": round(pred["step_score"], 4),
                  "modes": [m["mode"] for m in pred["modes"]],
                  "detail": json.dumps({k: pred[k] for k in ("modes", "pairs", "agents", "fault_score")})}
    if _root(spans).attributes.get(key) == label and _latest_event(spans, model_name) == (step.span_id, attributes):
        return pred  # the same verdict as last time: nothing new to say
    store.amend(full_id, attributes={key: label})
    event = {"name": sc.EVENT_ATTRIBUTION, "time_ns": time.time_ns(), "attributes": attributes}
    store.amend(full_id, step.span_id, events=[event])
    return pred


def _root(spans: list[Any]) -> Any:
    ids = {s.span_id for s in spans}
    return next((s for s in spans if s.parent_span_id not in ids), spans[0])


def _latest_event(spans: list[Any], model_name: str) -> tuple[str, dict[str, Any]] | None:
    """The span and attributes of ``model_name``'s latest ``aegis.attribution`` event in a trace."""
    found = [(e["time_ns"], s.span_id, {k: list(v) if isinstance(v, tuple) else v for k, v in e["attributes"].items()})
             for s in spans for e in s.events
             if e["name"] == sc.EVENT_ATTRIBUTION and e["attributes"].get("model") == model_name]
    if not found:
        return None
    _, span_id, attributes = max(found, key=lambda f: f[0])
    return span_id, attributes


def attribute_rows(model: DCLAttributor, rows: list[dict[str, Any]], progress: bool = True) -> tuple[list[dict[str, Any]], float]:
    """Predictions for DCL rows and the throughput in trajectories per second (encoding included),
    with a progress bar on stderr unless ``progress`` is false."""
    model.cache.clear()
    start = time.perf_counter()
    preds = model.predict_many(rows, progress=progress)
    return preds, len(rows) / max(time.perf_counter() - start, 1e-9)


def run(args: argparse.Namespace) -> int:
    """The ``attribute`` subcommand: predictions as JSON lines on stdout (or ``--output``)."""
    from .dcl.attributor import DCLAttributor
    from .dcl.examples import RowError

    model = DCLAttributor.load(args.model)
    if args.trace:
        store = TraceStore(args.store or ProbeConfig.resolve().trace_dir)
        # every id read and checked before a verdict is written: a typo amends none of them
        loaded = [(t, stored_trajectory(store, t)) for t in args.trace]
        from tqdm import tqdm

        traces = tqdm(loaded, desc="attributing", unit="trace", file=sys.stderr, disable=len(loaded) < 2 or args.no_progress)
        preds = [attribute_trace(model, store, t, Path(args.model).name, found) for t, found in traces]
    else:
        rows = read_rows(args.data, required=("turns",))
        if not rows:  # an empty file: an error, not an emptied --output
            raise ValueError(f"{args.data}: no rows to attribute" + (f"; {args.output} not written" if args.output else ""))
        try:
            preds, rate = attribute_rows(model, rows, progress=not args.no_progress)
        except RowError as exc:
            raise ValueError(f"{args.data}: {exc}") from None
        print(f"{len(preds)} trajectories, {rate:.1f} trajectories/s", file=sys.stderr)
    if args.output:  # whole or not at all, its folder made: a bad path does not lose the predictions
        write_rows(preds, args.output)
    else:
        sys.stdout.write("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in preds))
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The ``attribute`` subcommand."""
    from .cli import add_progress_arg

    parser = subparsers.add_parser("attribute", help="predict (agent, step, modes) with a trained DCL attributor",
                                   description=__doc__)
    parser.add_argument("--model", required=True, help="a DCL output directory (dcl_config.json + model.safetensors)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--trace", nargs="+", help="stored trace id(s) (unique prefixes); the verdict is written back")
    source.add_argument("--data", help="DCL rows (JSON lines) to predict for")
    parser.add_argument("--store", help="trace store directory (default: $AEGIS_TRACE_DIR or ./aegis-traces)")
    parser.add_argument("--output", help="write predictions here instead of stdout (.jsonl.gz: gzipped)")
    add_progress_arg(parser)
    parser.set_defaults(func=run)
    return parser
