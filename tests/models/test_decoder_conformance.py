"""The decoder family behaves like a native transformers causal LM: generation, attention backends, outputs,
checkpointing, embeddings, losses and save/load, for the GPT and Llama presets (fp32, dropout 0)."""

import json

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoModelForTokenClassification

PAD = 0
PROMPTS = ([11, 12, 13], [21, 22, 23, 24, 25, 26], [31, 32, 33, 34])
POSITION_KINDS = ("learned", "sinusoidal", "rotary", "alibi", "relative", "none")


def left_pad(prompts: tuple[list[int], ...], pad: int = PAD) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids and attention_mask of `prompts` padded on the left to the longest."""
    width = max(map(len, prompts))
    input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return input_ids, attention_mask


def argmax_continuation(model, prompt: list[int], steps: int) -> list[int]:
    """Greedy decoding the slow way: a full forward over the whole sequence for every new token."""
    tokens = list(prompt)
    with torch.no_grad():
        for _ in range(steps):
            logits = model(torch.tensor([tokens]), use_cache=False).logits
            tokens.append(int(logits[0, -1].argmax()))
    return tokens[len(prompt) :]


def greedy(model, input_ids: torch.Tensor, steps: int, **kwargs) -> torch.Tensor:
    """The new tokens of greedy `generate`."""
    output = model.generate(input_ids, max_new_tokens=steps, min_new_tokens=steps, do_sample=False, **kwargs)
    return output[:, input_ids.shape[1] :]


# ----------------------------------------------------------------------------------------------- generation
def test_greedy_generate_with_cache_equals_without_and_full_forward_argmax(decoder_preset, tiny_model):
    model = tiny_model(decoder_preset, pad_token_id=PAD)
    input_ids = torch.tensor([PROMPTS[1]])
    cached = greedy(model, input_ids, 10, use_cache=True)
    uncached = greedy(model, input_ids, 10, use_cache=False)
    assert torch.equal(cached, uncached)
    assert cached[0].tolist() == argmax_continuation(model, PROMPTS[1], 10)


def test_left_padded_rows_generate_what_they_generate_alone(decoder_preset, tiny_model):
    model = tiny_model(decoder_preset, pad_token_id=PAD)
    input_ids, attention_mask = left_pad(PROMPTS)
    batched = greedy(model, input_ids, 8, attention_mask=attention_mask)
    for row, prompt in enumerate(PROMPTS):
        alone = greedy(model, torch.tensor([prompt]), 8)
        assert batched[row].tolist() == alone[0].tolist(), f"row {row} (prompt length {len(prompt)})"


def test_beam_search_and_sampling_give_the_right_shapes(decoder_preset, tiny_model):
    model = tiny_model(decoder_preset, pad_token_id=PAD)
    input_ids, attention_mask = left_pad(PROMPTS[:2])
    beams = model.generate(
        input_ids,
        attention_mask=attention_mask,
        num_beams=3,
        num_return_sequences=2,
        max_new_tokens=5,
        min_new_tokens=5,
    )
    assert beams.shape == (2 * 2, input_ids.shape[1] + 5)
    torch.manual_seed(0)
    sampled = model.generate(
        input_ids, attention_mask=attention_mask, do_sample=True, top_k=20, max_new_tokens=5, min_new_tokens=5
    )
    assert sampled.shape == (2, input_ids.shape[1] + 5)
    assert torch.equal(sampled[:, : input_ids.shape[1]], input_ids)


def test_learned_positions_reject_inputs_longer_than_max_positions(decoder_preset, tiny_model):
    model = tiny_model(decoder_preset, position_embedding="learned", max_position_embeddings=16)
    model(torch.ones(1, 16, dtype=torch.long))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model(torch.ones(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model.generate(torch.ones(1, 14, dtype=torch.long), max_new_tokens=5, min_new_tokens=5, do_sample=False)


# ----------------------------------------------------------------------------------------------- attention backends
@pytest.mark.parametrize("position_embedding", POSITION_KINDS)
def test_eager_and_sdpa_give_the_same_logits(decoder_preset, position_embedding, tiny_model):
    model = tiny_model(decoder_preset, position_embedding=position_embedding, num_hidden_layers=2, pad_token_id=PAD)
    padded_ids, padded_mask = left_pad(PROMPTS)
    unpadded_ids = torch.tensor([PROMPTS[1], [5, 4, 3, 2, 1, 9]])
    with torch.no_grad():
        model.set_attn_implementation("sdpa")
        assert model.config._attn_implementation == "sdpa"
        sdpa_padded = model(padded_ids, attention_mask=padded_mask).logits
        sdpa_unpadded = model(unpadded_ids).logits
        model.set_attn_implementation("eager")
        assert model.model.layers[0].self_attn.config._attn_implementation == "eager"
        eager_padded = model(padded_ids, attention_mask=padded_mask).logits
        eager_unpadded = model(unpadded_ids).logits
    real = padded_mask.bool()
    torch.testing.assert_close(eager_padded[real], sdpa_padded[real], atol=1e-5, rtol=0)
    torch.testing.assert_close(eager_unpadded, sdpa_unpadded, atol=1e-5, rtol=0)


# ----------------------------------------------------------------------------------------------- outputs
def test_hidden_states_attentions_and_tuple_outputs(decoder_preset, tiny_model):
    model = tiny_model(decoder_preset, attn_implementation="eager")
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    input_ids = torch.tensor([PROMPTS[1], PROMPTS[1][::-1]])
    with torch.no_grad():
        outputs = model.model(input_ids, output_hidden_states=True, output_attentions=True)
        embeddings = model.model.embed_tokens(input_ids)
        if model.config.position_embedding == "learned":
            embeddings = embeddings + model.model.positions.embeddings(torch.arange(input_ids.shape[1]))
    hidden_states = outputs.hidden_states
    assert len(hidden_states) == layers + 1
    torch.testing.assert_close(hidden_states[0], embeddings)
    assert torch.equal(hidden_states[-1], outputs.last_hidden_state)
    assert len(outputs.attentions) == layers
    for weights in outputs.attentions:
        assert weights.shape == (2, heads, input_ids.shape[1], input_ids.shape[1])
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
        assert weights.triu(diagonal=1).abs().max() == 0  # causal

    with torch.no_grad():
        as_dict = model(input_ids, labels=input_ids)
        with_loss = model(input_ids, labels=input_ids, return_dict=False)
        without_loss = model(input_ids, return_dict=False)
    assert isinstance(with_loss, tuple) and isinstance(without_loss, tuple)
    assert torch.equal(with_loss[0], as_dict.loss) and torch.equal(with_loss[1], as_dict.logits)
    assert torch.equal(without_loss[0], as_dict.logits)


# ----------------------------------------------------------------------------------------------- training
def test_gradient_checkpointing_gives_the_same_gradients(decoder_preset, tiny_model):
    model = tiny_model(decoder_preset).train()
    input_ids = torch.tensor([PROMPTS[1], PROMPTS[1][::-1]])

    def gradients() -> dict[str, torch.Tensor]:
        model.zero_grad()
        model(input_ids, labels=input_ids).loss.backward()
        return {name: parameter.grad.clone() for name, parameter in model.named_parameters()}

    calls = []
    model.model.layers[0].self_attn.register_forward_pre_hook(lambda *_: calls.append(1))
    reference = gradients()
    model.gradient_checkpointing_enable()
    checkpointed = gradients()
    assert len(calls) == 3, "checkpointing should run the first attention again in the backward pass"
    assert reference.keys() == checkpointed.keys()
    for name, grad in reference.items():
        torch.testing.assert_close(checkpointed[name], grad, atol=1e-6, rtol=0, msg=name)


def test_labels_give_the_shifted_cross_entropy_with_ignore_index(decoder_preset, tiny_model):
    model = tiny_model(decoder_preset)
    input_ids = torch.tensor([PROMPTS[1] + [7, 8], [9, 8, 7, 6, 5, 4, 3, 2]])
    labels = input_ids.clone()
    labels[0, :3] = -100
    labels[1, 5] = -100
    with torch.no_grad():
        outputs = model(input_ids, labels=labels)
    expected = F.cross_entropy(
        outputs.logits[:, :-1].reshape(-1, outputs.logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100
    )
    torch.testing.assert_close(outputs.loss, expected)


# ----------------------------------------------------------------------------------------------- embeddings and dtypes
def test_resized_embeddings_keep_their_tying_after_save_and_load(decoder_preset, tiny_model, tmp_path):
    model = tiny_model(decoder_preset)
    tied = decoder_preset.startswith("gpt")
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == tied
    model.resize_token_embeddings(4200)
    assert model.model.embed_tokens.weight.shape == model.lm_head.weight.shape == (4200, 128)
    model.resize_token_embeddings(4201, pad_to_multiple_of=64)
    assert model.config.vocab_size == model.lm_head.weight.shape[0] == 4224
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == tied
    input_ids = torch.tensor([[4223, 5, 4100]])
    with torch.no_grad():
        logits = model(input_ids).logits
    assert logits.shape[-1] == 4224

    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert loaded.config.vocab_size == 4224
    assert (loaded.lm_head.weight is loaded.model.embed_tokens.weight) == tied
    if not tied:
        assert not torch.equal(loaded.lm_head.weight, loaded.model.embed_tokens.weight)
    with torch.no_grad():
        assert torch.equal(loaded(input_ids).logits, logits)


def test_loads_in_bfloat16_and_generates(decoder_preset, tiny_model, tmp_path):
    model = tiny_model(decoder_preset, pad_token_id=PAD)
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16).eval()
    assert {parameter.dtype for parameter in loaded.parameters()} == {torch.bfloat16}
    input_ids, attention_mask = left_pad(PROMPTS)
    with torch.no_grad():
        logits = loaded(input_ids, attention_mask=attention_mask).logits
        reference = model(input_ids, attention_mask=attention_mask).logits
    assert logits.dtype == torch.bfloat16
    real = attention_mask.bool()
    torch.testing.assert_close(logits[real].float(), reference[real], atol=0.1, rtol=0.05)
    assert greedy(loaded, input_ids, 4, attention_mask=attention_mask).shape == (3, 4)


# ----------------------------------------------------------------------------------------------- save / load
HEADS = {
    AutoModelForCausalLM: "ZooDecoderForCausalLM",
    AutoModelForSequenceClassification: "ZooDecoderForSequenceClassification",
    AutoModelForTokenClassification: "ZooDecoderForTokenClassification",
}


@pytest.mark.parametrize("auto_class", HEADS, ids=lambda auto_class: auto_class.__name__)
def test_save_pretrained_writes_safetensors_and_code_and_round_trips(decoder_preset, auto_class, tiny_model, tmp_path):
    model = tiny_model(decoder_preset, auto_class=auto_class, pad_token_id=PAD, num_labels=3)
    assert type(model).__name__ == HEADS[auto_class]
    model.save_pretrained(tmp_path)
    files = {path.name for path in tmp_path.iterdir()}
    assert {"model.safetensors", "config.json", "configuration_decoder.py", "modeling_decoder.py", "layers.py"} <= files
    assert not [name for name in files if name.endswith((".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt"))]
    auto_map = json.loads((tmp_path / "config.json").read_text())["auto_map"]
    assert auto_map["AutoConfig"] == "modeling_decoder.ZooDecoderConfig"  # one config class per model code
    assert auto_map[auto_class.__name__] == f"modeling_decoder.{HEADS[auto_class]}"

    loaded = auto_class.from_pretrained(tmp_path).eval()
    assert type(loaded) is type(model)
    input_ids, attention_mask = left_pad(PROMPTS)
    with torch.no_grad():
        expected = model(input_ids, attention_mask=attention_mask).logits
        logits = loaded(input_ids, attention_mask=attention_mask).logits
    # A last-bit difference alone would point at MKL's alignment-dependent GEMM (see test_decoder_properties.py).
    assert torch.equal(logits, expected), f"max difference {(logits - expected).abs().max():.2e}"


# ----------------------------------------------------------------------------------------------- classification heads
def test_sequence_classification_pools_the_last_real_token(decoder_preset, tiny_model):
    model = tiny_model(decoder_preset, auto_class=AutoModelForSequenceClassification, pad_token_id=PAD, num_labels=3)
    row, other = [5, 6, 7, 8], [9, 10, 11, 12, 13, 14]
    left = torch.tensor([[PAD, PAD, *row], other])
    right = torch.tensor([[*row, PAD, PAD], other])
    with torch.no_grad():
        from_left = model(left, attention_mask=(left != PAD).long()).logits
        from_right = model(right, attention_mask=(right != PAD).long()).logits
        alone = model(torch.tensor([row])).logits
    assert from_left.shape == (2, 3)
    torch.testing.assert_close(from_left, from_right, atol=1e-5, rtol=0)
    torch.testing.assert_close(from_left[0], alone[0], atol=1e-5, rtol=0)
    # Pooling really picks the last real token: the logits of a shorter prefix differ.
    with torch.no_grad():
        prefix = model(torch.tensor([row[:-1]])).logits
    assert not torch.allclose(prefix, alone, atol=1e-4)


def test_sequence_classification_without_pad_token_rejects_batches(decoder_preset, tiny_model):
    model = tiny_model(decoder_preset, auto_class=AutoModelForSequenceClassification, num_labels=2)
    assert model.config.pad_token_id is None
    model(torch.tensor([PROMPTS[0]]))  # a single row needs no padding
    with pytest.raises(ValueError, match="pad_token_id"):
        model(torch.tensor([PROMPTS[0], PROMPTS[0]]))


def test_classification_losses(decoder_preset, tiny_model):
    sequence = tiny_model(decoder_preset, auto_class=AutoModelForSequenceClassification, pad_token_id=PAD, num_labels=3)
    tokens = tiny_model(decoder_preset, auto_class=AutoModelForTokenClassification, num_labels=5)
    input_ids = torch.tensor([PROMPTS[1], PROMPTS[1][::-1]])
    with torch.no_grad():
        outputs = sequence(input_ids, labels=torch.tensor([2, 0]))
        torch.testing.assert_close(outputs.loss, F.cross_entropy(outputs.logits, torch.tensor([2, 0])))
        labels = torch.tensor([[0, 1, 2, 3, 4, -100], [4, 3, -100, 1, 0, 2]])
        outputs = tokens(input_ids, labels=labels)
    assert outputs.logits.shape == (2, 6, 5)
    torch.testing.assert_close(outputs.loss, F.cross_entropy(outputs.logits.reshape(-1, 5), labels.reshape(-1)))
