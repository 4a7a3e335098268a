"""Configuration of bottleneck adapters (Houlsby et al., 2019; Pfeiffer et al., 2021) as a PEFT method."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional, Union

from peft.config import PeftConfig
from peft.utils.peft_types import PeftType
from transformers.activations import ACT2FN

VARIANTS = ("houlsby", "pfeiffer")


@dataclass
class BottleneckConfig(PeftConfig):
    """A residual bottleneck MLP on the output of a block's sub-layers: `h + up(act(down(norm(h)))) * scaling`.

    The adapter wraps the output projection of a sub-layer, i.e. it acts on the sub-layer output before the block's
    residual add (and before the norm of a post-norm block), which is where both papers place it; so it works for
    pre- and post-norm models alike.

    Args:
        variant (`str`, defaults to `"pfeiffer"`):
            Which sub-layers get an adapter when `target_modules` is not given. `"houlsby"`: after the attention block
            AND after the feed-forward block (Houlsby et al., 2019, "Parameter-Efficient Transfer Learning for NLP");
            `"pfeiffer"`: after the feed-forward block only (Pfeiffer et al., 2021, "AdapterFusion"), half the
            parameters at about the same quality. Only self-attention counts as "attention": cross-attention of
            encoder-decoder models keeps no adapter, as in both papers.
        reduction_factor (`int`, defaults to 16):
            Bottleneck width = output width // reduction_factor (Pfeiffer et al. use 16).
        activation (`str`, defaults to `"relu"`):
            Non-linearity between the projections; any key of `transformers.activations.ACT2FN` (relu, gelu, silu...).
        layer_norm (`bool`, defaults to `False`):
            Apply a LayerNorm to the adapter input before the down projection.
        dropout (`float`, defaults to 0.0):
            Dropout on the bottleneck activations (training only).
        scaling (`float`, defaults to 1.0):
            Multiplier of the adapter output.
        init_weights (`bool`, defaults to `True`):
            Near-identity initialisation (Houlsby et al.): the down projection is drawn from N(0, 0.01^2), the up
            projection and both biases are zero, so the adapted model equals the base model before training.
            `False` draws the up projection like the down one (useful for tests only).
        target_modules (`list[str] | str`, *optional*):
            Modules to wrap, with PEFT's matching rules (a list: exact names or name suffixes; a string: a regex that
            must match the full module name). When omitted, the sub-layer outputs chosen by `variant` are looked up
            by the model's `model_type`; the resolved regex is what `save_pretrained` writes.
        exclude_modules (`list[str] | str`, *optional*):
            Modules never to wrap, same matching rules.
        modules_to_save (`list[str]`, *optional*):
            Modules besides the adapters to train and save (e.g. a freshly initialised classification head).
    """

    variant: Literal["houlsby", "pfeiffer"] = field(
        default="pfeiffer", metadata={"help": "'houlsby': attention + feed-forward outputs; 'pfeiffer': feed-forward."}
    )
    reduction_factor: int = field(default=16, metadata={"help": "Bottleneck width = output width // reduction_factor."})
    activation: str = field(default="relu", metadata={"help": "Activation between the projections (an ACT2FN key)."})
    layer_norm: bool = field(default=False, metadata={"help": "LayerNorm on the adapter input."})
    dropout: float = field(default=0.0, metadata={"help": "Dropout on the bottleneck activations."})
    scaling: float = field(default=1.0, metadata={"help": "Multiplier of the adapter output."})
    init_weights: bool = field(default=True, metadata={"help": "Near-identity init (zero up projection)."})
    target_modules: Optional[Union[list[str], str]] = field(
        default=None, metadata={"help": "Modules to wrap; default: the sub-layer outputs chosen by `variant`."}
    )
    exclude_modules: Optional[Union[list[str], str]] = field(
        default=None, metadata={"help": "Modules never to wrap (names, suffixes or a regex)."}
    )
    modules_to_save: Optional[list[str]] = field(
        default=None, metadata={"help": "Non-adapter modules to train and save, e.g. a classification head."}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self.peft_type = PeftType.BOTTLENECK
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {self.variant!r}.")
        if not (isinstance(self.reduction_factor, int) and self.reduction_factor >= 1):
            raise ValueError(f"reduction_factor must be a positive integer, got {self.reduction_factor!r}.")
        if self.activation not in ACT2FN:
            raise ValueError(f"Unknown activation {self.activation!r}; choose one of {sorted(ACT2FN)}.")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}.")
        for name in ("target_modules", "exclude_modules"):
            if isinstance(getattr(self, name), list):
                setattr(self, name, set(getattr(self, name)))
