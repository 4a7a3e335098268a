"""The families' configurations and models: three transformer topologies and the biLSTM language model (ELMo).

This folder is flat on purpose: `save_pretrained` copies the modeling files and their `from .x import y` siblings
next to the weights, so a checkpoint runs where hfzoo is not installed. The modules import only each other, never
this package file (which is not copied).
"""

from .alibi_positions import AlibiBias  # noqa: F401  (the component files register their code)
from .configuration_bilm import ZooBiLMConfig
from .configuration_decoder import ZooDecoderConfig
from .configuration_encoder import ZooEncoderConfig
from .configuration_encoder_decoder import ZooEncoderDecoderConfig
from .deberta_convolution import ConvolutionBranch  # noqa: F401
from .disentangled_attention import DisentangledPositionEmbedding  # noqa: F401
from .local_attention import LocalAttention  # noqa: F401
from .mixture_of_experts import MixtureOfExperts  # noqa: F401
from .modeling_bilm import *  # noqa: F403
from .modeling_bilm import __all__ as _bilm_models
from .modeling_decoder import *  # noqa: F403
from .modeling_decoder import __all__ as _decoder_models
from .modeling_encoder import *  # noqa: F403
from .modeling_encoder import __all__ as _encoder_models
from .modeling_encoder_decoder import *  # noqa: F403
from .modeling_encoder_decoder import __all__ as _encoder_decoder_models
from .relative_positions import RelativePositionBias  # noqa: F401

__all__ = [
    "ZooDecoderConfig",
    "ZooEncoderConfig",
    "ZooEncoderDecoderConfig",
    "ZooBiLMConfig",
    *_decoder_models,
    *_encoder_models,
    *_encoder_decoder_models,
    *_bilm_models,
]
