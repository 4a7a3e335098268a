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
                assert 0 < peak["min"] <= peak["peak_rss_delta_mib"] <= peak["max"], row


def test_decoder_benchmark_models_have_identical_size(decoder_results):
    parameters = decoder_results["json"]["parameters"]
    assert parameters["gpt-tiny"]["native_class"] == "GPT2LMHeadModel"
    assert parameters["llama-tiny"]["native_class"] == "LlamaForCausalLM"
    for counts in parameters.values():
        assert counts["hfzoo"] == counts["native"] > 0
        assert f"{counts['hfzoo']:,}" in decoder_results["stdout"]


def test_decoder_benchmark_records_how_it_was_measured(decoder_results):
    payload = decoder_results["json"]
    environment = payload["environment"]
    assert environment["malloc"]["name"] == "tuned"
    assert environment["torch_threads"] == 2
    assert {"date", "cpu", "torch", "transformers", "git", "load_average", "load_average_end"} <= set(environment)
    assert payload["settings"]["rounds"] == 1 and payload["settings"]["preset_size"] == "tiny"
    assert "ratio" in decoder_results["stdout"]


def test_a_preset_the_native_class_cannot_express_is_refused():
    sys.path.insert(0, str(BENCH_DECODER.parent))
    import bench_decoder

    import hfzoo

    config = hfzoo.preset_config("gpt-tiny", position_embedding="rotary")
    with pytest.raises(ValueError, match="position_embedding"):
        bench_decoder.gpt2_config(config, "gpt-tiny")
