"""Inputs of the train commands: ``import`` writes a record read twice once and says how many it
skipped, shows a progress bar like the other commands (``--no-progress``); ``.jsonl.gz`` and
``.json.gz`` inputs read as their plain files wherever those are read, and a corrupt or truncated
gzip file is one error naming it."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

from aegis_probe.train import cli
from test_train_data import whowhen_record, write_json

pytestmark = pytest.mark.train
ROW = {"id": "r1", "turns": [{"agent": "Coder", "text": "x = 1"}, {"agent": "Tester", "text": "fails"}],
       "label_agents": ["Coder"], "label_modes": [], "label_step": 0, "positive": False}


def run_ids(path: Path) -> list[str]:
    return [json.loads(line)["run_id"] for line in path.read_text(encoding="utf-8").splitlines()]


def gzipped(path: Path) -> Path:
    out = path.with_name(path.name + ".gz")
    out.write_bytes(gzip.compress(path.read_bytes()))
    return out


def test_import_writes_a_record_read_twice_once(tmp_path, capsys):
    lines = tmp_path / "ww.jsonl"  # one record twice, and one other
    lines.write_text("".join(json.dumps(r) + "\n" for r in (whowhen_record(), whowhen_record(), whowhen_record(mistake_step="2"))))
    d = tmp_path / "ww"
    write_json(d / "1.json", whowhen_record())
    write_json(d / "2.json", whowhen_record())  # the same content in another file: another record of the data set
    out = tmp_path / "out.jsonl"
    assert cli.main(["import", str(lines), str(d), str(lines), "-o", str(out), "--no-progress"]) == 0
    assert capsys.readouterr().out == f"wrote 4 trajectories to {out} (4 duplicate records skipped)\n"
    assert run_ids(out) == ["whowhen:ww:line1", "whowhen:ww:line3", "whowhen:1", "whowhen:2"]  # the first of each kept
    assert cli.main(["import", str(d), "-o", str(out), "--no-progress"]) == 0
    assert capsys.readouterr().out == f"wrote 2 trajectories to {out}\n"


def test_import_shows_progress_on_a_terminal_unless_told_not_to(tmp_path, capsys, monkeypatch):
    d = tmp_path / "ww"
    for i in range(3):
        write_json(d / f"{i}.json", whowhen_record(question_ID=f"q{i}"))
    out = tmp_path / "out.jsonl"
    assert cli.main(["import", str(d), "-o", str(out)]) == 0  # a log or a pipe: the summary only
    assert capsys.readouterr().err == f"{d}: 3 imported, 0 errors, 0 flagged\n"
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # a terminal: the captured stream says it is one
    assert cli.main(["import", str(d), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"import {d}: " in err and "3record" in err  # a tqdm bar counting the records read
    assert cli.main(["import", str(d), "-o", str(out), "--no-progress"]) == 0
    assert capsys.readouterr().err == f"{d}: 3 imported, 0 errors, 0 flagged\n"


def test_gzipped_inputs_read_as_their_plain_files(tmp_path, capsys):
    d = tmp_path / "ww"
    plain = write_json(d / "1.json", whowhen_record())
    gzipped(write_json(tmp_path / "12.json", whowhen_record(mistake_step="2"))).rename(d / "12.json.gz")
    out = tmp_path / "trajs.jsonl"
    assert cli.main(["import", str(d), "-o", str(out), "--no-progress"]) == 0
    assert run_ids(out) == ["whowhen:1", "whowhen:12"]  # 12.json.gz is record 12, in natural order
    packed = gzipped(out)
    assert cli.main(["import", str(packed), str(gzipped(plain)), "-o", str(tmp_path / "again.jsonl"), "--no-progress"]) == 0
    assert "(1 duplicate records skipped)" in capsys.readouterr().out  # 1.json.gz is the record already in trajs.jsonl.gz
    rows = tmp_path / "rows.jsonl"
    assert cli.main(["build", "dcl", str(packed), "-o", str(rows), "--no-progress"]) == 0
    data = gzipped(rows)
    assert cli.main(["dcl", "--data", str(data), "--out", str(tmp_path / "m"), "--epochs", "1", "--text_embeddings", "false",
                     "--hidden_size", "8", "--no-progress"]) == 0
    preds = tmp_path / "preds.jsonl.gz"  # an output named .gz is written gzipped, so it reads back as one
    assert cli.main(["attribute", "--model", str(tmp_path / "m"), "--data", str(data), "--output", str(preds), "--no-progress"]) == 0
    assert len(gzip.decompress(preds.read_bytes()).splitlines()) == 2
    assert cli.main(["eval", str(packed), "--predictions", str(preds), "--out-dir", str(tmp_path / "ev"),
                     "--bootstrap", "10", "--no-progress"]) == 0
    assert json.loads((tmp_path / "ev" / "metrics.json").read_text())["n_predicted"] == 2
    for command in (["import", str(packed)], ["build", "dcl", str(packed)]):
        assert cli.main([*command, "-o", str(tmp_path / "again.jsonl.gz"), "--no-progress"]) == 0
        assert len(gzip.decompress((tmp_path / "again.jsonl.gz").read_bytes()).splitlines()) == 2


@pytest.mark.parametrize("damage", ["not gzip", "truncated"])
def test_a_corrupt_gzip_is_one_error_naming_it(damage, tmp_path, capsys):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({**ROW, "id": f"r{i}", "turns": ROW["turns"] * 50}) + "\n" for i in range(40)))
    packed = gzipped(rows)
    packed.write_bytes(b"plain text, no gzip" if damage == "not gzip" else packed.read_bytes()[:200])
    good = write_json(tmp_path / "ww" / "1.json", whowhen_record())
    for argv in (["import", str(packed), "-o", str(tmp_path / "o.jsonl")],
                 ["dcl", "--data", str(packed), "--out", str(tmp_path / "m"), "--epochs", "1"],
                 ["eval", str(good), "--predictions", str(packed), "--out-dir", str(tmp_path / "ev")]):
        assert cli.main([*argv, "--no-progress"]) == 2
        errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
        assert len(errors) == 1 and errors[0].startswith(f"error: {packed}") and "not a readable gzip file" in errors[0], errors
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.jsonl", "rows.jsonl.gz", "ww"]  # nothing written


@pytest.mark.parametrize("bad", ["", '{"id": "r1", "tu', "\x00\x01\xff", "DIR", "[1, 2]"])
def test_bad_data_files_of_every_reader_are_one_error_naming_them(bad, tmp_path, capsys):
    """Empty, truncated JSON, binary bytes, a directory, a record that is no object: for every
    command reading rows or trajectories, exit 2 and one error line naming the file."""
    path = tmp_path / "bad.jsonl"
    if bad == "DIR":
        path.mkdir()
    else:
        path.write_bytes(bad.encode("latin-1"))
    good = write_json(tmp_path / "ww" / "1.json", whowhen_record())
    for argv in (["import", str(path), "-o", str(tmp_path / "o.jsonl")], ["build", "dcl", str(path), "-o", str(tmp_path / "o.jsonl")],
                 ["eval", str(path)], ["eval", str(good), "--predictions", str(path)], ["eval", str(good), "--method", "majority",
                 "--fit-on", str(path)], ["dcl", "--data", str(path), "--out", str(tmp_path / "m")],
                 ["benchmark", "--train", str(path), "--test", str(good), "--out", str(tmp_path / "b")]):
        assert cli.main([*argv, "--no-progress"]) == 2, argv
        errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error") or "Traceback" in line]
        assert len(errors) == 1 and str(path) in errors[0], (argv, errors)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "ww"]  # nothing written


def test_no_progress_quiets_the_bars_of_the_libraries_too(tmp_path, capsys):
    """``--no-progress`` showed no bar of ours, yet transformers' "Loading weights" (the encoder)
    and datasets' "Saving the dataset" (``--hf-dir``) still drew theirs."""
    src = write_json(tmp_path / "ww" / "1.json", whowhen_record())
    rows = tmp_path / "rows.jsonl"
    assert cli.main(["build", "dcl", str(src), "-o", str(rows), "--hf-dir", str(tmp_path / "hf"), "--no-progress"]) == 0
    assert capsys.readouterr().err == f"{src}: 1 imported, 0 errors, 0 flagged\n"
    assert cli.main(["dcl", "--data", str(rows), "--out", str(tmp_path / "m"), "--epochs", "1", "--hidden_size", "8",
                     "--text_embeddings", "true", "--no-progress"]) == 0  # a text model: the encoder is loaded
    assert capsys.readouterr().err == ""
    assert cli.main(["attribute", "--model", str(tmp_path / "m"), "--data", str(rows), "--no-progress"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("1 trajectories, ")


def test_every_command_that_imports_shows_the_import_bar(tmp_path, capsys, monkeypatch):
    """build, eval (and its --fit-on) and export read their sources as import does, with its bar
    (they showed none while reading, however large the source); --no-progress hides it."""
    src = write_json(tmp_path / "ww" / "1.json", whowhen_record())
    fit = write_json(tmp_path / "fit" / "2.json", whowhen_record())
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # a terminal: the captured stream says it is one
    for argv in (["build", "dcl", str(src), "-o", str(tmp_path / "rows.jsonl")],
                 ["eval", str(src), "--method", "majority", "--fit-on", str(fit), "--out-dir", str(tmp_path / "ev"),
                  "--bootstrap", "5"],
                 ["export", str(src), "--format", "whowhen", "-o", str(tmp_path / "out")]):
        assert cli.main(argv) == 0
        err = capsys.readouterr().err
        assert f"import {src}: " in err and (argv[0] != "eval" or f"import {fit}: " in err), argv
        assert cli.main([*argv, "--no-progress"]) == 0
        assert "import " not in capsys.readouterr().err


def test_import_refuses_to_write_over_one_of_its_sources(tmp_path, capsys):
    """With several sources, -o naming one of them replaced that input with the import's output."""
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text(json.dumps(whowhen_record()) + "\n")
    second.write_text(json.dumps(whowhen_record(mistake_step="2")) + "\n")
    before = first.read_bytes()
    assert cli.main(["import", str(second), str(first), "-o", str(first), "--no-progress"]) == 2
    assert capsys.readouterr().err == f"error: --out {first} is an input of this command; choose another path\n"
    assert first.read_bytes() == before


def test_every_command_that_imports_keeps_a_record_read_twice_once(tmp_path, capsys):
    """build (and eval, export) read their source as import does: a record twice is read once,
    and they say how many they skipped (build wrote a row for each copy)."""
    lines = tmp_path / "ww.jsonl"  # one record twice, and one other
    lines.write_text("".join(json.dumps(r) + "\n" for r in (whowhen_record(), whowhen_record(), whowhen_record(mistake_step="2"))))
    rows = tmp_path / "rows.jsonl"
    assert cli.main(["build", "dcl", str(lines), "-o", str(rows), "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert out == f"wrote 2 dcl rows to {rows}\n"
    assert f"{lines}: 1 duplicate records skipped\n" in err
    assert [json.loads(r)["id"] for r in rows.read_text(encoding="utf-8").splitlines()] == ["whowhen:ww:line1", "whowhen:ww:line3"]
    for argv in (["eval", str(lines), "--method", "majority", "--out-dir", str(tmp_path / "ev"), "--bootstrap", "5"],
                 ["export", str(lines), "--format", "whowhen", "-o", str(tmp_path / "out")]):
        assert cli.main([*argv, "--no-progress"]) == 0
        assert f"{lines}: 1 duplicate records skipped\n" in capsys.readouterr().err, argv
    assert len(list((tmp_path / "out").iterdir())) == 2
    unique = tmp_path / "unique.jsonl"
    unique.write_text(json.dumps(whowhen_record()) + "\n")
    assert cli.main(["build", "dcl", str(unique), "-o", str(rows), "--no-progress"]) == 0
    assert "duplicate" not in capsys.readouterr().err
