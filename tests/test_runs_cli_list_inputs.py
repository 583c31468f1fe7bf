"""An output option naming one of the items of an option that takes several inputs
(``nargs='+'``: ``benchmark --train/--test``) is refused before anything runs or is written."""

from __future__ import annotations

import json

import pytest

from aegis_probe.train import cli
from test_train_data import whowhen_record


@pytest.mark.parametrize("option", ["--train", "--test"])
def test_benchmark_refuses_an_out_that_is_one_of_its_list_inputs(tmp_path, capsys, option):
    sets = {name: tmp_path / f"{name}.jsonl" for name in ("train", "more", "test")}
    for i, path in enumerate(sets.values()):
        path.write_text(json.dumps(whowhen_record(mistake_step=str(i))) + "\n")
    before = {path: path.read_bytes() for path in sets.values()}
    target = sets["more"]
    train, test = ([sets["train"], target], [sets["test"]]) if option == "--train" else ([sets["train"]], [sets["test"], target])
    argv = ["benchmark", "--train", *map(str, train), "--test", *map(str, test), "--out", str(target), "--no-progress"]
    assert cli.main(argv) == 2
    assert capsys.readouterr().err == f"error: --out {target} is an input of this command; choose another path\n"
    assert {path: path.read_bytes() for path in sets.values()} == before
