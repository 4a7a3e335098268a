"""`make quickstart` runs end to end (smoke scale) and leaves files that load through the Auto classes."""

import json
import os
import subprocess
import sys
from pathlib import Path

from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSeq2SeqLM, AutoTokenizer

ROOT = Path(__file__).resolve().parents[1]


def test_make_quickstart_smoke(tmp_path):
    venv = Path(sys.executable).parent.parent
    output_dir = tmp_path / "quickstart"
    result = subprocess.run(
        ["make", "quickstart", f"VENV={venv}", f"QUICKSTART_ARGS=--scale smoke --output_dir {output_dir}"],
        cwd=ROOT,
        env={**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules")},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    summary = json.loads((output_dir / "summary.json").read_text())
    assert summary["remote_code_max_logit_diff"] == 0.0
    rows = {row["artefact"]: row for row in summary["rows"]}
    for artefact, auto_class in [("gpt-tiny-clm", AutoModelForCausalLM), ("modernbert-tiny-mlm", AutoModelForMaskedLM),
                                 ("t5-tiny-span", AutoModelForSeq2SeqLM)]:  # fmt: skip
        model_dir = output_dir / artefact
        assert (model_dir / "model.safetensors").is_file() and (model_dir / "README.md").is_file()
        assert not list(model_dir.glob("*.bin")) and not list(model_dir.glob("*.pt"))
        assert auto_class.from_pretrained(model_dir).config.vocab_size == len(AutoTokenizer.from_pretrained(model_dir))
        assert rows[artefact]["value"] > 1 and rows[artefact]["baseline"] > 1
    for artefact in ("adapter-module-lora", "adapter-area-bottleneck"):
        adapter_dir = output_dir / artefact
        assert (adapter_dir / "adapter_model.safetensors").is_file() and (adapter_dir / "metrics.json").is_file()
        assert 0 < rows[artefact]["trainable"] < 0.2 and 0 < rows[artefact]["baseline"] < 1
    baseline_metrics = json.loads((output_dir / "compose-fusion" / "average-baseline" / "metrics.json").read_text())

    def frozen(metrics: dict) -> int:
        return metrics["total_parameters"] - metrics["trainable_parameters"]

    for composition in ("compose-fusion", "compose-soft"):
        composition_dir = output_dir / composition
        metrics = json.loads((composition_dir / "metrics.json").read_text())
        assert metrics["reload_check"] == {"parameters_equal": True, "predictions_equal": True}
        assert (composition_dir / "composition" / "composition.safetensors").is_file()
        assert (composition_dir / "README.md").is_file()
        assert rows[composition]["baseline_name"] == "average" and rows[composition]["trainable"] > 0
        # Only the composition's own layers and the head train: it freezes exactly what the average baseline
        # freezes (the base model and both adapters). Fusion sits at every adapted module, so it may outweigh a
        # tiny base; a trainable fraction says nothing here.
        assert frozen(metrics) == frozen(baseline_metrics)
    assert (output_dir / "compose-fusion" / "average-baseline" / "metrics.json").is_file()
    assert not (output_dir / "compose-soft" / "average-baseline").exists()  # trained once, shared by both
    assert "remote code: reloaded without hfzoo" in result.stdout
