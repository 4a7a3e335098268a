"""What the transformer families share: their `PreTrainedModel` base with its capability flags, and the stack.

A stack is the bare model of the decoder and encoder families and each of the encoder-decoder's two halves: token
embedding, positions, blocks and a final norm, run as embed -> mask -> blocks -> final norm. The families differ
only in what surrounds that (caches, token types, the pooler, cross-attention inputs), so the loop lives here once.
"""

import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from transformers import initialization as init
from transformers.cache_utils import Cache, EncoderDecoderCache
from transformers.dynamic_module_utils import get_relative_import_files
from transformers.masking_utils import (
    create_bidirectional_mask,
    create_causal_mask,
    create_sliding_window_causal_mask,
)
from transformers.modeling_flash_attention_utils import FlashAttentionKwargs
from transformers.utils import ModelOutput, TransformersKwargs
from transformers.utils.output_capturing import OutputRecorder

from .compat import cache_argument
from .layers import (
    Attention,
    PositionEncoding,
    PositionSignals,
    RMSNorm,
    RoutedFeedForward,
    TransformerBlock,
    active_dropout,
    build_norm,
    component,
)
from .modeling_common import ZooPreTrainedModel


# What may travel through a forward's `**kwargs` besides the inputs it names: transformers' own keyword arguments
# (output flags, `num_items_in_batch` from Trainer, the attention functions' packed-sequence arguments), the fused
# causal loss's `shift_labels`, and a tokenizer's `token_type_ids`, which generate and the pipelines pass on to any
# model and which a family without token types ignores (as transformers' Llama and RoBERTa-style encoders do).
# Anything else is a mistake (a misspelt input, a label the head has no loss for) and raises instead of vanishing.
PASSED_THROUGH_KWARGS = (
    TransformersKwargs.__optional_keys__
    | FlashAttentionKwargs.__optional_keys__
    | {"output_attentions", "output_hidden_states", "return_dict", "shift_labels", "token_type_ids"}
)


def check_passed_through(model: nn.Module, kwargs: dict, also_passed_through: frozenset[str] = frozenset()) -> None:
    """Raise a TypeError naming every keyword argument in `kwargs` that no part of `model` takes."""
    unexpected = sorted(set(kwargs) - PASSED_THROUGH_KWARGS - also_passed_through)
    if unexpected:
        raise TypeError(
            f"{type(model).__name__}.forward() got unexpected keyword argument(s) {', '.join(map(repr, unexpected))}: "
            f"neither an input of the model nor one of transformers' keyword arguments "
            f"({', '.join(sorted(PASSED_THROUGH_KWARGS))})."
        )


class ZooTransformerPreTrainedModel(ZooPreTrainedModel):
    """Capability flags shared by the transformer families' `PreTrainedModel` bases.

    Every family stacks `TransformerBlock`s whose attention dispatches through transformers' registry, so the same
    attention backends, checkpointing, device-map splitting and output recording apply to all of them.
    """

    _no_split_modules = ["TransformerBlock"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    _can_record_outputs = {
        "hidden_states": TransformerBlock,
        "attentions": OutputRecorder(Attention, index=1),
        "router_logits": OutputRecorder(RoutedFeedForward, index=1),
    }

    def _init_weights(self, module: nn.Module) -> None:
        """transformers' initialisation, except an RMSNorm stored as an offset from 1 (`norm_unit_offset`) starts
        at 0, the identity, as every other norm starts, and `zero_init_projections` zeroes the branches' outputs."""
        super()._init_weights(module)
        if isinstance(module, RMSNorm) and module.unit_offset:
            init.zeros_(module.weight)
        # Marked by the branch that owns it: a Linear does not know its name here.
        if getattr(module, "starts_at_zero", False):
            init.zeros_(module.weight)

    def code_module(self) -> str:
        """The family's modeling file, or where the config uses component files (`config.component_files()`) the
        module saving writes beside it to import them (`modeling_encoder_components`): transformers copies a
        modeling file's relative imports with it, so only the checkpoints that run a component carry its code."""
        family = super().code_module()
        return f"{family}_components" if self.config.component_files() else family

    def save_pretrained(self, save_directory, *args, **kwargs):
        """`ZooPreTrainedModel.save_pretrained`, with the config's component files and the module importing them
        (`code_module`).

        transformers copies the family's files and names the family's file for the saving class in `auto_map`; the
        components' module is written after that, their files and what they import are copied, `config.json` is
        written again naming that module for every head, and a push to the Hub uploads the finished folder.
        """
        components = self.config.component_files()
        if not self.is_remote_code() or not components:
            return super().save_pretrained(save_directory, *args, **kwargs)
        push_to_hub = kwargs.pop("push_to_hub", False)
        hub_options = {key: kwargs.pop(key) for key in ("repo_id", "commit_message", "create_pr") if key in kwargs}
        result = super().save_pretrained(save_directory, *args, **kwargs)
        if self.should_save_on_this_rank(args[0] if args else kwargs.get("is_main_process", True)):
            family, folder = super().code_module(), Path(save_directory)
            lines = [f"from .{module} import *  # noqa: F403" for module in (*components, family)]
            family_name = family.removeprefix("modeling_")
            docstring = f'"""The {family_name} family with the component files its config runs (written by hfzoo)."""'
            exports = [f"from .{family} import {type(self.config).__name__}, __all__  # noqa: F401"]
            text = "\n".join([docstring, "", *lines, *exports, ""])
            (folder / f"{self.code_module()}.py").write_text(text, encoding="utf-8")
            package = Path(sys.modules[type(self).__module__].__file__).parent
            sources = [package / f"{name}.py" for name in components]
            for source in {*sources, *(Path(f) for source in sources for f in get_relative_import_files(source))}:
                shutil.copyfile(source, folder / source.name)
            self.config.auto_map = self.family_auto_map()
            self.config.save_pretrained(save_directory)
            if push_to_hub:
                repo_id = hub_options.pop("repo_id", Path(save_directory).name)
                self.push_to_hub(repo_id, token=kwargs.get("token"), **hub_options)
        return result

    def answer_span(
        self, hidden_states: torch.Tensor, start_positions: torch.Tensor | None, end_positions: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Extractive QA's start and end logits per token from the head's `qa_outputs` projection and, given both
        targets, transformers' QA loss (the mean of the two cross-entropies; positions outside the sequence ignored)."""
        start_logits, end_logits = (logits.contiguous() for logits in self.qa_outputs(hidden_states).unbind(dim=-1))
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = self.loss_function(start_logits, end_logits, start_positions, end_positions)
        return start_logits, end_logits, loss

    def base_model_outputs(self, *args, **kwargs) -> ModelOutput:
        """What a task head reads: the bare model's outputs. A mixture of experts also records its router logits,
        from which the head adds the load-balancing loss (`add_router_loss`)."""
        if self.config.num_experts:
            kwargs["output_router_logits"] = True
        return self.model(*args, **kwargs)


def add_router_loss(config, loss: torch.Tensor | None, outputs) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Return (loss, aux_loss): the load-balancing loss, weighted, is added to the task loss for MoE models."""
    if not config.num_experts:
        return loss, None
    experts = component("mixture_of_experts")
    aux_loss = experts.load_balancing_loss(outputs.router_logits, config.num_experts, config.num_experts_per_tok)
    if loss is not None:
        loss = loss + config.router_aux_loss_coef * aux_loss
    return loss, aux_loss


class TransformerStack:
    """Mixin for a stack (a bare model, or one half of the encoder-decoder): embeddings, blocks, final norm.

    A mixin rather than a submodule, so the parameters keep the names transformers looks for (`embed_tokens` for
    `get_input_embeddings` and the tied-weight keys) and the stack stays an instance of its family's base.
    """

    # Count positions over real tokens only, so a padded row gets the positions it has alone (as generate gives a
    # left-padded prompt); without this, learned/sinusoidal positions make outputs depend on the padding.
    positions_skip_padding: bool = False
    # Keyword arguments, beyond `PASSED_THROUGH_KWARGS`, that transformers hands this stack and it ignores.
    also_passed_through: frozenset[str] = frozenset()
    # Component files a stack may hold (the encoder's, where its config runs them; None unless set after
    # `build_blocks`): the mask and position signals of its local-attention layers (ModernBERT's `local_attention`),
    # and a branch that rewrites the first block's output from the embeddings it read (`deberta_convolution`).
    # Instance attributes only: a class default would hide a registered submodule from `nn.Module.__getattr__`.
    local_attention: Callable[..., tuple[torch.Tensor | None, PositionSignals]] | None
    convolution: nn.Module | None

    def build_inputs(self, config, is_causal: bool, embedding_size: int | None = None) -> None:
        """Token embedding (optionally scaled), positions, embedding norm and dropout, `embedding_size` wide
        (`hidden_size` unless given); narrower embeddings are projected to `hidden_size` (ELECTRA's
        `embeddings_project`) before the first block."""
        self.is_causal = is_causal
        width = embedding_size or config.hidden_size
        self.embed_tokens = nn.Embedding(config.vocab_size, width)
        self.positions = PositionEncoding(config, bidirectional=not is_causal, width=width)
        self.embedding_norm = build_norm(config, width) if config.embedding_norm else nn.Identity()
        self.dropout = nn.Dropout(config.hidden_dropout)
        self.embedding_scale = config.hidden_size**0.5 if config.scale_embeddings else 1.0
        project = width != config.hidden_size
        self.embeddings_project = nn.Linear(width, config.hidden_size) if project else nn.Identity()

    def build_blocks(self, config, num_layers: int, has_cross_attention: bool = False) -> None:
        """The blocks and, for pre-norm, the final norm (post-norm blocks already end in one)."""
        self.layers = nn.ModuleList(
            TransformerBlock(config, layer_idx, is_causal=self.is_causal, has_cross_attention=has_cross_attention)
            for layer_idx in range(num_layers)
        )
        self.norm = build_norm(config) if config.norm_position == "pre" else nn.Identity()
        self.gradient_checkpointing = False
        self.local_attention, self.convolution = None, None

    def cache_to_fill(self, past_key_values: Cache | None, use_cache: bool | None, kwargs: dict) -> Cache | None:
        """The cache this forward extends: the caller's (`compat.cache_argument`), else a new empty one
        (`new_cache`) when caching is on, else None."""
        past_key_values = cache_argument(past_key_values, kwargs)
        if past_key_values is not None:
            return past_key_values
        if self.gradient_checkpointing and self.training:
            return None  # recomputed blocks would write the cache a second time
        use_cache = self.config.use_cache if use_cache is None else use_cache
        return self.new_cache() if use_cache else None

    def new_cache(self) -> Cache:
        """An empty cache of the kind this stack's blocks fill."""
        raise NotImplementedError

    def embed_inputs(
        self,
        input_ids: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        past_length: int | torch.Tensor = 0,
        extra_embeds: torch.Tensor | None = None,
        key_length: int | None = None,
    ) -> tuple[torch.Tensor, PositionSignals]:
        """Hidden states entering the first block, and the position signals the blocks need.

        `extra_embeds` (BERT's token-type embeddings) is added before the norm, like the position embedding.
        `past_length` (a 0-dim tensor for a static cache) counts the cached tokens; `key_length` is how many keys the
        blocks attend to (past + new, or a static cache's whole length), by default past + new.
        """
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of input_ids or inputs_embeds.")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        if self.embedding_scale != 1.0:
            inputs_embeds = inputs_embeds * self.embedding_scale
        query_length = inputs_embeds.shape[1]
        if position_ids is None:
            position_ids = (torch.arange(query_length, device=inputs_embeds.device) + past_length)[None]
        if key_length is None:
            key_length = past_length + query_length
        signals = self.positions(position_ids, past_length, key_length, inputs_embeds.dtype)
        hidden_states = inputs_embeds
        for added in (signals.added, extra_embeds):
            if added is not None:
                hidden_states = hidden_states + added
        return active_dropout(self.dropout, self.embedding_norm(hidden_states)), signals

    def run_stack(
        self,
        input_ids: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None,
        attention_mask: torch.Tensor | None,
        position_ids: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        extra_embeds: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        **kwargs,
    ) -> torch.Tensor:
        """Embed -> mask -> blocks -> final norm; returns the last hidden state.

        With `encoder_hidden_states` the blocks also cross-attend to them, masked by `encoder_attention_mask`.
        `kwargs` reach the attention functions, so an argument nothing takes is refused here (`check_passed_through`).
        """
        check_passed_through(self, kwargs, self.also_passed_through)
        self_cache = past_key_values
        if isinstance(past_key_values, EncoderDecoderCache):
            self_cache = past_key_values.self_attention_cache
        new_tokens = input_ids if input_ids is not None else inputs_embeds
        query_length = new_tokens.shape[1] if new_tokens is not None else 0
        past_length, key_length = 0, None
        if self_cache is not None:
            # A static cache counts its tokens in a 0-dim tensor (no recompilation per step) and its blocks attend to
            # all of its slots, the unwritten ones masked: position biases must span them too.
            past_length = self_cache.get_seq_length()
            key_length = self_cache.get_mask_sizes(query_length, 0)[0]
        if self.positions_skip_padding and position_ids is None and attention_mask is not None:
            if attention_mask.dim() == 2:
                position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, -query_length:]
        hidden_states, signals = self.embed_inputs(
            input_ids, inputs_embeds, position_ids, past_length, extra_embeds, key_length
        )
        hidden_states = self.embeddings_project(hidden_states)
        if self.is_causal:
            # The cache positionally: its keyword is `past_key_values` up to transformers 5.23, `cache` from 5.24.
            # A sliding window (`config.sliding_window`) is a mask too; transformers' cache keeps only its keys.
            windowed = self.config.sliding_window is not None
            causal_mask = create_sliding_window_causal_mask if windowed else create_causal_mask
            mask = causal_mask(self.config, hidden_states, attention_mask, self_cache, position_ids=position_ids)
        else:
            mask = create_bidirectional_mask(config=self.config, inputs_embeds=hidden_states, attention_mask=attention_mask)
        if encoder_hidden_states is not None:
            kwargs["encoder_hidden_states"] = encoder_hidden_states
            kwargs["encoder_attention_mask"] = create_bidirectional_mask(
                config=self.config,
                inputs_embeds=hidden_states,
                attention_mask=encoder_attention_mask,
                encoder_hidden_states=encoder_hidden_states,
            )
        local = None
        if self.local_attention is not None:
            local = self.local_attention(hidden_states, attention_mask, position_ids, signals)
        embeddings = hidden_states
        for index, layer in enumerate(self.layers):
            is_local = local is not None and self.config.is_local_layer(index)
            layer_mask, layer_signals = local if is_local else (mask, signals)
            hidden_states = layer(hidden_states, layer_mask, layer_signals, past_key_values, **kwargs)
            if index == 0 and self.convolution is not None:
                hidden_states = self.convolution(hidden_states, embeddings, attention_mask)
        return self.norm(hidden_states)
