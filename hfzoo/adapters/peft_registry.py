"""The one place where hfzoo extends PEFT beyond its public API: adding a member to the closed `PeftType` enum.

PEFT 0.21 lets third-party methods register through `peft.utils.peft_types.register_peft_method`, but that function
only accepts a name that is already a `PeftType` member ("Unknown PEFT type X, please add an entry to
peft.utils.peft_types.PeftType") and PEFT offers no way to add one. `PeftType` is a plain `(str, Enum)`, so a member
is added exactly the way `enum` itself adds one at class creation (Python 3.11 `_proto_member.__set_name__`):
class attribute, `_member_names_`, `_member_map_`, `_value2member_map_`. Everything else (config class, tuner class,
state-dict prefix) then goes through PEFT's own registry, so `get_peft_model`, `save_pretrained`,
`PeftModel.from_pretrained` and `AutoPeftModelFor*` treat the method like a built-in one.

Both functions are idempotent: importing hfzoo twice (or reloading it) must not fail or register twice.
"""

from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING, PEFT_TYPE_TO_TUNER_MAPPING
from peft.utils.peft_types import PeftType, register_peft_method


def add_peft_type(name: str) -> PeftType:
    """Return `PeftType[name]`, adding the member (value == name, like every PEFT member) when it is missing."""
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


def register_method(*, name: str, config_cls: type, model_cls: type) -> PeftType:
    """Register a PEFT method under `name` (lower case, as PEFT requires); a repeated call is a no-op.

    A different method already registered under the same name is not overwritten: PEFT's `KeyError` surfaces.
    """
    peft_type = add_peft_type(name.upper())
    already = PEFT_TYPE_TO_CONFIG_MAPPING.get(peft_type) is config_cls
    if not (already and PEFT_TYPE_TO_TUNER_MAPPING.get(peft_type) is model_cls):
        register_peft_method(name=name, config_cls=config_cls, model_cls=model_cls)
    return peft_type
