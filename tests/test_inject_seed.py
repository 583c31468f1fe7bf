"""``inject --seed`` takes what the train commands take: a seed >= 0."""

from __future__ import annotations

from aegis_probe import cli


def test_inject_refuses_a_negative_seed_naming_option_and_value(tmp_path, capsys) -> None:
    """``--seed -1`` was accepted (and the campaign ran); now one line like the other options'."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "task": "What is 1 + 1?", "expected": "2"}\n')
    code = cli.main(["inject", "--app", "aegis_probe.demos.autogen:build_app", "--tasks", str(tasks),
                     "--out", str(tmp_path / "out"), "--seed", "-1"])
    err = capsys.readouterr().err
    assert (code, err) == (2, "error: --seed must be >= 0, not -1\n")
    assert not (tmp_path / "out").exists()
