"""Reading features: computed from the trace text, blind to agent names, fed to the DCL; the
``benchmark`` command end to end on a tiny set with them."""

from __future__ import annotations

import json

import pytest

from aegis_probe.train.dcl.inputs import DEFAULT_ENSEMBLE
from aegis_probe.train.dcl.reading import ALL_FEATURES, FEATURES, ROUND3, step_features

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


def column(rows: list[list[float]], name: str, names=FEATURES) -> list[float]:
    return [r[list(names).index(name)] for r in rows]


def every(texts, speakers, task=TASK) -> list[list[float]]:
    """Every feature's column (:data:`ALL_FEATURES`), the round-3 ones included."""
    return step_features(texts, speakers, task, ALL_FEATURES)


def col(rows: list[list[float]], name: str) -> list[float]:
    return column(rows, name, ALL_FEATURES)


def test_a_tool_result_turn_passes_the_answer_to_its_requester():
    """A turn that only reports the output of the code the step before asked to run is a result
    turn; the answer's content it states first counts as its requester's."""
    texts = ["Plan: count the lamps in the depot ledger and add the delivery.",
             "The ledger rows are in the shared folder.",
             "I will sum the ledger rows.\n```python\nprint(sum(rows) + delivery)\n```",
             "exitcode: 0 (execution succeeded)\nCode output: 714",
             "The code shows the depot holds 714 lamps, so that is our result.",
             "FINAL ANSWER: 714. TERMINATE"]
    speakers = ["Planner", "Searcher", "Coder", "Terminal", "Checker", "Planner"]
    rows = every(texts, speakers)
    assert all(len(r) == len(ALL_FEATURES) and all(0.0 <= v <= 1.0 for v in r) for r in rows)
    assert col(rows, "result_turn") == [0, 0, 0, 1, 0, 0]
    assert col(rows, "requests_result") == [0, 0, 1, 0, 0, 0]
    assert col(rows, "answer_provenance").index(1.0) == 3  # the round-2 feature: where the number was first said
    assert col(rows, "answer_provenance_passed").index(1.0) == 2  # passed to the step whose code produced it
    # the same output from the requester itself, or after a step without code, is no result turn
    for speaker_3, text_2 in (("Coder", texts[2]), ("Terminal", "I will sum the ledger rows.")):
        rows = every([*texts[:2], text_2, *texts[3:]], [*speakers[:3], speaker_3, *speakers[4:]])
        assert col(rows, "result_turn")[3] == 0.0 and col(rows, "answer_provenance_passed").index(1.0) == 3
    prose = every([*texts[:3], "The code ran, and it printed the total, which is 714, as we expected it to be.", *texts[4:]],
                  speakers)
    assert col(prose, "result_turn")[3] == 0.0 and col(prose, "answer_provenance_passed").index(1.0) == 3


def test_transitive_provenance_follows_the_computation_back_to_its_input():
    """The answer is first stated by the step that computed it; the step whose new number that
    computation used (not one of the task's) is the provenance's source."""
    texts = ["@Searcher please find the crates in the depot ledger.",
             "The ledger says the depot got 12 crates.",  # a new number, not in the task
             "Each crate holds lamps, as the delivery note says.",
             "Computing 12 * 59.5 gives 714.",  # takes up 12; 59.5 is new here
             "FINAL ANSWER: 714 lamps. TERMINATE"]
    speakers = ["Planner", "Searcher", "Reader", "Coder", "Planner"]
    rows = every(texts, speakers)
    assert col(rows, "answer_provenance").index(1.0) == 3 and col(rows, "answer_provenance_passed").index(1.0) == 3
    assert col(rows, "provenance_source") == [0, 1, 0, 0, 0]
    assert col(rows, "answer_inputs_introduced") == [0, 1, 0, 0, 0]  # 12: the one number it took from an earlier step
    # a number of the task is no input from a step
    rows = every(texts, speakers, task=TASK + " The depot got 12 crates.")
    assert col(rows, "provenance_source")[1] == col(rows, "answer_inputs_introduced")[1] == 0.0
    # no step before the answer said its content: no provenance, no source
    rows = every([*texts[:3], "Computing it now.", "FINAL ANSWER: 714 lamps. TERMINATE"], speakers)
    assert sum(col(rows, "answer_provenance_passed")) == sum(col(rows, "provenance_source")) == 0


def test_round3_features_on_odd_input():
    """Empty turns, a huge turn, non-ASCII and broken code fences: every value in [0, 1], names
    changing nothing, and a feature name that does not exist is one clear error."""
    huge = "```python\n" + "print('Zürich ✓ 😀')\n" * 50_000  # an unclosed fence, about 1 MB
    texts = ["", huge, "exitcode: 0\nZürich ✓ 😀 \x00 \ud800 " * 3, "", "```", "ok", "FINAL ANSWER: Zürich. TERMINATE", ""]
    speakers = ["a", "b", "c", "a", "b", "c", "a", "b"]
    rows = every(texts, speakers, task="Which city? 城市")
    assert len(rows) == 8 and all(len(r) == len(ALL_FEATURES) and all(0.0 <= v <= 1.0 for v in r) for r in rows)
    assert col(rows, "result_turn")[2] == 1.0 and col(rows, "result_turn")[0] == 0.0
    renamed = every(texts, ["Ü1", "b_b", "c c", "Ü1", "b_b", "c c", "Ü1", "b_b"], task="Which city? 城市")
    assert renamed == rows
    empty = every([""] * 3, ["x", "y", "x"], task="")
    assert [r[-len(ROUND3):] for r in empty] == [[0.0] * len(ROUND3)] * 3
    with pytest.raises(ValueError, match="'no_such_feature' is no reading feature"):
        step_features(["a"], ["x"], features=["novelty", "no_such_feature"])
    assert [r[: len(FEATURES)] for r in rows] == step_features(texts, speakers, "Which city? 城市")
    assert [r[len(ALL_FEATURES) - len(ROUND3):] for r in rows] == step_features(texts, speakers, "Which city? 城市", ROUND3)


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
    rows = step_features(texts, speakers, task="part1 part2", features=ALL_FEATURES)
    assert len(rows) == 300 and all(len(r) == len(ALL_FEATURES) and all(0.0 <= v <= 1.0 for v in r) for r in rows)
    sets = [set(tokens(t)) - {NAME_PLACEHOLDER} for t in texts]  # the texts name no agent
    for i in (0, 1, 150, 299):
        jaccard = max((len(sets[i] & x) / len(sets[i] | x) for x in sets[:i] if sets[i] | x), default=0.0)
        assert col(rows, "repeats_earlier")[i] == jaccard
        new = sets[i] - set(tokens("part1 part2")).union(*sets[:i])
        later = sets[i + 1:]
        depending = sum(bool(new & x) for x in later) / len(later) if new and later else 0.0
        assert col(rows, "steps_depending")[i] == depending


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
    assert report["inputs"] == {"reading_features": True, "features": list(FEATURES), "text_embeddings": False,
                                "anonymise_agents": True, "members": DEFAULT_ENSEMBLE}
    dcl = report["tests"][str(test)]["results"]["DCL (trained on the training sets)"]
    assert dcl["step"]["value"] >= 0.75 and dcl["agent"]["value"] >= dcl["step"]["value"]
    assert not (tmp_path / "emb.safetensors").exists()  # nothing was encoded
    model = DCLAttributor.load(out / "model")
    model.encoder.encode = None  # features only: the encoder is never called
    pred = model.predict({"id": "x", "task": "Sum.", "turns": [{"agent": "p", "text": "Looked at the records."},
                                                                 {"agent": "q", "text": "I think the total is 55."},
                                                                 {"agent": "p", "text": "FINAL ANSWER: 55."}]})
    assert (pred["step"], pred["agent"]) == (1, "q")


def test_dcl_reads_the_features_it_is_told_and_older_models_load(tmp_path, capsys):
    """``dcl --features`` picks the reading features (saved in dcl_config.json); a name that is
    none, or one named twice, is one error; a model saved before the features were named reads
    the round-2 set."""
    from aegis_probe.train.cli import main
    from aegis_probe.train.dcl.attributor import SPEC_FILE, DCLAttributor
    from aegis_probe.train.dcl.reading import ROUND2
    from test_train_data import whowhen_record

    src = tmp_path / "ww.jsonl"
    src.write_text("".join(json.dumps(whowhen_record(mistake_step=str(s), question_ID=f"q{s}")) + "\n" for s in (0, 1, 2)))
    rows = tmp_path / "rows.jsonl"
    assert main(["build", "dcl", str(src), "-o", str(rows), "--no-progress"]) == 0
    tiny = ["--data", str(rows), "--epochs", "1", "--hidden_size", "8", "--no-progress"]
    assert main(["dcl", *tiny, "--out", str(tmp_path / "r3"), "--features", "result_turn", "provenance_source"]) == 0
    spec = json.loads((tmp_path / "r3" / SPEC_FILE).read_text())
    assert spec["features"] == ["result_turn", "provenance_source"]
    assert DCLAttributor.load(tmp_path / "r3").head.feature_step[0].in_features == 2
    for bad, what in ((["novelty", "bogus"], "'bogus' is no reading feature"), (["novelty", "novelty"], "'novelty' is named twice")):
        capsys.readouterr()
        assert main(["dcl", *tiny, "--out", str(tmp_path / "bad"), "--features", *bad]) == 2
        assert f"error: --features: {what}" in capsys.readouterr().err and not (tmp_path / "bad").exists()
    assert main(["dcl", *tiny, "--out", str(tmp_path / "r2"), "--features", *ROUND2]) == 0
    capsys.readouterr()
    assert main(["attribute", "--model", str(tmp_path / "r2"), "--data", str(rows), "--no-progress"]) == 0
    before = capsys.readouterr().out
    spec_file = tmp_path / "r2" / SPEC_FILE
    spec = json.loads(spec_file.read_text())
    assert spec.pop("features") == list(ROUND2)
    spec_file.write_text(json.dumps(spec))  # as saved before the features were named
    assert DCLAttributor.load(tmp_path / "r2").spec["features"] == list(ROUND2)
    assert main(["attribute", "--model", str(tmp_path / "r2"), "--data", str(rows), "--no-progress"]) == 0
    assert capsys.readouterr().out == before  # the same features read: the same predictions


def test_benchmark_features_option_trains_the_named_set(tmp_path, capsys):
    """``benchmark --features`` trains a model reading those features (round 2's, to rerun it);
    without it, the default :data:`FEATURES`."""
    from aegis_probe.train.cli import main
    from aegis_probe.train.dcl.reading import ROUND2
    from test_benchmark import system_runs
    from aegis_probe.train.importers.native import write

    train = write(system_runs(["alpha", "beta"], 6, "a", 0), tmp_path / "train.jsonl")
    test = write(system_runs(["Planner", "Coder"], 4, "b", 1), tmp_path / "test.jsonl")
    options = ["--train", str(train), "--test", str(test), "--epochs", "1", "--bootstrap", "10", "--no-progress"]
    assert main(["benchmark", *options, "--out", str(tmp_path / "r2"), "--features", *ROUND2]) == 0
    assert main(["benchmark", *options, "--out", str(tmp_path / "default")]) == 0
    for name, expected in (("r2", ROUND2), ("default", FEATURES)):
        assert json.loads((tmp_path / name / "benchmark.json").read_text())["inputs"]["features"] == list(expected)
    assert main(["benchmark", *options, "--out", str(tmp_path / "bad"), "--features", "bogus"]) == 2
    assert "error: --features: 'bogus' is no reading feature" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()  # refused before --out is made
