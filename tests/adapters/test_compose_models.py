"""Compositions on other base models: native transformers GPT-2, BERT, T5 and Llama (LoRA "fixed" equal to PEFT's
own mixed batch bit for bit, classifier adapters' saved heads, generation with beams, every learned strategy trains
and reloads), and hfzoo's mixture-of-experts block. Every model is fp32 with dropout 0.
"""

from contextlib import nullcontext

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import (
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForQuestionAnswering,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    BertConfig,
    BertForSequenceClassification,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    T5Config,
    T5ForConditionalGeneration,
)

import hfzoo
from hfzoo.adapters import BottleneckConfig, compose, load_composition

FP32 = dict(atol=1e-6, rtol=1e-6)  # float32 rounding: a 1-row F.linear and a bmm round differently
VOCAB = 512
_NO_DROPOUT = dict(hidden_dropout=0.0, attention_dropout=0.0)
_SMALL = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)


def _zoo(preset: str, auto_class):
    return lambda: auto_class.from_config(hfzoo.preset_config(preset, vocab_size=VOCAB, **_NO_DROPOUT))


MODELS = {  # name -> (build the base model, LoRA targets (None: PEFT's defaults for the model type), task type)
    "gpt2": (
        lambda: GPT2LMHeadModel(GPT2Config(
            vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=2, n_positions=64,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        )),
        ["c_attn", "c_proj"], "CAUSAL_LM",
    ),
    "llama": (
        lambda: LlamaForCausalLM(LlamaConfig(**_SMALL, num_key_value_heads=2)),
        ["q_proj", "v_proj", "down_proj"], "CAUSAL_LM",
    ),
    "bert": (
        lambda: BertForSequenceClassification(
            BertConfig(**_SMALL, num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        ),
        ["query", "value"], "SEQ_CLS",
    ),
    "t5": (
        lambda: T5ForConditionalGeneration(T5Config(
            vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4, dropout_rate=0.0,
            decoder_start_token_id=0,
        )),
        ["q", "v", "wo"], "SEQ_2_SEQ_LM",
    ),
    "hfzoo-bert-tiny": (_zoo("bert-tiny", AutoModelForMaskedLM), None, None),
    "hfzoo-t5-tiny": (_zoo("t5-tiny", AutoModelForSeq2SeqLM), None, "SEQ_2_SEQ_LM"),
}


def build(name: str):
    torch.manual_seed(0)
    return MODELS[name][0]().eval()


def model_inputs(model, labels: str | None = None) -> dict:
    """Inputs of 3 rows, one left-padded; `labels="class"` or `"tokens"` adds labels."""
    ids = torch.randint(4, VOCAB, (3, 8), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # a left-padded row
    inputs = dict(input_ids=ids, attention_mask=mask)
    if model.config.is_encoder_decoder:
        inputs["decoder_input_ids"] = ids[:, :5].contiguous()
    if labels:
        inputs["labels"] = torch.arange(3) if labels == "class" else inputs.get("decoder_input_ids", ids)
    return inputs


@pytest.fixture(scope="module", params=list(MODELS))
def other_model(request, tmp_path_factory):
    """Two real PEFT LoRA adapters (r=4, scaling 2 and 4) with random factors and, for classifiers, their own heads.
    Equal ranks: no zero-padding, so "fixed" must give PEFT's result bit for bit."""
    name, (_, targets, task_type) = request.param, MODELS[request.param]
    folders = {}
    for adapter, alpha, rslora in (("a", 8, False), ("b", 16, True)):  # scaling alpha/r = 2, alpha/sqrt(r) = 8
        torch.manual_seed(alpha)
        config = LoraConfig(
            r=4, lora_alpha=alpha, use_rslora=rslora, target_modules=targets, task_type=task_type,
            fan_in_fan_out=name == "gpt2",
        )
        peft = get_peft_model(build(name), config)
        with torch.no_grad():
            for parameter in peft.parameters():
                if parameter.requires_grad:  # LoRA factors and saved heads, as training would leave them
                    parameter.add_(torch.randn_like(parameter) * 0.1)
        folders[adapter] = tmp_path_factory.mktemp(f"{name}-{adapter}")
        peft.save_pretrained(folders[adapter])
    return name, folders


def test_other_models_fixed_equals_peft_and_routers_run(other_model, tmp_path):
    name, folders = other_model
    reference = PeftModel.from_pretrained(build(name), folders["a"], adapter_name="a")
    reference.load_adapter(folders["b"], adapter_name="b")
    inputs, names = model_inputs(reference), ["a", "b", "__base__"]
    expected = reference(**inputs, adapter_names=names).logits
    composed = compose(build(name), folders, "fixed")
    logits, heads = composed(**inputs, adapter_names=names).logits, composed.adapters[0].heads
    if heads:  # a 1-row F.linear and a bmm round differently (PEFT's own mixed batch differs from set_adapter too)
        torch.testing.assert_close(logits, expected, **FP32)
    else:
        assert torch.equal(logits, expected)
    if composed.config.is_encoder_decoder:
        del inputs["decoder_input_ids"]
        options = dict(max_new_tokens=4, do_sample=False, num_beams=2)
        generated = composed.generate(**inputs, adapter_names=names, **options)
        rows = {}
        for adapter in names:
            with reference.disable_adapter() if adapter == "__base__" else nullcontext():
                if adapter != "__base__":
                    reference.set_adapter(adapter)
                rows[adapter] = reference.generate(**inputs, **options)
        assert torch.equal(generated, torch.stack([rows[adapter][row] for row, adapter in enumerate(names)]))

    if heads:  # classifier adapters save their own head: averaged as outputs, per row in "fixed" (above)
        averaged = compose(build(name), folders, "average")
        pooled = torch.randn(3, composed.config.hidden_size, generator=torch.Generator().manual_seed(0))
        path = next(iter(heads))
        copies = [reference.base_model.model.get_submodule(f"{path}.modules_to_save.{a}") for a in "ab"]
        expected = (copies[0](pooled) + copies[1](pooled)) / 2
        torch.testing.assert_close(averaged.composed_layers[path](pooled), expected, **FP32)
        # routed strategies compose for a new task: they need a fresh head
        with pytest.raises(ValueError, match="saves its own .*modules_to_save"):
            compose(build(name), folders, "soft")
    head = {"trainable_modules": sorted(heads)} if heads else {}
    for strategy, options in (("soft", {"granularity": "sequence"}), ("hard", {}), ("fusion", {})):
        routed = compose(build(name), folders, strategy, **head, **options).train()
        routed(**model_inputs(routed, labels="class" if heads else "tokens")).loss.backward()
        assert all(p.grad is not None for p in routed.parameters() if p.requires_grad)
        routed.eval().save_pretrained(tmp_path / strategy)
        reloaded = load_composition(build(name), tmp_path / strategy)
        assert torch.equal(reloaded(**model_inputs(routed)).logits, routed(**model_inputs(routed)).logits)


def test_bottlenecks_on_a_mixture_of_experts_block(tmp_path):
    """hfzoo's MoE block returns (hidden states, router logits): the adapters act on the first output."""
    def moe():
        torch.manual_seed(0)
        return _zoo("llama-moe-tiny", AutoModelForCausalLM)().eval()

    folders = {}
    for name, variant in (("houlsby", "houlsby"), ("pfeiffer", "pfeiffer")):
        get_peft_model(moe(), BottleneckConfig(variant=variant, init_weights=False)).save_pretrained(tmp_path / name)
        folders[name] = tmp_path / name
    reference = PeftModel.from_pretrained(moe(), folders["houlsby"], adapter_name="houlsby")
    reference.load_adapter(folders["pfeiffer"], adapter_name="pfeiffer")
    inputs, names = model_inputs(reference), ["houlsby", "pfeiffer", "__base__"]
    composed = compose(moe(), folders, "fixed")
    assert "model.layers.0.mlp" in composed.composed_layers
    assert torch.equal(composed(**inputs, adapter_names=names).logits, reference(**inputs, adapter_names=names).logits)
    soft = compose(moe(), folders, "soft").train()
    soft(**model_inputs(soft, labels="tokens")).loss.backward()
    assert soft.composed_layers["model.layers.0.mlp"].combiner.proj.weight.grad.abs().sum() > 0


def test_adapters_of_other_task_kinds_compose_for_a_new_task(tmp_path):
    """A QA adapter saves qa_outputs, an NER adapter its 9-label classifier: composed for sentence classification
    with a fresh classifier, their heads are left out (the base model has no qa_outputs; its classifier trains anew)
    and the composition trains; without a head of its own, the foreign head is refused by name."""
    def config(num_labels: int):
        return hfzoo.preset_config("bert-tiny", vocab_size=VOCAB, num_labels=num_labels, **_NO_DROPOUT)

    folders = {}
    for task, auto_class, head, labels in (("qa", AutoModelForQuestionAnswering, "qa_outputs", 2),
                                           ("ner", AutoModelForTokenClassification, "classifier", 9)):
        torch.manual_seed(0)
        adapted = get_peft_model(auto_class.from_config(config(labels)),
                                 BottleneckConfig(variant="pfeiffer", modules_to_save=[head]))  # fmt: skip
        adapted.save_pretrained(tmp_path / task)
        folders[task] = tmp_path / task

    def target():
        torch.manual_seed(1)
        return AutoModelForSequenceClassification.from_config(config(3))

    for strategy in ("average", "fusion"):
        composed = compose(target(), folders, strategy, trainable_modules=["classifier"]).train()
        assert all(adapter.heads == {} for adapter in composed.adapters)
        assert not any("qa_outputs" in path or path == "classifier" for path in composed.composed_layers)
        inputs = model_inputs(composed, labels="class")
        composed(**inputs).loss.backward()
        assert composed.base_model.classifier.weight.grad is not None
    with pytest.raises(ValueError, match="adapter 'qa' adapts qa_outputs, which the base model"):
        compose(target(), folders, "average")
