"""The preset table: named architectures as data (family + flag values), not code.

`*-tiny` presets are for tests (< 2M parameters), `*-small` train on two CPU cores in minutes (10-30M),
`*-base` follow the dimensions of the paper they are named after.
"""

from dataclasses import fields

from transformers import PreTrainedConfig

from ..models.configuration_bilm import ZooBiLMConfig
from ..models.configuration_decoder import ZooDecoderConfig
from ..models.configuration_encoder import ZooEncoderConfig
from ..models.configuration_encoder_decoder import ZooEncoderDecoderConfig

FAMILY_CONFIGS: dict[str, type[PreTrainedConfig]] = {
    "decoder": ZooDecoderConfig,
    "encoder": ZooEncoderConfig,
    "encoder_decoder": ZooEncoderDecoderConfig,
    "bilm": ZooBiLMConfig,
}
# The Auto class of each family's pretraining model (language-model head).
FAMILY_LM_AUTO_CLASS: dict[str, str] = {
    "decoder": "AutoModelForCausalLM",
    "encoder": "AutoModelForMaskedLM",
    "encoder_decoder": "AutoModelForSeq2SeqLM",
    "bilm": "AutoModelForPreTraining",  # forward + backward LM heads; a bidirectional model cannot generate
}

_GPT = dict(
    activation="gelu_new", norm_type="layernorm", norm_position="pre", position_embedding="learned",
    attention_bias=True, mlp_bias=True, tie_word_embeddings=True, norm_eps=1e-5,
)
_LLAMA = dict(
    activation="swiglu", norm_type="rmsnorm", norm_position="pre", position_embedding="rotary",
    attention_bias=False, mlp_bias=False, tie_word_embeddings=False, norm_eps=1e-6,
    hidden_dropout=0.0, attention_dropout=0.0, rope_theta=10000.0,
)
# GPT-2 with what paid in the speedrun ablation on this machine (model_cards/results/clm-speedrun-shakespeare, issue
# 36): rotary positions and a ReLU² MLP (each about -0.12 to -0.15 nats at a 2-minute budget), logit soft-capping at
# 30 (-0.003 and -0.026 in the two passes), no dropout. Left out, as they did not pay there: QK-norm, zero-initialised
# projections, an untied head (a gain no larger than its runs' difference in time), Muon. The recipe's
# warmup-stable-decay schedule (-0.031, -0.003) is in its config (recipes/configs/gpt-speedrun-small-enwiki-clm.yaml).
_SPEEDRUN = {**_GPT, "position_embedding": "rotary", "activation": "relu2", "logit_softcap": 30.0,
             "hidden_dropout": 0.0, "attention_dropout": 0.0}  # fmt: skip
_TINY = dict(vocab_size=4096, hidden_size=128, num_hidden_layers=4, num_attention_heads=4, max_position_embeddings=512)
_SMALL = dict(vocab_size=16384, hidden_size=384, num_hidden_layers=6, num_attention_heads=6, max_position_embeddings=1024)
_BERT = dict(
    activation="gelu", norm_type="layernorm", norm_position="post", norm_eps=1e-12, position_embedding="learned",
    attention_bias=True, mlp_bias=True, embedding_norm=True, tie_word_embeddings=True, type_vocab_size=2,
    add_pooling_layer=True, max_position_embeddings=512,
)
# RoBERTa: BERT's architecture; type_vocab_size=0 because its single token-type row is a constant the learned
# positions absorb, and 0 makes a BERT-style tokenizer's segment ids harmless instead of out of range. Its token ids
# (<s>=0, <pad>=1, </s>=2) come with it: RoBERTa numbers positions from the pad token, so a model built from the
# preset exports to RoBERTa as it is (a recipe sets the ids of the tokenizer it trains with).
_ROBERTA = {**_BERT, "type_vocab_size": 0, "norm_eps": 1e-5, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2}
# ModernBERT without its alternating sliding-window attention (every layer attends globally here).
_MODERNBERT = dict(
    activation="geglu", norm_type="layernorm", norm_bias=False, norm_position="pre", norm_eps=1e-5,
    position_embedding="rotary", rope_theta=160000.0, attention_bias=False, mlp_bias=False, embedding_norm=True,
    tie_word_embeddings=True, type_vocab_size=0, add_pooling_layer=False, hidden_dropout=0.0, attention_dropout=0.0,
)
# DeBERTa-v3's encoder (He et al., 2021; 2023): BERT's post-norm layers with disentangled attention over
# log-bucketed relative positions (no absolute position embedding), no token types, a GELU pooler (DeBERTa's
# ContextPooler); its enhanced mask decoder and DeBERTa-v2's convolution layer are not part of these presets.
_DEBERTA = dict(
    activation="gelu", norm_type="layernorm", norm_position="post", norm_eps=1e-7, position_embedding="disentangled",
    position_buckets=256, max_relative_positions=512, position_attention_terms="c2p|p2c", attention_bias=True,
    mlp_bias=True, embedding_norm=True, tie_word_embeddings=True, type_vocab_size=0, add_pooling_layer=True,
    pooler_activation="gelu", max_position_embeddings=512,
)
_BERT_BASE = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
# Encoder-decoder presets: the depth is per stack (num_hidden_layers encoder blocks, as many decoder blocks).
# T5 v1.1 (and Flan-T5, mT5) gate with GPT-2's tanh GELU: T5Config's `gated-gelu` is transformers' `gelu_new`.
_T5 = dict(
    activation="geglu_tanh", norm_type="rmsnorm", norm_position="pre", norm_eps=1e-6, position_embedding="relative",
    relative_attention_num_buckets=32, relative_attention_max_distance=128, attention_bias=False, mlp_bias=False,
    share_embeddings=True, tie_word_embeddings=False, decoder_start_token_id=0,
)
_BART = dict(
    activation="gelu", norm_type="layernorm", norm_position="post", norm_eps=1e-5, position_embedding="learned",
    embedding_norm=True, attention_bias=True, mlp_bias=True, share_embeddings=True, tie_word_embeddings=True,
    decoder_start_token_id=1,  # BART starts the decoder from </s> (id 1 in hfzoo's encoder-decoder tokenizers)
)
_TRANSFORMER = dict(
    activation="relu", norm_type="layernorm", norm_position="post", norm_eps=1e-6, position_embedding="sinusoidal",
    scale_embeddings=True, attention_bias=True, mlp_bias=True, share_embeddings=True, tie_word_embeddings=True,
    attention_dropout=0.0, decoder_start_token_id=0,
)
_SEQ2SEQ_TINY = {**_TINY, "num_hidden_layers": 2}
_SEQ2SEQ_SMALL = {**_SMALL, "num_hidden_layers": 4}

# ELMo (Peters et al., 2018): 2 layers per direction, projected LSTMs (4096 cells -> 512), residual between layers.
_ELMO = dict(num_hidden_layers=2, residual_connections=True, hidden_dropout=0.1, tie_word_embeddings=True)

# name -> (family, flag values, what it follows)
PRESETS: dict[str, tuple[str, dict, str]] = {
    "gpt-tiny": ("decoder", {**_GPT, **_TINY, "intermediate_size": 512}, "GPT-2 (Radford et al., 2019), test size"),
    "gpt-small": ("decoder", {**_GPT, **_SMALL, "intermediate_size": 1536}, "GPT-2, CPU-trainable size"),
    "gpt-base": (
        "decoder",
        {**_GPT, "vocab_size": 50257, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
         "intermediate_size": 3072, "max_position_embeddings": 1024},
        "GPT-2 124M dimensions (Radford et al., 2019)",
    ),
    "gpt-speedrun-tiny": (
        "decoder", {**_SPEEDRUN, **_TINY, "intermediate_size": 512},
        "GPT-2 with the speedrun's changes that paid on CPU (rotary, ReLU², logit soft-cap), test size",
    ),
    "gpt-speedrun-small": (
        "decoder", {**_SPEEDRUN, **_SMALL, "intermediate_size": 1536},
        "GPT-2 with the speedrun's changes that paid on CPU (rotary, ReLU², logit soft-cap; measured in "
        "model_cards/results/clm-speedrun-shakespeare), CPU-trainable size",
    ),
    "llama-tiny": (
        "decoder",
        {**_LLAMA, **_TINY, "num_key_value_heads": 2, "intermediate_size": 352},
        "Llama (Touvron et al., 2023), test size",
    ),
    "llama-small": (
        "decoder",
        {**_LLAMA, **_SMALL, "num_key_value_heads": 2, "intermediate_size": 1024},
        "Llama, CPU-trainable size",
    ),
    "llama-moe-tiny": (
        "decoder",
        {**_LLAMA, **_TINY, "num_key_value_heads": 2, "intermediate_size": 192, "num_experts": 4,
         "num_experts_per_tok": 2, "tie_word_embeddings": True},
        "Llama with a top-2 mixture of 4 experts (Switch/GShard-style routing), test size",
    ),
    "llama-moe-small": (
        "decoder",
        {**_LLAMA, **_SMALL, "num_key_value_heads": 2, "intermediate_size": 256, "num_experts": 8,
         "num_experts_per_tok": 2, "tie_word_embeddings": True},
        "Llama with a top-2 mixture of 8 experts, CPU-trainable size",
    ),
    "llama-base": (
        "decoder",
        {**_LLAMA, "vocab_size": 32000, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
         "num_key_value_heads": 4, "intermediate_size": 2048, "max_position_embeddings": 2048},
        "Llama-style at ~125M parameters",
    ),
    "bert-tiny": (
        "encoder", {**_BERT, **_TINY, "intermediate_size": 512}, "BERT (Devlin et al., 2019), test size"
    ),
    "bert-small": (
        "encoder", {**_BERT, **_SMALL, "intermediate_size": 1536, "max_position_embeddings": 512},
        "BERT (Devlin et al., 2019), CPU-trainable size",
    ),
    "bert-base": ("encoder", {**_BERT, **_BERT_BASE}, "BERT-base 110M dimensions (Devlin et al., 2019)"),
    "roberta-tiny": (
        "encoder", {**_ROBERTA, **_TINY, "intermediate_size": 512},
        "RoBERTa (Liu et al., 2019): BERT without token types, trained without NSP, with dynamic masking; test size",
    ),
    "roberta-small": (
        "encoder", {**_ROBERTA, **_SMALL, "intermediate_size": 1536, "max_position_embeddings": 514},
        "RoBERTa (Liu et al., 2019): trained without NSP, with dynamic masking; CPU-trainable size",
    ),
    "roberta-base": (
        "encoder", {**_ROBERTA, **_BERT_BASE, "vocab_size": 50265, "max_position_embeddings": 514},
        "RoBERTa-base 125M dimensions (Liu et al., 2019): trained without NSP, with dynamic masking",
    ),
    "modernbert-tiny": (
        "encoder", {**_MODERNBERT, **_TINY, "intermediate_size": 192},
        "ModernBERT (Warner et al., 2024): pre-norm, bias-free, rotary, GeGLU, global attention only; test size",
    ),
    "modernbert-small": (
        "encoder", {**_MODERNBERT, **_SMALL, "intermediate_size": 576},
        "ModernBERT (Warner et al., 2024), global attention only; CPU-trainable size",
    ),
    "modernbert-base": (
        "encoder",
        {**_MODERNBERT, "vocab_size": 50368, "hidden_size": 768, "num_hidden_layers": 22, "num_attention_heads": 12,
         "intermediate_size": 1152, "max_position_embeddings": 8192},
        "ModernBERT-base 149M dimensions (Warner et al., 2024), global attention only",
    ),
    "deberta-tiny": (
        "encoder", {**_DEBERTA, **_TINY, "intermediate_size": 512},
        "DeBERTa-v3 (He et al., 2021): disentangled attention (content-to-position and position-to-content) over "
        "256 log-bucketed relative positions, post-norm; test size",
    ),
    "deberta-small": (
        "encoder", {**_DEBERTA, **_SMALL, "intermediate_size": 1536, "max_position_embeddings": 512},
        "DeBERTa-v3 (He et al., 2021): disentangled attention over log-bucketed relative positions; CPU-trainable size",
    ),
    "deberta-base": (
        "encoder", {**_DEBERTA, **_BERT_BASE, "vocab_size": 128100},
        "DeBERTa-v3-base 184M dimensions (He et al., 2023), without the enhanced mask decoder",
    ),
    "t5-tiny": (
        "encoder_decoder", {**_T5, **_SEQ2SEQ_TINY, "intermediate_size": 256},
        "T5 v1.1 (Raffel et al., 2020): pre-RMSNorm, relative bias, GeGLU with tanh GELU, untied head; test size",
    ),
    "t5-small": (
        "encoder_decoder", {**_T5, **_SEQ2SEQ_SMALL, "intermediate_size": 1024},
        "T5 v1.1 (Raffel et al., 2020), CPU-trainable size",
    ),
    "t5-base": (
        "encoder_decoder",
        {**_T5, "vocab_size": 32128, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
         "intermediate_size": 2048, "max_position_embeddings": 512},
        "T5 v1.1-base 248M dimensions (Raffel et al., 2020)",
    ),
    "bart-tiny": (
        "encoder_decoder", {**_BART, **_SEQ2SEQ_TINY, "intermediate_size": 512},
        "BART (Lewis et al., 2020): post-LayerNorm, learned positions, embedding norm, tied embeddings; test size",
    ),
    "bart-small": (
        "encoder_decoder", {**_BART, **_SEQ2SEQ_SMALL, "intermediate_size": 1536},
        "BART (Lewis et al., 2020), CPU-trainable size",
    ),
    "bart-base": (
        "encoder_decoder",
        {**_BART, "vocab_size": 50265, "hidden_size": 768, "num_hidden_layers": 6, "num_attention_heads": 12,
         "intermediate_size": 3072, "max_position_embeddings": 1024},
        "BART-base 139M dimensions (Lewis et al., 2020)",
    ),
    "transformer-tiny": (
        "encoder_decoder", {**_TRANSFORMER, **_SEQ2SEQ_TINY, "intermediate_size": 512},
        "The Transformer (Vaswani et al., 2017): post-norm, sinusoidal positions, ReLU, shared embeddings; test size",
    ),
    "transformer-small": (
        "encoder_decoder", {**_TRANSFORMER, **_SEQ2SEQ_SMALL, "intermediate_size": 1536},
        "The Transformer (Vaswani et al., 2017), CPU-trainable size",
    ),
    "transformer-base": (
        "encoder_decoder",
        {**_TRANSFORMER, "vocab_size": 37000, "hidden_size": 512, "num_hidden_layers": 6, "num_attention_heads": 8,
         "intermediate_size": 2048, "max_position_embeddings": 1024},
        "Transformer base 63M dimensions (Vaswani et al., 2017), 37000-token shared BPE of WMT en-de",
    ),
    "elmo-tiny": (
        "bilm", {**_ELMO, "vocab_size": 4096, "hidden_size": 64, "cell_size": 256},
        "ELMo's biLM (Peters et al., 2018) on tokens: forward and backward projected LSTMs, tied softmax; test size",
    ),
    "elmo-small": (
        "bilm", {**_ELMO, "vocab_size": 16384, "hidden_size": 256, "cell_size": 1024},
        "ELMo's biLM (Peters et al., 2018) on tokens, CPU-trainable size",
    ),
}


def list_presets() -> list[str]:
    """Names of every preset, sorted."""
    return sorted(PRESETS)


def preset_family(name: str) -> str:
    _check_name(name)
    return PRESETS[name][0]


def preset_description(name: str) -> str:
    _check_name(name)
    return PRESETS[name][2]


def _check_name(name: str) -> None:
    if name not in PRESETS:
        raise ValueError(f"Unknown preset {name!r}. Valid presets: {', '.join(list_presets())}.")


# Config arguments that are not dataclass fields but that every PreTrainedConfig accepts (transformers'
# own `from_dict` lets the same ones through); `num_labels` sizes classification heads.
_INIT_ONLY_KEYS = {"num_labels", "attn_implementation", "output_attentions"}


def preset_config(name: str, **overrides) -> PreTrainedConfig:
    """The config of preset `name`, with any field overridden; unknown names or keys list the valid ones."""
    _check_name(name)
    family, values, _ = PRESETS[name]
    config_cls = FAMILY_CONFIGS[family]
    valid = {f.name for f in fields(config_cls)} | _INIT_ONLY_KEYS
    unknown = sorted(set(overrides) - valid)
    if unknown:
        raise ValueError(
            f"Unknown override(s) {', '.join(unknown)} for preset {name!r} ({config_cls.__name__}). "
            f"Valid keys: {', '.join(sorted(valid))}."
        )
    return config_cls(**{**values, **overrides})


def build_preset_model(name: str, **overrides):
    """A randomly initialised model of preset `name` with its family's language-model head."""
    import transformers

    auto_cls = getattr(transformers, FAMILY_LM_AUTO_CLASS[preset_family(name)])
    return auto_cls.from_config(preset_config(name, **overrides))


def count_preset_parameters(name: str) -> int:
    """Parameters of preset `name` (with its LM head; tied weights counted once), without allocating them."""
    import torch

    with torch.device("meta"):
        model = build_preset_model(name)
    return sum(p.numel() for p in model.parameters())
