"""`torch.compile` of hfzoo models in training: one graph per family (no graph breaks), the same loss and gradients
as eager, and `--compile true` in a recipe run (recipes/configs/test-gpt-tiny-clm.yaml, as test_pretrain_recipe runs it)
that trains, checkpoints, resumes and saves a normal model.
"""

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch._dynamo
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file
from tests.helpers.recipe_runs import run_pretrain as run_in_process
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSeq2SeqLM

from hfzoo.core.presets import PRESETS, preset_config
from hfzoo.training import list_checkpoints
from hfzoo.training.compilation import compile_in_place
from hfzoo.training.logging import read_log

LM_CLASSES = {
    "decoder": AutoModelForCausalLM, "encoder": AutoModelForMaskedLM, "encoder_decoder": AutoModelForSeq2SeqLM
}


def _training_model_and_batch(name: str):
    torch.manual_seed(0)
    model = LM_CLASSES[PRESETS[name][0]].from_config(preset_config(name, hidden_dropout=0.0, attention_dropout=0.0))
    input_ids = torch.randint(3, 100, (2, 16))
    labels = input_ids.clone()
    labels[:, :3] = -100
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, -2:] = 0  # padding, so the masks are built from an attention mask as in training
    return model.train(), dict(input_ids=input_ids, attention_mask=attention_mask, labels=labels)


@pytest.mark.parametrize("name", ["gpt-tiny", "llama-tiny", "bert-tiny", "t5-tiny", "bart-tiny"])
def test_a_training_forward_is_one_graph(name: str):
    """Forward and loss in training mode trace as one graph; AOTAutograd derives the backward from it, so the
    backward is one graph too. The masked-LM loss scores only the labelled rows (a data-dependent count), which
    dynamo captures with the setting `compile_in_place` turns on."""
    model, batch = _training_model_and_batch(name)
    torch._dynamo.reset()
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        explanation = torch._dynamo.explain(lambda batch: model(**batch).loss)(batch)
    reasons = [reason.reason.splitlines()[0] for reason in explanation.break_reasons]
    assert explanation.graph_break_count == 0, reasons
    assert explanation.graph_count == 1


@pytest.mark.slow  # 31 s of compiling; the compiled training steps below use compile_in_place
def test_compile_in_place_captures_data_dependent_shapes_for_its_model_only():
    """bert-tiny's masked-LM loss scores a data-dependent number of rows: compiled in place it still runs without a
    graph break, while dynamo's global setting stays as it was for every other compile in the process."""
    model, batch = _training_model_and_batch("bert-tiny")
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compile_in_place(model)(**batch).loss.backward()
    assert not torch._dynamo.config.capture_dynamic_output_shape_ops
    assert not torch._dynamo.utils.counters["graph_break"], dict(torch._dynamo.utils.counters["graph_break"])
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1


@pytest.mark.slow  # 40-50 s of compiling each; make test traces every family's training forward as one graph (above)
@pytest.mark.parametrize(("name", "lora"), [("llama-tiny", False), ("bert-tiny", False), ("llama-tiny", True)])
def test_a_compiled_training_step_equals_eager(name: str, lora: bool):
    """Also under a PEFT adapter: compiled in place, the PeftModel keeps its adapter's parameter names."""
    model, batch = _training_model_and_batch(name)
    if lora:  # B initialised non-zero, so the adapter changes the output and gets gradients
        model = get_peft_model(model, LoraConfig(r=4, init_lora_weights=False))
    compiled = compile_in_place(copy.deepcopy(model))
    torch._dynamo.reset()
    eager_loss = model(**batch).loss
    eager_loss.backward()
    compiled_loss = compiled(**batch).loss
    compiled_loss.backward()
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1
    torch.testing.assert_close(compiled_loss, eager_loss, rtol=0, atol=1e-5)
    compiled_parameters = dict(compiled.named_parameters())
    for parameter_name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        found = compiled_parameters[parameter_name].grad
        torch.testing.assert_close(found, parameter.grad, rtol=0, atol=1e-5, msg=lambda m: f"{parameter_name}: {m}")


@pytest.mark.slow
def test_the_recipe_trains_checkpoints_and_resumes_compiled(tmp_path: Path):
    """gpt-tiny with gradient accumulation 2: checkpoints at steps 2, 4 and its last, 5, resumed to step 6, save a
    model whose keys are the model's own (no `_orig_mod.` prefix of a compile wrapper) and that reloads."""
    output_dir = tmp_path / "run"
    common = ["--compile", "true", "--output_dir", str(output_dir), "--eval_every", "2", "--save_every", "2"]
    run_in_process(*common, "--max_steps", "5")
    checkpoint_keys = set(load_file(list_checkpoints(output_dir)[-1] / "model.safetensors"))
    run_in_process(*common, "--max_steps", "6", "--resume", "true")
    model = AutoModelForCausalLM.from_pretrained(output_dir)
    saved_keys = set(load_file(output_dir / "model.safetensors"))
    assert not [key for key in checkpoint_keys | saved_keys if "_orig_mod" in key]
    assert saved_keys <= set(model.state_dict())
    losses = [record["loss"] for record in read_log(output_dir) if "loss" in record]
    assert len(losses) >= 6 and all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-2:]) < sum(losses[:2])


@pytest.mark.slow
def test_the_compile_benchmark_runs_in_tiny_mode(tmp_path: Path):
    """Every training variant and the static-cache generation are timed, with the measured peak and FLOPs/token."""
    output = tmp_path / "compile.json"
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_compile.py"
    completed = subprocess.run(
        [sys.executable, str(script), "--tiny", "--output", str(output)], capture_output=True, text=True, timeout=900
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "measured fp32 matmul peak" in completed.stdout
    results = json.loads(output.read_text())
    assert results["matmul_peak_flops"] > 0
    train, generate = results["results"]
    assert train["flops_per_token"] > 0
    for variant in ("hfzoo_compiled", "hfzoo_eager", "native_eager", "native_compiled"):
        assert 0 < train[variant]["mfu"] and train[variant]["median"] > 0
    assert train["ratio_vs_native_eager"]["median"] > 0 and train["ratio_vs_native_compiled"]["median"] > 0
    assert generate["figure"] == "generate_b1" and generate["ratio_vs_native_eager"]["median"] > 0
