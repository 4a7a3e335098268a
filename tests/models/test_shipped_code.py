"""A checkpoint ships only its model's code: the files `save_pretrained` copies next to the weights, per family, their
line counts, and the component files (code only some configs run) shipped only with those configs, loading where hfzoo
cannot be imported.

The file lists are pinned exactly: a file joining a checkpoint is a decision to see in review. Line counts are pinned
as ceilings a little above today's (`HEADROOM`), so edits that shrink the code pass untouched and a growth of more
than a few lines asks whoever adds it to raise the number here, in the same commit.
"""

import json
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForPreTraining, AutoModelForSeq2SeqLM

import hfzoo

HEADROOM = 25  # lines a checkpoint's code may grow by before its ceiling here must be raised
BASE = {"checkpoint_guard.py", "component_options.py", "losses.py", "modeling_common.py"}
TRANSFORMER = BASE | {"compat.py", "configuration_common.py", "layers.py", "transformer_stack.py"}
ENCODER = TRANSFORMER | {"configuration_encoder.py", "modeling_encoder.py"}
DECODER = TRANSFORMER | {"configuration_decoder.py", "modeling_decoder.py"}
ENCODER_DECODER = TRANSFORMER | {"configuration_encoder_decoder.py", "modeling_encoder_decoder.py"}

# preset -> (its LM head's Auto class, the files its checkpoint ships, their lines today)
SHIPPED = {
    "gpt-tiny": (AutoModelForCausalLM, DECODER, 1735),
    "llama-tiny": (AutoModelForCausalLM, DECODER, 1735),
    "bert-tiny": (AutoModelForMaskedLM, ENCODER, 2050),
    "modernbert-tiny": (AutoModelForMaskedLM, ENCODER, 2050),
    "deberta-tiny": (AutoModelForMaskedLM, ENCODER | {"disentangled_attention.py", "modeling_encoder_components.py"},
                     2170),
    "t5-tiny": (
        AutoModelForSeq2SeqLM, ENCODER_DECODER | {"relative_positions.py", "modeling_encoder_decoder_components.py"}, 2057
    ),
    "bart-tiny": (AutoModelForSeq2SeqLM, ENCODER_DECODER, 1995),
    "elmo-tiny": (AutoModelForPreTraining, BASE | {"configuration_bilm.py", "modeling_bilm.py"}, 773),
}


def shipped_code(preset: str, folder: Path, **overrides) -> dict[str, int]:
    """Save a tiny model of `preset` into `folder`; the Python files saved with it and their line counts."""
    auto_class = SHIPPED[preset][0]
    auto_class.from_config(hfzoo.preset_config(preset, vocab_size=64, **overrides)).save_pretrained(folder)
    return {path.name: len(path.read_text().splitlines()) for path in sorted(folder.glob("*.py"))}


@pytest.mark.parametrize("preset", SHIPPED)
def test_each_checkpoint_ships_only_its_model_code(preset, tmp_path):
    _, files, lines = SHIPPED[preset]
    shipped = shipped_code(preset, tmp_path)
    assert set(shipped) == files
    assert lines - HEADROOM <= sum(shipped.values()) <= lines + HEADROOM, shipped


# A component file -> a preset, its family's modeling file and the config values that use the component.
COMPONENT_USERS = {
    "alibi_positions.py": ("gpt-tiny", "modeling_decoder", {"position_embedding": "alibi"}),
    "relative_positions.py": ("bert-tiny", "modeling_encoder", {"position_embedding": "relative"}),
    "disentangled_attention.py": ("bart-tiny", "modeling_encoder_decoder", {"position_embedding": "disentangled"}),
    "mixture_of_experts.py": ("gpt-tiny", "modeling_decoder", {"num_experts": 4}),
    "deberta_convolution.py": ("bert-tiny", "modeling_encoder", {"conv_kernel_size": 3}),
    "local_attention.py": (
        "bert-tiny", "modeling_encoder", {"local_attention_window": 8, "global_attention_every_n_layers": 2}
    ),
}


@pytest.mark.parametrize("component", COMPONENT_USERS)
def test_a_component_file_ships_only_with_the_configs_that_run_it(component, tmp_path):
    preset, family_module, overrides = COMPONENT_USERS[component]
    assert component not in shipped_code(preset, tmp_path / "without")
    shipped = shipped_code(preset, tmp_path / "with", **overrides)
    assert {component, f"{family_module}_components.py"} <= set(shipped)
    auto_map = json.loads((tmp_path / "with" / "config.json").read_text())["auto_map"]
    heads = {name: ref for name, ref in auto_map.items() if name != "AutoConfig"}
    assert heads and all(ref.startswith(f"{family_module}_components.") for ref in heads.values()), auto_map


def test_saving_to_the_hub_pushes_the_finished_folder(tmp_path, monkeypatch):
    """transformers uploads what its own save wrote, before the components' module joins the folder: the
    push goes through `push_to_hub`, which saves the finished folder again."""
    model = AutoModelForMaskedLM.from_config(hfzoo.preset_config("deberta-tiny", vocab_size=64))
    pushed = []
    monkeypatch.setattr(type(model), "push_to_hub", lambda self, repo_id, **options: pushed.append(repo_id))
    model.save_pretrained(tmp_path / "mine", push_to_hub=True)
    assert pushed == ["mine"]
    assert (tmp_path / "mine" / "modeling_encoder_components.py").is_file()


CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    root = Path(sys.argv[1])
    inputs = load_file(root / "inputs.safetensors")
    logits = {}
    for name in ("plain/encoder", "encoder", "plain/decoder", "decoder"):
        auto_class = AutoModelForMaskedLM if name.endswith("encoder") else AutoModelForCausalLM
        model = auto_class.from_pretrained(root / name, trust_remote_code=True).eval()
        assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
        with torch.no_grad():
            logits[name] = model(**inputs).logits
    save_file(logits, root / "remote.safetensors")
    """
)


def test_checkpoints_with_component_files_run_without_hfzoo(tmp_path, hfzoo_free_python):
    """The saved code of checkpoints with two component files each (DeBERTa's attention with its convolution, and
    with a mixture of experts), loaded through transformers' `trust_remote_code` in a process that cannot import
    hfzoo, gives the logits hfzoo's own classes give from the same weights. Each loads after a checkpoint of the
    same folder name without components (`plain/encoder`, then `encoder`), as two runs' `model` folders are loaded
    in one process: each runs its own code (transformers maps a remote config class to the model class first loaded
    with it, `ZooPreTrainedModel.family_auto_map`)."""
    input_ids = torch.tensor([[3, 4, 5, 6], [7, 8, 9, 0]])
    inputs = {"input_ids": input_ids, "attention_mask": (input_ids != 0).long()}
    save_file(inputs, tmp_path / "inputs.safetensors")
    expected = {}
    for name, auto_class, plain, (preset, overrides) in (
        ("encoder", AutoModelForMaskedLM, "bert-tiny", ("deberta-tiny", {"conv_kernel_size": 3})),
        ("decoder", AutoModelForCausalLM, "gpt-tiny", ("gpt-tiny", {"position_embedding": "disentangled",
                                                                    "num_experts": 4})),
    ):  # fmt: skip
        for folder, (folder_preset, options) in ((f"plain/{name}", (plain, {})), (name, (preset, overrides))):
            torch.manual_seed(0)
            config = hfzoo.preset_config(folder_preset, vocab_size=64, pad_token_id=0, **options)
            auto_class.from_config(config).save_pretrained(tmp_path / folder)
            with torch.no_grad():
                expected[folder] = auto_class.from_pretrained(tmp_path / folder).eval()(**inputs).logits
    assert not list((tmp_path / "plain").glob("*/*_components.py"))
    assert (tmp_path / "encoder" / "deberta_convolution.py").is_file()
    child = hfzoo_free_python.run(CHILD, tmp_path, str(tmp_path))
    assert child.returncode == 0, child.stderr[-4000:]
    remote = load_file(tmp_path / "remote.safetensors")
    for name, logits in expected.items():
        torch.testing.assert_close(remote[name], logits, atol=1e-6, rtol=0, msg=name)
