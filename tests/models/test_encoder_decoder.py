"""The encoder-decoder family behaves like a native transformers seq2seq model (T5, BART and the original
Transformer presets, fp32, dropout 0): generation, attention backends, save/load and remote code, training with
labels, gradient checkpointing, embeddings and PEFT. The Trainer, pipelines and a trained tokenizer:
test_encoder_decoder_ecosystem.py."""

import textwrap

import pytest
import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file, save_file
from tests.helpers.seq2seq_generation import EOS, NEW_TOKENS, PAD, greedy, seq2seq
from transformers import AutoModelForQuestionAnswering, AutoModelForSeq2SeqLM, AutoModelForSequenceClassification
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

import hfzoo
from hfzoo.core.presets import count_preset_parameters
from hfzoo.models.mixture_of_experts import MixtureOfExperts
from hfzoo.models.modeling_encoder_decoder import shift_tokens_right

PRESETS = ("t5-tiny", "bart-tiny", "transformer-tiny")
SOURCES = ([11, 12, 13, 14, 15, 16, 17], [21, 22, 23], [31, 32, 33, 34, 35])


@pytest.fixture(params=PRESETS)
def preset(request) -> str:
    return request.param


def pad(sequences, side: str = "right") -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids and attention_mask of `sequences` padded with PAD to the longest, on `side`."""
    width = max(map(len, sequences))
    rows, masks = [], []
    for sequence in sequences:
        fill = [PAD] * (width - len(sequence))
        rows.append(sequence + fill if side == "right" else fill + sequence)
        ones, zeros = [1] * len(sequence), [0] * len(fill)
        masks.append(ones + zeros if side == "right" else zeros + ones)
    return torch.tensor(rows), torch.tensor(masks)


def argmax_decoding(model, source: list[int]) -> list[int]:
    """Greedy decoding the slow way: a full encoder + decoder forward, without cache, for every new token.

    eos is excluded, as `min_new_tokens` does in `greedy`.
    """
    tokens = [model.config.decoder_start_token_id]
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            logits = model(
                input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([tokens]), use_cache=False
            ).logits[0, -1]
            logits[model.config.eos_token_id] = -torch.inf
            tokens.append(int(logits.argmax()))
    return tokens


# ----------------------------------------------------------------------------------------------- generation
def test_greedy_generate_with_cache_equals_without_and_full_forward_argmax(preset, tiny_model):
    model = seq2seq(tiny_model, preset)
    source = torch.tensor([SOURCES[0]])
    cached, uncached = greedy(model, source, use_cache=True), greedy(model, source, use_cache=False)
    assert torch.equal(cached, uncached)
    assert cached[0].tolist() == argmax_decoding(model, SOURCES[0])


@pytest.mark.parametrize("side", ["right", "left"])
def test_padded_encoder_rows_generate_what_they_generate_alone(preset, side, tiny_model):
    model = seq2seq(tiny_model, preset)
    input_ids, attention_mask = pad(SOURCES, side)
    batched = greedy(model, input_ids, attention_mask=attention_mask)
    for row, source in enumerate(SOURCES):
        assert batched[row].tolist() == greedy(model, torch.tensor([source]))[0].tolist(), f"row {row}"


def test_beam_search_with_padding_and_cache(preset, tiny_model):
    model = seq2seq(tiny_model, preset)
    input_ids, attention_mask = pad(SOURCES)
    kwargs = dict(attention_mask=attention_mask, num_beams=3, num_return_sequences=2)
    beams = greedy(model, input_ids, **kwargs)
    assert beams.shape == (2 * len(SOURCES), NEW_TOKENS + 1)
    assert torch.equal(beams, greedy(model, input_ids, use_cache=False, **kwargs))


def test_a_decoder_deeper_than_the_encoder_generates_with_a_cache_per_decoder_layer(tiny_model):
    model = seq2seq(tiny_model, "t5-tiny", num_hidden_layers=1, num_decoder_layers=3)
    assert len(model.model.decoder.layers) == 3
    source = torch.tensor([SOURCES[0]])
    assert torch.equal(greedy(model, source), greedy(model, source, use_cache=False))


def test_generate_returns_an_encoder_decoder_cache_that_continues_decoding(tiny_model):
    model = seq2seq(tiny_model, "t5-tiny")
    source, start = torch.tensor([SOURCES[0]]), torch.tensor([[PAD]])
    with torch.no_grad():
        first = model(input_ids=source, decoder_input_ids=start)
        assert isinstance(first.past_key_values, EncoderDecoderCache)
        step = model(
            encoder_outputs=(first.encoder_last_hidden_state,),
            decoder_input_ids=torch.tensor([[7]]),
            past_key_values=first.past_key_values,
        )
        full = model(input_ids=source, decoder_input_ids=torch.tensor([[PAD, 7]]), use_cache=False)
    torch.testing.assert_close(step.logits[:, -1], full.logits[:, -1], atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="EncoderDecoderCache"):
        model(input_ids=source, decoder_input_ids=start, past_key_values=DynamicCache())


# ----------------------------------------------------------------------------------------------- attention
def test_eager_and_sdpa_agree_with_encoder_padding(preset, tiny_model):
    input_ids, attention_mask = pad(SOURCES)
    decoder_input_ids = torch.tensor([[PAD, 5, 6, 7]] * len(SOURCES))
    outputs = {}
    for implementation in ("eager", "sdpa"):
        model = seq2seq(tiny_model, preset, attn_implementation=implementation)
        assert model.config._attn_implementation == implementation
        with torch.no_grad():
            outputs[implementation] = model(
                input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids
            )
    real = attention_mask.bool()
    eager, sdpa = outputs["eager"].encoder_last_hidden_state, outputs["sdpa"].encoder_last_hidden_state
    torch.testing.assert_close(eager[real], sdpa[real], atol=1e-5, rtol=0)
    torch.testing.assert_close(outputs["eager"].logits, outputs["sdpa"].logits, atol=1e-5, rtol=0)


@pytest.mark.parametrize("implementation", ["flash_attention_2", "flex_attention"])
def test_kernels_that_would_drop_the_relative_bias_are_refused(implementation, tiny_model):
    with pytest.raises(ValueError, match="does not support"):
        seq2seq(tiny_model, "t5-tiny", attn_implementation=implementation)


def test_attentions_and_hidden_states_of_each_stack(tiny_model):
    model = seq2seq(tiny_model, "bart-tiny", num_hidden_layers=2, num_decoder_layers=3, attn_implementation="eager")
    input_ids, attention_mask = pad(SOURCES)
    with torch.no_grad():
        out = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=torch.tensor([[1, 5, 6, 7]] * 3),
            output_attentions=True,
            output_hidden_states=True,
        )
    assert len(out.encoder_hidden_states) == 3 and len(out.decoder_hidden_states) == 4
    assert [a.shape for a in out.encoder_attentions] == [(3, 4, 7, 7)] * 2
    assert [a.shape for a in out.decoder_attentions] == [(3, 4, 4, 4)] * 3
    assert [a.shape for a in out.cross_attentions] == [(3, 4, 4, 7)] * 3
    # Cross-attention gives padded source positions no weight.
    assert out.cross_attentions[0][1, :, :, 3:].abs().max() == 0


# ----------------------------------------------------------------------------------------------- positions
def test_t5_relative_bias_is_one_module_per_stack_and_changes_outputs(tiny_model):
    model = seq2seq(tiny_model, "t5-tiny")
    biases = [name for name, _ in model.named_modules() if name.endswith("relative_attention_bias")]
    assert biases == [f"model.{stack}.positions.relative_attention_bias" for stack in ("encoder", "decoder")]
    without = seq2seq(tiny_model, "t5-tiny", position_embedding="none")
    missing, unexpected = without.load_state_dict(model.state_dict(), strict=False)
    assert not missing and sorted(unexpected) == sorted(f"{name}.weight" for name in biases)
    inputs = dict(input_ids=torch.tensor([SOURCES[0]]), decoder_input_ids=torch.tensor([[PAD, 5, 6]]))
    with torch.no_grad():
        assert not torch.allclose(model(**inputs).logits, without(**inputs).logits, atol=1e-3)


@pytest.mark.parametrize("family", ["t5", "bart", "transformer"])
def test_preset_sizes_and_the_published_base_models(family):
    assert count_preset_parameters(f"{family}-tiny") < 2_000_000
    assert 10_000_000 <= count_preset_parameters(f"{family}-small") <= 30_000_000
    # T5 v1.1-base and HF's bart-base (whose learned position tables carry 2 extra rows each); the Transformer
    # paper reports 65M for its base model.
    published, tolerance = {"t5": (247_577_856, 0.0), "bart": (139_420_416, 3e-5), "transformer": (65e6, 0.04)}[family]
    assert abs(count_preset_parameters(f"{family}-base") - published) <= tolerance * published


def test_config_rejects_settings_that_cannot_work():
    with pytest.raises(ValueError, match="num_decoder_layers"):
        hfzoo.ZooEncoderDecoderConfig(num_decoder_layers=0)
    with pytest.raises(ValueError, match="decoder_start_token_id"):
        hfzoo.ZooEncoderDecoderConfig(decoder_start_token_id=None)
    with pytest.raises(ValueError, match="pad_token_id is required"):
        hfzoo.ZooEncoderDecoderConfig(pad_token_id=None)
    with pytest.raises(ValueError, match="pad_token_id=9000.*vocab_size=8192"):
        hfzoo.ZooEncoderDecoderConfig(pad_token_id=9000)
    with pytest.raises(ValueError, match="ZooDecoderConfig"):
        hfzoo.ZooEncoderDecoderConfig(is_encoder_decoder=False)
    config = hfzoo.ZooEncoderDecoderConfig(num_hidden_layers=3)
    assert config.num_decoder_layers == 3
    assert config.get_text_config(decoder=True).num_hidden_layers == 3


# ----------------------------------------------------------------------------------------------- training
def test_labels_give_cross_entropy_over_the_decoder_positions_ignoring_minus_100(preset, tiny_model):
    model = seq2seq(tiny_model, preset)
    input_ids, attention_mask = pad(SOURCES)
    labels = torch.tensor([[5, 6, 7, EOS], [8, 9, EOS, -100], [10, EOS, -100, -100]])
    decoder_input_ids = shift_tokens_right(labels, PAD, model.config.decoder_start_token_id)
    start = model.config.decoder_start_token_id
    assert decoder_input_ids.tolist() == [[start, 5, 6, 7], [start, 8, 9, EOS], [start, 10, EOS, PAD]]
    with torch.no_grad():
        out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
        logits = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
    expected = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
    torch.testing.assert_close(out.loss, expected)
    assert out.past_key_values is None  # training with labels builds no cache


def test_gradient_checkpointing_gives_the_same_gradients(preset, tiny_model):
    input_ids, attention_mask = pad(SOURCES)
    labels = torch.tensor([[5, 6, 7, EOS]] * 3)
    gradients = []
    for checkpointing in (False, True):
        model = seq2seq(tiny_model, preset).train()
        if checkpointing:
            model.gradient_checkpointing_enable()
            assert all(layer.gradient_checkpointing for layer in model.model.decoder.layers)
        model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
        gradients.append({name: p.grad.clone() for name, p in model.named_parameters()})
    assert gradients[0].keys() == gradients[1].keys()
    for name, gradient in gradients[0].items():
        torch.testing.assert_close(gradients[1][name], gradient, atol=1e-6, rtol=1e-5, msg=name)


def test_mixture_of_experts_trains_with_aux_loss_and_generates_with_cache(tiny_model):
    model = seq2seq(tiny_model, "t5-tiny", num_experts=4, num_experts_per_tok=2).train()
    input_ids, attention_mask = pad(SOURCES)
    labels = torch.tensor([[5, 6, 7, EOS]] * 3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(5):
        out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
        aux = out.encoder_aux_loss + out.decoder_aux_loss
        cross_entropy = F.cross_entropy(out.logits.reshape(-1, out.logits.shape[-1]), labels.reshape(-1))
        torch.testing.assert_close(out.loss, cross_entropy + model.config.router_aux_loss_coef * aux)
        assert len(out.encoder_router_logits) == 2 and len(out.decoder_router_logits) == 2
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(out.loss.item())
    assert losses[-1] < losses[0]
    model.eval()
    source = torch.tensor([SOURCES[0]])
    assert torch.equal(greedy(model, source), greedy(model, source, use_cache=False))


@pytest.mark.parametrize("auto_class", [AutoModelForSequenceClassification, AutoModelForQuestionAnswering])
def test_mixture_of_experts_task_heads_add_both_stacks_load_balancing_losses(auto_class, tiny_model):
    model = tiny_model("bart-tiny", auto_class, num_experts=4, num_experts_per_tok=2).eval()
    config = model.config
    input_ids, attention_mask = pad([source + [EOS] for source in SOURCES])
    inputs = dict(input_ids=input_ids, attention_mask=attention_mask)
    if auto_class is AutoModelForSequenceClassification:
        targets = dict(labels=torch.tensor([0, 1, 1]))
    else:
        targets = dict(start_positions=torch.tensor([1, 0, 2]), end_positions=torch.tensor([3, 2, 4]))
    with torch.no_grad():
        decoder_input_ids = shift_tokens_right(input_ids, PAD, config.decoder_start_token_id)
        bare = model.model(**inputs, decoder_input_ids=decoder_input_ids)
        loss = model(**inputs, **targets).loss
        coef, config.router_aux_loss_coef = config.router_aux_loss_coef, 0.0
        task_loss = model(**inputs, **targets).loss
    aux_losses = [
        MixtureOfExperts.load_balancing_loss(router_logits, config.num_experts, config.num_experts_per_tok)
        for router_logits in (bare.encoder_router_logits, bare.decoder_router_logits)
    ]
    torch.testing.assert_close(loss, task_loss + coef * sum(aux_losses))


# ----------------------------------------------------------------------------------------------- embeddings
def test_embeddings_are_shared_and_the_head_tied_as_configured(preset, tiny_model):
    model = seq2seq(tiny_model, preset)
    encoder, decoder = model.model.encoder.embed_tokens, model.model.decoder.embed_tokens
    assert encoder.weight is decoder.weight
    assert (model.lm_head.weight is decoder.weight) == model.config.tie_word_embeddings == (preset != "t5-tiny")
    separate = seq2seq(tiny_model, preset, share_embeddings=False)
    assert separate.model.encoder.embed_tokens.weight is not separate.model.decoder.embed_tokens.weight


@pytest.mark.parametrize("share_embeddings", [True, False])
def test_resize_token_embeddings_keeps_sharing_and_tying(preset, share_embeddings, tiny_model):
    model = seq2seq(tiny_model, preset, share_embeddings=share_embeddings)
    new_size = model.config.vocab_size + 10
    model.resize_token_embeddings(new_size)
    encoder, decoder = model.model.encoder.embed_tokens, model.model.decoder.embed_tokens
    assert model.config.vocab_size == new_size
    assert encoder.weight.shape[0] == decoder.weight.shape[0] == model.lm_head.weight.shape[0] == new_size
    assert (encoder.weight is decoder.weight) == share_embeddings
    assert (model.lm_head.weight is decoder.weight) == model.config.tie_word_embeddings
    with torch.no_grad():
        new_tokens = dict(input_ids=torch.tensor([[new_size - 1, 5]]), decoder_input_ids=torch.tensor([[new_size - 2]]))
        logits = model(**new_tokens).logits
    assert logits.shape == (1, 1, new_size)


# ----------------------------------------------------------------------------------------------- save / load
def test_save_is_safetensors_and_reloads_to_identical_logits_and_ties(preset, tiny_model, tmp_path):
    model = seq2seq(tiny_model, preset)
    model.save_pretrained(tmp_path)
    files = {path.name for path in tmp_path.iterdir()}
    assert "model.safetensors" in files and not any(name.endswith((".bin", ".pt", ".pth")) for name in files)
    assert {"modeling_encoder_decoder.py", "configuration_encoder_decoder.py", "layers.py"} <= files
    reloaded, info = AutoModelForSeq2SeqLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values()), info
    assert reloaded.model.encoder.embed_tokens.weight is reloaded.model.decoder.embed_tokens.weight
    assert (reloaded.lm_head.weight is reloaded.model.decoder.embed_tokens.weight) == model.config.tie_word_embeddings
    input_ids, attention_mask = pad(SOURCES)
    inputs = dict(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=torch.tensor([[PAD, 5, 6]] * 3))
    with torch.no_grad():
        assert torch.equal(model(**inputs).logits, reloaded.eval()(**inputs).logits)


def test_loads_in_bfloat16_and_generates(preset, tiny_model, tmp_path):
    seq2seq(tiny_model, preset).save_pretrained(tmp_path)
    model = AutoModelForSeq2SeqLM.from_pretrained(tmp_path, dtype=torch.bfloat16).eval()
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    input_ids, attention_mask = pad(SOURCES)
    generated = greedy(model, input_ids, attention_mask=attention_mask)
    assert generated.shape == (3, NEW_TOKENS + 1)


REMOTE_CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import torch
    from safetensors.torch import load_file, save_file

    root = Path(sys.argv[1])
    from transformers import AutoModelForSeq2SeqLM

    inputs = load_file(root / "inputs.safetensors")
    for checkpoint in sorted((root / "checkpoints").iterdir()):
        model = AutoModelForSeq2SeqLM.from_pretrained(checkpoint, trust_remote_code=True).eval()
        assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
        with torch.no_grad():
            logits = model(**inputs).logits
            generated = model.generate(
                inputs["input_ids"], attention_mask=inputs["attention_mask"], max_new_tokens=%d, do_sample=False
            )
        save_file({"logits": logits, "generated": generated}, root / f"{checkpoint.name}.remote.safetensors")
    """
    % NEW_TOKENS
)


def test_remote_code_loads_where_hfzoo_cannot_be_imported(tiny_model, tmp_path, hfzoo_free_python):
    input_ids, attention_mask = pad(SOURCES)
    inputs = dict(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=torch.tensor([[PAD, 5, 6]] * 3))
    save_file(inputs, tmp_path / "inputs.safetensors")
    expected = {}
    for preset in PRESETS:
        model = seq2seq(tiny_model, preset)
        model.save_pretrained(tmp_path / "checkpoints" / preset)
        with torch.no_grad():
            generated = model.generate(
                input_ids, attention_mask=attention_mask, max_new_tokens=NEW_TOKENS, do_sample=False
            )
            expected[preset] = {"logits": model(**inputs).logits, "generated": generated}
    child = hfzoo_free_python.run(REMOTE_CHILD, tmp_path, str(tmp_path))
    assert child.returncode == 0, child.stderr[-4000:]
    for preset in PRESETS:
        remote = load_file(tmp_path / f"{preset}.remote.safetensors")
        assert torch.equal(remote["logits"], expected[preset]["logits"]), preset
        assert torch.equal(remote["generated"], expected[preset]["generated"]), preset


# ----------------------------------------------------------------------------------------------- PEFT
def test_lora_defaults_cover_self_and_cross_attention_and_merge_exactly(preset, tiny_model):
    model = get_peft_model(seq2seq(tiny_model, preset), LoraConfig(task_type="SEQ_2_SEQ_LM", r=4, lora_alpha=8))
    adapted = {name.rsplit(".", 1)[-1] for name, module in model.named_modules() if hasattr(module, "lora_A")}
    assert adapted == {"qkv_proj", "q_proj", "kv_proj"}
    input_ids, attention_mask = pad(SOURCES)
    batch = dict(input_ids=input_ids, attention_mask=attention_mask, labels=torch.tensor([[5, 6, 7, EOS]] * 3))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    for _ in range(3):
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    with torch.no_grad():
        adapted_logits = model(**batch).logits
        with model.disable_adapter():
            assert not torch.allclose(model(**batch).logits, adapted_logits, atol=1e-4)
        merged = model.merge_and_unload()
        assert type(merged) is hfzoo.ZooEncoderDecoderForConditionalGeneration
        torch.testing.assert_close(merged(**batch).logits, adapted_logits, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------------------------- classification
def test_sequence_classification_reads_the_last_eos_and_rejects_unusable_inputs(tiny_model):
    model = tiny_model("bart-tiny", AutoModelForSequenceClassification, num_labels=3)
    sources = [s + [EOS] for s in SOURCES]
    input_ids, attention_mask = pad(sources)
    labels = torch.tensor([0, 2, 1])
    with torch.no_grad():
        out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
        for row, source in enumerate(sources):
            alone = model(input_ids=torch.tensor([source])).logits[0]
            torch.testing.assert_close(out.logits[row], alone, atol=1e-5, rtol=0)
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits, labels))
    with pytest.raises(ValueError, match="eos token"):
        model(input_ids=torch.tensor([SOURCES[0]]))
    left_ids, left_mask = pad(sources, "left")
    with pytest.raises(ValueError, match="padding_side='right'"):
        model(input_ids=left_ids, attention_mask=left_mask)
