"""Small random models for the conversion tests, seeded and built without downloads: native transformers models of
every family hfzoo converts, hfzoo models of the presets at test size, and the inputs each is judged on. Norms and
biases are moved off their (1, 0) start, so that a swapped or dropped weight shows in the outputs."""

import torch
import transformers

import hfzoo
from hfzoo.core.presets import FAMILY_CONFIGS, PRESETS

VOCAB = 96


# family -> (config class, small config arguments). The token ids are those each family's heads need: pad for the
# decoder classifiers, eos for the seq2seq classifiers, a start token for generation.
NATIVE_CONFIGS = {
    "gpt2": (transformers.GPT2Config, dict(
        vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=4, bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )),
    "llama": (transformers.LlamaConfig, dict(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
        pad_token_id=0,
    )),
    # A window shorter than the test inputs and generations, so that ignoring it shows.
    "mistral": (transformers.MistralConfig, dict(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, sliding_window=4, bos_token_id=1, eos_token_id=2,
        pad_token_id=0,
    )),
    # Gemma: RMSNorms scaling by 1 + weight, embeddings scaled by sqrt(hidden_size), a tanh-GELU gate.
    "gemma": (transformers.GemmaConfig, dict(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=64, bos_token_id=1, eos_token_id=2,
        pad_token_id=0,
    )),
    "qwen2": (transformers.Qwen2Config, dict(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )),
    "bert": (transformers.BertConfig, dict(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
        max_position_embeddings=64,
    )),
    "roberta": (transformers.RobertaConfig, dict(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
        max_position_embeddings=66, type_vocab_size=1,
    )),
    "distilbert": (transformers.DistilBertConfig, dict(
        vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=48, max_position_embeddings=64,
    )),
    # ELECTRA-Small's shape: embeddings narrower than the hidden states, projected (embeddings_project).
    "electra": (transformers.ElectraConfig, dict(
        vocab_size=VOCAB, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=48, max_position_embeddings=64,
    )),
    # T5 v1.1 / Flan-T5: a gate of the tanh GELU (transformers' gelu_new), untied head, unscaled decoder output.
    "t5": (transformers.T5Config, dict(
        vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=48, num_layers=2, num_decoder_layers=3, num_heads=4,
        feed_forward_proj="gated-gelu", tie_word_embeddings=False, decoder_start_token_id=0,
    )),
    # mT5: T5 v1.1 under its own classes, whose config always ties the head (and never scales the decoder output).
    "mt5": (transformers.MT5Config, dict(
        vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=48, num_layers=2, num_decoder_layers=3, num_heads=4,
        feed_forward_proj="gated-gelu", decoder_start_token_id=0,
    )),
    "bart": (transformers.BartConfig, dict(
        vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48, max_position_embeddings=64,
        forced_eos_token_id=None,
    )),
}


def native_model(family: str, head: str, seed: int = 0, **overrides) -> transformers.PreTrainedModel:
    config_class, arguments = NATIVE_CONFIGS[family]
    config = config_class(**{**arguments, **overrides})
    torch.manual_seed(seed)
    model = getattr(transformers, head)(config).eval()
    with torch.no_grad():  # norms start at (1, 0), biases at 0: move them, so a swapped or dropped one shows
        for name, parameter in model.named_parameters():
            if "norm" in name.lower() or name.endswith(".bias"):
                parameter.add_(torch.randn_like(parameter) * 0.1)
    return model


def model_inputs(family: str, head: str, config) -> dict:
    """Token ids that avoid every special id; right padding (mask 0) on the second row for the encoders; an eos
    closing each row where a classifier pools it."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(4, VOCAB, (2, 9), generator=generator)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if family in ("bert", "roberta", "distilbert", "electra"):
        ids[1, -3:] = config.pad_token_id
        inputs["attention_mask"][1, -3:] = 0
    if family in ("bert", "roberta", "electra"):
        inputs["token_type_ids"] = torch.zeros_like(ids)
        inputs["token_type_ids"][:, 5:] = config.type_vocab_size - 1
    if family in ("t5", "mt5", "bart"):
        ids[:, -1] = config.eos_token_id
        # The classifiers shift the source into the decoder; the tagger and the encoder model have no decoder.
        if not head.endswith(("SequenceClassification", "QuestionAnswering", "TokenClassification", "EncoderModel")):
            inputs["decoder_input_ids"] = torch.randint(4, VOCAB, (2, 5), generator=generator)
    if head.endswith("MultipleChoice"):
        inputs = {name: tensor[:, None].expand(-1, 3, -1).contiguous() for name, tensor in inputs.items()}
    return inputs



def random_native(head: str, config: transformers.PreTrainedConfig, seed: int = 0) -> transformers.PreTrainedModel:
    """A random native `head` of `config` (its initializer_range wide: sharp attention); norms and biases moved off
    their (1, 0) start, so that a swapped or dropped weight, or positions read wrongly, show in the outputs."""
    torch.manual_seed(seed)
    model = getattr(transformers, head)(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name.lower() or name.endswith("bias"):
                parameter.add_(torch.randn_like(parameter) * 0.1)
    return model


def deberta_inputs(head: str, config) -> dict:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(4, VOCAB, (2, 11), generator=generator)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    ids[1, -3:] = config.pad_token_id or 0  # masked: any id
    inputs["attention_mask"][1, -3:] = 0
    if config.type_vocab_size:
        inputs["token_type_ids"] = (torch.arange(11) >= 6).long().expand_as(ids).contiguous()
    if head.endswith("MultipleChoice"):
        inputs = {name: tensor[:, None].expand(-1, 3, -1).contiguous() for name, tensor in inputs.items()}
    return inputs



SMALL = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48)


# preset -> (overrides beyond SMALL, native family, Auto class the export loads with)
EXPORTS = {
    "gpt-tiny": ({"max_position_embeddings": 64, "pad_token_id": 0}, "gpt2", transformers.AutoModelForCausalLM),
    "llama-tiny": ({"num_key_value_heads": 2, "pad_token_id": 0}, "llama", transformers.AutoModelForCausalLM),
    "bert-tiny": ({"max_position_embeddings": 64, "pad_token_id": 0}, "bert", transformers.AutoModelForMaskedLM),
    "roberta-tiny": ({"max_position_embeddings": 66}, "roberta", transformers.AutoModelForMaskedLM),
    "t5-tiny": ({"hidden_size": 64}, "t5", transformers.AutoModelForSeq2SeqLM),
    "bart-tiny": ({"max_position_embeddings": 66}, "bart", transformers.AutoModelForSeq2SeqLM),
}


def zoo_model(preset: str, head=None, **overrides) -> transformers.PreTrainedModel:
    """A random hfzoo model of `preset` at test size, norms moved off their (1, 0) start so a swapped one shows."""
    family, values, _ = PRESETS[preset]
    config = FAMILY_CONFIGS[family](**{**values, **SMALL, **EXPORTS.get(preset, ({},))[0], **overrides})
    torch.manual_seed(0)
    head = head or getattr(hfzoo, {"decoder": "ZooDecoderForCausalLM", "encoder": "ZooEncoderForMaskedLM"}.get(
        family, "ZooEncoderDecoderForConditionalGeneration"))
    model = head(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.add_(torch.randn_like(parameter) * 0.1)
    return model

