"""The checks every conversion test applies: outputs compared at the real tokens, native -> hfzoo -> native round
trips, and PEFT adapters mapped between an hfzoo model and its native twin."""

import json

import torch
import transformers
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file
from tests.helpers.native_models import deberta_inputs

from hfzoo.convert import adapter_from_native, adapter_to_native, from_native, to_native

TOLERANCE = 1e-4


def outputs(model, inputs: dict) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        result = model(**inputs)
    names = ("logits", "start_logits", "end_logits", "last_hidden_state", "pooler_output", "encoder_last_hidden_state")
    return {name: result[name] for name in names if result.get(name) is not None}


def max_difference(first: dict, second: dict, inputs: dict) -> float:
    """Largest difference over the outputs both give, at real tokens only (RoBERTa positions pads differently)."""
    assert first.keys() == second.keys()
    mask = inputs["attention_mask"].bool()
    worst = 0.0
    for name, value in first.items():
        other = second[name]
        if value.shape[: mask.dim()] == mask.shape:
            value, other = value[mask], other[mask]
        worst = max(worst, (value - other).abs().max().item())
    return worst



def logits(model, inputs: dict) -> torch.Tensor:
    with torch.no_grad():
        output = model(**inputs)
    return output.logits if "logits" in output else output.last_hidden_state


def gap(first, second, inputs: dict) -> float:
    """Largest difference at real tokens (RoBERTa positions pads differently)."""
    return max_difference({"logits": first}, {"logits": second}, inputs)


def lora(targets, task_type, head=None, seed=3, **options) -> LoraConfig:
    """A LoRA whose B is drawn at random (`init_lora_weights=False`): an adapter that changes the outputs, as a
    trained one does, so equal outputs mean the mapping is right."""
    torch.manual_seed(seed)
    return LoraConfig(target_modules=targets, task_type=task_type, init_lora_weights=False, r=4, lora_alpha=8,
                      modules_to_save=[head] if head else None, **options)  # fmt: skip


def saved(model, folder) -> str:
    model.save_pretrained(folder)
    return str(folder)


def check_on_native(adapted_zoo, native, inputs: dict, folder, what: str):
    """Save the hfzoo model's adapter, map it to `native` and load it there with plain PEFT: the outputs must be
    equal. Returns (the mapped folder, the hfzoo outputs, the adapted native model)."""
    mapped = adapter_to_native(saved(adapted_zoo, folder / "zoo"), folder / "native", native)
    expected = logits(adapted_zoo, inputs)
    adapted = PeftModel.from_pretrained(native, mapped).eval()
    difference = gap(logits(adapted, inputs), expected, inputs)
    print(f"{what} hfzoo -> native: max abs diff {difference:.2e}")
    assert difference <= TOLERANCE
    return mapped, expected, adapted



def check_round_trip(native, head: str, folder, inputs: dict | None = None) -> tuple[float, float]:
    """native -> hfzoo (equal outputs) -> native (a plain folder, equal outputs, bit-identical weights); returns the
    largest output difference of the import and of the export. `inputs` default to `deberta_inputs`."""
    inputs = deberta_inputs(head, native.config) if inputs is None else inputs
    zoo = from_native(native)
    difference = max_difference(outputs(native, inputs), outputs(zoo, inputs), inputs)
    assert difference <= TOLERANCE
    to_native(zoo, folder)
    saved_config = json.loads((folder / "config.json").read_text())
    assert saved_config["model_type"] == native.config.model_type and "auto_map" not in saved_config
    reloaded = getattr(transformers, head).from_pretrained(folder).eval()
    exported = max_difference(outputs(zoo, inputs), outputs(reloaded, inputs), inputs)
    assert exported <= TOLERANCE
    original, back = native.state_dict(), reloaded.state_dict()
    assert original.keys() == back.keys()
    changed = [key for key in original if not torch.equal(original[key], back[key])]
    assert not changed, f"the round trip changed {changed}"
    return difference, exported


def check_lora_from_hfzoo(native, inputs: dict, folder, what: str) -> None:
    """A LoRA trained on the imported sequence classifier (its classifier saved beside it) gives the native model's
    outputs once mapped, and maps back to the very same tensors."""
    targets = ["qkv_proj", "o_proj", "up_proj", "down_proj"]
    zoo = get_peft_model(from_native(native), lora(targets, "SEQ_CLS", "classifier")).eval()
    base = logits(native, inputs)  # before PEFT wraps the native modules in place
    mapped, expected, _ = check_on_native(zoo, native, inputs, folder, f"{what} LoRA")
    assert gap(expected, base, inputs) > 10 * TOLERANCE, "the adapter must change the outputs"
    back = adapter_from_native(mapped, folder / "back", native)
    original, returned = (load_file(f"{path}/adapter_model.safetensors") for path in (folder / "zoo", back))
    assert original.keys() == returned.keys()
    assert all(torch.equal(original[key], returned[key]) for key in original)


def check_lora_from_native(native, inputs: dict, folder, targets, what: str) -> None:
    """A LoRA trained on the native sequence classifier gives its outputs on the imported model once mapped."""
    zoo = from_native(native)  # before PEFT wraps the native modules in place
    adapted = get_peft_model(native, lora(targets, "SEQ_CLS")).eval()
    mapped = adapter_from_native(saved(adapted, folder / "native"), folder / "zoo", zoo)
    difference = gap(logits(PeftModel.from_pretrained(zoo, mapped).eval(), inputs), logits(adapted, inputs), inputs)
    print(f"{what} native -> hfzoo LoRA ({targets or 'PEFT default'}): max abs diff {difference:.2e}")
    assert difference <= TOLERANCE

