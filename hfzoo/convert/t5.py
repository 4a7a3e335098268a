"""T5 (`T5ForConditionalGeneration`, `T5Model`, the sequence classifier, QA head and tagger, `T5EncoderModel`) <->
hfzoo's encoder-decoder with pre-RMSNorm and relative position buckets.

- T5 does not scale attention scores by 1/sqrt(head_dim); hfzoo does. The factor sqrt(head_dim) goes into the
  query projections (8 for T5's d_kv=64, a power of two, so the round trip stays bit-identical).
- The relative-bias table sits in each stack's first block natively and on each stack's positions in hfzoo; both
  bucket the same way (`relative_attention_num_buckets`, `relative_attention_max_distance`), bidirectionally in the
  encoder and causally in the decoder.
- Original T5 (tied head) scales the decoder output by d_model**-0.5 before the head; hfzoo folds that factor into
  the decoder's final norm (exact in function; the export then has `scale_decoder_outputs=False` and that norm).
- `feed_forward_proj`: relu/gelu/gelu_new/silu map to hfzoo's plain activations, gated-silu to swiglu, T5's own
  `gated-gelu` (T5 v1.1, Flan-T5, mT5: T5Config turns it into a gate of GPT-2's tanh GELU, `gelu_new`) to
  `geglu_tanh`, and hfzoo's `geglu` (gated exact GELU) to `gated-gelu_python` (T5Config reads the part after
  "gated-" as the activation's name, and transformers' `gelu_python` is the exact GELU).
- The tagger (`T5ForTokenClassification`) and `T5EncoderModel` hold the encoder alone, as hfzoo's
  `ZooEncoderDecoderForTokenClassification` and `ZooEncoderDecoderEncoderModel` do: only the encoder's rules apply.
- mT5 (`MT5ForConditionalGeneration`, ...) is T5 v1.1 under its own classes and `model_type`; it never scales the
  decoder output, whatever its head (`mt5.py`).
"""

from torch import nn
from transformers import PreTrainedModel, T5Config

from ..models import ZooEncoderDecoderConfig
from ..models.component_options import GATED_ACTIVATIONS
from .family import ConfigMap, NativeFamily, require, same_names, tied_head
from .heads import seq2seq_heads
from .mapping import joined, linear, scaled

FEED_FORWARD = {
    "relu": "relu", "gelu": "gelu", "gelu_new": "gelu_new", "silu": "silu", "gated-silu": "swiglu",
    "gated-gelu": "geglu_tanh", "gated-gelu_python": "geglu",
}
CONFIG = ConfigMap(
    T5Config,
    fields={
        **same_names(
            "vocab_size", "relative_attention_num_buckets", "relative_attention_max_distance", "num_decoder_layers",
            "pad_token_id", "eos_token_id", "decoder_start_token_id",
        ),
        "hidden_size": "d_model", "num_hidden_layers": "num_layers", "num_attention_heads": "num_heads",
        "intermediate_size": "d_ff", "norm_eps": "layer_norm_epsilon", "hidden_dropout": "dropout_rate",
    },
    fixed=dict(
        norm_type="rmsnorm", norm_position="pre", position_embedding="relative", attention_bias=False, mlp_bias=False,
        attention_output_bias=False, norm_unit_offset=False, scale_embeddings=False, embedding_norm=False, share_embeddings=True, num_experts=0,
    ),
)


def zoo_config(model: PreTrainedModel) -> dict:
    config = model.config
    require(config, "hfzoo's encoder-decoder", feed_forward_proj=tuple(FEED_FORWARD))
    require(config, "hfzoo's encoder-decoder", dense_act_fn=dense_activation(config.feed_forward_proj))
    require(config, "hfzoo's encoder-decoder", d_kv=config.d_model // config.num_heads)
    kwargs = CONFIG.zoo_kwargs(config)
    if kwargs["decoder_start_token_id"] is None:
        kwargs["decoder_start_token_id"] = config.pad_token_id  # T5 starts decoding from its pad token
    return {
        **kwargs,
        "activation": FEED_FORWARD[config.feed_forward_proj],
        "attention_dropout": config.dropout_rate,
        "tie_word_embeddings": tied_head(model),
    }


def dense_activation(feed_forward_proj: str) -> str:
    """The activation T5Config derives from `feed_forward_proj`: a config whose `dense_act_fn` was changed after
    that computes something its `feed_forward_proj` does not say."""
    return "gelu_new" if feed_forward_proj == "gated-gelu" else feed_forward_proj.split("-")[-1]


def native_config(config: ZooEncoderDecoderConfig) -> T5Config:
    return layout_native_config(config, CONFIG, "T5")


def layout_native_config(config: ZooEncoderDecoderConfig, config_map: ConfigMap, what: str) -> T5Config:
    """The native config of T5's layout (T5, mT5), refusing (naming the switch) what it cannot express."""
    require(config, what, num_key_value_heads=config.num_attention_heads, activation=tuple(FEED_FORWARD.values()))
    return config_map.native_config(
        config,
        what,
        d_kv=config.head_dim,
        feed_forward_proj={zoo: native for native, zoo in FEED_FORWARD.items()}[config.activation],
        # T5Config reads `tie_word_embeddings=False` as "no output scaling" (T5 v1.1) and then forces it to True;
        # whether the head is really tied is the weights' business (`untie_head`).
        tie_word_embeddings=False,
    )


def untie_head(model: PreTrainedModel, config: ZooEncoderDecoderConfig) -> None:
    """T5 ties its head to the embedding in `__init__` whatever the config says: give an untied hfzoo head its own
    weight (saved as `lm_head.weight`, which transformers then loads untied)."""
    head = model.get_output_embeddings()
    if head is not None and not config.tie_word_embeddings:
        head.weight = nn.Parameter(head.weight.detach().clone())


def stack_rules(zoo: ZooEncoderDecoderConfig, stack: str, depth: int) -> list:
    rows = zoo.hidden_size
    query_scale = [zoo.head_dim**0.5, 1.0, 1.0]
    gated = zoo.activation in GATED_ACTIVATIONS
    rules = linear(f"{stack}.embed_tokens", f"{stack}.embed_tokens", False)
    rules += linear(
        f"{stack}.positions.relative_attention_bias", f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias", False
    )
    for i in range(depth):
        z, n = f"{stack}.layers.{i}.", f"{stack}.block.{i}.layer."
        attention = [f"{n}0.SelfAttention.{p}" for p in "qkv"]
        rules += joined(z + "self_attn.qkv_proj", attention, (rows, rows, rows), False, query_scale)
        rules += linear(z + "self_attn.o_proj", n + "0.SelfAttention.o", False)
        rules += linear(z + "self_attn_norm", n + "0.layer_norm", False)
        feed_forward = n + "1."
        if stack == "decoder":
            rules.append(scaled(z + "cross_attn.q_proj.weight", n + "1.EncDecAttention.q.weight", zoo.head_dim**0.5))
            rules += joined(z + "cross_attn.kv_proj", [n + "1.EncDecAttention.k", n + "1.EncDecAttention.v"], (rows, rows), False)
            rules += linear(z + "cross_attn.o_proj", n + "1.EncDecAttention.o", False)
            rules += linear(z + "cross_attn_norm", n + "1.layer_norm", False)
            feed_forward = n + "2."
        if gated:
            up = [feed_forward + "DenseReluDense.wi_0", feed_forward + "DenseReluDense.wi_1"]
            rules += joined(z + "mlp.up_proj", up, (zoo.intermediate_size,) * 2, False)
        else:
            rules += linear(z + "mlp.up_proj", feed_forward + "DenseReluDense.wi", False)
        rules += linear(z + "mlp.down_proj", feed_forward + "DenseReluDense.wo", False)
        rules += linear(z + "mlp_norm", feed_forward + "layer_norm", False)
    return rules


def base_rules(zoo: ZooEncoderDecoderConfig, native: T5Config) -> list:
    return [
        *stack_rules(zoo, "encoder", zoo.num_hidden_layers),
        *linear("encoder.norm", "encoder.final_layer_norm", False),
        *stack_rules(zoo, "decoder", zoo.num_decoder_layers),
        *linear("decoder.norm", "decoder.final_layer_norm", False),
    ]


def generation_head_rules(zoo: ZooEncoderDecoderConfig, native: T5Config) -> list:
    rules = linear("lm_head", "lm_head", False)
    if getattr(native, "scale_decoder_outputs", False):
        rules.append(scaled("model.decoder.norm.weight", "decoder.final_layer_norm.weight", zoo.hidden_size**-0.5))
    return rules



HEADS = seq2seq_heads("T5", "", "transformer.", generation_head_rules, tagger_prefix="transformer.")
FAMILY = NativeFamily("t5", "relative", zoo_config, native_config, base_rules, HEADS, prepare_native=untie_head)
