"""BART (`BartForConditionalGeneration`, `BartModel`, `BartForSequenceClassification`) <-> hfzoo's post-LayerNorm
encoder-decoder with learned positions and an embedding norm.

- BART's learned positions are read at row `position + 2` (a fairseq legacy); hfzoo reads row `position`. The
  table is rolled by 2 (`mapping.rolled_rows`): hfzoo's `max_position_embeddings` is BART's plus 2, and the two
  rows BART never reads sit at the end, so the round trip is exact.
- `layernorm_embedding` is hfzoo's `embedding_norm`; the blocks are post-norm as hfzoo's `norm_position="post"`.
- `final_logits_bias` (a buffer of zeros in every released BART) has no hfzoo counterpart: exported as zeros,
  imported only when it is zeros.
"""

from transformers import BartConfig, PreTrainedModel

from ..models import ZooEncoderDecoderConfig
from .family import ConfigMap, NativeFamily, require, same_names, tied_head
from .heads import seq2seq_heads
from .mapping import joined, linear, native_zeros, rolled_rows

ACTIVATIONS = ("gelu", "gelu_new", "relu", "silu")
POSITION_OFFSET = 2  # BartLearnedPositionalEmbedding.offset
CONFIG = ConfigMap(
    BartConfig,
    fields={
        **same_names(
            "vocab_size", "attention_dropout", "tie_word_embeddings", "pad_token_id", "bos_token_id", "eos_token_id",
            "decoder_start_token_id",
        ),
        "hidden_size": "d_model", "num_hidden_layers": "encoder_layers", "num_decoder_layers": "decoder_layers",
        "num_attention_heads": "encoder_attention_heads", "intermediate_size": "encoder_ffn_dim",
        "activation": "activation_function", "hidden_dropout": "dropout", "initializer_range": "init_std",
        "scale_embeddings": "scale_embedding",
    },
    fixed=dict(
        norm_type="layernorm", norm_position="post", norm_bias=True, norm_eps=1e-5, position_embedding="learned",
        attention_bias=True, attention_output_bias=True, mlp_bias=True,
        embedding_norm=True, share_embeddings=True, num_experts=0,
    ),  # norm_eps: BART's LayerNorms use torch's default epsilon
)


def zoo_config(model: PreTrainedModel) -> dict:
    config = model.config
    require(config, "hfzoo's encoder-decoder", activation_function=ACTIVATIONS)
    require(config, "hfzoo's encoder-decoder (one head count for both stacks)", decoder_attention_heads=config.encoder_attention_heads)
    require(config, "hfzoo's encoder-decoder (one feed-forward width for both stacks)", decoder_ffn_dim=config.encoder_ffn_dim)
    kwargs = CONFIG.zoo_kwargs(config)
    return {
        **kwargs,
        "max_position_embeddings": config.max_position_embeddings + POSITION_OFFSET,
        "tie_word_embeddings": tied_head(model),
    }


def native_config(config: ZooEncoderDecoderConfig) -> BartConfig:
    require(config, "BART", num_key_value_heads=config.num_attention_heads, activation=ACTIVATIONS)
    if config.max_position_embeddings <= POSITION_OFFSET:
        raise ValueError(
            f"BART reads positions from row {POSITION_OFFSET}, so max_position_embeddings="
            f"{config.max_position_embeddings} leaves none: it needs more rows."
        )
    return CONFIG.native_config(
        config,
        "BART",
        max_position_embeddings=config.max_position_embeddings - POSITION_OFFSET,
        decoder_attention_heads=config.num_attention_heads,
        decoder_ffn_dim=config.intermediate_size,
        activation_dropout=0.0,
        forced_eos_token_id=None,  # hfzoo's generate does not force one; neither does the export
    )


def stack_rules(zoo: ZooEncoderDecoderConfig, stack: str, depth: int) -> list:
    rows = zoo.hidden_size
    rules = [
        *linear(f"{stack}.embed_tokens", f"{stack}.embed_tokens", False),
        rolled_rows(f"{stack}.positions.embeddings.weight", f"{stack}.embed_positions.weight", POSITION_OFFSET),
        *linear(f"{stack}.embedding_norm", f"{stack}.layernorm_embedding", True),
    ]
    for i in range(depth):
        z = n = f"{stack}.layers.{i}."
        attention = [n + "self_attn.q_proj", n + "self_attn.k_proj", n + "self_attn.v_proj"]
        rules += joined(z + "self_attn.qkv_proj", attention, (rows, rows, rows), True)
        rules += linear(z + "self_attn.o_proj", n + "self_attn.out_proj", True)
        rules += linear(z + "self_attn_norm", n + "self_attn_layer_norm", True)
        if stack == "decoder":
            rules += linear(z + "cross_attn.q_proj", n + "encoder_attn.q_proj", True)
            rules += joined(z + "cross_attn.kv_proj", [n + "encoder_attn.k_proj", n + "encoder_attn.v_proj"], (rows, rows), True)
            rules += linear(z + "cross_attn.o_proj", n + "encoder_attn.out_proj", True)
            rules += linear(z + "cross_attn_norm", n + "encoder_attn_layer_norm", True)
        rules += linear(z + "mlp.up_proj", n + "fc1", True)
        rules += linear(z + "mlp.down_proj", n + "fc2", True)
        rules += linear(z + "mlp_norm", n + "final_layer_norm", True)
    return rules


def base_rules(zoo: ZooEncoderDecoderConfig, native: BartConfig) -> list:
    return [*stack_rules(zoo, "encoder", zoo.num_hidden_layers), *stack_rules(zoo, "decoder", zoo.num_decoder_layers)]


def generation_head_rules(zoo: ZooEncoderDecoderConfig, native: BartConfig) -> list:
    why = "a per-token logit offset BART adds after its head"
    return [*linear("lm_head", "lm_head", False), native_zeros("final_logits_bias", (1, zoo.vocab_size), why)]



HEADS = seq2seq_heads("Bart", "model.", "model.", generation_head_rules)
FAMILY = NativeFamily("bart", "learned", zoo_config, native_config, base_rules, HEADS)
