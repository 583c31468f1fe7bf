"""Reading features: computed from the trace text, blind to agent names, fed to the DCL; the
``benchmark`` command end to end on a tiny set with them."""

from __future__ import annotations

import json

import pytest

from aegis_probe.train.dcl.reading import FEATURES, step_features

pytestmark = pytest.mark.train
COL = {name: i for i, name in enumerate(FEATURES)}
TASK = "How many lamps does the depot hold after the delivery? Answer with a number."


def run(source_step: int, names=("Planner", "Searcher", "Coder")) -> tuple[list[str], list[str]]:
    """A 6-step run whose final answer 714 first enters at ``source_step`` (the others talk around it)."""
    p, s, c = names
    texts = [f"@{s} please look up the stock of lamps in the depot ledger.",
             f"The ledger lists the depot stock for lamps; asking {c} to check the delivery note.",
             f"{p}, the delivery note adds crates of lamps to the depot.",
             "I will count the crates of lamps in the delivery note.",
             f"Counted: the crates hold lamps; passing it to {p}.",
             "FINAL ANSWER: 714 lamps. TERMINATE"]
    texts[source_step] += " The total is 714."
    return texts, [p, s, c, s, c, p]


def column(rows: list[list[float]], name: str) -> list[float]:
    return [r[COL[name]] for r in rows]


def test_provenance_follows_the_content_not_the_position():
    for source in (1, 3):
        rows = step_features(*run(source), task=TASK)
        assert len(rows) == 6 and all(len(r) == len(FEATURES) and all(0.0 <= v <= 1.0 for v in r) for r in rows)
        assert column(rows, "answer_provenance").index(1.0) == source
        assert column(rows, "answer_numbers_introduced")[source] == 1.0
        assert column(rows, "feeds_provenance").index(1.0) == source - 1
    # the answer step itself introduces the number when no step before it did
    rows = step_features(*run(5), task=TASK)
    assert sum(column(rows, "answer_provenance")) == 0 and column(rows, "answer_numbers_introduced")[5] == 1.0


def test_error_cues_and_reuse_are_read_from_the_text():
    texts, speakers = run(2)
    texts[3] = "Error: the file was not found, the count failed."
    rows = step_features(texts, speakers, task=TASK)
    assert column(rows, "error_cues")[3] > 0.5 and column(rows, "error_cues")[2] == 0.0
    assert column(rows, "error_cues_next")[2] == column(rows, "error_cues")[3]
    assert column(rows, "reused_later")[2] > 0  # 714 is repeated in the final answer
    assert column(rows, "speaker_share") == [2 / 6] * 6
    assert column(rows, "speaker_first_turn") == [1, 1, 1, 0, 0, 0]


def test_agent_names_do_not_change_any_value():
    texts, speakers = run(3)
    base = step_features(texts, speakers, task=TASK)
    permuted = run(3, names=("Coder", "Planner", "Searcher"))  # the same run, names permuted everywhere
    renamed = run(3, names=("WebSurfer", "Orchestrator", "Data_Analysis_Expert"))  # other names altogether
    assert step_features(*permuted, task=TASK) == base
    assert step_features(*renamed, task=TASK) == base


def test_bad_input_is_one_clear_error():
    from aegis_probe.train.dcl.examples import example_from_row

    with pytest.raises(ValueError, match="3 step texts but 2 speakers"):
        step_features(["a", "b", "c"], ["x", "y"])
    with pytest.raises(ValueError, match="step 1 text is int, not a string"):
        step_features(["a", 5], ["x", "y"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="the task is list"):
        step_features(["a"], ["x"], task=["t"])  # type: ignore[arg-type]
    assert step_features([], []) == []
    with pytest.raises(ValueError, match=r"DCL row 'r7' turn 1: not an object with an 'agent'"):
        example_from_row({"id": "r7", "turns": [{"agent": "a", "text": "x"}, {"text": "y"}]}, ["FM-1.1"])
    with pytest.raises(ValueError, match=r"DCL row 'r8': 'turns' must be a list"):
        example_from_row({"id": "r8", "turns": "hello"}, ["FM-1.1"])
    ex = example_from_row({"id": "r9", "task": TASK, "turns": [{"agent": "a", "text": None}, {"agent": "b", "text": "714"}]},
                          ["FM-1.1"])
    assert tuple(ex.features.shape) == (2, len(FEATURES))


def test_a_long_run_with_odd_bytes_keeps_the_definitions():
    """Hundreds of steps with NULs, lone surrogates and emoji: every value in [0, 1], and the
    overlap features equal their plain definitions (Jaccard with earlier steps, later steps reusing
    a new token), whatever indexing computes them."""
    import random

    from aegis_probe.train.dcl.reading import NAME_PLACEHOLDER, tokens

    rng = random.Random(3)
    vocab = [f"part{i}" for i in range(60)] + [str(i) for i in range(30)] + ["\x00", "\ud800", "🙂", "errors", "sorry"]
    texts = [" ".join(rng.choice(vocab) for _ in range(rng.randint(0, 12))) for _ in range(300)]
    speakers = [f"agent_{i % 5}" for i in range(300)]
    rows = step_features(texts, speakers, task="part1 part2")
    assert len(rows) == 300 and all(len(r) == len(FEATURES) and all(0.0 <= v <= 1.0 for v in r) for r in rows)
    sets = [set(tokens(t)) - {NAME_PLACEHOLDER} for t in texts]  # the texts name no agent
    for i in (0, 1, 150, 299):
        jaccard = max((len(sets[i] & x) / len(sets[i] | x) for x in sets[:i] if sets[i] | x), default=0.0)
        assert column(rows, "repeats_earlier")[i] == jaccard
        new = sets[i] - set(tokens("part1 part2")).union(*sets[:i])
        later = sets[i + 1:]
        depending = sum(bool(new & x) for x in later) / len(later) if new and later else 0.0
        assert column(rows, "steps_depending")[i] == depending


def test_benchmark_with_reading_features_end_to_end(tmp_path, capsys):
    """Features only: trained on one tiny system, scored on another (other names, longer runs),
    without the encoder ever being called; the saved model reloads and reads a new trace."""
    import random

    from aegis_probe.train.cli import main
    from aegis_probe.train.dcl.attributor import DCLAttributor
    from aegis_probe.train.importers.native import write
    from aegis_probe.trajectory import Fault, Labels, Step, Trajectory

    def system(names: list[str], n: int, prefix: str, seed: int, turns: int) -> list[Trajectory]:
        rng = random.Random(seed)
        out = []
        for i in range(n):
            source = rng.randrange(1, turns - 1)  # where the wrong number enters; the last step reports it
            texts = [f"Step {k}: I looked at the records and passed them on." for k in range(turns)]
            texts[source] = f"I think the total is {100 + i}."
            texts[-1] = f"FINAL ANSWER: {100 + i}. TERMINATE"
            steps = [Step(index=k, agent=names[k % len(names)], output=t) for k, t in enumerate(texts)]
            out.append(Trajectory(run_id=f"{prefix}-{i}", task="Sum the records.", steps=steps,
                                  labels=Labels(faults=[Fault(agent=steps[source].agent, step=source)], source="test")))
        return out

    train = write(system(["alpha", "beta"], 16, "a", 0, 6), tmp_path / "train.jsonl")
    test = write(system(["Planner", "Coder", "Checker"], 12, "b", 1, 10), tmp_path / "test.jsonl")
    out = tmp_path / "bench"
    assert main(["benchmark", "--train", str(train), "--test", str(test), "--out", str(out), "--epochs", "15",
                 "--bootstrap", "50", "--embedding-cache", str(tmp_path / "emb.safetensors")]) == 0
    assert "| DCL (trained on the training sets) |" in capsys.readouterr().out
    report = json.loads((out / "benchmark.json").read_text())
    assert report["inputs"] == {"reading_features": True, "text_embeddings": False, "anonymise_agents": True}
    dcl = report["tests"][str(test)]["results"]["DCL (trained on the training sets)"]
    assert dcl["step"]["value"] >= 0.75 and dcl["agent"]["value"] >= dcl["step"]["value"]
    assert not (tmp_path / "emb.safetensors").exists()  # nothing was encoded
    model = DCLAttributor.load(out / "model")
    model.encoder.encode = None  # features only: the encoder is never called
    pred = model.predict({"id": "x", "task": "Sum.", "turns": [{"agent": "p", "text": "Looked at the records."},
                                                                 {"agent": "q", "text": "I think the total is 55."},
                                                                 {"agent": "p", "text": "FINAL ANSWER: 55."}]})
    assert (pred["step"], pred["agent"]) == (1, "q")
