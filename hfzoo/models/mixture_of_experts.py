"""A mixture of experts in place of the feed-forward (`num_experts`): top-k routed experts (Switch / GShard) and the
Switch Transformer's load-balancing loss.

A component file (`layers.COMPONENTS`): only checkpoints whose config has experts carry it.
"""

import torch
import torch.nn.functional as F
from torch import nn

from .layers import COMPONENTS, FeedForward, RoutedFeedForward

__all__ = ["MixtureOfExperts"]


class MixtureOfExperts(RoutedFeedForward):
    """Top-k routed experts (Switch / GShard). Tokens are grouped per expert, so each expert only sees its tokens.

    Returns the router logits beside the output so the model can add the load-balancing loss.
    """

    def __init__(self, config):
        super().__init__()
        self.top_k = config.num_experts_per_tok
        self.num_experts = config.num_experts
        self.router = nn.Linear(config.hidden_size, config.num_experts, bias=False)
        self.experts = nn.ModuleList(FeedForward(config) for _ in range(config.num_experts))

    def forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        shape = hidden_states.shape
        tokens = hidden_states.reshape(-1, shape[-1])
        router_logits = self.router(tokens)
        weights, chosen = torch.topk(router_logits.softmax(dim=-1, dtype=torch.float32), self.top_k, dim=-1)
        weights = (weights / weights.sum(dim=-1, keepdim=True)).to(tokens.dtype)
        output = torch.zeros_like(tokens)
        # One sort groups the (token, slot) pairs by expert; only experts that received tokens run.
        flat_expert = chosen.reshape(-1)
        order = torch.argsort(flat_expert, stable=True)
        counts = torch.bincount(flat_expert, minlength=self.num_experts).tolist()
        token_of_slot = order // self.top_k
        start = 0
        for expert, count in zip(self.experts, counts):
            if count:
                slots = order[start : start + count]
                rows = token_of_slot[start : start + count]
                contribution = expert(tokens[rows]) * weights.reshape(-1)[slots, None]
                output.index_add_(0, rows, contribution)
            start += count
        return output.reshape(shape), router_logits

    @staticmethod
    def load_balancing_loss(router_logits: tuple[torch.Tensor, ...], num_experts: int, top_k: int) -> torch.Tensor:
        """Switch Transformer auxiliary loss, averaged over layers: num_experts * sum_i f_i * P_i.

        f_i is the fraction of routing slots sent to expert i, P_i the mean router probability; the loss is 1.0 for
        a perfectly uniform router and grows as routing collapses onto few experts.
        """
        logits = torch.cat([layer_logits.float() for layer_logits in router_logits], dim=0)
        probs = logits.softmax(dim=-1)
        chosen = torch.topk(probs, top_k, dim=-1).indices
        fraction = F.one_hot(chosen, num_experts).float().sum(dim=1).mean(dim=0) / top_k
        return num_experts * (fraction * probs.mean(dim=0)).sum()


COMPONENTS["mixture_of_experts"] = MixtureOfExperts
