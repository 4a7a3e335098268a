"""`hfzoo generate`: text in, text out, with adapters routed per prompt in one batch.

Each completion is checked against what transformers and PEFT give for that prompt alone (the adapter loaded with
plain `PeftModel.from_pretrained`), so the batched, routed path is shown to change nothing but the speed.
"""

from pathlib import Path

import pytest
import torch
from peft import PeftModel
from tests.helpers.tiny_checkpoints import random_lora
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSeq2SeqLM, GPT2Config, GPT2LMHeadModel

from hfzoo.cli import main
from hfzoo.core.refusals import Refusal

PROMPT = "Return a new list"


@pytest.fixture(scope="module")
def decoder_with_adapters(tmp_path_factory, tiny_model, tokenizer, tokenizer_overrides) -> tuple[Path, dict[str, Path]]:
    root = tmp_path_factory.mktemp("generate")
    model = tiny_model("gpt-tiny", **tokenizer_overrides)
    model.save_pretrained(root / "model")
    tokenizer.save_pretrained(root / "model")
    adapters = {name: random_lora(tiny_model("gpt-tiny", **tokenizer_overrides), root / name, seed)
                for seed, name in enumerate("ab")}  # fmt: skip
    return root / "model", adapters


def _alone(model_path: Path, adapter: Path | None, tokenizer, max_new_tokens: int) -> str:
    model = AutoModelForCausalLM.from_pretrained(model_path).eval()
    if adapter is not None:
        model = PeftModel.from_pretrained(model, adapter).eval()
    ids = tokenizer(PROMPT, return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    return tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)


def test_adapters_per_prompt_in_one_batch_match_each_alone(decoder_with_adapters, tokenizer, capsys):
    model_path, adapters = decoder_with_adapters
    main(["generate", str(model_path), "--adapter", f"a={adapters['a']}", "--adapter", f"b={adapters['b']}",
          "--prompt", PROMPT, "--prompt", PROMPT, "--prompt", PROMPT, "--adapter_names", "a", "b", "__base__",
          "--max_new_tokens", "12"])  # fmt: skip
    out = capsys.readouterr().out
    expected = {
        "a": _alone(model_path, adapters["a"], tokenizer, 12),
        "b": _alone(model_path, adapters["b"], tokenizer, 12),
        "__base__": _alone(model_path, None, tokenizer, 12),
    }
    assert len(set(expected.values())) == 3, "the adapters must change the continuation for this test to mean anything"
    printed = [f"[{name}] {text}\n" for name, text in expected.items()]  # each row when it ends: any order
    assert all(row in out for row in printed) and len(out) == sum(map(len, printed)), out


def test_one_prompt_streams_prompt_and_continuation(decoder_with_adapters, tokenizer, capsys):
    model_path, adapters = decoder_with_adapters
    main(["generate", str(model_path), "--adapter", f"a={adapters['a']}", "--prompt", PROMPT, "--max_new_tokens", "10"])
    assert capsys.readouterr().out == f"[a] {PROMPT}{_alone(model_path, adapters['a'], tokenizer, 10)}\n"


def test_static_cache_gives_the_same_text(decoder_with_adapters, tokenizer, capsys):
    model_path, _ = decoder_with_adapters
    main(["generate", str(model_path), "--prompt", PROMPT, "--max_new_tokens", "10", "--static_cache"])
    assert capsys.readouterr().out == f"{PROMPT}{_alone(model_path, None, tokenizer, 10)}\n"


def test_seq2seq_beam_search(tmp_path, tiny_model, tokenizer, tokenizer_overrides, capsys):
    overrides = {**tokenizer_overrides, "decoder_start_token_id": tokenizer.pad_token_id}
    model = tiny_model("t5-tiny", AutoModelForSeq2SeqLM, **overrides)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    main(["generate", str(tmp_path), "--prompt", PROMPT, "--num_beams", "3", "--max_new_tokens", "6"])
    ids = tokenizer(PROMPT, return_tensors="pt")
    expected = model.generate(
        **ids, num_beams=3, max_new_tokens=6, do_sample=False, pad_token_id=tokenizer.pad_token_id
    )
    assert capsys.readouterr().out == tokenizer.decode(expected[0], skip_special_tokens=True) + "\n"


def test_native_model_without_hfzoo_code(tmp_path, tokenizer, capsys):
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=2, n_positions=64,
                        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)  # fmt: skip
    GPT2LMHeadModel(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    main(["generate", str(tmp_path), "--prompt", PROMPT, "--max_new_tokens", "5"])
    assert capsys.readouterr().out == f"{PROMPT}{_alone(tmp_path, None, tokenizer, 5)}\n"


def test_sampling_is_repeatable_with_a_seed(decoder_with_adapters, capsys):
    model_path, _ = decoder_with_adapters
    args = ["generate", str(model_path), "--prompt", PROMPT, "--do_sample", "--top_k", "50", "--seed", "3"]
    main(args)
    first = capsys.readouterr().out
    main(args)
    assert capsys.readouterr().out == first


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--prompt", "x"], "say which one each prompt uses with --adapter_names"),
        (["--prompt", "x", "--prompt", "y", "--prompt", "z", "--adapter_names", "a", "b"],
         "gives 2 names for 3 prompts"),
        (["--prompt", "x", "--adapter_names", "c"], "unknown adapter(s) ['c']"),
    ],
)
def test_routing_mistakes_are_refused_by_name(decoder_with_adapters, extra, message):
    """Each a one-line refusal (exit status 2) naming the mistake."""
    model_path, adapters = decoder_with_adapters
    with pytest.raises(Refusal, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        main(["generate", str(model_path), "--adapter", f"a={adapters['a']}", "--adapter", f"b={adapters['b']}",
              *extra])  # fmt: skip


def test_bad_adapter_argument_and_encoder_are_refused(decoder_with_adapters, tmp_path, tiny_model):
    model_path, _ = decoder_with_adapters
    with pytest.raises(Refusal, match="write NAME=PATH"):
        main(["generate", str(model_path), "--adapter", "just-a-path", "--prompt", "x"])
    with pytest.raises(Refusal, match="no such folder"):
        main(["generate", str(model_path), "--adapter", f"a={tmp_path / 'missing'}", "--prompt", "x"])
    tiny_model("bert-tiny", AutoModelForMaskedLM).save_pretrained(tmp_path / "bert")
    with pytest.raises(Refusal, match="is an encoder"):
        main(["generate", str(tmp_path / "bert"), "--prompt", "x"])


def test_saved_composition_routes_like_adapters(decoder_with_adapters, tmp_path, capsys):
    from hfzoo.adapters import compose

    model_path, adapters = decoder_with_adapters
    base = AutoModelForCausalLM.from_pretrained(model_path)
    compose(base, {"a": adapters["a"], "b": adapters["b"]}, strategy="fixed").save_pretrained(tmp_path / "fixed")
    routed = ["--prompt", PROMPT, "--prompt", PROMPT, "--adapter_names", "b", "a", "--max_new_tokens", "8"]
    main(["generate", str(model_path), "--composition", str(tmp_path / "fixed"), *routed])
    from_composition = capsys.readouterr().out
    main(["generate", str(model_path), "--adapter", f"a={adapters['a']}", "--adapter", f"b={adapters['b']}", *routed])
    assert from_composition == capsys.readouterr().out


@pytest.mark.slow
def test_compiled_decoding_gives_the_same_text(decoder_with_adapters, tokenizer, capsys):
    model_path, _ = decoder_with_adapters
    main(["generate", str(model_path), "--prompt", PROMPT, "--max_new_tokens", "6", "--compile"])
    assert capsys.readouterr().out == f"{PROMPT}{_alone(model_path, None, tokenizer, 6)}\n"
