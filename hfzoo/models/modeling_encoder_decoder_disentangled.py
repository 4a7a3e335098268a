"""The encoder-decoder family with DeBERTa's disentangled attention (`position_embedding="disentangled"`).

The module a checkpoint of that position kind names in its `auto_map` (`ZooTransformerPreTrainedModel.code_module`):
it imports `disentangled_attention`, which registers the kind, so only those checkpoints carry that code.
"""

from .disentangled_attention import DisentangledPositionEmbedding  # noqa: F401  (registers the position kind)
from .modeling_encoder_decoder import *  # noqa: F403
from .modeling_encoder_decoder import __all__  # noqa: F401
