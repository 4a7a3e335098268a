"""`make quickstart` runs end to end (in a reduced mode) and leaves files that load through the Auto classes."""

import json
import os
import subprocess
import sys
from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = Path(__file__).resolve().parents[1]


def test_make_quickstart_reduced(tmp_path):
    venv = Path(sys.executable).parent.parent
    output_dir = tmp_path / "quickstart"
    result = subprocess.run(
        ["make", "quickstart", f"VENV={venv}", f"QUICKSTART_ARGS=--steps 4 --output_dir {output_dir}"],
        cwd=ROOT,
        env={**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules")},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    summary = json.loads((output_dir / "summary.json").read_text())
    assert summary["remote_code_max_logit_diff"] == 0.0
    assert summary["validation_perplexity"] > 1 and summary["unigram_baseline_perplexity"] > 1
    model_dir = Path(summary["artefact"])
    assert (model_dir / "model.safetensors").is_file()
    assert not list(model_dir.glob("*.bin")) and not list(model_dir.glob("*.pt"))
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    assert model.config.vocab_size == len(tokenizer)
    assert "validation ppl" in result.stdout
