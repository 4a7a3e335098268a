"""IA3 composes like LoRA and bottleneck adapters (`hfzoo/adapters/composition/stacking/ia3.py`, one file): equal to PEFT's
own IA3 for one adapter, per row on mixed batches, and AdapterFusion's folded scores equal its definition for
IA3's shared key directions (output scaling: the identity; input scaling: W^T)."""

import pytest
import torch
from peft import IA3Config, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM

from hfzoo.adapters import compose
from hfzoo.adapters.composition import stacked

QKV, DOWN = "model.layers.1.self_attn.qkv_proj", "model.layers.1.mlp.down_proj"  # output / input (feedforward) scaling
NAMES = ("first", "second")


@pytest.fixture(scope="module")
def ia3(tmp_path_factory, tiny_model):
    root = tmp_path_factory.mktemp("ia3")
    tiny_model("llama-tiny").save_pretrained(root / "base")
    folders = {}
    for seed, name in enumerate(NAMES):
        config = IA3Config(target_modules=["qkv_proj", "down_proj"], feedforward_modules=["down_proj"])
        model = get_peft_model(AutoModelForCausalLM.from_pretrained(root / "base"), config)
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():  # trained-looking vectors: PEFT initialises them to exactly 1 (no change)
            for parameter in (p for n, p in model.named_parameters() if "ia3_l" in n):
                parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.3)
        folders[name] = root / name
        model.save_pretrained(folders[name])
    return root, folders


def base(root):
    return AutoModelForCausalLM.from_pretrained(root / "base").eval()


def ids(batch: int = 4):
    return torch.randint(3, 200, (batch, 7), generator=torch.Generator().manual_seed(0))


def peft_module(root, folder, path):
    return PeftModel.from_pretrained(base(root), folder).base_model.model.get_submodule(path)


def peft_logits(root, folder, input_ids):
    with torch.no_grad():
        return PeftModel.from_pretrained(base(root), folder).eval()(input_ids=input_ids).logits


@pytest.mark.parametrize("strategy", ["fixed", "average"])
def test_one_ia3_adapter_equals_peft(ia3, strategy):
    root, folders = ia3
    input_ids = ids()
    composed = compose(base(root), {"first": folders["first"]}, strategy)
    kwargs = {"adapter_names": ["first"] * len(input_ids)} if strategy == "fixed" else {}
    with torch.no_grad():
        logits = composed(input_ids=input_ids, **kwargs).logits
    expected = peft_logits(root, folders["first"], input_ids)
    assert not torch.allclose(expected, base(root)(input_ids=input_ids).logits, atol=1e-3)  # the adapter does work
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)


def test_mixed_batch_of_ia3_adapters_equals_peft_per_row(ia3):
    root, folders = ia3
    input_ids, names = ids(), ["first", "second", "__base__", "second"]
    composed = compose(base(root), folders, "fixed")
    with torch.no_grad():
        logits = composed(input_ids=input_ids, adapter_names=names).logits
        per_adapter = {name: peft_logits(root, folders[name], input_ids) for name in NAMES}
        per_adapter["__base__"] = base(root)(input_ids=input_ids).logits
    expected = torch.stack([per_adapter[name][row] for row, name in enumerate(names)])
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("path", [QKV, DOWN])
def test_fusion_of_ia3_adapters_equals_its_definition(ia3, path):
    root, folders = ia3
    composed = compose(base(root), folders, "fusion")
    layer, reference = composed.composed_layers[path], base(root).get_submodule(path)
    peft_modules = [peft_module(root, folders[name], path) for name in NAMES]
    x = torch.randn(3, 5, reference.in_features, generator=torch.Generator().manual_seed(1))
    fusion = layer.combiner
    with torch.no_grad():
        generator = torch.Generator().manual_seed(2)
        for projection in (fusion.query, fusion.key, fusion.value):
            projection.weight.copy_(torch.randn(projection.weight.shape, generator=generator) * 0.1)
        outputs = torch.stack([module(x) for module in peft_modules], dim=-2)  # o_n
        y = reference(x)
        scores = (fusion.query(y).unsqueeze(-2) * fusion.key(outputs)).sum(-1)  # (Q y) . (K o_n), by definition
        expected = (scores.softmax(-1).unsqueeze(-1) * fusion.value(outputs)).sum(-2)
        torch.testing.assert_close(layer(x), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("path", [QKV, DOWN])
def test_hard_routing_of_ia3_adapters_applies_the_chosen_one_gathered_or_grouped(ia3, path, monkeypatch):
    root, folders = ia3
    composed = compose(base(root), folders, "hard")
    layer, reference = composed.composed_layers[path], base(root).get_submodule(path)
    peft_modules = [peft_module(root, folders[name], path) for name in NAMES]
    torch.nn.init.normal_(layer.combiner.proj.weight, std=1.0, generator=torch.Generator().manual_seed(0))
    x = torch.randn(4, 6, reference.in_features, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        outputs = torch.stack([module(x) for module in peft_modules], dim=-2)  # [4, 6, 2, out]
        chosen = layer.combiner.logits(layer, x).argmax(-1)
        assert chosen.unique().numel() == 2  # both adapters are picked somewhere
        expected = outputs.gather(-2, chosen[..., None, None].expand(-1, -1, 1, outputs.shape[-1])).squeeze(-2)
        for limit in (0, 10**9):  # grouped by adapter, gathered per token
            monkeypatch.setattr(stacked, "GATHERED_VALUES_LIMIT", limit)
            torch.testing.assert_close(layer(x), expected, atol=1e-5, rtol=1e-5)
