"""Saved checkpoints run where hfzoo cannot be imported, through transformers' `trust_remote_code`.

`save_pretrained` copies the modeling files next to the weights; this loads them in a separate Python process in
which `import hfzoo` fails for real (a blocking package comes first on PYTHONPATH), from a directory outside the
repository, offline, with its own module cache, and compares with the logits and tokens of the parent process.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

PRESETS = ("gpt-tiny", "llama-tiny", "llama-moe-tiny")
INPUT_IDS = torch.tensor([[0, 0, 11, 12, 13], [21, 22, 23, 24, 25]])
ATTENTION_MASK = (INPUT_IDS != 0).long()
NEW_TOKENS = 6

CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import torch
    from safetensors.torch import load_file, save_file

    checkpoints, results = Path(sys.argv[1]), Path(sys.argv[2])
    try:
        import hfzoo
    except ImportError as error:
        (results / "import_error.txt").write_text(str(error))
    else:
        raise SystemExit(f"hfzoo should not be importable here, got {hfzoo.__file__}")
    from transformers import AutoModelForCausalLM

    for checkpoint in sorted(checkpoints.iterdir()):
        inputs = load_file(checkpoint.parent.parent / "inputs.safetensors")
        model = AutoModelForCausalLM.from_pretrained(checkpoint, trust_remote_code=True).eval()
        assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
        with torch.no_grad():
            logits = model(**inputs).logits
            generated = model.generate(**inputs, max_new_tokens=%d, min_new_tokens=%d, do_sample=False)
        save_file({"logits": logits, "generated": generated}, results / f"{checkpoint.name}.safetensors")
    """
    % (NEW_TOKENS, NEW_TOKENS)
)


def parent_outputs(model) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        logits = model(input_ids=INPUT_IDS, attention_mask=ATTENTION_MASK).logits
        generated = model.generate(
            input_ids=INPUT_IDS,
            attention_mask=ATTENTION_MASK,
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
            do_sample=False,
        )
    return {"logits": logits, "generated": generated}


@pytest.fixture(scope="module")
def remote_code_run(tmp_path_factory, tiny_model) -> tuple[dict, Path]:
    """Save every preset, load them all in one child process (imports dominate), return parent outputs + results."""
    root = tmp_path_factory.mktemp("remote_code")
    checkpoints, results, blocker = root / "checkpoints", root / "results", root / "blocker" / "hfzoo"
    results.mkdir()
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text('raise ImportError("hfzoo is hidden from this process on purpose")\n')
    save_file({"input_ids": INPUT_IDS, "attention_mask": ATTENTION_MASK}, root / "inputs.safetensors")
    expected = {}
    for preset in PRESETS:
        model = tiny_model(preset, pad_token_id=0)
        model.save_pretrained(checkpoints / preset)
        # The reference runs the same weights file through the installed hfzoo code. (Weights loaded from
        # safetensors sit at other memory alignments than freshly initialised ones, and MKL's GEMM may then round
        # differently in the last bit; comparing loaded with loaded isolates the code, which must match bit for bit.)
        loaded = AutoModelForCausalLM.from_pretrained(checkpoints / preset).eval()
        assert type(loaded) is type(model)
        expected[preset] = parent_outputs(loaded)
        fresh = parent_outputs(model)
        torch.testing.assert_close(expected[preset]["logits"], fresh["logits"], atol=1e-6, rtol=0)
    (root / "child.py").write_text(CHILD)
    env = {
        **os.environ,
        "PYTHONPATH": str(blocker.parent),
        "HF_MODULES_CACHE": str(root / "modules"),
        "HF_HOME": str(root / "hf_home"),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }
    child = subprocess.run(
        [sys.executable, str(root / "child.py"), str(checkpoints), str(results)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0, child.stderr[-4000:]
    return expected, results


def test_the_child_process_cannot_import_hfzoo(remote_code_run):
    _, results = remote_code_run
    assert (results / "import_error.txt").read_text() == "hfzoo is hidden from this process on purpose"
    # The saved code was imported from the module cache the child was given, one folder per checkpoint.
    cached = [path for path in (results.parent / "modules" / "transformers_modules").glob("*/*/modeling_decoder.py")]
    assert len({path.parts[-3] for path in cached}) == len(PRESETS)


@pytest.mark.parametrize("preset", PRESETS)
def test_remote_code_gives_identical_logits_and_generations(preset, remote_code_run):
    expected, results = remote_code_run
    remote = load_file(results / f"{preset}.safetensors")
    assert torch.equal(remote["logits"], expected[preset]["logits"])
    assert torch.equal(remote["generated"], expected[preset]["generated"])
