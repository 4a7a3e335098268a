"""Registering hfzoo's PEFT methods with PEFT's own registry.

PEFT's `register_peft_method` needs the method's name to be a `PeftType` member already, which PEFT offers no way
to add: `hfzoo.integrations.peft.add_peft_type` adds it. Everything else (config class, tuner class, state-dict
prefix) then goes through PEFT's registry, so `get_peft_model`, `save_pretrained`, `PeftModel.from_pretrained` and
`AutoPeftModelFor*` treat the method like a built-in one.
"""

from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING, PEFT_TYPE_TO_TUNER_MAPPING
from peft.utils.peft_types import PeftType, register_peft_method

from ...integrations.peft import add_peft_type


def register_method(*, name: str, config_cls: type, model_cls: type) -> PeftType:
    """Register a PEFT method under `name` (lower case, as PEFT requires); a repeated call (importing hfzoo twice,
    or reloading it) is a no-op.

    A different method already registered under the same name is not overwritten: PEFT's `KeyError` surfaces.
    """
    peft_type = add_peft_type(name.upper())
    already = PEFT_TYPE_TO_CONFIG_MAPPING.get(peft_type) is config_cls
    if not (already and PEFT_TYPE_TO_TUNER_MAPPING.get(peft_type) is model_cls):
        register_peft_method(name=name, config_cls=config_cls, model_cls=model_cls)
    return peft_type
