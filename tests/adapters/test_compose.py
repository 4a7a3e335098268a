"""Composition of task adapters (`hfzoo.adapters.compose`): each strategy against plain PEFT or its definition, router
training on a small real task, save/load, and the errors users see.

The main adapters are real PEFT adapters trained here for a few steps on real text (stdlib docstrings of one module
each) on llama-tiny: LoRA "email" (r=4), LoRA "asyncio" (r=8), bottleneck "logging" (Houlsby: o_proj + down_proj,
with LayerNorm). So o_proj carries two LoRA and one bottleneck adapter, qkv_proj two LoRA, down_proj one
bottleneck. Every model is fp32 with dropout 0.
"""

import json

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from tests.helpers.llama_adapters import TASKS, causal_base, train_steps
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoModelForSequenceClassification

from hfzoo.adapters import ComposedModel, compose, load_composition
from hfzoo.adapters.composition import stacked

MIXED = "model.layers.1.self_attn.o_proj"  # carries all three adapters (two kinds)
# "Equal" up to float32 rounding: stacking zero-pads ranks to the largest (email r=4 next to asyncio r=8), and a
# matmul kernel picked for another shape may round differently (seen: 1.6e-6 on logits of 5.5 for a native T5 with
# r=4 next to r=2). With equal ranks the results are bit-identical to PEFT (test_other_models_...).
FP32 = dict(atol=1e-6, rtol=1e-6)


def classifier_base(setup):
    torch.manual_seed(0)  # the fresh `score` head
    return AutoModelForSequenceClassification.from_pretrained(setup.root / "base", num_labels=len(TASKS)).eval()


def peft_models(setup):
    """Plain PEFT: one PeftModel with both LoRA adapters, one with the bottleneck (PEFT cannot mix the two)."""
    lora = PeftModel.from_pretrained(causal_base(setup), setup.folders["email"], adapter_name="email")
    lora.load_adapter(setup.folders["asyncio"], adapter_name="asyncio")
    return lora, PeftModel.from_pretrained(causal_base(setup), setup.folders["logging"], adapter_name="logging")


def peft_per_row(setup, names: list[str], run, train: bool = False) -> torch.Tensor:
    """Row i of `run(model)` computed with adapter names[i] alone (whole batch through that adapter, row i kept)."""
    lora, bottleneck = peft_models(setup)
    lora.train(train), bottleneck.train(train)
    outputs = {}
    for name in set(names):
        if name == "__base__":
            with lora.disable_adapter():
                outputs[name] = run(lora)
        elif name == "logging":
            outputs[name] = run(bottleneck)
        else:
            lora.set_adapter(name)
            outputs[name] = run(lora)
    return torch.stack([outputs[name][row] for row, name in enumerate(names)])


def adapter_outputs(setup, path: str, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Each adapter's output of module `path` for input x, through PEFT's own layers."""
    lora, bottleneck = peft_models(setup)
    outputs = {}
    for name in ("email", "asyncio"):
        lora.set_adapter(name)
        outputs[name] = lora.base_model.model.get_submodule(path)(x)
    outputs["logging"] = bottleneck.base_model.model.get_submodule(path)(x)
    return outputs


def sample_batch(setup, per_task: int = 2) -> dict:
    return setup.encode([text for task in TASKS for text in setup.texts[task][8 : 8 + per_task]])


# ----------------------------------------------------------------------------------------------- fixed
@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_fixed_mixed_batch_equals_each_adapter_through_peft(setup, train):
    batch = sample_batch(setup)
    names = ["email", "asyncio", "logging", "__base__", "logging", "email"]
    composed = compose(causal_base(setup), setup.folders, "fixed").train(train)
    logits = composed(**batch, adapter_names=names).logits
    reference = peft_per_row(setup, names, lambda model: model(**batch).logits, train)
    trained = peft_models(setup)[0].base_model.model.get_submodule(MIXED).lora_B
    assert all(trained[name].weight.abs().sum() > 0 for name in ("email", "asyncio"))  # the adapters learned
    torch.testing.assert_close(logits, reference, **FP32)


@pytest.mark.parametrize("beams", [1, 2])
def test_fixed_generate_equals_peft_with_beams_and_return_sequences(setup, beams):
    batch = setup.encode([setup.texts[task][9][:60] for task in TASKS] + [setup.texts["email"][10][:40]])
    names = ["email", "asyncio", "logging", "__base__"]
    options = dict(max_new_tokens=6, do_sample=False, num_beams=beams, num_return_sequences=beams)
    composed = compose(causal_base(setup), setup.folders, "fixed")
    generated = composed.generate(**batch, adapter_names=names, **options)
    reference = peft_per_row(
        setup, [name for name in names for _ in range(beams)], lambda model: model.generate(**batch, **options)
    )
    assert torch.equal(generated, reference)


def test_fixed_needs_valid_adapter_names(setup):
    composed = compose(causal_base(setup), setup.folders, "fixed")
    batch = sample_batch(setup, per_task=1)
    with pytest.raises(ValueError, match="needs adapter_names"):
        composed(**batch)
    with pytest.raises(ValueError, match=r"unknown adapter\(s\) \['mail'\]"):
        composed(**batch, adapter_names=["mail", "email", "email"])
    with pytest.raises(ValueError, match="adapter_names has 2 entries for a batch of 3 rows"):
        composed(**batch, adapter_names=["email", "asyncio"])
    composed.gradient_checkpointing_enable()
    with pytest.raises(ValueError, match="disable gradient checkpointing"):
        composed.train()(**batch, adapter_names=["email"] * 3)


def test_unload_gives_the_base_model_back(setup):
    base = causal_base(setup)
    batch = sample_batch(setup)
    expected = base(**batch).logits
    composed = compose(base, setup.folders, "soft")
    assert all(p.requires_grad == (".combiner." in n) for n, p in composed.named_parameters())  # only routers train
    assert not torch.equal(composed(**batch).logits, expected)
    assert composed.unload() is base
    assert torch.equal(base(**batch).logits, expected) and all(p.requires_grad for p in base.parameters())
    assert "ComposedLayer" not in repr(base)


# ----------------------------------------------------------------------------------------------- average
def test_average_is_the_mean_of_the_adapters_outputs(setup):
    composed = compose(causal_base(setup), setup.folders, "average")
    x = torch.randn(3, 5, 128, generator=torch.Generator().manual_seed(0))
    outputs = adapter_outputs(setup, MIXED, x)
    expected = torch.stack(list(outputs.values())).mean(0)
    torch.testing.assert_close(composed.composed_layers[MIXED](x), expected, **FP32)

    weighted = compose(causal_base(setup), setup.folders, "average", weights=[0.5, 0.3, 0.2])
    expected = 0.5 * outputs["email"] + 0.3 * outputs["asyncio"] + 0.2 * outputs["logging"]
    torch.testing.assert_close(weighted.composed_layers[MIXED](x), expected, **FP32)


def test_merging_through_peft(setup):
    """PEFT's `cat` is the exact weighted delta, so it equals output averaging; the other merges run and differ."""
    loras = {name: setup.folders[name] for name in ("email", "asyncio")}
    batch = sample_batch(setup)
    averaged = compose(causal_base(setup), loras, "average", weights=[0.7, 0.3])(**batch).logits
    concatenated = compose(causal_base(setup), loras, "average", weights=[0.7, 0.3], merge="cat")(**batch).logits
    torch.testing.assert_close(concatenated, averaged, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="same r value"):  # PEFT's own rule: email has r=4, asyncio r=8
        compose(causal_base(setup), loras, "average", merge="ties", density=0.5)
    same_rank = {"email": setup.folders["email"], "email_again": setup.folders["email"]}
    base_logits = causal_base(setup)(**batch).logits
    for merge in ("linear", "ties", "dare_ties"):
        first = compose(causal_base(setup), same_rank, "average", merge=merge, density=0.5)(**batch).logits
        again = compose(causal_base(setup), same_rank, "average", merge=merge, density=0.5)(**batch).logits
        assert torch.equal(first, again)  # DARE's random pruning is seeded
        assert not torch.allclose(first, base_logits, atol=1e-4)
    with pytest.raises(ValueError, match="adapter 'logging' is a bottleneck adapter"):
        compose(causal_base(setup), setup.folders, "average", merge="cat")


# ----------------------------------------------------------------------------------------------- routers
@pytest.mark.parametrize(
    "strategy, options",
    [("soft", {"granularity": "sequence"}), ("hard", {"granularity": "token"}), ("fusion", {})],
)
def test_routers_learn_a_new_task_and_train_only_themselves_and_the_head(setup, tmp_path, strategy, options):
    """Target task: which module a docstring comes from, with a fresh `score` head trained with the composition."""
    texts = [text for task in TASKS for text in setup.texts[task][:8]]
    batch, labels = setup.encode(texts), torch.arange(len(TASKS)).repeat_interleave(8)
    composed = compose(classifier_base(setup), setup.folders, strategy, trainable_modules=["score"], **options)
    before = {name: p.detach().clone() for name, p in composed.named_parameters()}
    torch.manual_seed(0)
    losses = train_steps(composed, batch, labels, steps=30, lr=1e-2)
    assert sum(losses[-5:]) < 0.7 * sum(losses[:5]), losses
    changed = {name for name, p in composed.named_parameters() if not torch.equal(p, before[name])}
    trainable = {name for name, p in composed.named_parameters() if p.requires_grad}
    assert changed == trainable
    assert trainable == {n for n in before if ".combiner." in n or n.startswith("base_model.score.")}

    composed.save_pretrained(tmp_path / "composition")
    reloaded = load_composition(classifier_base(setup), tmp_path / "composition")
    assert torch.equal(reloaded(**batch).logits, composed(**batch).logits)


def test_sequence_routing_ignores_padding_and_routes_generation_by_the_prompt(setup):
    composed = compose(causal_base(setup), setup.folders, "soft", granularity="sequence")
    routers = [layer.combiner.proj for layer in composed.composed_layers.values() if hasattr(layer.combiner, "proj")]
    assert len(routers) == 12  # qkv_proj, o_proj and down_proj of 4 layers (down_proj: logging or the base)
    for router in routers:
        torch.nn.init.normal_(router.weight, std=0.5, generator=torch.Generator().manual_seed(0))
    short, long = setup.texts["email"][9][:30], setup.texts["asyncio"][9][:120]
    alone = composed(**setup.encode([short])).logits[0]
    padded_batch = setup.encode([short, long])
    padded = composed(**padded_batch).logits[0]
    torch.testing.assert_close(padded[padded_batch["attention_mask"][0].bool()], alone, atol=1e-5, rtol=0)
    generated = composed.generate(**setup.encode([short]), max_new_tokens=3, do_sample=False)
    assert generated[0, -3] == alone[-1].argmax()


# Token rows are gathered while few and grouped by adapter when many (`stacked.GATHERED_VALUES_LIMIT`): both ways
@pytest.mark.parametrize("gathered_values_limit", [0, 10**9], ids=["grouped", "gathered"])
def test_hard_routing_at_inference_computes_only_the_chosen_adapter(setup, monkeypatch, gathered_values_limit):
    monkeypatch.setattr(stacked, "GATHERED_VALUES_LIMIT", gathered_values_limit)
    composed = compose(causal_base(setup), setup.folders, "hard")
    layer = composed.composed_layers[MIXED]
    torch.nn.init.normal_(layer.combiner.proj.weight, std=1.0, generator=torch.Generator().manual_seed(0))
    x = torch.randn(4, 6, 128, generator=torch.Generator().manual_seed(1))
    chosen = layer.combiner.proj(x).argmax(-1)  # member order here: email, asyncio (LoRA), logging (bottleneck)
    assert len(chosen.unique()) == 3
    outputs = torch.stack(list(adapter_outputs(setup, MIXED, x).values()), dim=-2)  # [4, 6, 3, 128]
    expected = outputs.gather(-2, chosen[..., None, None].expand(-1, -1, 1, 128)).squeeze(-2)
    torch.testing.assert_close(layer(x), expected, **FP32)

    def flops(module, x):
        with FlopCounterMode(display=False) as counter:
            module(x)
        return counter.get_total_flops()

    fixed = compose(causal_base(setup), setup.folders, "fixed")
    fixed.routing_context.adapter_index = torch.zeros(4, dtype=torch.long)
    router = 2 * x.shape[0] * x.shape[1] * 128 * 3
    assert flops(layer, x) == flops(fixed.composed_layers[MIXED], x) + router  # one adapter's cost, not three
    soft = compose(causal_base(setup), setup.folders, "soft")
    assert flops(soft.composed_layers[MIXED], x) > flops(layer, x)

    # every router forced to "email": the whole model equals the email adapter through PEFT
    loras = {name: setup.folders[name] for name in ("email", "asyncio")}
    forced = compose(causal_base(setup), loras, "hard", granularity="sequence")
    for layer in forced.composed_layers.values():
        layer.combiner.proj.bias.data = torch.tensor([10.0, 0.0])
    batch = sample_batch(setup)
    reference = peft_per_row(setup, ["email"] * 6, lambda model: model(**batch).logits)
    torch.testing.assert_close(forced(**batch).logits, reference, **FP32)


def test_fusion_at_init_is_the_mean_and_its_shortcut_is_exact(setup):
    composed = compose(causal_base(setup), setup.folders, "fusion")
    layer = composed.composed_layers[MIXED]
    fusion = layer.combiner
    x = torch.randn(3, 5, 128, generator=torch.Generator().manual_seed(0))
    outputs = torch.stack(list(adapter_outputs(setup, MIXED, x).values()), dim=-2)  # o_n: [3, 5, 3, 128]
    with torch.no_grad():
        fusion.query.weight.zero_()
        torch.testing.assert_close(layer(x), outputs.mean(-2), **FP32)

        generator = torch.Generator().manual_seed(1)
        for projection in (fusion.query, fusion.key, fusion.value):
            projection.weight.copy_(torch.randn(projection.weight.shape, generator=generator) * 0.1)
        y = layer.base_layer(x)
        scores = (fusion.query(y).unsqueeze(-2) * fusion.key(outputs)).sum(-1)  # (Q y) . (K o_n), by definition
        expected = (scores.softmax(-1).unsqueeze(-1) * fusion.value(outputs)).sum(-2)
        torch.testing.assert_close(layer(x), expected, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------------------------- save / load
@pytest.mark.parametrize("strategy", ["fixed", "hard"])
def test_save_load_round_trip_is_self_contained(setup, tmp_path, strategy):
    composed = compose(causal_base(setup), setup.folders, strategy)
    composed.print_trainable_parameters()
    (tmp_path / "composition").mkdir()  # an existing folder: the files saved replace theirs, others stay
    (tmp_path / "composition" / "notes.txt").write_text("mine")
    composed.save_pretrained(tmp_path / "composition")
    saved = tmp_path / "composition"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["composition"]
    assert sorted(p.name for p in saved.iterdir()) == [
        "adapters", "composition.json", "composition.safetensors", "notes.txt"
    ]  # fmt: skip
    assert (saved / "notes.txt").read_text() == "mine"
    spec = json.loads((saved / "composition.json").read_text())
    assert spec["strategy"] == strategy and [a["name"] for a in spec["adapters"]] == list(TASKS)
    assert [a["kind"] for a in spec["adapters"]] == ["lora", "lora", "bottleneck"]
    assert spec["adapters"][1]["rank"] == 8 and spec["adapters"][2]["adapter_config"]["peft_type"] == "BOTTLENECK"
    assert spec["base_model"]["config"]["model_type"] == "hfzoo_decoder"
    qkv = causal_base(setup).get_submodule("model.layers.0.self_attn.qkv_proj")
    assert spec["base_model"]["modules"]["model.layers.0.self_attn.qkv_proj"] == [qkv.out_features, qkv.in_features]

    batch, names = sample_batch(setup), ["logging", "email", "asyncio", "__base__", "email", "logging"]
    kwargs = {"adapter_names": names} if strategy == "fixed" else {}
    reloaded = load_composition(causal_base(setup), saved)
    assert isinstance(reloaded, ComposedModel) and reloaded.adapter_names == list(TASKS)
    assert torch.equal(reloaded(**batch, **kwargs).logits, composed(**batch, **kwargs).logits)
    for task in TASKS:  # the adapters were copied in: the composition no longer needs the originals
        assert (saved / "adapters" / task / "adapter_model.safetensors").is_file()


def test_mismatched_base_model_is_named(setup, tmp_path, tiny_model, tokenizer_overrides):
    composed = compose(causal_base(setup), setup.folders, "soft")
    composed.save_pretrained(tmp_path / "composition")
    narrower = tiny_model("llama-tiny", **{**tokenizer_overrides, "hidden_size": 64, "num_attention_heads": 2})
    with pytest.raises(ValueError, match="config.hidden_size is 64, expected 128"):
        load_composition(narrower, tmp_path / "composition")
    # the adapter's base (PEFT's base_model_name_or_path, still on disk) is named beside the one given
    expected = r"trained on hfzoo_decoder \(hidden_size 128.*the base model is hfzoo_decoder \(hidden_size 64"
    with pytest.raises(ValueError, match=expected):
        compose(narrower, {"email": setup.folders["email"]}, "fixed")
    shallower = tiny_model("llama-tiny", **{**tokenizer_overrides, "num_hidden_layers": 2})
    with pytest.raises(ValueError, match="differs in num_hidden_layers"):
        compose(shallower, {"email": setup.folders["email"]}, "fixed")
    gpt = tiny_model("gpt-tiny", **tokenizer_overrides)
    with pytest.raises(ValueError, match="base model differs from the one the composition was saved with: config"):
        load_composition(gpt, tmp_path / "composition")


def test_unsupported_peft_options_are_named(setup, tmp_path):
    for option, config in {
        "use_dora=True": LoraConfig(r=4, target_modules=["o_proj"], use_dora=True),
        "bias='all'": LoraConfig(r=4, target_modules=["o_proj"], bias="all"),
    }.items():
        get_peft_model(causal_base(setup), config).save_pretrained(tmp_path / option)
        with pytest.raises(ValueError, match=f"uses the option {option}"):
            compose(causal_base(setup), {"a": tmp_path / option}, "fixed")
    with pytest.raises(ValueError, match="strategy 'soft' takes the options"):
        compose(causal_base(setup), setup.folders, "soft", top_k=1)
