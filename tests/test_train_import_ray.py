"""``train import --executor ray`` on a real local Ray (loopback only): a folder of campaign
outputs is split into its stores, each converted in a Ray task; the output is the local import's
of the same stores, byte for byte, with the same duplicates skipped and errors kept."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

if importlib.util.find_spec("ray") is None:  # not imported here: Ray reads its switches at import
    pytest.skip("needs Ray (the scale extra)", allow_module_level=True)
pytest.importorskip("autogen_agentchat")

from test_realuse_store import copies, real_line  # noqa: E402

from aegis_probe.storage.store import SPANS_FILE  # noqa: E402
from aegis_probe.train import cli  # noqa: E402
from aegis_probe.train.importers.shards import shards  # noqa: E402

LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}


def _campaigns(tmp_path: Path) -> Path:
    """Two campaign folders (traces/ and baselines/ stores); c2's traces repeat two of c1's runs,
    and c1's baselines end in a line that is no OTLP request."""
    line, trace_id = real_line(tmp_path, 2)
    root = tmp_path / "campaigns"
    for store, ids in (("c1/traces", (1, 2, 3)), ("c1/baselines", (4, 5)), ("c2/traces", (2, 3, 6))):
        (root / store).mkdir(parents=True)
        copies(root / store / SPANS_FILE, line, trace_id, iter(ids))
    with open(root / "c1" / "baselines" / SPANS_FILE, "a") as fh:
        fh.write('{"resourceSpans": "nope"}\n')
    (root / ".hidden").mkdir()
    copies(root / ".hidden" / SPANS_FILE, line, trace_id, iter((9,)))
    return root


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    """One local Ray on 127.0.0.1 for the module (the switches set before Ray is imported); the
    executor uses a Ray already started as it is."""
    saved = {k: os.environ.get(k) for k in [*LOOPBACK_ENV, "RAY_ADDRESS"]}
    os.environ.update(LOOPBACK_ENV)
    os.environ.pop("RAY_ADDRESS", None)
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def test_import_on_ray_matches_the_local_import_of_its_shards(tmp_path, capsys):
    root = _campaigns(tmp_path)
    parts = shards([str(root)])
    assert parts == [str(root / s) for s in ("c1/baselines", "c1/traces", "c2/traces")]  # hidden folders are no data

    local, remote = tmp_path / "local.jsonl", tmp_path / "ray.jsonl"
    assert cli.main(["import", *parts, "-o", str(local), "--errors", str(tmp_path / "le.json"), "--no-progress"]) == 0
    said = capsys.readouterr().out
    assert cli.main(["import", str(root), "-o", str(remote), "--errors", str(tmp_path / "re.json"), "--no-progress",
                     "--executor", "ray"]) == 0
    assert capsys.readouterr().out == said.replace(str(local), str(remote)) == \
        f"wrote 6 trajectories to {remote} (2 duplicate records skipped)\n"
    assert remote.read_bytes() == local.read_bytes()
    assert [json.loads(r)["trace_id"][-1] for r in remote.read_text().splitlines()] == list("451236")
    errors = json.loads((tmp_path / "re.json").read_text())
    assert errors == json.loads((tmp_path / "le.json").read_text()) and [e["record"] for e in errors] == ["line 3"]


def test_a_shard_that_fails_is_one_error_naming_it(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    out = tmp_path / "o.jsonl"
    assert cli.main(["import", str(tmp_path / "empty"), "-o", str(out), "--no-progress", "--executor", "ray"]) != 0
    err = capsys.readouterr().err
    assert f"error: {tmp_path / 'empty'}: ValueError: no data files at {tmp_path / 'empty'}" in err
    assert not out.exists()
