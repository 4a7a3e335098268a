"""Bottleneck adapters as a PEFT method: identity at init, training, save/load through PEFT's own loaders, named
adapters, mixed-adapter batches, default targets on hfzoo and native transformers models.

Every model is a real, randomly initialised tiny model in fp32 with dropout 0.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import transformers
from peft import AutoPeftModelForCausalLM, PeftModel, PeftType, get_peft_model
from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING
from safetensors.torch import load_file
from transformers import (
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    BertConfig,
    BertForSequenceClassification,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    RobertaConfig,
    RobertaForSequenceClassification,
    T5Config,
    T5ForConditionalGeneration,
)

import hfzoo
from hfzoo.adapters import BottleneckConfig, BottleneckLayer, BottleneckModel
from hfzoo.adapters.bottleneck.registry import register_method
from hfzoo.core.presets import FAMILY_LM_AUTO_CLASS, preset_family
from hfzoo.integrations.peft import add_peft_type

VOCAB = 4096  # the tiny presets' vocabulary


def _ids(batch: int = 3, length: int = 12, vocab: int = VOCAB, seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(4, vocab, (batch, length), generator=generator)


def _wrapped(model) -> list[str]:
    return [name for name, module in model.named_modules() if isinstance(module, BottleneckLayer)]


@torch.no_grad()
def _randomize(model, adapter: str, std: float = 0.3, seed: int = 0) -> None:
    """Give `adapter` weights large enough to change predictions (a trained adapter, without the training)."""
    generator = torch.Generator().manual_seed(seed)
    for module in model.modules():
        if isinstance(module, BottleneckLayer) and adapter in module.bottleneck_down:
            for linear in (module.bottleneck_down[adapter], module.bottleneck_up[adapter]):
                linear.weight.copy_(torch.randn(linear.weight.shape, generator=generator) * std)


@torch.no_grad()  # grad mode picks the CPU attention kernel (last-bit differences): compare outputs under one mode
def _logits(model, ids: torch.Tensor, **kwargs) -> torch.Tensor:
    config = model.config
    if getattr(config, "is_encoder_decoder", False):
        kwargs["decoder_input_ids"] = ids
    return model(input_ids=ids, **kwargs).logits


def _num_layers(config) -> int:
    if getattr(config, "is_encoder_decoder", False):
        return config.num_hidden_layers + config.num_decoder_layers
    return config.num_hidden_layers


def _zoo_lm(tiny_model, preset: str):
    """A tiny hfzoo preset with its family's language-model head."""
    return tiny_model(preset, getattr(transformers, FAMILY_LM_AUTO_CLASS[preset_family(preset)]))


_SMALL = dict(vocab_size=128)
_LLAMA_LIKE = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1)


def _t5(num_decoder_layers: int) -> T5ForConditionalGeneration:
    config = T5Config(**_SMALL, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_decoder_layers=num_decoder_layers,
                      num_heads=2, dropout_rate=0.0, decoder_start_token_id=0)
    return T5ForConditionalGeneration(config)


# Native transformers models from tiny configs (no downloads), dropout 0.
NATIVE = {
    "bert": lambda: BertForSequenceClassification(
        BertConfig(**_SMALL, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                   hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    ),
    "gpt2": lambda: GPT2LMHeadModel(
        GPT2Config(**_SMALL, n_embd=32, n_layer=2, n_head=2, bos_token_id=1, eos_token_id=2,
                   resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    ),
    "t5": lambda: _t5(num_decoder_layers=3),
    "llama": lambda: LlamaForCausalLM(LlamaConfig(**_SMALL, **_LLAMA_LIKE)),
    "mistral": lambda: MistralForCausalLM(MistralConfig(**_SMALL, **_LLAMA_LIKE)),
    "qwen2": lambda: Qwen2ForCausalLM(Qwen2Config(**_SMALL, **_LLAMA_LIKE)),
    "roberta": lambda: RobertaForSequenceClassification(
        RobertaConfig(**_SMALL, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    ),
}
# Transformer presets: the adapters sit after attention and feed-forward sub-layers, which the biLSTM family
# (ELMo) does not have; its adapters name their targets (tests/adapters/test_bilm_features.py).
TINY_PRESETS = [name for name in hfzoo.list_presets() if name.endswith("-tiny") and preset_family(name) != "bilm"]


# ----------------------------------------------------------------------------------------------- registration
def test_peft_type_member_is_a_real_enum_member_and_registration_is_idempotent():
    member = PeftType.BOTTLENECK
    assert PeftType("BOTTLENECK") is member and member in list(PeftType) and member.value == "BOTTLENECK"
    assert json.dumps({"peft_type": member}) == '{"peft_type": "BOTTLENECK"}' and member == "BOTTLENECK"
    assert add_peft_type("BOTTLENECK") is member
    assert register_method(name="bottleneck", config_cls=BottleneckConfig, model_cls=BottleneckModel) is member
    assert PEFT_TYPE_TO_CONFIG_MAPPING["BOTTLENECK"] is BottleneckConfig
    with pytest.raises(KeyError, match="already PEFT method called 'bottleneck'"):
        register_method(name="bottleneck", config_cls=BottleneckConfig, model_cls=PeftModel)


# ----------------------------------------------------------------------------------------------- behaviour
@pytest.mark.parametrize("variant", ["houlsby", "pfeiffer"])
def test_identity_at_init(tiny_model, variant):
    base = tiny_model("gpt-tiny")
    ids = _ids()
    reference = _logits(base, ids)
    config = BottleneckConfig(variant=variant, activation="gelu", layer_norm=True, task_type="CAUSAL_LM")
    model = get_peft_model(base, config)
    assert torch.equal(_logits(model, ids), reference)


def test_training_changes_output_and_trains_only_adapters_and_head(tiny_model):
    base = tiny_model("llama-tiny", AutoModelForSequenceClassification, num_labels=2, pad_token_id=0)
    model = get_peft_model(base, BottleneckConfig(variant="houlsby", task_type="SEQ_CLS"))
    trainable, total = model.get_nb_trainable_parameters()
    print(f"bottleneck houlsby, reduction 16, llama-tiny: {trainable}/{total} trainable = {trainable / total:.2%}")
    assert trainable / total < 0.02
    ids, labels = _ids(batch=8), torch.tensor([0, 1] * 4)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    logits_before = _logits(model, ids)
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    losses = []
    for _ in range(5):
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    model.eval()
    assert losses[-1] < losses[0]
    assert not torch.allclose(_logits(model, ids), logits_before)
    changed = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    adapters = {name for name in before if ".bottleneck_down.default." in name or ".bottleneck_up.default." in name}
    assert changed == adapters | {"base_model.model.score.modules_to_save.default.weight"}


def test_save_and_reload_through_peft_loaders(tiny_model, tmp_path):
    tiny_model("llama-tiny").save_pretrained(tmp_path / "base")
    base = AutoModelForCausalLM.from_pretrained(tmp_path / "base").eval()
    model = get_peft_model(base, BottleneckConfig(variant="houlsby", task_type="CAUSAL_LM"))
    _randomize(model, "default")
    ids = _ids()
    reference = _logits(model, ids)
    model.save_pretrained(tmp_path / "adapter")

    saved = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert saved["peft_type"] == "BOTTLENECK" and saved["variant"] == "houlsby"
    assert saved["target_modules"] == r"(.*\.)?(mlp\.down_proj|self_attn\.o_proj)"
    keys = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    assert "base_model.model.model.layers.0.mlp.down_proj.bottleneck_down.weight" in keys
    assert len(keys) == 4 * 2 * 4  # 4 layers x 2 sub-layers x (down, up) x (weight, bias)

    fresh = AutoModelForCausalLM.from_pretrained(tmp_path / "base").eval()
    loaded = PeftModel.from_pretrained(fresh, tmp_path / "adapter")
    assert isinstance(loaded.peft_config["default"], BottleneckConfig)
    assert torch.equal(_logits(loaded, ids), reference)
    fresh = AutoModelForCausalLM.from_pretrained(tmp_path / "base").eval()
    loaded = PeftModel.from_pretrained(fresh, tmp_path / "adapter", low_cpu_mem_usage=True)  # meta-device init
    assert torch.equal(_logits(loaded, ids), reference)
    auto = AutoPeftModelForCausalLM.from_pretrained(tmp_path / "adapter").eval()
    assert torch.equal(_logits(auto, ids), reference)


def test_loading_without_import_hfzoo_fails_and_import_fixes_it(tiny_model, tmp_path):
    """Where hfzoo was not imported nothing of hfzoo runs, so PEFT's own lookup of the saved `peft_type` is the
    error: `KeyError: 'BOTTLENECK'` (raised before anything else is read; its text is the JSON value, which must be
    "BOTTLENECK" for PEFT's registry). The remedy, `import hfzoo`, is documented in `hfzoo.adapters.bottleneck`."""
    tiny_model("gpt-tiny").save_pretrained(tmp_path / "base")
    base = AutoModelForCausalLM.from_pretrained(tmp_path / "base")
    get_peft_model(base, BottleneckConfig(task_type="CAUSAL_LM")).save_pretrained(tmp_path / "adapter")
    script = textwrap.dedent(
        f"""
        import sys
        from peft import AutoPeftModelForCausalLM
        assert "hfzoo" not in sys.modules
        try:
            AutoPeftModelForCausalLM.from_pretrained({str(tmp_path / "adapter")!r})
        except KeyError as error:
            print(f"{{type(error).__name__}}: {{error}}")
        import hfzoo
        model = AutoPeftModelForCausalLM.from_pretrained({str(tmp_path / "adapter")!r})
        print("loaded", type(model.peft_config["default"]).__name__)
        """
    )
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["KeyError: 'BOTTLENECK'", "loaded BottleneckConfig"]


def test_named_adapters_set_disable_delete_unload(tiny_model):
    base = tiny_model("llama-tiny")
    ids = _ids()
    reference = _logits(base, ids)
    model = get_peft_model(base, BottleneckConfig(variant="pfeiffer", task_type="CAUSAL_LM"), adapter_name="sst2")
    model.add_adapter("mnli", BottleneckConfig(variant="houlsby", task_type="CAUSAL_LM"))
    _randomize(model, "sst2", seed=1)
    _randomize(model, "mnli", seed=2)
    assert len(_wrapped(model)) == 8  # houlsby "mnli" adds the attention outputs to the wrappers "sst2" created

    logits_sst2 = _logits(model, ids)
    model.set_adapter("mnli")
    logits_mnli = _logits(model, ids)
    assert not torch.allclose(logits_sst2, logits_mnli) and not torch.allclose(logits_sst2, reference)
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".mnli." in name for name in trainable)
    with model.disable_adapter():
        assert torch.equal(_logits(model, ids), reference)
    assert torch.equal(_logits(model, ids), logits_mnli)

    with pytest.warns(UserWarning, match="mnli was active which is now deleted"):
        model.delete_adapter("mnli")
    assert model.active_adapters == ["sst2"] and torch.allclose(_logits(model, ids), logits_sst2)
    assert all("mnli" not in model.get_submodule(name).bottleneck_down for name in _wrapped(model))
    unloaded = model.unload()
    assert not _wrapped(unloaded) and torch.equal(_logits(unloaded, ids), reference)


def test_merge_and_unload_raises_clear_error(tiny_model):
    model = get_peft_model(tiny_model("gpt-tiny"), BottleneckConfig(task_type="CAUSAL_LM"))
    with pytest.raises(ValueError, match="cannot be merged.*non-linear activation"):
        model.merge_and_unload()
    with pytest.raises(ValueError, match="cannot be merged"):
        model.merge_adapter()


# ----------------------------------------------------------------------------------------------- mixed batches
@pytest.fixture(params=["llama-tiny", "native-t5"])
def two_adapter_model(request, tiny_model):
    """A decoder-only and an encoder-decoder model (whose encoder sees un-expanded rows under beam search)."""
    torch.manual_seed(0)
    # T5 with more decoder than encoder layers cannot generate in transformers 5.23 (IndexError in its cache).
    base = tiny_model("llama-tiny") if request.param == "llama-tiny" else _t5(num_decoder_layers=2).eval()
    task = "SEQ_2_SEQ_LM" if base.config.is_encoder_decoder else "CAUSAL_LM"
    model = get_peft_model(base, BottleneckConfig(variant="houlsby", task_type=task), adapter_name="sst2")
    model.add_adapter("mnli", BottleneckConfig(variant="pfeiffer", activation="silu", task_type=task))
    _randomize(model, "sst2", seed=1)
    _randomize(model, "mnli", seed=2)
    return model


ROWS = ["sst2", "mnli", "__base__", "mnli"]


def _per_row(model, run):
    """Output of `run(model)` for each row of ROWS, each computed with that row's adapter alone on the full batch."""
    outputs = {}
    for name in set(ROWS) - {"__base__"}:
        model.set_adapter(name)
        outputs[name] = run(model)
    with model.disable_adapter():
        outputs["__base__"] = run(model)
    return torch.stack([outputs[name][row] for row, name in enumerate(ROWS)])


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_mixed_batch_forward_equals_per_row_adapters(two_adapter_model, mode):
    model = two_adapter_model.train(mode == "train")
    ids = _ids(batch=len(ROWS), vocab=model.config.vocab_size)
    expected = _per_row(model, lambda m: _logits(m, ids))
    assert not torch.allclose(expected[0], expected[1], atol=1e-3)  # the adapters really differ
    mixed = _logits(model, ids, adapter_names=ROWS)
    torch.testing.assert_close(mixed, expected, rtol=1e-5, atol=1e-5)
    if mode == "train":  # differentiable: the loss reaches the adapter that is active
        model.set_adapter("sst2")
        decoder_ids = {"decoder_input_ids": ids} if model.config.is_encoder_decoder else {}
        model(input_ids=ids, **decoder_ids, adapter_names=ROWS).logits.sum().backward()
        layer = next(m for m in model.modules() if isinstance(m, BottleneckLayer))
        assert layer.bottleneck_up["sst2"].weight.grad.abs().sum() > 0


@pytest.mark.parametrize("num_beams", [1, 2])
def test_mixed_batch_generate_equals_per_row_adapters(two_adapter_model, num_beams):
    ids = _ids(batch=len(ROWS), length=6, vocab=two_adapter_model.config.vocab_size)
    settings = dict(max_new_tokens=6, do_sample=False, num_beams=num_beams, pad_token_id=0)
    expected = _per_row(two_adapter_model, lambda m: m.generate(input_ids=ids, **settings))
    with two_adapter_model.disable_adapter():
        assert not torch.equal(two_adapter_model.generate(input_ids=ids, **settings), expected)
    mixed = two_adapter_model.generate(input_ids=ids, adapter_names=ROWS, **settings)
    assert torch.equal(mixed, expected)


def test_mixed_batch_routes_rows_to_their_classification_head(tiny_model):
    """`modules_to_save` heads (one trained copy per adapter) follow `adapter_names` too."""
    base = tiny_model("llama-tiny", AutoModelForSequenceClassification, num_labels=3, pad_token_id=0)
    model = get_peft_model(base, BottleneckConfig(task_type="SEQ_CLS"), adapter_name="sst2")
    model.add_adapter("mnli", BottleneckConfig(task_type="SEQ_CLS"))
    _randomize(model, "sst2", seed=1)
    _randomize(model, "mnli", seed=2)
    with torch.no_grad():
        model.base_model.model.score.modules_to_save["mnli"].weight.normal_()
    ids = _ids(batch=len(ROWS))
    expected = _per_row(model, lambda m: _logits(m, ids))
    torch.testing.assert_close(_logits(model, ids, adapter_names=ROWS), expected, rtol=1e-5, atol=1e-5)


def test_mixed_batch_refuses_gradient_checkpointing_in_training(two_adapter_model):
    two_adapter_model.gradient_checkpointing_enable()
    two_adapter_model.train()
    with pytest.raises(ValueError, match="cannot be combined with gradient checkpointing"):
        two_adapter_model(input_ids=_ids(batch=len(ROWS), vocab=100), adapter_names=ROWS)


def test_mixed_batch_rejects_unknown_adapter(two_adapter_model):
    with pytest.raises(ValueError, match=r"Unknown adapter\(s\) in `adapter_names`: \['cola'\]"):
        two_adapter_model.generate(input_ids=_ids(batch=2, vocab=100), adapter_names=["sst2", "cola"])


# ----------------------------------------------------------------------------------------------- default targets
@pytest.mark.parametrize("case", TINY_PRESETS + [f"native-{name}" for name in NATIVE])
def test_default_targets_without_naming_modules(tiny_model, case):
    torch.manual_seed(0)
    native = NATIVE.get(case.removeprefix("native-"))
    base = native().eval() if native else _zoo_lm(tiny_model, case)
    vocab = base.config.vocab_size
    ids = _ids(batch=2, length=8, vocab=vocab)
    reference = _logits(base, ids)
    layers = _num_layers(base.config)

    model = get_peft_model(base, BottleneckConfig(variant="houlsby"))
    houlsby = _wrapped(model)
    assert len(houlsby) == 2 * layers, houlsby
    assert not any("cross" in name.lower() or "EncDec" in name for name in houlsby)
    assert torch.equal(_logits(model, ids), reference)
    _randomize(model, "default")
    assert not torch.allclose(_logits(model, ids), reference)  # the adapters are on the forward path

    model = get_peft_model(model.unload(), BottleneckConfig(variant="pfeiffer"))
    pfeiffer = _wrapped(model)
    assert len(pfeiffer) == layers and set(pfeiffer) < set(houlsby)
    assert not any("attn" in name.lower() or "attention" in name.lower() for name in pfeiffer)


def test_mixture_of_experts_block_is_wrapped_whole_and_keeps_router_loss(tiny_model):
    base = tiny_model("llama-moe-tiny")
    ids = _ids()
    with torch.no_grad():
        reference = base(input_ids=ids, labels=ids)
    model = get_peft_model(base, BottleneckConfig(variant="pfeiffer", task_type="CAUSAL_LM"))
    assert {name.rsplit(".", 1)[-1] for name in _wrapped(model)} == {"mlp"}
    with torch.no_grad():
        output = model(input_ids=ids, labels=ids)
    assert reference.aux_loss is not None and torch.equal(output.aux_loss, reference.aux_loss)
    assert torch.equal(output.loss, reference.loss)


def test_every_hfzoo_family_has_a_tiny_preset_under_test():
    families = {preset_family(name) for name in TINY_PRESETS}
    if "encoder_decoder" not in families:
        pytest.skip("no hfzoo encoder-decoder tiny preset yet; native T5 covers the encoder-decoder layout")
    assert {"decoder", "encoder"} <= families


def test_unknown_model_type_asks_for_target_modules():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    model.config = transformers.PretrainedConfig()  # a model_type-less config, like a custom architecture
    with pytest.raises(ValueError, match="know no default targets.*Pass `target_modules`"):
        get_peft_model(model, BottleneckConfig())
