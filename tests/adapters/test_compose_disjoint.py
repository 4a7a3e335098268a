"""Composition of adapters on disjoint modules, as in the README: a LoRA on qkv_proj and a bottleneck on down_proj
(PEFT classification adapters of gpt-tiny, each saving its own head). No module carries both, so each adapter is
the identity where it is absent: the learned strategies weigh, per module, its adapter against the base output.
"""

import json

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForSequenceClassification

from hfzoo.adapters import BottleneckConfig, compose, load_composition
from hfzoo.adapters.composition.routing import AdapterFusion, HardRouter

LAYERS = range(4)  # gpt-tiny
QKV = [f"model.layers.{i}.self_attn.qkv_proj" for i in LAYERS]
DOWN = [f"model.layers.{i}.mlp.down_proj" for i in LAYERS]
FP32 = dict(atol=1e-5, rtol=1e-5)


def _base(root):
    torch.manual_seed(0)  # the fresh `score` head
    return AutoModelForSequenceClassification.from_pretrained(root / "base", num_labels=3).eval()


@pytest.fixture(scope="module")
def adapters(tmp_path_factory, tiny_model):
    """The README's pair, with random (not zero) up projections so that every adapter changes its module."""
    root = tmp_path_factory.mktemp("disjoint")
    base = tiny_model("gpt-tiny", AutoModelForSequenceClassification, num_labels=3, pad_token_id=0)
    base.save_pretrained(root / "base")
    configs = {
        "area": LoraConfig(r=8, target_modules=["qkv_proj"], init_lora_weights=False, task_type="SEQ_CLS"),
        "module": BottleneckConfig(init_weights=False, task_type="SEQ_CLS"),
    }
    folders = {}
    for name, config in configs.items():
        get_peft_model(_base(root), config).save_pretrained(root / name)
        folders[name] = root / name
    return root, folders


def _inputs() -> dict:
    input_ids = torch.randint(3, 1000, (6, 12), generator=torch.Generator().manual_seed(0))
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(**_inputs()).logits


def test_fusion_fuses_each_adapter_with_the_base_output_by_definition(adapters):
    root, folders = adapters
    composed = compose(_base(root), folders, "fusion", trainable_modules=["score"])
    fusions = {path for path, layer in composed.composed_layers.items() if isinstance(layer.combiner, AdapterFusion)}
    assert fusions == set(QKV + DOWN)
    for name, path in (("area", QKV[1]), ("module", DOWN[2])):
        layer, module = composed.composed_layers[path], _base(root).get_submodule(path)
        peft_module = PeftModel.from_pretrained(_base(root), folders[name]).base_model.model.get_submodule(path)
        fusion = layer.combiner
        with torch.no_grad():
            generator = torch.Generator().manual_seed(1)
            for projection in (fusion.query, fusion.key, fusion.value):
                projection.weight.copy_(torch.randn(projection.weight.shape, generator=generator) * 0.1)
        x = torch.randn(3, 5, module.in_features, generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            y = module(x)
            outputs = torch.stack([peft_module(x), y], dim=-2)  # o_adapter, o_identity = y
            assert not torch.allclose(outputs[..., 0, :], y, atol=1e-3)  # the adapter does change its module
            scores = (fusion.query(y).unsqueeze(-2) * fusion.key(outputs)).sum(-1)  # (Q y) . (K o_n), by definition
            expected = (scores.softmax(-1).unsqueeze(-1) * fusion.value(outputs)).sum(-2)
            torch.testing.assert_close(layer(x), expected, **FP32)  # qkv_proj: the folded shortcut
        torch.testing.assert_close(layer(x.requires_grad_()), expected, **FP32)  # with a gradient: not folded


def test_fusion_layers_and_the_head_train(adapters):
    """What the README's comment says: the fusion layers (at every qkv_proj and down_proj) and the head train."""
    root, folders = adapters
    composed = compose(_base(root), folders, "fusion", trainable_modules=["score"]).train()
    trainable = {name for name, p in composed.named_parameters() if p.requires_grad}
    fusion_parameters = {name for name in trainable if ".combiner." in name}
    assert {name.split(".combiner.")[0].removeprefix("base_model.") for name in fusion_parameters} == set(QKV + DOWN)
    assert trainable - fusion_parameters == {"base_model.score.weight"}
    before = {name: p.detach().clone() for name, p in composed.named_parameters()}
    optimizer = torch.optim.AdamW([p for p in composed.parameters() if p.requires_grad], lr=1e-2)
    labels = torch.tensor([0, 1, 2, 0, 1, 2])
    losses = []
    for step in range(15):
        loss = composed(**_inputs(), labels=labels).loss
        loss.backward()
        if step == 0:
            assert all(composed.get_parameter(name).grad.abs().sum() > 0 for name in fusion_parameters)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses
    changed = {name for name, p in composed.named_parameters() if not torch.equal(p, before[name])}
    assert changed == trainable


def test_every_strategy_treats_an_absent_adapter_as_the_identity(adapters):
    root, folders = adapters
    base = _logits(_base(root))
    half = _logits(compose(_base(root), folders, "average", trainable_modules=["score"]))
    full = _logits(compose(_base(root), folders, "average", weights=[1.0, 1.0], trainable_modules=["score"]))
    assert not torch.allclose(half, base, atol=1e-3) and not torch.allclose(half, full, atol=1e-3)

    # soft routers and fusion start as the uniform mixture of the adapter and the base output: half the adapter
    soft = compose(_base(root), folders, "soft", trainable_modules=["score"])
    assert all(layer.combiner.proj.out_features == 2 for layer in soft.composed_layers.values())
    torch.testing.assert_close(_logits(soft), half, **FP32)
    fusion = compose(_base(root), folders, "fusion", trainable_modules=["score"])
    for layer in fusion.composed_layers.values():
        torch.nn.init.zeros_(layer.combiner.query.weight)
    torch.testing.assert_close(_logits(fusion), half, **FP32)

    # hard routers pick the adapter or the base output (the last candidate)
    for bias, expected in (([10.0, -10.0], full), ([-10.0, 10.0], base)):
        hard = compose(_base(root), folders, "hard", granularity="sequence", trainable_modules=["score"])
        for layer in hard.composed_layers.values():
            assert isinstance(layer.combiner, HardRouter)
            layer.combiner.proj.bias.data = torch.tensor(bias)
        torch.testing.assert_close(_logits(hard), expected, **FP32)

    # fixed: each example's adapter where it sits, the base module elsewhere: the adapter alone through PEFT
    fixed = compose(_base(root), folders, "fixed")
    names = ["area", "module", "__base__", "module", "area", "area"]
    with torch.no_grad():
        logits = fixed(**_inputs(), adapter_names=names).logits
    reference = {name: _logits(PeftModel.from_pretrained(_base(root), folder)) for name, folder in folders.items()}
    reference["__base__"] = base
    torch.testing.assert_close(logits, torch.stack([reference[n][row] for row, n in enumerate(names)]), **FP32)


def test_one_adapter_is_weighed_against_the_base_output_and_old_files_are_named(adapters, tmp_path):
    root, folders = adapters
    alone = {"area": folders["area"]}
    soft = compose(_base(root), alone, "soft", trainable_modules=["score"])
    assert set(soft.composed_layers) == set(QKV)
    assert all(layer.combiner.proj.out_features == 2 for layer in soft.composed_layers.values())
    half = compose(_base(root), alone, "average", weights=[0.5], trainable_modules=["score"])
    torch.testing.assert_close(_logits(soft), _logits(half), **FP32)

    compose(_base(root), folders, "fusion", trainable_modules=["score"]).save_pretrained(tmp_path / "fusion")
    reloaded = load_composition(_base(root), tmp_path / "fusion")
    assert isinstance(reloaded.composed_layers[DOWN[0]].combiner, AdapterFusion)
    spec_file = tmp_path / "fusion" / "composition.json"
    spec = json.loads(spec_file.read_text())
    spec_file.write_text(json.dumps({**spec, "version": 1}))
    with pytest.raises(ValueError, match="version 1 .fusion. composition of one adapter or of adapters on"):
        load_composition(_base(root), tmp_path / "fusion")
