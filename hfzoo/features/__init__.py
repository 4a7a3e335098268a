"""Features from a frozen pretrained model for downstream tasks: ELMo's learned mix of all layers.

It reaches models only through transformers' interface (`output_hidden_states=True`), like the adapters, so it
works on any hfzoo model and on native transformers models alike.
"""

from .scalar_mix import ScalarMix, ScalarMixClassifier

__all__ = ["ScalarMix", "ScalarMixClassifier"]
