"""Pretraining objectives: the one table that ties an objective to its collator, Auto class and family.

The objective is not the model (style guide): masking, span corruption and denoising live in collators
in `hfzoo.data.collators`; the model only takes `labels`. Everything the recipe, the config checks and
the model card need to know about an objective is a row here, so adding one is one edit.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSeq2SeqLM, PreTrainedTokenizerBase

from ..presets import list_presets, preset_family


@dataclass(frozen=True)
class Objective:
    """How one pretraining objective is trained, evaluated and described."""

    name: str
    family: str  # the preset family whose models can be trained with it
    auto_class: type  # the Auto class that builds and reloads the model
    collator: str  # "module:Class" of its collator in hfzoo.data.collators (imported on first use)
    pipeline_tag: str  # for the model card metadata
    task_name: str  # human-readable, for the model card's model-index
    shifts_labels: bool  # causal LMs predict token t+1 from position t, so the first label is never a target

    def make_collator(self, tokenizer: PreTrainedTokenizerBase, options: dict, generator: torch.Generator) -> Callable:
        """The objective's collator, drawing all its randomness from `generator` (so it can be checkpointed).

        `options` are the collator's own arguments (config key `collator`); a wrong one is named in the error.
        """
        module_name, class_name = self.collator.split(":")
        try:
            collator_cls = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):
            raise NotImplementedError(f"objective {self.name!r} needs {self.collator}, which does not exist yet") from None
        parameters = inspect.signature(collator_cls).parameters
        unknown = sorted(set(options) - set(parameters) - {"tokenizer", "generator"})
        if unknown:
            valid = [p for p in parameters if p not in ("tokenizer", "generator")]
            raise ValueError(f"config key 'collator': {class_name} has no option {', '.join(map(repr, unknown))}. "
                             f"Valid options: {', '.join(valid) or 'none'}.")  # fmt: skip
        seeded = {"generator": generator} if "generator" in parameters else {}  # deterministic collators take none
        return collator_cls(tokenizer, **seeded, **options)


_COLLATORS = "hfzoo.data.collators"
OBJECTIVES: dict[str, Objective] = {
    o.name: o
    for o in (
        Objective("clm", "decoder", AutoModelForCausalLM, f"{_COLLATORS}.clm:CausalLMCollator", "text-generation",
                  "Causal language modeling", shifts_labels=True),
        Objective("mlm", "encoder", AutoModelForMaskedLM, f"{_COLLATORS}.mlm:MaskedLMCollator", "fill-mask",
                  "Masked language modeling", shifts_labels=False),
        Objective("span_corruption", "encoder_decoder", AutoModelForSeq2SeqLM,
                  f"{_COLLATORS}.span_corruption:SpanCorruptionCollator", "text2text-generation",
                  "Span corruption (T5)", shifts_labels=False),
        Objective("denoising", "encoder_decoder", AutoModelForSeq2SeqLM, f"{_COLLATORS}.denoising:DenoisingCollator",
                  "text2text-generation", "Denoising autoencoding (BART)", shifts_labels=False),
    )
}  # fmt: skip


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
