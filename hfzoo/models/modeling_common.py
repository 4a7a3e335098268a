"""The `PreTrainedModel` base of every hfzoo family (the three transformer topologies and the biLSTM): loading
from safetensors only, refusing a pretrained head that would start from random weights, and saving with every head
of the family named in `auto_map`.

What only the transformer families share (their capability flags and the stack of blocks) is `transformer_stack`,
so a family without transformer blocks (ELMo) ships none of that code with its checkpoints.
"""

import os

import transformers
from transformers.modeling_utils import PreTrainedModel
from transformers.utils import ModelOutput

from .checkpoint_guard import check_local_weights
from .losses import VOCABULARY_LOSSES


class ZooPreTrainedModel(PreTrainedModel):
    """What the families' `PreTrainedModel` bases share (each adds its `config` annotation and its flags)."""

    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _can_compile_fullgraph = True
    # The family's heads by the Auto class that loads them (transformers' names), set at the end of each modeling
    # file: `hfzoo` registers them and every saved checkpoint names them all in its `auto_map`. Where several heads
    # answer one Auto class (the encoder's pretraining heads), the first is the default and transformers picks the
    # one a checkpoint names in its config's `architectures`.
    heads_by_auto_class: dict[str, tuple[type, ...]] = {}
    # A head whose weights come from pretraining (a language-model or replaced-token-detection head), unlike a task
    # head that fine-tuning starts from random values: loading it from a checkpoint that has none of them is an error.
    pretrained_head: bool = False

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """`PreTrainedModel.from_pretrained` from safetensors only: a folder without `model.safetensors` fails instead
        of falling back to unpickling `pytorch_model.bin`, and a local folder's weight files are checked first, so a
        missing, truncated or pickled file is named (`checkpoint_guard`)."""
        if kwargs.get("use_safetensors") is False:
            raise ValueError(
                f"{cls.__name__} loads weights from safetensors only (pickled weights can run code when loaded); "
                "leave use_safetensors unset."
            )
        kwargs["use_safetensors"] = True
        folder = os.path.join(str(pretrained_model_name_or_path), kwargs.get("subfolder") or "")
        if pretrained_model_name_or_path is not None and os.path.isdir(folder) and not kwargs.get("variant"):
            check_local_weights(folder)
        wants_loading_info = kwargs.get("output_loading_info", False)
        kwargs["output_loading_info"] = True
        model, loading_info = super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        for auto_name, heads in cls.heads_by_auto_class.items():  # as remote code, transformers maps the config class
            if len(heads) > 1:  # to the head it loaded first; given them all, it picks by `architectures` as hfzoo's
                getattr(transformers, auto_name).register(type(model.config), heads, exist_ok=True)
        model.refuse_fresh_pretrained_head(pretrained_model_name_or_path, loading_info)
        return (model, loading_info) if wants_loading_info else model

    def refuse_fresh_pretrained_head(self, source, loading_info: dict) -> None:
        """Raise when this is a pretrained head and the checkpoint, saved as another head, has none of its weights
        but weights of its own head, which loading would drop (`loading_info` is `from_pretrained`'s).

        transformers would initialise them at random and only log it: an ELECTRA discriminator loaded as BERT's
        MLM + NSP head would lose its detection head and predict tokens with random weights. The message names the
        class the checkpoint was saved as and the Auto class that picks it. A bare model's checkpoint, which has no
        head to drop, still starts any head.
        """
        saved_as = (getattr(self.config, "architectures", None) or [type(self).__name__])[0]
        if not self.pretrained_head or saved_as == type(self).__name__:
            return
        tied = set(getattr(self, "all_tied_weights_keys", None) or {})
        head_keys = {key for key in self.state_dict() if not key.startswith(f"{self.base_model_prefix}.")} - tied
        if not head_keys or not head_keys <= set(loading_info["missing_keys"]) or not loading_info["unexpected_keys"]:
            return
        routes = [name for name, heads in self.heads_by_auto_class.items() if saved_as in (h.__name__ for h in heads)]
        route = f" (or {routes[-1]}.from_pretrained, which picks it)" if routes else ""
        raise ValueError(
            f"{source} holds a {saved_as} checkpoint (config.json 'architectures'), which has none of the weights of "
            f"{type(self).__name__}'s head ({', '.join(sorted(head_keys))}); they would start from random values. "
            f"Load it with {saved_as}.from_pretrained{route}; to fine-tune it, load a task head such as "
            "AutoModelForSequenceClassification."
        )

    def save_pretrained(self, save_directory, *args, **kwargs):
        """`PreTrainedModel.save_pretrained`, with every head of the family named in `config.json`'s `auto_map`.

        transformers names only the saving class there; naming all of them lets any head load the checkpoint with
        `trust_remote_code=True` where hfzoo is not installed (all heads live in the one modeling file it copies).
        """
        if self._auto_class is not None:
            self.config.auto_map = self.family_auto_map()
            self.config._auto_class = None  # else its own saving names its file in auto_map again
        return super().save_pretrained(save_directory, *args, **kwargs)

    def code_module(self) -> str:
        """The module `auto_map` names for this config: the family's modeling file (here), or one that also imports
        code only some configs need (`ZooTransformerPreTrainedModel.code_module`)."""
        return type(self).__module__.rsplit(".", 1)[-1]

    def family_auto_map(self) -> dict[str, str]:
        """`auto_map` naming, for each Auto class, this model's class if it answers it, else the family's default
        head, and the config class, all through the modeling module (`module.Class`): one config class per code."""
        auto_map = {"AutoConfig": f"{self.code_module()}.{type(self.config).__name__}"}
        for auto_name, heads in self.heads_by_auto_class.items():
            auto_map[auto_name] = f"{self.code_module()}.{(type(self) if type(self) in heads else heads[0]).__name__}"
        return auto_map

    @PreTrainedModel.loss_function.getter
    def loss_function(self):
        # Language-model losses run fused (see `losses`); a loss function the user set still wins.
        if hasattr(self, "_loss_function"):
            return self._loss_function
        return VOCABULARY_LOSSES.get(self.loss_type) or super().loss_function

    def base_model_outputs(self, *args, **kwargs) -> ModelOutput:
        """What a head reads: the bare model's outputs."""
        return self.model(*args, **kwargs)
