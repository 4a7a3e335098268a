"""Bottleneck adapters as a PEFT method, registered with PEFT under `peft_type="BOTTLENECK"` on import.

`peft.get_peft_model(model, BottleneckConfig(...))`, `save_pretrained`, `PeftModel.from_pretrained` and
`AutoPeftModelFor*` then work as for LoRA. A process that has not imported hfzoo cannot load such an adapter: PEFT
looks the saved `peft_type` up in its registry and fails with `KeyError: 'BOTTLENECK'` before any hfzoo code could
run; `import hfzoo` first.
"""

from .registry import register_method
from .config import BottleneckConfig
from .layer import BottleneckLayer
from .model import SUBLAYER_OUTPUTS, BottleneckModel, default_target_modules

PEFT_TYPE = register_method(name="bottleneck", config_cls=BottleneckConfig, model_cls=BottleneckModel)

__all__ = ["BottleneckConfig", "BottleneckLayer", "BottleneckModel", "SUBLAYER_OUTPUTS", "default_target_modules"]
