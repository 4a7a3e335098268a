"""hfzoo's encoder-decoder presets against the native transformers models of identical shape, in one run.

`t5-<size>` is compared with `T5ForConditionalGeneration` (v1.1 style: gated GeLU, relative attention buckets and
max distance, no biases, RMSNorm epsilon, untied LM head) and `bart-<size>` with `BartForConditionalGeneration`
(learned positions, post-LayerNorm, embedding LayerNorm, GeLU, tied embeddings), each native config mapped from
the hfzoo preset. The parameter counts are asserted equal up to the documented differences (`native_difference`).
Random init, fp32, dropout 0, two threads, SDPA attention in both. Figures:

- `train`: tokens/s of forward + backward + AdamW step on `--batch-size` pairs of a `--source-len` source and a
  `--target-len` target (labels shifted right inside the model); source and target tokens are both counted;
- `generate_b<n>` for each `--gen-batch-sizes`: new tokens/s of greedy `generate` with a `--source-len` source,
  exactly `--new-tokens` per row (`min_new_tokens` = `max_new_tokens`), encoder pass included;
- peak tensor memory of two warm training steps and of a warm generate call, each variant in its own fresh
  process (first-call RSS growth beside it).

Ratios are hfzoo / native for speed and native / hfzoo for memory, so > 1 means hfzoo is better everywhere.

    .venv/bin/python benchmarks/bench_seq2seq.py            # full run, 6 minutes on 2 quiet cores (measured)
    .venv/bin/python benchmarks/bench_seq2seq.py --preset-size tiny --rounds 1 --steps 1   # smoke run
"""

import argparse
import copy
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from transformers import (
    AutoModelForSeq2SeqLM,
    BartConfig,
    BartForConditionalGeneration,
    PreTrainedModel,
    T5Config,
    T5ForConditionalGeneration,
)

import hfzoo
from hfzoo.models.component_options import GATED_ACTIVATIONS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_decoder import _require  # noqa: E402  (the benchmarks folder is not a package)
from common import (  # noqa: E402
    RESULTS_DIR,
    THREADS,
    VARIANTS,
    add_common_arguments,
    check_parameters,
    ensure_malloc_setting,
    environment,
    measure_memory,
    measure_mode_switch,
    measure_speed,
    report,
    training_workload,
)

PRELOAD = ("torch", "transformers", "hfzoo", "transformers.models.t5.modeling_t5",
           "transformers.models.bart.modeling_bart")
MEMORY_TRAINING_STEPS = 2  # the second step is the first with AdamW state already allocated


def t5_config(config, preset: str) -> T5Config:
    _require(
        config, preset, "T5", norm_type="rmsnorm", norm_position="pre", position_embedding="relative",
        attention_bias=False, mlp_bias=False, embedding_norm=False, scale_embeddings=False, num_experts=0,
        share_embeddings=True, num_key_value_heads=config.num_attention_heads,
    )
    gated = config.activation in GATED_ACTIVATIONS
    activation = GATED_ACTIVATIONS.get(config.activation, config.activation)
    native = T5Config(
        vocab_size=config.vocab_size,
        d_model=config.hidden_size,
        d_kv=config.head_dim,
        d_ff=config.intermediate_size,
        num_layers=config.num_hidden_layers,
        num_decoder_layers=config.num_decoder_layers,
        num_heads=config.num_attention_heads,
        relative_attention_num_buckets=config.relative_attention_num_buckets,
        relative_attention_max_distance=config.relative_attention_max_distance,
        dropout_rate=0.0,
        layer_norm_epsilon=config.norm_eps,
        feed_forward_proj=f"gated-{activation}" if gated else activation,
        # False makes T5 skip its d_model**-0.5 output scaling (v1.1); the head itself is untied in build_model.
        tie_word_embeddings=config.tie_word_embeddings,
        pad_token_id=config.pad_token_id,
        eos_token_id=config.eos_token_id,
        decoder_start_token_id=config.decoder_start_token_id,
    )
    # T5Config turns "gated-gelu" into the tanh approximation for old checkpoints; hfzoo's geglu gates with exact GeLU.
    native.dense_act_fn = activation
    return native


def bart_config(config, preset: str) -> BartConfig:
    _require(
        config, preset, "BART", norm_type="layernorm", norm_position="post", position_embedding="learned",
        attention_bias=True, mlp_bias=True, norm_bias=True, embedding_norm=True, num_experts=0,
        share_embeddings=True, tie_word_embeddings=True, num_key_value_heads=config.num_attention_heads,
        norm_eps=1e-5,  # BART's LayerNorms use torch's default eps
    )
    return BartConfig(
        vocab_size=config.vocab_size,
        max_position_embeddings=config.max_position_embeddings,
        d_model=config.hidden_size,
        encoder_layers=config.num_hidden_layers,
        decoder_layers=config.num_decoder_layers,
        encoder_attention_heads=config.num_attention_heads,
        decoder_attention_heads=config.num_attention_heads,
        encoder_ffn_dim=config.intermediate_size,
        decoder_ffn_dim=config.intermediate_size,
        activation_function=config.activation,
        scale_embedding=config.scale_embeddings,
        init_std=config.initializer_range,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        pad_token_id=config.pad_token_id,
        bos_token_id=None,
        eos_token_id=config.eos_token_id,
        decoder_start_token_id=config.decoder_start_token_id,
        forced_eos_token_id=None,  # BART's default would force eos as the last token: not what hfzoo generates
    )


# hfzoo preset family -> (native class, config mapping)
NATIVE = {"t5": (T5ForConditionalGeneration, t5_config), "bart": (BartForConditionalGeneration, bart_config)}


def native_difference(model_name: str) -> tuple[int, str | None]:
    """Parameters the native model has beyond hfzoo's (native - hfzoo), and why."""
    config = zoo_config(model_name)
    if model_name.startswith("bart"):
        return 2 * 2 * config.hidden_size, (
            "BART's learned position tables have 2 extra rows, an offset kept from fairseq, in each of the 2 stacks"
        )
    return 0, None


def zoo_config(preset: str):
    return hfzoo.preset_config(preset, hidden_dropout=0.0, attention_dropout=0.0)


def build_model(model_name: str, variant: str, seed: int) -> PreTrainedModel:
    """A randomly initialised fp32 model: hfzoo's preset `model_name` or its native twin."""
    config = zoo_config(model_name)
    torch.manual_seed(seed)
    if variant == "hfzoo":
        # from_config shares and mutates its config: each model gets its own copy.
        return AutoModelForSeq2SeqLM.from_config(copy.deepcopy(config))
    family = model_name.split("-")[0]
    native_cls, to_native = NATIVE[family]
    model = native_cls(to_native(config, model_name))
    if family == "t5" and not config.tie_word_embeddings:
        # transformers 5.23's T5Config forces tie_word_embeddings=True, so T5ForConditionalGeneration always ties
        # lm_head to the shared embedding; v1.1 (and hfzoo's preset) has its own head, restored here.
        model.lm_head.weight = nn.Parameter(model.shared.weight.detach().clone())
    return model


def seq2seq_batch(vocab_size: int, batch_size: int, source_len: int, target_len: int, seed: int) -> dict:
    """Random source and target tokens; ids 0-2 (pad, eos, unk) are avoided so nothing is read as padding or end."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(3, vocab_size, (batch_size, source_len), generator=generator)
    labels = torch.randint(3, vocab_size, (batch_size, target_len), generator=generator)
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": labels}


def generation_workload(model: PreTrainedModel, args, batch_size: int) -> Callable[[], None]:
    """One greedy `generate` call producing exactly `--new-tokens` tokens per row after the start token."""
    batch = seq2seq_batch(model.config.vocab_size, batch_size, args.source_len, 1, args.seed)
    batch = {key: value.to(model.device) for key, value in batch.items()}

    def run() -> None:
        model.eval()
        output = model.generate(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            max_new_tokens=args.new_tokens,
            min_new_tokens=args.new_tokens,
            do_sample=False,
        )
        assert output.shape == (batch_size, 1 + args.new_tokens), output.shape

    return run


def figures(args) -> list[str]:
    return ["train", *(f"generate_b{batch_size}" for batch_size in args.gen_batch_sizes)]


def workload(model: PreTrainedModel, args, figure: str, training_steps: int) -> Callable[[], None]:
    if figure == "train":
        batch = seq2seq_batch(model.config.vocab_size, args.batch_size, args.source_len, args.target_len, args.seed)
        return training_workload(model, batch, training_steps)
    return generation_workload(model, args, int(figure.removeprefix("generate_b")))


def tokens_per_call(args, figure: str) -> int:
    if figure == "train":
        return args.steps * args.batch_size * (args.source_len + args.target_len)
    return int(figure.removeprefix("generate_b")) * args.new_tokens


def memory_probe(model_name: str, variant: str, figure: str, args) -> Callable[[], None]:
    """Runs in a fresh process (module level so it can be sent there): builds one model, returns the workload."""
    return workload(build_model(model_name, variant, args.seed), args, figure, MEMORY_TRAINING_STEPS)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_arguments(parser, RESULTS_DIR / "seq2seq.json")
    parser.add_argument("--models", nargs="+", default=list(NATIVE), choices=list(NATIVE))
    parser.add_argument("--source-len", type=int, default=256, help="source tokens (train and generate)")
    parser.add_argument("--target-len", type=int, default=64, help="target tokens in training")
    parser.add_argument("--gen-batch-sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--new-tokens", type=int, default=64, help="tokens each generate call produces per row")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    ensure_malloc_setting(args.malloc)
    torch.set_num_threads(THREADS)
    started = environment()
    model_names = [f"{family}-{args.preset_size}" for family in args.models]
    memory_rows = measure_memory(memory_probe, model_names, figures(args), args, PRELOAD) if args.memory else []
    models = {name: {variant: build_model(name, variant, args.seed) for variant in VARIANTS} for name in model_names}
    parameters = check_parameters(models, native_difference)
    rows = measure_speed(
        model_names, lambda name, variant: build_model(name, variant, args.seed), figures(args),
        lambda model, figure: workload(model, args, figure, args.steps),
        lambda figure: tokens_per_call(args, figure), args,
    )
    return report("seq2seq", args, started, models, parameters, rows + memory_rows, measure_mode_switch(models))


if __name__ == "__main__":
    main()
