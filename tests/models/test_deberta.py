"""Disentangled attention (`position_embedding="disentangled"`, the `deberta-*` presets) computes what transformers'
DebertaV2Model computes, on copied weights, and works wherever a position kind must: with a cache (decoder and
encoder-decoder generation), with padding, through both attention kernels that take a bias.

The native model is restricted to what the option implements: relative attention with a shared, layer-normed
relative embedding and shared query/key projections (`share_att_key=True`), no absolute positions
(`position_biased_input=False`), no convolution layer (`conv_kernel_size=0`). DeBERTa's enhanced mask decoder is a
pretraining head, not part of the encoder compared here.
"""

import pytest
import torch
from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSeq2SeqLM, DebertaV2Config, DebertaV2Model

import hfzoo
from hfzoo import ZooEncoderConfig

LAYERS = 2
LENGTHS = (40, 25, 33)  # longer than 2 * (position_buckets // 2): distances past the exact range get log buckets


def native_deberta(terms: str, buckets: int, max_relative: int) -> DebertaV2Model:
    config = DebertaV2Config(
        vocab_size=100, hidden_size=32, num_hidden_layers=LAYERS, num_attention_heads=4, intermediate_size=64,
        hidden_act="gelu", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, max_position_embeddings=64,
        type_vocab_size=2, layer_norm_eps=1e-7, relative_attention=True, pos_att_type=terms.split("|"),
        position_buckets=buckets, max_relative_positions=max_relative, norm_rel_ebd="layer_norm", share_att_key=True,
        position_biased_input=False, conv_kernel_size=0, pad_token_id=0,
        initializer_range=0.3,  # sharp attention: at the default 0.02 every score is near 0 and positions barely matter
    )  # fmt: skip
    return DebertaV2Model(config).eval()


def copied_into_hfzoo(native: DebertaV2Model, attn_implementation: str) -> torch.nn.Module:
    """The same encoder as an hfzoo model: DeBERTa's separate q/k/v projections become the fused `qkv_proj`."""
    native_config = native.config
    config = ZooEncoderConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=LAYERS, num_attention_heads=4, intermediate_size=64,
        activation="gelu", hidden_dropout=0.0, attention_dropout=0.0, max_position_embeddings=64, type_vocab_size=2,
        norm_eps=1e-7, norm_position="post", embedding_norm=True, position_embedding="disentangled",
        position_buckets=max(native_config.position_buckets, 0),
        max_relative_positions=native_config.max_relative_positions,
        position_attention_terms="|".join(native_config.pos_att_type), add_pooling_layer=False,
        attn_implementation=attn_implementation,
    )  # fmt: skip
    source = native.state_dict()
    state = {
        "embed_tokens.weight": source["embeddings.word_embeddings.weight"],
        "token_type_embeddings.weight": source["embeddings.token_type_embeddings.weight"],
        "positions.disentangled.relative_embeddings.weight": source["encoder.rel_embeddings.weight"],
    }
    for kind in ("weight", "bias"):
        state[f"embedding_norm.{kind}"] = source[f"embeddings.LayerNorm.{kind}"]
        state[f"positions.disentangled.relative_norm.{kind}"] = source[f"encoder.LayerNorm.{kind}"]
        for layer in range(LAYERS):
            ours, theirs = f"layers.{layer}.", f"encoder.layer.{layer}."
            projections = [source[f"{theirs}attention.self.{name}_proj.{kind}"] for name in ("query", "key", "value")]
            state[f"{ours}self_attn.qkv_proj.{kind}"] = torch.cat(projections)
            state[f"{ours}self_attn.o_proj.{kind}"] = source[f"{theirs}attention.output.dense.{kind}"]
            state[f"{ours}self_attn_norm.{kind}"] = source[f"{theirs}attention.output.LayerNorm.{kind}"]
            state[f"{ours}mlp.up_proj.{kind}"] = source[f"{theirs}intermediate.dense.{kind}"]
            state[f"{ours}mlp.down_proj.{kind}"] = source[f"{theirs}output.dense.{kind}"]
            state[f"{ours}mlp_norm.{kind}"] = source[f"{theirs}output.LayerNorm.{kind}"]
    model = AutoModel.from_config(config).eval()
    model.load_state_dict(state, strict=True)  # every hfzoo weight comes from the native model
    return model


def padded_batch() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(1, 100, (len(LENGTHS), max(LENGTHS)), generator=generator)
    attention_mask = (torch.arange(max(LENGTHS))[None] < torch.tensor(LENGTHS)[:, None]).long()
    token_type_ids = (torch.arange(max(LENGTHS))[None] >= 20).long().expand_as(input_ids)
    return {"input_ids": input_ids * attention_mask, "attention_mask": attention_mask, "token_type_ids": token_type_ids}


# (terms, position_buckets, max_relative_positions): log buckets (v2/v3), DeBERTa-v3's 256 buckets, and v1's clipped
# distances without buckets (native -1 = hfzoo 0); each position term alone changes the scale factor.
NATIVE_SETTINGS = [("c2p|p2c", 8, 16), ("c2p|p2c", 256, 512), ("c2p|p2c", -1, 12), ("c2p", 8, 16), ("p2c", 8, 16)]


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize(("terms", "buckets", "max_relative"), NATIVE_SETTINGS)
def test_disentangled_attention_equals_native_deberta_v2(terms, buckets, max_relative, attn_implementation):
    torch.manual_seed(0)
    native = native_deberta(terms, buckets, max_relative)
    model = copied_into_hfzoo(native, attn_implementation)
    batch = padded_batch()
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = native(**batch, output_attentions=True)
        output = model(**batch, output_attentions=attn_implementation == "eager")
    assert (output.last_hidden_state[real] - expected.last_hidden_state[real]).abs().max() <= 1e-4
    if attn_implementation == "eager":  # the attention probabilities themselves, rows of real queries
        for ours, theirs in zip(output.attentions, expected.attentions, strict=True):
            assert (ours.transpose(1, 2)[real] - theirs.transpose(1, 2)[real]).abs().max() <= 1e-4

    # The comparison has teeth: the same model with its relative embeddings in reverse order computes something else.
    with torch.no_grad():
        model.positions.disentangled.relative_embeddings.weight.copy_(
            model.positions.disentangled.relative_embeddings.weight.flip(0)
        )
        reversed_positions = model(**batch).last_hidden_state
    assert (reversed_positions[real] - expected.last_hidden_state[real]).abs().max() > 0.5


def test_gradients_equal_native_deberta_v2():
    """Training follows the same math: every weight's gradient matches the native model's (q/k/v fused here)."""
    torch.manual_seed(0)
    native = native_deberta("c2p|p2c", 8, 16)
    model = copied_into_hfzoo(native, "sdpa")
    batch = padded_batch()
    real = batch["attention_mask"].bool()
    weights = torch.randn(real.sum(), 32, generator=torch.Generator().manual_seed(1))
    (native(**batch).last_hidden_state[real] * weights).sum().backward()
    (model(**batch).last_hidden_state[real] * weights).sum().backward()
    native_qkv = [native.encoder.layer[0].attention.self, "query_proj", "key_proj", "value_proj"]
    pairs = {
        "relative embeddings": (
            model.positions.disentangled.relative_embeddings.weight.grad, native.encoder.rel_embeddings.weight.grad
        ),
        "relative norm": (model.positions.disentangled.relative_norm.weight.grad, native.encoder.LayerNorm.weight.grad),
        "qkv": (
            model.layers[0].self_attn.qkv_proj.weight.grad,
            torch.cat([getattr(native_qkv[0], name).weight.grad for name in native_qkv[1:]]),
        ),
        "word embeddings": (model.embed_tokens.weight.grad, native.embeddings.word_embeddings.weight.grad),
    }
    for name, (ours, theirs) in pairs.items():
        assert theirs.abs().max() > 0, name
        assert (ours - theirs).abs().max() <= 1e-4, name


# ----------------------------------------------------------------------------------------------- other families
# Small buckets, so that prompt + generated tokens reach the logarithmic buckets.
DISENTANGLED = dict(position_embedding="disentangled", position_buckets=8, max_relative_positions=16)


@pytest.mark.parametrize(
    ("preset", "auto_class"), [("llama-tiny", AutoModelForCausalLM), ("t5-tiny", AutoModelForSeq2SeqLM)]
)
def test_generation_with_a_cache_equals_generation_without(preset, auto_class, tiny_model):
    """With a cache, queries are the last of the key positions: the c2p/p2c indices must follow (decoder-only,
    and an encoder-decoder whose cross-attention has no position terms)."""
    model = tiny_model(preset, auto_class, pad_token_id=0, **DISENTANGLED)
    prompt = torch.tensor([[5, 6, 7, 8, 9, 10], [0, 0, 11, 12, 13, 14]])
    attention_mask = (prompt != 0).long()
    generate = dict(max_new_tokens=12, min_new_tokens=12, do_sample=False, attention_mask=attention_mask)
    if auto_class is AutoModelForSeq2SeqLM:
        prompt[1], attention_mask[1] = prompt[1].roll(-2), attention_mask[1].roll(-2)  # right-padded sources
    cached = model.generate(prompt, use_cache=True, **generate)
    uncached = model.generate(prompt, use_cache=False, **generate)
    assert torch.equal(cached, uncached)
    if auto_class is AutoModelForCausalLM:  # relative positions ignore left padding: row 1 generates what it does alone
        alone = model.generate(prompt[1:, 2:], use_cache=True, **{**generate, "attention_mask": None})
        assert torch.equal(cached[1, prompt.shape[1] :], alone[0, 4:])


def test_flex_and_flash_kernels_are_refused_with_the_reason():
    model = AutoModel.from_config(hfzoo.preset_config("deberta-tiny"))
    model.config._attn_implementation_internal = "flex_attention"
    with pytest.raises(ValueError, match="position_embedding='disentangled'.*'sdpa' or 'eager'"):
        model(torch.ones(1, 3, dtype=torch.long))


@pytest.mark.parametrize(
    ("override", "setting"),
    [
        ({"position_buckets": 1}, "position_buckets"),
        ({"position_buckets": -4}, "position_buckets"),
        ({"position_buckets": 64, "max_relative_positions": 33}, "max_relative_positions"),
        ({"position_attention_terms": "c2c"}, "position_attention_terms"),
    ],
)
def test_invalid_disentangled_settings_name_the_setting(override, setting):
    with pytest.raises(ValueError, match=setting):
        hfzoo.preset_config("deberta-tiny", **override)


def test_deberta_presets_use_deberta_v3_positions_and_scale():
    config = hfzoo.preset_config("deberta-small")
    assert (config.position_buckets, config.max_relative_positions, config.type_vocab_size) == (256, 512, 0)
    model = AutoModel.from_config(config)
    assert model.positions.disentangled.relative_embeddings.weight.shape == (512, config.hidden_size)
    # sqrt(d * 3): content, c2p and p2c terms.
    assert model.layers[0].self_attn.scaling == pytest.approx((3 * config.head_dim) ** -0.5)


def test_base_preset_matches_native_deberta_v3_base():
    """deberta-base has DeBERTa-v3-base's weights, plus the pooler hfzoo's encoder has where DeBERTa's
    classification heads put their ContextPooler (a dense layer on the first token)."""
    with torch.device("meta"):
        native = DebertaV2Model(
            DebertaV2Config(
                vocab_size=128100, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                intermediate_size=3072, max_position_embeddings=512, type_vocab_size=0, relative_attention=True,
                pos_att_type=["p2c", "c2p"],
                position_buckets=256, max_relative_positions=-1, norm_rel_ebd="layer_norm", share_att_key=True,
                position_biased_input=False,
            )  # fmt: skip
        )
        ours = AutoModel.from_config(hfzoo.preset_config("deberta-base"))
    pooler = 768 * 768 + 768
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in native.parameters()) + pooler
