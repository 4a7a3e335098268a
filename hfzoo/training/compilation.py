"""`compile: true`: the recipes' model runs through `torch.compile`, compiled in place.

In place (`nn.Module.compile`) rather than wrapped (`torch.compile(model)`, which accelerate's dynamo plugin does): a
wrapper prefixes every state-dict key with `_orig_mod.`, so checkpoints, resumes, `unwrap_model` and PEFT's adapter
files would all see other names. Compiled in place, the module stays the object the recipe built and only its calls
run the compiled graph, so accelerate's preparation, gradient accumulation, checkpoint files and adapters are as
without compilation.
"""

from accelerate import Accelerator
from torch import nn

from ..integrations.torch import compile_with_dynamo_settings


class CompilingAccelerator(Accelerator):
    """An `Accelerator` whose `prepare` also compiles each model it prepares for training (in place)."""

    def prepare_model(self, model: nn.Module, device_placement: bool | None = None, evaluation_mode: bool = False):
        model = super().prepare_model(model, device_placement=device_placement, evaluation_mode=evaluation_mode)
        compile_in_place(self.unwrap_model(model))
        return model


def compile_in_place(model: nn.Module) -> nn.Module:
    """Compile `model`'s calls with inductor, keeping the module (and its state-dict keys) as it is.

    The masked-LM heads score only the labelled rows, whose count depends on the batch's data: dynamo captures
    such shapes only when told to, else it breaks the graph there. Told so for this model's calls only.
    """
    return compile_with_dynamo_settings(model, capture_dynamic_output_shape_ops=True)
