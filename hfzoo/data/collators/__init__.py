"""Pretraining objectives as data collators: the model only ever sees ``input_ids``,
``attention_mask`` and ``labels`` (plus ``decoder_input_ids``, ``token_type_ids`` and
``next_sentence_label`` where the objective needs them).

=============================  ==========================================================
objective                      collator
=============================  ==========================================================
causal LM (GPT)                :class:`CausalLMCollator`
bidirectional LM (ELMo)        :class:`BiLMCollator`
masked LM (BERT, whole-word,   :class:`MaskedLMCollator` (``masking=`` ``"token"`` /
SpanBERT) and NSP              ``"whole_word"`` / ``"span"``, ``next_sentence_prediction``)
T5 span corruption             :class:`SpanCorruptionCollator`, :func:`compute_input_and_target_lengths`
BART denoising                 :class:`DenoisingCollator`
ELECTRA                        :func:`electra_collator`, :func:`replaced_token_detection_batch`
=============================  ==========================================================

Each collator is a dataclass called on a list of examples (``{"input_ids": [...]}``, as packing
produces them) and returns torch tensors; rows may differ in length (right padding). Work is
vectorised over the whole batch.

Reproducibility and exact resume: the random collators take ``generator: torch.Generator``
(torch's global RNG when None; under DDP give each process its own seed, e.g. ``seed +
process_index``). A run that must resume exactly saves the generator's position
with the rest of its state; the collators expose it as ``state_dict()``/``load_state_dict()``, so
either::

    accelerator.register_for_checkpointing(collator)   # then save_state/load_state carry it

or, by hand, ``torch.save(collator.state_dict(), path)`` and
``collator.load_state_dict(torch.load(path))``. Two things decide whether the saved state is the
right one:

* Call the collator in the training loop, on the lists of examples the loader yields
  (``collate_fn=list``), rather than as the loader's ``collate_fn``: accelerate's prepared
  loaders fetch one batch ahead, so a collator inside them has already drawn the next batch's
  masks when the checkpoint is written.
* Collate in the main process (cheap: a few ms per 32 x 512 batch). A DataLoader worker gets a
  *copy* of the collator, so all workers would replay the same random stream and the main
  process's generator would never advance. With ``generator=None`` and workers, randomness
  comes from each worker's torch seed: reproducible from the run's seed, not resumable mid-epoch.
"""

from .bilm import BiLMCollator
from .clm import CausalLMCollator
from .denoising import DenoisingCollator
from .electra import electra_collator, replaced_token_detection_batch
from .mlm import MaskedLMCollator
from .span_corruption import SpanCorruptionCollator, compute_input_and_target_lengths

__all__ = [
    "BiLMCollator",
    "CausalLMCollator",
    "DenoisingCollator",
    "MaskedLMCollator",
    "SpanCorruptionCollator",
    "compute_input_and_target_lengths",
    "electra_collator",
    "replaced_token_detection_batch",
]
