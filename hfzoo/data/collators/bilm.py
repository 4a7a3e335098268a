"""Bidirectional language modelling (ELMo, Peters et al. 2018): a forward LM predicts every next token and a
backward LM every previous one."""

from __future__ import annotations

from dataclasses import dataclass

from .clm import CausalLMCollator


@dataclass
class BiLMCollator(CausalLMCollator):
    """``input_ids``, ``attention_mask`` and ``labels`` = ``input_ids`` with padding set to -100.

    The batch of a causal LM: both directions score the same tokens, and the model shifts the labels itself, one
    way for each direction (``ZooBiLMForPreTraining``). Its own class so that the objective names what it trains
    and a change to either objective's batch stays local to it.
    """
