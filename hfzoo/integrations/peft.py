"""PEFT internals: a new member of the closed `PeftType` enum, per-architecture default targets, the input cast of
a tuner layer."""

import torch
from peft.tuners.tuners_utils import BaseTunerLayer
from peft.utils import constants
from peft.utils.peft_types import PeftType

from .versions import written_for


@written_for("peft")
def add_peft_type(name: str) -> PeftType:
    """Return `PeftType[name]`, adding the member (value == name, like every PEFT member) when it is missing.

    PEFT 0.21's `register_peft_method` only accepts a name that is already a `PeftType` member ("Unknown PEFT type
    X, please add an entry to peft.utils.peft_types.PeftType") and PEFT offers no way to add one. `PeftType` is a
    plain `(str, Enum)`, so the member is added exactly the way `enum` itself adds one at class creation (Python
    3.11 `_proto_member.__set_name__`): class attribute, `_member_names_`, `_member_map_`, `_value2member_map_`.
    Idempotent: importing hfzoo twice (or reloading it) must not add a second member.
    """
    if not (name.isupper() and name.isidentifier()):
        raise ValueError(f"PEFT type names are upper-case identifiers like 'LORA', got {name!r}.")
    if name in PeftType.__members__:
        return PeftType[name]
    member = str.__new__(PeftType, name)
    member._name_ = name
    member._value_ = name
    member.__objclass__ = PeftType
    member._sort_order_ = len(PeftType._member_names_)
    setattr(PeftType, name, member)
    PeftType._member_names_.append(name)
    PeftType._member_map_[name] = member
    PeftType._value2member_map_[name] = member
    return member


@written_for("peft")
def add_default_targets(model_type: str, targets: dict[str, list[str]]) -> None:
    """Give `model_type` default target modules for PEFT methods, keyed by the name of PEFT's mapping
    (`TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING`, ...); defaults already there are kept.

    PEFT has no public API for these: its mapping dicts in `peft.utils.constants` are extended in place (they are
    the dicts `get_peft_model` and each tuner read)."""
    for mapping_name, modules in targets.items():
        mapping = getattr(constants, mapping_name, None)
        if not isinstance(mapping, dict):
            raise ValueError(f"peft.utils.constants has no target-module mapping {mapping_name!r}")
        mapping.setdefault(model_type, list(modules))


@written_for("peft")
def cast_input_dtype(layer: BaseTunerLayer, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`x` in the adapter weights' `dtype` unless the user turned input casting off (PEFT's `cast_input_dtype`
    switch), as PEFT's own tuner layers cast their inputs."""
    return layer._cast_input_dtype(x, dtype)
