"""Pretraining objectives: the one table that ties an objective to its collator, Auto class and family.

The objective is not the model (style guide): masking, span corruption and denoising live in collators
in `hfzoo.data.collators`; the model only takes `labels`. Everything the recipe, the config checks and
the model card need to know about an objective is an entry of `OBJECTIVES`, so a new objective is its collator
plus one entry here: the config's `objective` key, its checks and the cards read this registry.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn
from transformers import (
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForPreTraining,
    AutoModelForSeq2SeqLM,
    PreTrainedTokenizerBase,
)

from ..core.presets import list_presets, preset_family
from ..data.collators import BiLMCollator, CausalLMCollator, DenoisingCollator, MaskedLMCollator, SpanCorruptionCollator
from ..data.collators.electra import ELECTRA_MASKING
from ..data.packing import pack
from ..data.sentence_pairs import sentence_pairs
from .electra import ElectraPreTraining
from .spanbert import SpanBertPreTraining


@dataclass(frozen=True)
class Objective:
    """How one pretraining objective is trained, evaluated and described."""

    name: str
    family: str  # the preset family whose models can be trained with it
    auto_class: type  # the Auto class that builds and reloads the (kept) model
    collator: type  # its collator class, from hfzoo.data.collators
    pipeline_tag: str  # for the model card metadata
    task_name: str  # human-readable, for the model card's model-index
    shifts_labels: bool  # causal LMs predict token t+1 from position t, so the first label is never a target
    scored_targets: str  # what a target token is: validation loss and perplexity are means over these
    # How the corpus becomes training examples: `pack(texts, tokenizer, block_size)` streams it into blocks;
    # next-sentence prediction keeps documents apart (`sentence_pairs`).
    examples: Callable = pack
    # Collator options the objective decides (the model head depends on them): a config may not set them otherwise.
    fixed_collator_options: dict = field(default_factory=dict, hash=False)
    # The module the loop trains when it is not the Auto class's model: built as `training_model(model_config,
    # **objective_options)`, checked by its `check_options(model_config, **objective_options)`, and saved as its
    # `kept_model(state_dict)` (ELECTRA trains a generator beside the discriminator it keeps).
    training_model: type | None = None
    # The output loss whose exponential is the validation perplexity (`loss`, or the language-model part of it).
    perplexity_of: str = "loss"
    # A sequence-level prediction whose validation accuracy is reported: (metric name, logits field, label key).
    accuracy_of: tuple[str, str, str] | None = None
    # The logits field whose most likely token at each target is scored right or wrong (a masked LM's accuracy).
    token_accuracy_of: str | None = None

    def check_collator_options(self, options: dict) -> None:
        """Raise if `options` (config key `collator`) holds an argument the collator does not take, or changes one
        the objective fixes (naming the objective that has it)."""
        parameters = [p for p in inspect.signature(self.collator).parameters if p not in ("tokenizer", "generator")]
        unknown = sorted(set(options) - set(parameters))
        if unknown:
            raise ValueError(
                f"config key 'collator': {self.collator.__name__} has no option {', '.join(map(repr, unknown))}. "
                f"Valid options: {', '.join(parameters) or 'none'}."
            )
        for name, fixed in self.fixed_collator_options.items():
            if name in options and options[name] != fixed:
                fitting = [o.name for o in OBJECTIVES.values() if o.fixed_collator_options.get(name) == options[name]]
                raise ValueError(
                    f"config key 'collator': objective {self.name!r} trains with {name}={fixed!r}; "
                    f"for {name}={options[name]!r} use objective {' or '.join(map(repr, fitting)) or 'none'}."
                )

    def check_options(self, options: dict, model_config) -> None:
        """Raise if `options` (config key `objective_options`) are not the training model's, naming the key."""
        parameters = []
        if self.training_model is not None:
            parameters = list(inspect.signature(self.training_model).parameters)[1:]  # after the model config
        unknown = sorted(set(options) - set(parameters))
        if unknown:
            raise ValueError(
                f"config key 'objective_options': objective {self.name!r} has no option "
                f"{', '.join(map(repr, unknown))}. Valid options: {', '.join(parameters) or 'none'}."
            )
        if self.training_model is not None:
            self.training_model.check_options(model_config, **options)

    def build_model(self, model_config, options: dict) -> nn.Module:
        """The module the loop trains, randomly initialised: the Auto class's model, or the training model."""
        self.check_options(options, model_config)
        if self.training_model is None:
            return self.auto_class.from_config(model_config)
        return self.training_model(model_config, **options)

    def make_collator(self, tokenizer: PreTrainedTokenizerBase, options: dict, generator: torch.Generator) -> Callable:
        """The objective's collator, drawing all its randomness from `generator` (so it can be checkpointed)."""
        self.check_collator_options(options)
        seeded = "generator" in inspect.signature(self.collator).parameters  # deterministic collators take none
        options = {**options, **self.fixed_collator_options}
        return self.collator(tokenizer, **options, **({"generator": generator} if seeded else {}))


OBJECTIVES: dict[str, Objective] = {o.name: o for o in (
    Objective(
        "clm", "decoder", AutoModelForCausalLM, CausalLMCollator, "text-generation", "Causal language modeling",
        shifts_labels=True, scored_targets="every next token of each block",
    ),
    Objective(
        "mlm", "encoder", AutoModelForMaskedLM, MaskedLMCollator, "fill-mask", "Masked language modeling",
        shifts_labels=False, scored_targets="the masked positions only",
        fixed_collator_options={"next_sentence_prediction": False}, token_accuracy_of="logits",
    ),
    Objective(
        "mlm_nsp", "encoder", AutoModelForPreTraining, MaskedLMCollator, "fill-mask",
        "Masked language modeling and next-sentence prediction (BERT)", shifts_labels=False,
        scored_targets="the masked positions (the loss adds next-sentence prediction's cross-entropy per pair)",
        examples=sentence_pairs, fixed_collator_options={"next_sentence_prediction": True},
        perplexity_of="masked_lm_loss",
        accuracy_of=("next_sentence_accuracy", "seq_relationship_logits", "next_sentence_label"),
        token_accuracy_of="prediction_logits",
    ),
    Objective(
        "electra", "encoder", AutoModelForPreTraining, MaskedLMCollator, "feature-extraction",
        "Replaced token detection (ELECTRA)", shifts_labels=False,
        scored_targets="the generator's masked positions: its masked-LM loss (the perplexity's) plus "
        "discriminator_weight x the discriminator's binary cross-entropy over every token",
        fixed_collator_options={"next_sentence_prediction": False, **ELECTRA_MASKING},
        training_model=ElectraPreTraining, perplexity_of="generator_loss", token_accuracy_of="generator_logits",
    ),
    Objective(
        "spanbert", "encoder", AutoModelForMaskedLM, MaskedLMCollator, "fill-mask",
        "Span masking and the span-boundary objective (SpanBERT)", shifts_labels=False,
        scored_targets="the masked spans' tokens: the masked-LM loss (the perplexity's) plus the span-boundary "
        "head's cross-entropy of the same tokens",
        fixed_collator_options={"next_sentence_prediction": False, "masking": "span"},
        training_model=SpanBertPreTraining, perplexity_of="masked_lm_loss", token_accuracy_of="logits",
    ),
    Objective(
        "span_corruption", "encoder_decoder", AutoModelForSeq2SeqLM, SpanCorruptionCollator, "text2text-generation",
        "Span corruption (T5)", shifts_labels=False,
        scored_targets="the decoder's target sequence: a sentinel before each dropped span, its tokens, then EOS",
    ),
    Objective(
        "denoising", "encoder_decoder", AutoModelForSeq2SeqLM, DenoisingCollator, "text2text-generation",
        "Denoising autoencoding (BART)", shifts_labels=False,
        scored_targets="the whole original block, reconstructed by the decoder",
    ),
    Objective(
        "bilm", "bilm", AutoModelForPreTraining, BiLMCollator, "feature-extraction",
        "Bidirectional language modeling (ELMo)", shifts_labels=True,
        scored_targets="every next token (forward LM) and every previous token (backward LM); the mean of both",
    ),
)}  # fmt: skip


def get_objective(name: str, preset: str) -> Objective:
    """The objective `name`, checked to fit `preset`'s family; errors say which objectives/presets do fit."""
    if name not in OBJECTIVES:
        raise ValueError(f"objective: unknown value {name!r}. Valid objectives: {', '.join(OBJECTIVES)}.")
    objective = OBJECTIVES[name]
    family = preset_family(preset)
    if objective.family != family:
        fitting_objectives = [o.name for o in OBJECTIVES.values() if o.family == family]
        fitting_presets = [p for p in list_presets() if preset_family(p) == objective.family]
        raise ValueError(
            f"objective: {name!r} trains {objective.family} models, but preset {preset!r} is a {family}. "
            f"Objectives for {preset!r}: {', '.join(fitting_objectives) or 'none'}; "
            f"presets for {name!r}: {', '.join(fitting_presets) or f'none yet (no {objective.family} presets)'}."
        )
    return objective
