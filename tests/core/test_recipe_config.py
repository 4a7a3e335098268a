"""The recipe config: YAML, then command-line overrides, typed; every malformed value named with what is valid; every
shipped config (and accelerate config) valid.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from peft import TaskType

from hfzoo.adapters.methods import MethodOptions, peft_config_for
from hfzoo.commands.pretrain import PretrainConfig, main, parse_args
from hfzoo.core.recipe_config import from_dict
from hfzoo.core.refusals import run_command
from hfzoo.training.options import RunOptions

REPO = Path(__file__).resolve().parents[2]


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
            "--max_grad_norm",
            "none",  # as the keys' help spells it
        ]
    )
    assert config.training.learning_rate == 3e-4  # YAML 1.1 reads 3e-4 as a string; it is still a float here
    assert config.training.max_steps == 7 and config.output_dir == "runs/x" and config.checkpoints.resume is True
    assert config.model == {"hidden_dropout": 0.2, "attention_dropout": 0}  # entries merged, not replaced
    assert config.training.eval_batches is None and config.run.max_grad_norm is None
    with pytest.raises(ValueError, match="'max_steps' must be int"):  # `none` is None only where a key may be none
        parse_args(["--config", str(path), "--max_steps", "none"])


def test_config_file_is_optional_given_preset_and_objective():
    config = parse_args(["--preset", "llama-tiny", "--objective", "clm", "--seed", "3"])
    assert (config.preset, config.objective, config.run.seed) == ("llama-tiny", "clm", 3)
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
        ({"embedding_learning_rate": 0.0}, r"config key 'embedding_learning_rate' must be > 0, got 0\.0"),
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


@pytest.mark.parametrize(("where", "text", "message"), [
    ("--model", "{vocab_size: 69", r"--model: not valid YAML \(expected ',' or '}', but got '<stream end>' at line 1"),
    ("--model", '!!python/object/apply:os.system ["true"]', r"--model: YAML tag '!!python/object/apply:os.system' is "
                                                           "not allowed"),
    ("file", 'objective: clm\nmodel: !!python/name:os.system', r"run.yaml: YAML tag '!!python/name:os.system' is not "
                                                              "allowed"),
    ("peft", "!!python/object/new:dict {}", r"peft.yaml: YAML tag '!!python/object/new:dict' is not allowed"),
])  # fmt: skip
def test_malformed_yaml_and_python_tags_are_refused_in_one_line(where, text, message, tmp_path, capsys):
    """A YAML syntax error in a `--key` value, and a `!!python` tag anywhere, ended in PyYAML's multi-line traceback
    (safe_load never ran the tag; now it also says it is not allowed)."""
    (tmp_path / "run.yaml").write_text(f"preset: gpt-tiny\n{text}\n")
    (tmp_path / "peft.yaml").write_text(text)
    if where == "peft":
        with pytest.raises(ValueError, match=message):
            peft_config_for(MethodOptions(peft_config=str(tmp_path / "peft.yaml")), TaskType.SEQ_CLS, [])
        return
    argv = ["--config", str(tmp_path / "run.yaml")] if where == "file" else ["--preset", "gpt-tiny", "--objective",
                                                                              "clm", where, text]  # fmt: skip
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--output_dir", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1 and re.match(f"pretrain: .*{message}", err), err
    assert not (tmp_path / "out").exists()


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
    assert kinds == {"cpu_ddp": "MULTI_GPU", "ddp": "MULTI_GPU", "fsdp": "FSDP"}  # no DeepSpeed: it cannot run


def test_a_deepspeed_launch_is_refused_in_one_line_before_anything_is_written(tmp_path, monkeypatch, capsys):
    """`accelerate launch` with a DeepSpeed config sets ACCELERATE_USE_DEEPSPEED. Every recipe's Accelerator comes from
    `RunOptions.accelerator`, which refuses it and says what to use instead."""
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    with pytest.raises(ValueError, match="DeepSpeed is not supported"):
        RunOptions().accelerator()
    with pytest.raises(SystemExit) as refused:
        run_command("pretrain", ["--preset", "gpt-tiny", "--objective", "clm", "--output_dir", str(tmp_path)], main)
    assert refused.value.code == 2
    line = capsys.readouterr().err.splitlines()[-1]
    assert line.startswith("pretrain: DeepSpeed is not supported") and line.endswith("--sharding fsdp")
    assert not any(tmp_path.iterdir())


def test_unknown_collator_option_is_named():
    message = (
        r"config key 'collator': CausalLMCollator has no option 'mlm_probability'\. Valid options: pad_to_multiple_of"
    )
    with pytest.raises(ValueError, match=message):
        from_dict(PretrainConfig, {"preset": "gpt-tiny", "objective": "clm", "collator": {"mlm_probability": 0.2}})


# ------------------------------------------------------------------------------ a config made of sections (finetune)
FINETUNE_REQUIRED = ["--model", "runs/any", "--task", "sequence-classification", "--dataset", "runs/any-data"]


def test_a_sections_key_is_given_by_its_own_name_or_with_its_section(tmp_path):
    from hfzoo.commands.finetune import parse_args as finetune_args

    flat = finetune_args([*FINETUNE_REQUIRED, "--lr_schedule", "slanted_triangular", "--save_every", "5"])
    qualified = finetune_args([*FINETUNE_REQUIRED, "--ulmfit.lr_schedule", "slanted_triangular",
                               "--checkpoints.save_every=5"])  # fmt: skip
    path = tmp_path / "run.yaml"
    path.write_text("ulmfit: {lr_schedule: slanted_triangular}\ncheckpoints:\n  save_every: 5\n")
    grouped = finetune_args(["--config", str(path), *FINETUNE_REQUIRED])
    for config in (flat, qualified, grouped):
        assert (config.ulmfit.lr_schedule, config.checkpoints.save_every) == ("slanted_triangular", 5)
        assert config.data.model == "runs/any" and config.run.seed == 42  # untouched sections keep their defaults
    assert flat.to_dict() == qualified.to_dict() == grouped.to_dict()


def test_a_config_is_saved_flat_and_read_back_from_what_it_saved():
    """training_config.yaml and checkpoints hold every key by its own name, as a command line writes it."""
    from hfzoo.commands.compose import ComposeConfig
    from hfzoo.commands.finetune import FinetuneConfig
    from hfzoo.commands.finetune import parse_args as finetune_args

    config = finetune_args([*FINETUNE_REQUIRED, "--method", "lora", "--method_options.r", "4",
                            "--tuning.method_options.lora_alpha", "8", "--seed", "3"])  # fmt: skip
    saved = config.to_dict()
    assert {"model", "method", "method_options", "lr_schedule", "save_every", "seed", "do_train"} <= saved.keys()
    assert not {"data", "tuning", "ulmfit", "checkpoints", "run"} & saved.keys()
    assert saved["method_options"] == {"r": 4, "lora_alpha": 8} and saved["seed"] == 3
    assert from_dict(FinetuneConfig, saved) == config
    assert "adapters" in ComposeConfig().to_dict() and "lr_schedule" not in ComposeConfig().to_dict()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ulmfit.seed", "3"], r"config section 'ulmfit' has no key 'seed': --ulmfit.<key> takes one of lr_schedule"),
        (["--tuning.methd", "lora"], r"config section 'tuning' has no key 'methd'"),
        (["--lr_scheduel", "cosine"], r"unknown config key 'lr_scheduel'\. Did you mean 'lr_schedule'\?"),
        (["--ulmfit", "cosine"], r"config key 'ulmfit' is a section: give it a mapping of its keys, or give them flat"),
        (["--ulmfit", "{seed: 3}"], r"config section 'ulmfit' has no key 'seed'\. Its keys: lr_schedule"),
    ],
)
def test_a_key_outside_its_section_is_refused_naming_the_sections_keys(args, message):
    from hfzoo.commands.finetune import parse_args as finetune_args

    with pytest.raises(ValueError, match=message):
        finetune_args([*FINETUNE_REQUIRED, *args])


def test_yaml_grouping_a_key_under_another_section_or_twice_is_refused(tmp_path):
    from hfzoo.commands.finetune import parse_args as finetune_args

    path = tmp_path / "run.yaml"
    path.write_text("run: {lr_schedule: cosine}\n")
    with pytest.raises(ValueError, match=r"config section 'run' has no key 'lr_schedule'\. Its keys: gradient_acc"):
        finetune_args(["--config", str(path), *FINETUNE_REQUIRED])
    path.write_text("seed: 1\nrun: {seed: 2}\n")
    with pytest.raises(ValueError, match=r"config key 'seed' is given twice: flat and in section 'run'"):
        finetune_args(["--config", str(path), *FINETUNE_REQUIRED])
    path.write_text("run: {seed: 2}\n")  # the command line overrides a grouped key by either of its names
    assert finetune_args(["--config", str(path), *FINETUNE_REQUIRED, "--seed", "5"]).run.seed == 5
    assert finetune_args(["--config", str(path), *FINETUNE_REQUIRED, "--run", "{seed: 6}"]).run.seed == 6


def test_help_lists_each_sections_keys_under_it(capsys):
    from hfzoo.commands.finetune import parse_args as finetune_args

    with pytest.raises(SystemExit):
        finetune_args(["--help"])
    out = capsys.readouterr().out
    assert out.index("\nulmfit: ") < out.index("  --lr_schedule") < out.index("\ncheckpoints: ")
    assert "--ulmfit.<key> or --<key>" in out
