"""The benchmark harness runs end to end in a tiny mode and writes the JSON that cards and READMEs are built from.

Speed is not asserted (the machine is shared and noisy); the schema, the equal parameter counts, the recorded
malloc setting and the positivity of every ratio are.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hfzoo.training.logging import steps_filling

REPO_ROOT = Path(__file__).resolve().parents[1]
BENCH_DECODER = REPO_ROOT / "benchmarks" / "bench_decoder.py"
TINY_RUN = [
    "--preset-size", "tiny", "--rounds", "1", "--warmup", "0", "--steps", "1", "--batch-size", "2",
    "--seq-len", "16", "--gen-batch-sizes", "2", "--prompt-len", "4", "--new-tokens", "3", "--memory-repeats", "1",
]


@pytest.fixture(scope="module")
def decoder_results(tmp_path_factory) -> dict:
    output = tmp_path_factory.mktemp("bench") / "decoder.json"
    # Started without the malloc variables: the script must re-execute itself with them.
    env = {key: value for key, value in os.environ.items() if not key.startswith("MALLOC_")}
    completed = subprocess.run(
        [sys.executable, str(BENCH_DECODER), *TINY_RUN, "--output", str(output)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return {"json": json.loads(output.read_text()), "stdout": completed.stdout}


@pytest.mark.slow  # a 38 s tiny run; make test runs a benchmark side by side in test_bench_shakespeare.py
def test_decoder_benchmark_compares_every_figure_of_both_models(decoder_results):
    results = decoder_results["json"]["results"]
    expected = {
        (model, figure)
        for model in ("gpt-tiny", "llama-tiny")
        for figure in ("train", "generate_b2", "memory_train", "memory_generate_b2")
    }
    assert {(row["model"], row["figure"]) for row in results} == expected
    for row in results:
        assert row["ratio"]["median"] > 0, row
        if row["unit"] == "tokens/s":
            for variant in ("hfzoo", "native"):
                summary = row[variant]
                assert 0 < summary["min"] <= summary["median"] <= summary["max"], row
                assert len(summary["per_round"]) == 1
                assert summary["cpu_utilisation"] > 0
        else:
            for variant in ("hfzoo", "native"):
                peak = row[variant]
                assert 0 < peak["min"] <= peak["peak_tensor_mib"] <= peak["max"], row
                assert peak["min"] == peak["max"], "the tensor peak of a warm call is deterministic"


@pytest.mark.slow  # shares the tiny run above
def test_decoder_benchmark_models_have_identical_size(decoder_results):
    parameters = decoder_results["json"]["parameters"]
    assert parameters["gpt-tiny"]["native_class"] == "GPT2LMHeadModel"
    assert parameters["llama-tiny"]["native_class"] == "LlamaForCausalLM"
    for counts in parameters.values():
        assert counts["hfzoo"] == counts["native"] > 0
        assert f"{counts['hfzoo']:,}" in decoder_results["stdout"]


@pytest.mark.slow  # shares the tiny run above
def test_decoder_benchmark_records_how_it_was_measured(decoder_results):
    payload = decoder_results["json"]
    environment = payload["environment"]
    assert environment["malloc"]["name"] == "tuned"
    assert environment["torch_threads"] == 2
    assert {"date", "cpu", "torch", "transformers", "git", "load_average", "load_average_end"} <= set(environment)
    assert payload["settings"]["rounds"] == 1 and payload["settings"]["preset_size"] == "tiny"
    assert "ratio" in decoder_results["stdout"]
    for model_name in ("gpt-tiny", "llama-tiny"):
        switch = payload["mode_switch_ms"][model_name]
        assert all(0 < switch[variant]["min"] <= switch[variant]["median"] for variant in ("hfzoo", "native"))


# ----------------------------------------------------------------------------------------------- encoder, seq2seq
BENCH_ENCODER = REPO_ROOT / "benchmarks" / "bench_encoder.py"
BENCH_SEQ2SEQ = REPO_ROOT / "benchmarks" / "bench_seq2seq.py"
TINY_COMMON = ["--preset-size", "tiny", "--rounds", "1", "--warmup", "0", "--steps", "1", "--batch-size", "2"]
ENCODER_TINY_RUN = [*TINY_COMMON, "--seq-len", "16"]
SEQ2SEQ_TINY_RUN = [
    *TINY_COMMON, "--source-len", "16", "--target-len", "8", "--gen-batch-sizes", "2", "--new-tokens", "3",
]


def run_tiny_benchmark(script: Path, arguments: list[str], output: Path) -> dict:
    """Run `script` in its tiny mode. The environment is inherited: `make test` already sets the malloc variables,
    which spares the re-execution (and second library import) that the decoder test covers.
    """
    completed = subprocess.run(
        [sys.executable, str(script), *arguments, "--output", str(output)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return {"json": json.loads(output.read_text()), "stdout": completed.stdout}


@pytest.fixture(scope="module")
def encoder_results(tmp_path_factory) -> dict:
    return run_tiny_benchmark(BENCH_ENCODER, ENCODER_TINY_RUN, tmp_path_factory.mktemp("bench") / "encoder.json")


@pytest.fixture(scope="module")
def seq2seq_results(tmp_path_factory) -> dict:
    return run_tiny_benchmark(BENCH_SEQ2SEQ, SEQ2SEQ_TINY_RUN, tmp_path_factory.mktemp("bench") / "seq2seq.json")


def assert_rows_are_complete(results: list[dict], expected: set[tuple[str, str]]) -> None:
    """Every (model, figure) is there once, each speed with one round of ordered positive rates, each memory > 0."""
    assert sorted((row["model"], row["figure"]) for row in results) == sorted(expected)
    for row in results:
        assert row["ratio"]["median"] > 0, row
        if row["unit"] == "tokens/s":
            for variant in ("hfzoo", "native"):
                summary = row[variant]
                assert 0 < summary["min"] <= summary["median"] <= summary["max"], row
                assert len(summary["per_round"]) == 1
                assert summary["cpu_utilisation"] > 0
        else:
            assert all(row[variant]["peak_tensor_mib"] > 0 for variant in ("hfzoo", "native")), row


@pytest.mark.slow  # its tiny benchmark run: 37 s in CI; the decoder benchmark covers the harness
def test_encoder_benchmark_compares_training_encoding_and_memory_with_bert(encoder_results):
    payload = encoder_results["json"]
    expected = {("bert-tiny", figure) for figure in ("train", "encode", "memory_train", "memory_encode")}
    assert_rows_are_complete(payload["results"], expected)
    counts = payload["parameters"]["bert-tiny"]
    assert counts["native_class"] == "BertForMaskedLM"
    assert counts["hfzoo"] == counts["native"] > 0
    assert f"{counts['hfzoo']:,}" in encoder_results["stdout"]
    assert payload["benchmark"] == "encoder" and payload["settings"]["mask_fraction"] == 0.15
    assert payload["environment"]["malloc"]["name"] == "tuned"
    assert "load_average_end" in payload["environment"]


@pytest.mark.slow  # its tiny benchmark run: 76 s in CI
def test_seq2seq_benchmark_compares_t5_and_bart_training_generation_and_memory(seq2seq_results):
    payload = seq2seq_results["json"]
    expected = {
        (model, figure)
        for model in ("t5-tiny", "bart-tiny")
        for figure in ("train", "generate_b2", "memory_train", "memory_generate_b2")
    }
    assert_rows_are_complete(payload["results"], expected)
    assert payload["benchmark"] == "seq2seq" and payload["settings"]["new_tokens"] == 3
    assert payload["environment"]["malloc"]["name"] == "tuned"


@pytest.mark.slow  # shares the seq2seq benchmark run above
def test_seq2seq_benchmark_models_have_identical_size(seq2seq_results):
    """Built by hfzoo.convert as `to_native` exports them: T5 v1.1's untied head, BART's position table with the 2
    offset rows of fairseq counted in hfzoo's `max_position_embeddings`."""
    parameters = seq2seq_results["json"]["parameters"]
    t5, bart = parameters["t5-tiny"], parameters["bart-tiny"]
    assert t5["native_class"] == "T5ForConditionalGeneration"
    assert bart["native_class"] == "BartForConditionalGeneration"
    for counts in (t5, bart):
        assert counts["hfzoo"] == counts["native"] > 0
        assert f"{counts['hfzoo']:,}" in seq2seq_results["stdout"]


@pytest.mark.parametrize(
    ("preset", "options", "native_class", "switch"),
    [
        ("gpt-tiny", {"position_embedding": "rotary"}, "GPT2LMHeadModel", "position_embedding"),
        ("modernbert-tiny", {}, "BertForMaskedLM", "norm_position"),
        ("bart-tiny", {}, "T5ForConditionalGeneration", "norm_type"),
        ("t5-tiny", {}, "BartForConditionalGeneration", "activation"),
    ],
)
def test_a_preset_the_native_class_cannot_express_is_refused(preset, options, native_class, switch):
    """The benchmarks build the native twin through hfzoo.convert, which names the switch instead of comparing
    different models."""
    import hfzoo
    from hfzoo.convert import native_model

    with pytest.raises(ValueError, match=f"cannot express .*{switch}="):
        native_model(hfzoo.preset_config(preset, **options), native_class)


# ----------------------------------------------------------------------------------------------- adapters
BENCH_ADAPTERS = REPO_ROOT / "benchmarks" / "bench_adapters.py"
ADAPTERS_TINY_RUN = [
    "--preset-size", "tiny", "--counts", "2", "--shapes", "2x8", "--tokens-per-call", "16", "--rounds", "1",
    "--warmup", "0", "--threads", "1", "--memory-variants", "fusion",
]


@pytest.fixture(scope="module")
def adapters_results(tmp_path_factory) -> dict:
    return run_tiny_benchmark(BENCH_ADAPTERS, ADAPTERS_TINY_RUN, tmp_path_factory.mktemp("bench") / "adapters.json")


@pytest.mark.slow  # a 21 s tiny run; tests/adapters time nothing but check every method's outputs
def test_adapters_benchmark_times_every_method_beside_base_and_single_adapters(adapters_results):
    payload = adapters_results["json"]
    timed = [row for row in payload["results"] if row["unit"] == "tokens/s"]
    references = {"lora": ["base", "single", "merged", "peft_mixed"], "bottleneck": ["base", "single", "peft_mixed"]}
    methods = ["fixed", "average", "soft", "hard", "fusion"]
    assert [(row["kind"], row["variant"]) for row in timed] == [
        (kind, variant) for kind in ("lora", "bottleneck") for variant in references[kind] + methods
    ]
    for row in timed:
        assert row["n"] == 2 and row["shape"] == "2x8" and row["model"] == f"llama-tiny + {row['kind']}"
        assert 0 < row["hfzoo"]["min"] <= row["hfzoo"]["median"] <= row["hfzoo"]["max"], row
        assert len(row["hfzoo"]["per_round"]) == 1 and row["hfzoo"]["cpu_utilisation"] > 0
        for ratio in (row["ratio"], row["latency_vs_base"], row["latency_vs_single"]):
            assert ratio["median"] > 0, row
    memory = [(row["kind"], row["variant"]) for row in payload["results"] if row["unit"] == "MiB peak tensor memory"]
    assert memory == [(kind, variant) for kind in ("lora", "bottleneck") for variant in ("base", "fusion")]
    assert all(row["hfzoo"]["peak_tensor_mib"] > 0 for row in payload["results"] if "memory" in row["figure"])


@pytest.mark.slow  # shares the tiny run above
def test_adapters_benchmark_checks_the_issue_targets_and_records_the_run(adapters_results):
    payload = adapters_results["json"]
    checked = {(c["variant"], c["reference"], c["kind"]) for c in payload["targets"]}
    assert checked == {
        ("hard", "single", "lora"), ("fixed", "single", "lora"), ("fixed", "single", "bottleneck"),
    }  # fusion's target is set at N = 8, not measured in the tiny run
    assert all(c["ratio"] > 0 and isinstance(c["met"], bool) for c in payload["targets"])
    environment = payload["environment"]
    assert environment["torch_threads"] == 1 and "load_average_end" in environment
    assert payload["settings"]["logits_to_keep"] == 1
    assert payload["command"].startswith("python benchmarks/bench_adapters.py --preset-size tiny")
    assert "hard <= 1.05x single" in adapters_results["stdout"]


# ----------------------------------------------------------------------------------------------- scaling
BENCH_SCALING = REPO_ROOT / "benchmarks" / "bench_scaling.py"


@pytest.fixture(scope="module")
def scaling_results(tmp_path_factory) -> dict:
    """DDP only: the FSDP rows (the same launches with `--sharding fsdp`) are the slow test's."""
    arguments = ["--tiny", "--sharding", "ddp"]
    return run_tiny_benchmark(BENCH_SCALING, arguments, tmp_path_factory.mktemp("bench") / "scaling.json")


def train_rows(payload: dict, sharding: str) -> list[dict]:
    return [row for row in payload["results"] if row["figure"] == "train" and row["sharding"] == sharding]


@pytest.mark.slow  # three launches, 57 s in CI; tests/training/test_fsdp.py runs two processes
def test_scaling_benchmark_runs_the_recipe_on_one_and_two_processes(scaling_results):
    payload = scaling_results["json"]
    ddp = train_rows(payload, "ddp")
    # torchrun starts a process group even for one process: both are MULTI_CPU (gloo)
    assert [(row["processes"], row["num_processes"], row["distributed_type"]) for row in ddp] == [
        (1, 1, "MULTI_CPU"), (2, 2, "MULTI_CPU")
    ]
    for row in ddp:
        assert 0 < row["tokens_per_s"]["min"] <= row["tokens_per_s"]["median"] <= row["tokens_per_s"]["max"], row
        assert row["model"] == "gpt-tiny" and row["parameters"] > 0
    assert ddp[0]["scaling_efficiency"] == 1.0 and ddp[1]["scaling_efficiency"] > 0
    assert payload["command"] == "python benchmarks/bench_scaling.py --tiny --sharding ddp --output scaling.json"
    assert "load_average_end" in payload["environment"]


@pytest.mark.slow  # shares the scaling benchmark run above
def test_scaling_benchmark_measures_checkpoints_against_model_size(scaling_results):
    [checkpoint] = [row for row in scaling_results["json"]["results"] if row["figure"] == "checkpoint"]
    assert checkpoint["model"] == "gpt-tiny"
    # Weights and AdamW's two moments in fp32, at least: 12 bytes per parameter.
    assert checkpoint["size_mib"] * 2**20 >= 12 * checkpoint["parameters"] > 0
    assert checkpoint["save_s"]["median"] > 0 and checkpoint["load_s"]["median"] > 0


@pytest.mark.slow  # the DDP rows above run the same launches and the same row code in `make test`
def test_scaling_benchmark_shards_with_fsdp_on_one_and_two_processes(tmp_path):
    payload = run_tiny_benchmark(BENCH_SCALING, ["--tiny", "--sharding", "fsdp"], tmp_path / "scaling.json")["json"]
    fsdp = train_rows(payload, "fsdp")
    assert [(row["processes"], row["num_processes"]) for row in fsdp] == [(1, 1), (2, 2)]
    assert all(0 < row["tokens_per_s"]["median"] for row in fsdp) and fsdp[0]["scaling_efficiency"] == 1.0


BENCH_SERVE = REPO_ROOT / "benchmarks" / "bench_serve.py"


@pytest.mark.slow  # a server process and three scenarios: 30 s; tests/test_serve.py covers the server in `make test`
def test_serve_benchmark_measures_every_scenario_and_both_targets(tmp_path):
    payload = run_tiny_benchmark(BENCH_SERVE, ["--tiny"], tmp_path / "serve.json")["json"]
    assert set(payload["scenarios"]) == {"one_adapter", "spread", "one_at_a_time"}
    assert all(row["requests_per_s"] > 0 and row["tokens_per_s"] > 0 for row in payload["scenarios"].values())
    assert {name: ratio["target"] for name, ratio in payload["ratios"].items()} == \
        {"spread_vs_one_adapter": 0.8, "batched_vs_one_at_a_time": 3.0}  # fmt: skip
    assert payload["command"] == "python benchmarks/bench_serve.py --tiny" and payload["settings"]["adapters"] == 2


GPU_SUITE = REPO_ROOT / "benchmarks" / "gpu_suite.py"


@pytest.mark.slow  # compiles 4 models and runs the recipe twice: 45 s; nothing in make test runs on a GPU anyway
def test_the_gpu_suite_runs_every_step_in_tiny_mode(shared_data, tmp_path):
    """The suite a lent GPU runs, here on the CPU: bf16 compiled training against native with MFU, static-cache
    decoding, a wall-budget enwiki run whose steps a calibration sized, and report rows for both files."""
    results, runs = tmp_path / "results", tmp_path / "runs"
    command = [sys.executable, str(GPU_SUITE), "--tiny", "--results_dir", str(results), "--runs_dir", str(runs)]
    completed = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert completed.returncode == 0, completed.stdout[-3000:]
    compiled = json.loads((results / "compile_bf16_cpu_tiny.json").read_text())
    assert compiled["settings"]["dtype"] == "bfloat16" and "--output" not in compiled["command"]
    train = next(row for row in compiled["results"] if row["figure"] == "train")
    assert train["hfzoo_compiled"]["mfu"] > 0 and train["ratio_vs_native_compiled"]["median"] > 0
    budget = json.loads((results / "wall_budget_cpu_tiny.json").read_text())
    (row,) = budget["results"]
    calibration = runs / "gpt-speedrun-small-enwiki-clm-calibration"
    assert row["steps"] == row["planned_steps"] == steps_filling(0.05, calibration) >= 10
    assert row["validation_loss"] > 0 and row["tokens_per_s_median"] > 0
    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    import report  # benchmarks/ is not a package

    text = report.render_result_file(results / "wall_budget_cpu_tiny.json")
    assert f"| recipes/configs/gpt-speedrun-small-enwiki-clm.yaml | {row['steps']:,} |" in text
    rows = report.headline({results / "compile_bf16_cpu_tiny.json": compiled})
    assert "bf16 MFU, compiled" in rows and "train, compiled vs native compiled" in rows
