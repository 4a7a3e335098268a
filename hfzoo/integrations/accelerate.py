"""accelerate internals: what an `Accelerator` prepared and what was registered for checkpointing.

hfzoo checkpoints are safetensors and JSON, not accelerate's `save_state` (which pickles), so they save and
restore the very objects `save_state` would; accelerate keeps those lists private."""

from accelerate import Accelerator
from torch import nn
from torch.optim import Optimizer

from .versions import written_for


@written_for("accelerate")
def prepared_models(accelerator: Accelerator) -> list[nn.Module]:
    """The models `accelerator.prepare` returned, in the order they were prepared."""
    return list(accelerator._models)


@written_for("accelerate")
def prepared_optimizers(accelerator: Accelerator) -> list[Optimizer]:
    """The (wrapped) optimizers `accelerator.prepare` returned, in the order they were prepared."""
    return list(accelerator._optimizers)


@written_for("accelerate")
def checkpointed_objects(accelerator: Accelerator) -> list:
    """The objects passed to `accelerator.register_for_checkpointing`, in registration order."""
    return list(accelerator._custom_objects)


@written_for("accelerate")
def forget_checkpointed_objects(accelerator: Accelerator) -> None:
    """Drop every object registered for checkpointing (`free_memory` keeps them), so an Accelerator reused for a
    second run checkpoints only that run's objects."""
    accelerator._custom_objects.clear()


@written_for("accelerate")
def track_prepared_model(accelerator: Accelerator, model: nn.Module) -> None:
    """Count `model` among the prepared models without letting `prepare` wrap it: a model hfzoo sharded itself
    (`fully_shard`) would otherwise be wrapped again in DDP, which DTensor parameters do not support."""
    if model not in accelerator._models:
        accelerator._models.append(model)
