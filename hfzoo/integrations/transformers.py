"""transformers internals: building a model class from a config, the Auto classes' mappings and the Auto class a
model class registered itself for, the attention backend a config selected, compiling generation on every device,
the blocks a model must not be split inside."""

from transformers import PretrainedConfig, PreTrainedModel
from transformers.generation import CompileConfig

from .versions import written_for


@written_for("transformers")
def model_from_config(model_cls: type[PreTrainedModel], config: PretrainedConfig, **kwargs) -> PreTrainedModel:
    """A freshly initialised `model_cls` for `config`, as the Auto classes' `from_config` builds one (with `dtype`,
    `attn_implementation` and head kwargs), for a class named directly rather than looked up by model type."""
    return model_cls._from_config(config, **kwargs)


@written_for("transformers")
def auto_class_has(auto_class: type, config: PretrainedConfig) -> bool:
    """Whether `auto_class` (`AutoModelForSequenceClassification`, ...) has a model for `config`'s class, without
    building one."""
    return type(config) in auto_class._model_mapping


@written_for("transformers")
def own_auto_class(model_cls: type[PreTrainedModel]) -> str | None:
    """The Auto class name `model_cls` itself registered for with `register_for_auto_class` (None if it did not; a
    parent's registration does not count): transformers keeps it in the class attribute `_auto_class`, which every
    class inherits from `PreTrainedModel`."""
    return vars(model_cls).get("_auto_class")


@written_for("transformers")
def attn_implementation(config: PretrainedConfig) -> str | None:
    """The attention backend (eager, sdpa, ...) a model built from `config` dispatches to."""
    return config._attn_implementation


@written_for("transformers")
def compile_on_every_device(compile_config: CompileConfig) -> CompileConfig:
    """Make `generate` compile its decoding step with `compile_config` on any device (it compiles on CPU only when
    the config says so), and return the config."""
    compile_config._compile_all_devices = True
    return compile_config



@written_for("transformers")
def block_class_names(model) -> set[str]:
    """The class names of the blocks `model` must not be split inside (its transformer layers): the union of the
    `_no_split_modules` of every transformers model in it (a PEFT or composed model holds one), which is also what
    accelerate's FSDP auto-wrap policy reads."""
    return {
        name
        for module in model.modules()
        if isinstance(module, PreTrainedModel)
        for name in (getattr(module, "_no_split_modules", None) or ())
    }
