"""hfzoo's decoder presets against the native transformers models of identical shape, in one run.

`gpt-<size>` is compared with `GPT2LMHeadModel` and `llama-<size>` with `LlamaForCausalLM`, each native config
mapped from the hfzoo preset (same layers, width, heads, kv heads, ffn, vocabulary, positions, tying,
activation; the parameter counts are asserted equal). Random init, fp32, dropout 0, two threads. Figures:

- training tokens/s: forward + backward + AdamW step on a batch of `--batch-size` x `--seq-len`;
- generation tokens/s at each `--gen-batch-sizes`: greedy, `--new-tokens` after a `--prompt-len` prompt, with
  `min_new_tokens` so both models produce the same count (prefill included);
- peak memory: the peak of live tensor bytes during two warm training steps and during a warm generate call,
  each variant in its own fresh process, with the first call's RSS growth beside it (see `common.PeakMemoryProbe`).

Ratios are hfzoo / native for speed and native / hfzoo for memory, so > 1 means hfzoo is better everywhere.

    .venv/bin/python benchmarks/bench_decoder.py            # full run, 6.5 minutes on 2 quiet cores (measured)
    .venv/bin/python benchmarks/bench_decoder.py --preset-size tiny --rounds 1 --steps 1   # smoke run
"""

import argparse
import copy
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
)

import hfzoo
from hfzoo.models.component_options import GATED_ACTIVATIONS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402  (the benchmarks folder is not a package)
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
    parameter_count,  # noqa: F401  (imported from here by the other benchmarks)
    print_results,  # noqa: F401  (imported from here by the other benchmarks)
    report,
    training_workload,
)

# Imported once by the memory probes' fork server, so each fresh process starts without the import cost.
PRELOAD = ("torch", "transformers", "hfzoo", "transformers.models.gpt2.modeling_gpt2",
           "transformers.models.llama.modeling_llama")
MEMORY_TRAINING_STEPS = 2  # the second step is the first with AdamW state already allocated


def _require(config, preset: str, native: str, **expected) -> None:
    """Refuse a preset whose switches the native class cannot express, instead of comparing different models."""
    wrong = {key: getattr(config, key) for key, value in expected.items() if getattr(config, key) != value}
    if wrong:
        raise ValueError(f"{preset} cannot be mapped onto {native}: it has {wrong}, {native} needs {expected}.")


def gpt2_config(config, preset: str) -> GPT2Config:
    _require(
        config, preset, "GPT2", norm_type="layernorm", norm_position="pre", position_embedding="learned",
        attention_bias=True, mlp_bias=True, norm_bias=True, num_experts=0, embedding_norm=False,
        scale_embeddings=False, num_key_value_heads=config.num_attention_heads,
    )
    return GPT2Config(
        vocab_size=config.vocab_size,
        n_positions=config.max_position_embeddings,
        n_embd=config.hidden_size,
        n_layer=config.num_hidden_layers,
        n_head=config.num_attention_heads,
        n_inner=config.intermediate_size,
        activation_function=config.activation,
        layer_norm_epsilon=config.norm_eps,
        initializer_range=config.initializer_range,
        tie_word_embeddings=config.tie_word_embeddings,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=None,
        eos_token_id=None,
    )


def llama_config(config, preset: str) -> LlamaConfig:
    _require(
        config, preset, "Llama", norm_type="rmsnorm", norm_position="pre", position_embedding="rotary",
        activation="swiglu", mlp_bias=config.attention_bias, num_experts=0, embedding_norm=False,
        scale_embeddings=False,
    )
    return LlamaConfig(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads,
        max_position_embeddings=config.max_position_embeddings,
        rms_norm_eps=config.norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": config.rope_theta},
        hidden_act=GATED_ACTIVATIONS[config.activation],
        attention_bias=config.attention_bias,
        mlp_bias=config.mlp_bias,
        initializer_range=config.initializer_range,
        tie_word_embeddings=config.tie_word_embeddings,
        attention_dropout=0.0,
        bos_token_id=None,
        eos_token_id=None,
    )


# hfzoo preset family -> (native class, config mapping)
NATIVE = {"gpt": (GPT2LMHeadModel, gpt2_config), "llama": (LlamaForCausalLM, llama_config)}


def zoo_config(preset: str):
    return hfzoo.preset_config(preset, hidden_dropout=0.0, attention_dropout=0.0)


def build_model(model_name: str, variant: str, seed: int) -> PreTrainedModel:
    """A randomly initialised fp32 model: hfzoo's preset `model_name` (`gpt-small`, ...) or its native twin."""
    config = zoo_config(model_name)
    torch.manual_seed(seed)
    if variant == "hfzoo":
        # from_config shares and mutates its config: each model gets its own copy.
        return AutoModelForCausalLM.from_config(copy.deepcopy(config))
    native_cls, to_native = NATIVE[model_name.split("-")[0]]
    return native_cls(to_native(config, model_name))


def generation_workload(model: PreTrainedModel, args, batch_size: int) -> Callable[[], None]:
    """One greedy `generate` call producing exactly `--new-tokens` tokens per row."""
    generator = torch.Generator().manual_seed(args.seed)
    prompt = torch.randint(model.config.vocab_size, (batch_size, args.prompt_len), generator=generator).to(model.device)
    attention_mask = torch.ones_like(prompt)

    def run() -> None:
        model.eval()
        output = model.generate(
            input_ids=prompt,
            attention_mask=attention_mask,
            max_new_tokens=args.new_tokens,
            min_new_tokens=args.new_tokens,
            do_sample=False,
            pad_token_id=0,
        )
        assert output.shape == (batch_size, args.prompt_len + args.new_tokens), output.shape

    return run


def figures(args) -> list[str]:
    return ["train", *(f"generate_b{batch_size}" for batch_size in args.gen_batch_sizes)]


def workload(model: PreTrainedModel, args, figure: str, training_steps: int) -> Callable[[], None]:
    if figure == "train":
        generator = torch.Generator().manual_seed(args.seed)
        input_ids = torch.randint(model.config.vocab_size, (args.batch_size, args.seq_len), generator=generator)
        return training_workload(model, {"input_ids": input_ids, "labels": input_ids}, training_steps)
    return generation_workload(model, args, int(figure.removeprefix("generate_b")))


def tokens_per_call(args, figure: str) -> int:
    if figure == "train":
        return args.steps * args.batch_size * args.seq_len
    return int(figure.removeprefix("generate_b")) * args.new_tokens


def memory_probe(model_name: str, variant: str, figure: str, args) -> Callable[[], None]:
    """Runs in a fresh process (module level so it can be sent there): builds one model, returns the workload."""
    return workload(build_model(model_name, variant, args.seed), args, figure, MEMORY_TRAINING_STEPS)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_arguments(parser, RESULTS_DIR / "decoder.json")
    parser.add_argument("--models", nargs="+", default=list(NATIVE), choices=list(NATIVE),
                        help="preset families to compare, each as <family>-<preset-size>")
    parser.add_argument("--seq-len", type=int, default=256, help="training sequence length")
    parser.add_argument("--gen-batch-sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    ensure_malloc_setting(args.malloc)
    torch.set_num_threads(THREADS)
    started = environment()
    model_names = [f"{family}-{args.preset_size}" for family in args.models]
    memory_rows = measure_memory(memory_probe, model_names, figures(args), args, PRELOAD) if args.memory else []
    models = {name: {variant: build_model(name, variant, args.seed) for variant in VARIANTS} for name in model_names}
    parameters = check_parameters(models)
    rows = measure_speed(
        model_names, lambda name, variant: build_model(name, variant, args.seed), figures(args),
        lambda model, figure: workload(model, args, figure, args.steps),
        lambda figure: tokens_per_call(args, figure), args,
    )
    return report("decoder", args, started, models, parameters, rows + memory_rows, measure_mode_switch(models))


if __name__ == "__main__":
    main()
