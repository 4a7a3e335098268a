"""The training infrastructure, piece by piece: config parsing and its errors, atomic checkpoints, the run
log, evaluation, the LR schedule and model cards. Real objects throughout (a real Accelerator, real tiny
models); the recipe as a whole is tested in test_pretrain_recipe.py.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch
import yaml
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState

import hfzoo
from hfzoo.cards import (
    LOSS_CURVE,
    PRETRAINING_SECTIONS,
    RunRecord,
    describe_objective,
    pretraining_metadata,
    render_card,
    write_card,
)
from hfzoo.recipe_config import from_dict
from hfzoo.recipes.pretrain import PretrainConfig, main, parse_args
from hfzoo.training import checkpointing, get_objective, latest_checkpoint, list_checkpoints
from hfzoo.training.checkpointing import Progress, checkpoint_to_resume, load_checkpoint, save_checkpoint
from hfzoo.training.evaluation import EvalShard, evaluate
from hfzoo.training.logging import RunLogger, read_log
from hfzoo.training.loop import TrainMeter, build_optimizer, build_scheduler

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def accelerator():
    """A fresh single-process CPU Accelerator; accelerate's process-wide state is reset afterwards."""
    yield Accelerator(cpu=True)
    GradientState._reset_state()
    AcceleratorState._reset_state(reset_partial_state=True)


# ------------------------------------------------------------------------------------------------ config
def test_yaml_then_command_line_overrides_with_types(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("preset: gpt-tiny\nobjective: clm\nlearning_rate: 3e-4\nmodel: {hidden_dropout: 0.2}\n")
    config = parse_args(
        [
            "--config",
            str(path),
            "--max_steps",
            "7",
            "--model.attention_dropout",
            "0",
            "--output_dir=runs/x",
            "--resume",
            "--eval_batches",
            "null",
        ]
    )
    assert config.learning_rate == 3e-4  # YAML 1.1 reads 3e-4 as a string; it is still a float here
    assert config.max_steps == 7 and config.output_dir == "runs/x" and config.resume is True
    assert config.model == {"hidden_dropout": 0.2, "attention_dropout": 0}  # entries merged, not replaced
    assert config.eval_batches is None


def test_config_file_is_optional_given_preset_and_objective():
    config = parse_args(["--preset", "llama-tiny", "--objective", "clm", "--seed", "3"])
    assert (config.preset, config.objective, config.seed) == ("llama-tiny", "clm", 3)
    with pytest.raises(ValueError, match="--config FILE, or at least --preset and --objective"):
        parse_args(["--preset", "llama-tiny"])


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"learnig_rate": 1e-3},
            r"unknown config key 'learnig_rate'\. Did you mean 'learning_rate'\?.*Valid keys: preset",
        ),
        ({"max_steps": "ten"}, r"config key 'max_steps' must be int, got 'ten' \(str\)"),
        ({"max_steps": 2.5}, r"config key 'max_steps' must be int, got 2\.5 \(float\)"),
        ({"tensorboard": "yes"}, r"config key 'tensorboard' must be bool"),
        (
            {"objective": "mlm"},
            r"objective: 'mlm' trains encoder models, but preset 'gpt-tiny' is a decoder\. "
            r"Objectives for 'gpt-tiny': clm; presets for 'mlm': bert-base",
        ),
        ({"objective": "translation"}, r"objective: unknown value 'translation'\. Valid objectives: clm, mlm, "),
        ({"preset": "gpt-huge"}, r"config key 'preset': unknown value 'gpt-huge'\. Valid presets: .*gpt-tiny"),
        ({"model": {"hidden_sise": 64}}, r"config key 'model': Unknown override\(s\) hidden_sise .* Valid keys:"),
        ({"block_size": 4096}, r"'block_size' is 4096, but preset 'gpt-tiny' has learned positions for at most 512"),
        ({"max_steps": 0}, r"config key 'max_steps' must be >= 1, got 0"),
        (
            {"mixed_precision": "fp8"},
            r"config key 'mixed_precision': unknown value 'fp8'\. Valid values: no, fp16, bf16",
        ),
    ],
)
def test_malformed_config_names_the_key_the_value_and_what_is_valid(values, message):
    with pytest.raises(ValueError, match=message):
        from_dict(PretrainConfig, {"preset": "gpt-tiny", "objective": "clm", **values})


def test_unknown_command_line_key_and_stray_argument_are_errors():
    with pytest.raises(ValueError, match="unknown config key 'max_step'. Did you mean 'max_steps'"):
        parse_args(["--preset", "gpt-tiny", "--objective", "clm", "--max_step", "5"])
    with pytest.raises(ValueError, match="unexpected argument 'gpt-tiny'"):
        parse_args(["gpt-tiny"])


def test_bad_yaml_and_missing_file_are_reported_by_the_recipe_entry_point(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("preset: gpt-tiny\nobjective: [clm\n")
    with pytest.raises(SystemExit, match=r"pretrain: .*bad.yaml: not valid YAML"):
        main(["--config", str(bad)])
    with pytest.raises(SystemExit, match=r"pretrain: .*No such file"):
        main(["--config", str(tmp_path / "missing.yaml")])
    with pytest.raises(SystemExit, match=r"pretrain: objective: 'mlm' trains encoder models"):
        main(["--preset", "gpt-tiny", "--objective", "mlm"])


def test_help_lists_every_key_with_its_default(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--gradient_accumulation_steps" in out and "(1)" in out and "--resume" in out


def test_every_shipped_config_is_valid():
    configs = sorted((REPO / "recipes" / "configs").glob("*.yaml"))
    assert len(configs) >= 9
    for path in configs:
        config = parse_args(["--config", str(path)])
        assert path.stem.startswith((config.preset, f"test-{config.preset}")), path.name
        assert path.stem.endswith(config.objective), path.name


def test_accelerate_configs_parse_with_accelerate():
    from accelerate.commands.config.config_args import load_config_from_file

    kinds = {
        p.stem: load_config_from_file(str(p)).distributed_type.value
        for p in (REPO / "recipes" / "configs" / "accelerate").glob("*.yaml")
    }
    assert kinds == {"cpu_ddp": "MULTI_GPU", "ddp": "MULTI_GPU", "fsdp": "FSDP", "deepspeed_zero2": "DEEPSPEED"}


def test_unknown_collator_option_is_named():
    message = (
        r"config key 'collator': CausalLMCollator has no option 'mlm_probability'\. Valid options: pad_to_multiple_of"
    )
    with pytest.raises(ValueError, match=message):
        from_dict(PretrainConfig, {"preset": "gpt-tiny", "objective": "clm", "collator": {"mlm_probability": 0.2}})


# ----------------------------------------------------------------------------------------- checkpoints
def _tiny_training_state(accelerator, seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    return model, optimizer


def _train_step(model, optimizer):
    model(torch.randn(2, 4)).pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad()


def test_checkpoints_keep_the_latest_and_restore_everything(accelerator, tmp_path):
    model, optimizer = _tiny_training_state(accelerator)
    generator = torch.Generator().manual_seed(5)
    for step in (1, 2, 3):
        _train_step(model, optimizer)
        torch.rand(3, generator=generator)
        save_checkpoint(
            accelerator, tmp_path, Progress(step=step, epoch=1, batches_in_epoch=step * 2), generator, keep=2
        )
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-00000002", "step-00000003"]
    expected_weight, expected_draw = model.weight.detach().clone(), torch.rand(3, generator=generator)

    _train_step(model, optimizer)  # move away, then restore
    restored_generator = torch.Generator().manual_seed(0)
    progress = load_checkpoint(accelerator, latest_checkpoint(tmp_path), restored_generator)
    assert (progress.step, progress.epoch, progress.batches_in_epoch) == (3, 1, 6)
    assert torch.equal(model.weight, expected_weight)
    assert torch.equal(torch.rand(3, generator=restored_generator), expected_draw)


def test_a_save_interrupted_before_publishing_is_never_a_valid_checkpoint(accelerator, tmp_path, monkeypatch):
    model, optimizer = _tiny_training_state(accelerator)
    generator = torch.Generator()
    save_checkpoint(accelerator, tmp_path, Progress(step=1), generator, keep=3)
    weights_at_1 = model.weight.detach().clone()
    _train_step(model, optimizer)

    def crash(src, dst):
        raise OSError("killed mid-save")

    monkeypatch.setattr(checkpointing.os, "replace", crash)
    with pytest.raises(OSError, match="killed mid-save"):
        save_checkpoint(accelerator, tmp_path, Progress(step=2), generator, keep=3)
    monkeypatch.undo()
    partial = tmp_path / "checkpoints" / ".tmp-step-00000002"
    assert (partial / "model.safetensors").is_file() and (partial / "progress.json").is_file()
    assert latest_checkpoint(tmp_path).name == "step-00000001"
    assert checkpoint_to_resume(tmp_path, True).name == "step-00000001"
    with pytest.raises(FileNotFoundError, match="not a complete checkpoint"):
        checkpoint_to_resume(tmp_path, str(tmp_path / "checkpoints" / "missing"))

    assert load_checkpoint(accelerator, latest_checkpoint(tmp_path), generator).step == 1
    assert torch.equal(model.weight, weights_at_1)
    save_checkpoint(accelerator, tmp_path, Progress(step=2), generator, keep=3)  # the next save clears the debris
    assert not partial.exists()
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-00000001", "step-00000002"]


def test_starting_fresh_over_existing_checkpoints_is_refused(accelerator, tmp_path):
    assert checkpoint_to_resume(tmp_path, False) is None and checkpoint_to_resume(tmp_path, True) is None
    model, _ = _tiny_training_state(accelerator)
    save_checkpoint(accelerator, tmp_path, Progress(step=4), torch.Generator(), keep=1)
    with pytest.raises(FileExistsError, match="already holds checkpoints .*step-00000004.*pass --resume"):
        checkpoint_to_resume(tmp_path, False)


# ------------------------------------------------------------------------------------------------ logging
def test_run_log_records_and_resume_truncation(tmp_path):
    log = RunLogger(tmp_path, enabled=True, max_steps=4, tensorboard=True)
    log.write("start", step=0, num_processes=1)
    for step in (1, 2, 3):
        log.train(step, loss=5.0 - step, lr=1e-3, grad_norm=1.0, tokens_per_s=100.0, tokens_seen=64 * step)
    log.write("eval", step=2, eval_loss=3.5, perplexity=math.exp(3.5))
    log.close()
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    with open(tmp_path / "log.jsonl", "a") as f:
        f.write('{"event": "train", "step": 4, "lo')  # a record cut off by a kill

    resumed = RunLogger(tmp_path, enabled=True, max_steps=4, start_step=2, tensorboard=False)
    resumed.write("start", step=2)
    resumed.close()
    records = read_log(tmp_path)
    assert [(r["event"], r["step"]) for r in records] == [
        ("start", 0),
        ("train", 1),
        ("train", 2),
        ("eval", 2),
        ("start", 2),
    ]
    assert {"step", "loss", "lr", "tokens_per_s", "tokens_seen", "elapsed"} <= records[1].keys()


def test_tensorboard_missing_is_skipped_cleanly(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # `import` now raises ImportError
    log = RunLogger(tmp_path, enabled=True, max_steps=1, tensorboard=True)
    log.train(1, loss=2.0, lr=1e-3, grad_norm=None, tokens_per_s=10.0, tokens_seen=8)
    log.close()
    assert "tensorboard is not installed" in caplog.text
    assert not (tmp_path / "tensorboard").exists()
    assert read_log(tmp_path)[0]["loss"] == 2.0


def test_logger_of_a_non_main_process_writes_nothing(tmp_path):
    log = RunLogger(tmp_path / "rank1", enabled=False, max_steps=1)
    log.write("start", step=0)
    log.close()
    assert not (tmp_path / "rank1").exists()


def test_train_meter_reports_mean_loss_and_all_tokens(accelerator):
    meter = TrainMeter(accelerator)
    meter.add(torch.tensor(2.0), torch.tensor(10))
    meter.add(torch.tensor(4.0), torch.tensor(30))
    saved = meter.state()
    resumed = TrainMeter(accelerator)
    resumed.load_state(saved)
    for m in (meter, resumed):
        loss, tokens, tokens_per_s = m.report()
        assert (loss, tokens) == (3.0, 40) and tokens_per_s > 0
    assert meter.report()[:2] == (0.0, 0)


# ------------------------------------------------------------------------------------- schedule and eval
def test_warmup_then_cosine_to_the_minimum():
    optimizer = build_optimizer(torch.nn.Linear(2, 2), 1e-3, 0.1, (0.9, 0.95), 1e-8)
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.1, 0.0]  # matrices decay, biases do not
    scheduler = build_scheduler(optimizer, warmup_steps=4, max_steps=20, min_lr_ratio=0.1)
    lrs = []
    for _ in range(21):
        lrs.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    assert lrs[:5] == pytest.approx([0.0, 2.5e-4, 5e-4, 7.5e-4, 1e-3])
    assert lrs[12] == pytest.approx(1e-4 + 0.9e-3 * 0.5)  # half way through the decay
    assert lrs[20] == pytest.approx(1e-4)
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:]))


def test_eval_shards_cover_every_example_once_with_equal_lengths():
    examples = [{"input_ids": [i]} for i in range(7)]
    shards = [EvalShard(examples, rank, 3) for rank in range(3)]
    assert [len(s) for s in shards] == [3, 3, 3]
    real = sorted(ex["input_ids"][0] for s in shards for ex, is_real in (s[i] for i in range(len(s))) if is_real)
    assert real == list(range(7))


def test_evaluate_is_the_token_weighted_loss_of_the_model(accelerator, tokenizer, tiny_model):
    model = tiny_model("gpt-tiny", vocab_size=len(tokenizer)).train()
    objective = get_objective("clm", "gpt-tiny")
    collator = objective.make_collator(tokenizer, {}, torch.Generator())
    lengths = [9, 5, 12, 7, 3]  # padded batches: the collator masks padding out of the labels
    examples = [{"input_ids": list(range(10, 10 + n))} for n in lengths]
    loader = torch.utils.data.DataLoader(EvalShard(examples, 0, 1), batch_size=2, collate_fn=list)
    metrics = evaluate(model, loader, collator, accelerator, shifts_labels=True)
    with torch.no_grad():
        total = sum(
            model(input_ids=torch.tensor([ex["input_ids"]]), labels=torch.tensor([ex["input_ids"]])).loss.item()
            * (len(ex["input_ids"]) - 1)
            for ex in examples
        )
    assert metrics["eval_targets"] == sum(n - 1 for n in lengths)
    assert metrics["eval_loss"] == pytest.approx(total / metrics["eval_targets"], abs=1e-5)
    assert metrics["perplexity"] == pytest.approx(math.exp(metrics["eval_loss"]))
    assert model.training  # evaluate restores the mode it found


# ------------------------------------------------------------------------------------------------- cards
def test_model_card_comes_from_the_log_and_the_configs(tmp_path):
    values = {"preset": "llama-tiny", "objective": "clm", "max_steps": 3, "dataset": "wikitext"}
    config = from_dict(PretrainConfig, values)
    model_config = hfzoo.preset_config("llama-tiny", vocab_size=300)
    log = RunLogger(tmp_path, enabled=True, max_steps=3, tensorboard=False)
    log.write(
        "start",
        step=0,
        num_processes=2,
        distributed_type="MULTI_CPU",
        device="cpu",
        mixed_precision="no",
        global_batch_size=16,
        parameters=123456,
    )
    for step, loss in enumerate((6.0, 5.5, 5.1), 1):
        log.train(step, loss=loss, lr=1e-3, grad_norm=1.0, tokens_per_s=1000.0 * step, tokens_seen=512 * step)
    log.write("eval", step=3, eval_loss=5.0, perplexity=math.exp(5.0), eval_targets=100)
    log.write("end", step=3, tokens_seen=1536, elapsed=4.2)
    log.close()

    objective = describe_objective(get_objective("clm", "llama-tiny"))
    record = RunRecord(tmp_path.name, config.to_dict(), read_log(tmp_path), objective, model_config.to_dict())
    card_path = write_card(tmp_path, record, PRETRAINING_SECTIONS, pretraining_metadata(record))
    card = card_path.read_text()
    metadata = yaml.safe_load(card.split("---\n")[1])
    assert metadata["library_name"] == "transformers" and metadata["pipeline_tag"] == "text-generation"
    assert metadata["datasets"] == ["wikitext"]
    assert {"hfzoo", "llama-tiny", "decoder", "clm"} <= set(metadata["tags"])
    result = metadata["model-index"][0]["results"][0]
    assert result["task"]["type"] == "text-generation" and result["dataset"]["name"] == "wikitext"
    metrics = {m["type"]: m["value"] for m in result["metrics"]}
    assert metrics == {"perplexity": round(math.exp(5.0), 4), "loss": 5.0}
    for field in ("num_hidden_layers", "hidden_size", "num_key_value_heads", "position_embedding"):
        assert f"| {field} | {getattr(model_config, field)} |" in card
    assert "| parameters | 123,456 |" in card and "| processes | 2 (MULTI_CPU, cpu) |" in card
    assert "| tokens seen | 1,536 |" in card and "num_experts" not in card  # dense model: no MoE rows
    assert "trust_remote_code=True" in card and "import hfzoo" in card
    assert (tmp_path / LOSS_CURVE).read_bytes()[:4] == b"\x89PNG"
    assert card == render_card(record, PRETRAINING_SECTIONS, pretraining_metadata(record))
