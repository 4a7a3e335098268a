"""hfzoo: transformer architectures, pretraining recipes and composable adapters, native to Hugging Face.

Importing hfzoo registers every family with transformers' Auto classes and PEFT's default targets.
"""

from . import adapters  # registers the bottleneck adapters as PEFT method "BOTTLENECK"
from .models.configuration_decoder import ZooDecoderConfig
from .models.modeling_decoder import (
    ZooDecoderForCausalLM,
    ZooDecoderForSequenceClassification,
    ZooDecoderForTokenClassification,
    ZooDecoderModel,
)
from .models.configuration_encoder import ZooEncoderConfig
from .models.modeling_encoder import (
    ZooEncoderForMaskedLM,
    ZooEncoderForMultipleChoice,
    ZooEncoderForQuestionAnswering,
    ZooEncoderForSequenceClassification,
    ZooEncoderForTokenClassification,
    ZooEncoderModel,
)
from .models.configuration_encoder_decoder import ZooEncoderDecoderConfig
from .models.modeling_encoder_decoder import (
    ZooEncoderDecoderForConditionalGeneration,
    ZooEncoderDecoderForSequenceClassification,
    ZooEncoderDecoderModel,
)
from .presets import list_presets, preset_config
from .registration import register as _register

_register()

__version__ = "0.1.0"

__all__ = [
    "ZooDecoderConfig",
    "ZooDecoderModel",
    "ZooDecoderForCausalLM",
    "ZooDecoderForSequenceClassification",
    "ZooDecoderForTokenClassification",
    "ZooEncoderConfig",
    "ZooEncoderModel",
    "ZooEncoderForMaskedLM",
    "ZooEncoderForSequenceClassification",
    "ZooEncoderForTokenClassification",
    "ZooEncoderForQuestionAnswering",
    "ZooEncoderForMultipleChoice",
    "ZooEncoderDecoderConfig",
    "ZooEncoderDecoderModel",
    "ZooEncoderDecoderForConditionalGeneration",
    "ZooEncoderDecoderForSequenceClassification",
    "list_presets",
    "preset_config",
]
