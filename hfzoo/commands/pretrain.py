"""Pretrain a preset from scratch: config -> corpus -> tokenizer -> collator -> model -> AdamW -> loop -> save.

Read `pretrain` top to bottom; it is the recipe. It runs unchanged as one process, under
`accelerate launch` (DDP, FSDP: see recipes/configs/accelerate/) and under `torchrun`:

    python recipes/pretrain.py --config recipes/configs/gpt-small-clm.yaml
    accelerate launch recipes/pretrain.py --config recipes/configs/gpt-small-clm.yaml --max_steps 200
    accelerate launch --config_file recipes/configs/accelerate/cpu_ddp.yaml recipes/pretrain.py --config ...
    torchrun --nproc_per_node 2 recipes/pretrain.py --config ...   # 2 CPU processes (gloo) or GPUs
    torchrun --nproc_per_node 2 recipes/pretrain.py --config ... --sharding fsdp   # sharded: hfzoo.training.sharding
    hfzoo pretrain --preset gpt-tiny --objective clm --max_steps 50

A run killed at any point continues with `--resume` and ends with the weights an uninterrupted run
would have had, bit for bit, given the same config, number of processes and threads per process (float
sums are split across threads): see `checkpointing` and `loop` for what that takes.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
import yaml
from accelerate import Accelerator
from accelerate.utils import DistributedType, gather_object, set_seed
from datasets import IterableDataset
from torch.utils.data import DataLoader
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from ..card_writing import PRETRAINING_SECTIONS, RunRecord, describe_objective, pretraining_metadata, write_card
from ..core.files import check_output_folder, check_output_outside_inputs, write_atomic
from ..core.presets import FAMILY_CONFIGS, list_presets, preset_config, preset_family
from ..core.recorded_paths import recorded_path
from ..core.recipe_config import CONFIG_FILE, config_dict, key, parse_config, section
from ..data.corpus import load_corpus
from ..data.packing import pack
from ..data.streaming import HELD_OUT_TEXTS, held_out, training_stream
from ..data.tokenizer_training import KINDS, train_tokenizer_on_corpus
from ..objectives.objective import OBJECTIVES, Objective, get_objective
from ..training.best_model import save_published
from ..training.checkpointing import (
    Progress,
    check_checkpointable,
    check_resumed_config,
    checkpoint_to_resume,
    exit_on_checkpoint_error,
    inexact_resume,
    load_checkpoint,
    save_checkpoint,
    stopped_before_training,
)
from ..training.evaluation import EvalShard, evaluate, parameter_checksum
from ..training.logging import RunLogger, read_log, start_recipe
from ..training.loop import TrainingSteps, build_optimizer, build_scheduler
from ..training.options import OPTIMIZERS, RunOptions
from ..training.run_folder import check_something_to_resume
from ..training.run_inputs import check_resumed_inputs, run_inputs, tokenizer_file_names
from ..training.run_lock import holding_run_folder
from ..training.sharding import is_sharded, prepare, ready_for_training, whole_for_saving

logger = logging.getLogger(__name__)
# The model config fields the run sets from its tokenizer (its length, its special ids): `model` cannot override them.
TOKENIZER_FIELDS = ("vocab_size", "pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")


@dataclass
class PretrainDataOptions:
    """What a pretraining run reads and how it becomes examples: the corpus, the tokenizer, the block length."""

    dataset: str | None = key(None, "corpus: none = embedded default corpus; a local file/folder; or a Hub name")
    data_files: str | list | dict | None = key(None, "local files (path, glob, list, or split -> paths)")
    text_column: str = key("text", "column holding the text")
    exclude_titles: list | None = key(None, "WikiExtractor corpus: leave out these articles, by title (a list, e.g. an "
                                      "evaluation set's articles); each must be in the corpus")  # fmt: skip
    keep_titles: bool = key(False, "WikiExtractor corpus: keep each article's title line at the start of its text")
    max_train_samples: int | None = key(None, "keep only the first N training texts (before packing)", minimum=1)
    max_eval_samples: int | None = key(None, "keep only the first N validation texts (before packing); none = all "
                                       f"(streaming: the first {HELD_OUT_TEXTS})", minimum=1)  # fmt: skip
    streaming: bool = key(False, "read the corpus lazily (local files or a Hub dataset), tokenise and pack it on the "
                          "fly, each process its share; memory stays flat as the corpus grows")  # fmt: skip
    block_size: int = key(128, "tokens per training example; the corpus is packed into blocks of this length",
                          minimum=1)  # fmt: skip
    tokenizer: str | None = key(None, "tokenizer path; none = train one on the training corpus")
    tokenizer_kind: str = key("bpe", "kind of tokenizer to train (char: one token per character)", choices=KINDS)
    vocab_size: int | None = key(None, "vocabulary of the trained tokenizer; none = the preset's", minimum=1)


@dataclass
class PretrainTrainingOptions:
    """How a pretraining run trains and evaluates: batches, AdamW with linear warmup and cosine decay, its length."""

    per_device_batch_size: int = key(8, "blocks per micro-batch on each process", minimum=1)
    learning_rate: float = key(3e-4, "peak learning rate of AdamW")
    weight_decay: float = key(0.1, "AdamW weight decay (not applied to biases and norms)")
    adam_beta1: float = key(0.9, "AdamW beta1")
    adam_beta2: float = key(0.95, "AdamW beta2")
    adam_epsilon: float = key(1e-8, "AdamW epsilon")
    optimizer: str = key("adamw", "adamw; or muon: Muon on the hidden matrices, AdamW on embeddings, head, norms and "
                         "biases (the modded-nanoGPT speedrun; hfzoo.training.muon)", choices=OPTIMIZERS)  # fmt: skip
    muon_learning_rate: float = key(0.02, "peak learning rate of Muon (optimizer muon)")
    embedding_learning_rate: float | None = key(None, "peak learning rate of the token embedding table (AdamW; with "
                                                "the output head where tied to it), as the speedrun trains it "
                                                "faster than the rest; none = learning_rate")  # fmt: skip
    warmup_steps: int = key(100, "linear warmup steps", minimum=0)
    min_lr_ratio: float = key(0.1, "final learning rate of the decay, as a fraction of the peak")
    lr_schedule: str = key("cosine", "after the warmup, cosine: decay to min_lr_ratio; wsd: hold the peak, then decay "
                           "linearly over the last decay_fraction of the steps", choices=("cosine", "wsd"))  # fmt: skip
    decay_fraction: float = key(0.2, "wsd: the fraction of max_steps spent decaying")
    max_steps: int = key(1000, "optimizer steps to train for", minimum=1)
    eval_every: int = key(200, "optimizer steps between evaluations (and one at the end)", minimum=1)
    eval_batches: int | None = key(None, "evaluate on at most this many batches per process; none = all", minimum=1)
    tensorboard: bool = key(True, "also log to TensorBoard (skipped if tensorboard is not installed)")

    def check(self) -> None:
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError(f"config key 'min_lr_ratio' must be in [0, 1], got {self.min_lr_ratio}.")
        for name in ("learning_rate", "embedding_learning_rate"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise ValueError(f"config key '{name}' must be > 0, got {getattr(self, name)}.")
        if not 0.0 < self.decay_fraction <= 1.0:
            raise ValueError(f"config key 'decay_fraction' must be in (0, 1], got {self.decay_fraction}.")


@dataclass
class PretrainCheckpointOptions:
    """What a pretraining run keeps while it trains: checkpoints to resume from."""

    save_every: int = key(500, "optimizer steps between checkpoints", minimum=1)
    keep_checkpoints: int = key(2, "how many of the latest checkpoints to keep", minimum=1)
    resume: bool | str = key(False, "true = continue from the latest checkpoint in output_dir; or a checkpoint path")


@dataclass
class PretrainConfig:
    """Every setting of a pretraining run: its own keys (what to train, with which objective) and its sections (the
    data, optimisation, checkpoints, how the run executes), the fine-tuning recipe's sections. YAML keys and
    command-line flags have exactly the keys' names, wherever they live (`--max_steps`, or `--training.max_steps`)."""

    preset: str = key("", "model preset (see `hfzoo presets`), e.g. gpt-small", required=True,
                      choices=list_presets, choice_noun="presets")  # fmt: skip
    objective: str = key("", f"{' | '.join(OBJECTIVES)}; must fit the preset's family", required=True)
    model: dict = key({}, "overrides of the preset's config fields, e.g. {hidden_dropout: 0.0}")
    collator: dict = key({}, "options of the objective's collator, e.g. {mlm_probability: 0.15}")
    objective_options: dict = key({}, "options of the objective's training model; electra: {generator_size: 0.25 "
                                  "(generator width / discriminator's), discriminator_weight: 50 (lambda), "
                                  "sampling_temperature: 1.0 (of the generator's samples)}; spanbert: "
                                  "{max_span_positions: 32}")
    output_dir: str = key("runs/pretrain", "where checkpoints, logs and the final model go")
    data: PretrainDataOptions = section(PretrainDataOptions, "the corpus, the tokenizer, the block length")
    training: PretrainTrainingOptions = section(PretrainTrainingOptions, "batches, AdamW, warmup, run length, "
                                                "evaluations")  # fmt: skip
    checkpoints: PretrainCheckpointOptions = section(PretrainCheckpointOptions, "checkpoints to resume from")
    run: RunOptions = section(RunOptions, "devices, precision, gradient steps, logging, seed")

    def to_dict(self) -> dict:
        """Every key, flat, as written on the command line and saved in `training_config.yaml` and checkpoints."""
        return config_dict(self)

    def check(self) -> None:
        if decided := [name for name in TOKENIZER_FIELDS if name in self.model]:
            how = ("to size the vocabulary, set the top-level key vocab_size (what a trained tokenizer gets)"
                   if decided[0] == "vocab_size" else "give a tokenizer with the special tokens you want (--tokenizer)")
            raise ValueError(f"config key 'model': {decided[0]} is taken from the tokenizer, not set by hand; {how}.")
        try:
            model_config = preset_config(self.preset, **self.model)
        except (ValueError, TypeError) as error:  # an unknown field or a bad value; the message says which
            raise ValueError(f"config key 'model': {error}") from None
        objective = get_objective(self.objective, self.preset)
        if not_text := [f"item {i} ({title!r})" for i, title in enumerate(self.data.exclude_titles or [])
                        if not isinstance(title, str)]:  # fmt: skip
            raise ValueError(f"config key 'exclude_titles' lists article titles, strings: {', '.join(not_text)} is not "
                             "(quote titles that YAML reads otherwise, such as '1984' or 'yes')")  # fmt: skip
        if self.data.streaming and objective.examples is not pack:
            raise ValueError(f"config key 'streaming': objective {self.objective!r} builds its examples per document "
                             "(not packed blocks), which is not streamed; use streaming false.")  # fmt: skip
        objective.check_collator_options(self.collator)
        objective.check_options(self.objective_options, model_config)
        limit = getattr(model_config, "max_position_embeddings", None)  # recurrent models (bilm) have no limit
        if getattr(model_config, "position_embedding", None) == "learned" and self.data.block_size > limit:
            raise ValueError(
                f"config key 'block_size' is {self.data.block_size}, but preset {self.preset!r} has learned positions "
                f"for at most {limit} tokens (max_position_embeddings); use block_size <= {limit}."
            )


def parse_args(argv: Sequence[str] | None = None) -> PretrainConfig:
    """The config from `argv` (default: `sys.argv[1:]`): YAML file, then overrides, then checks."""
    return parse_config(PretrainConfig, argv, "pretrain")


def _first(dataset, limit: int | None):
    if limit is None:
        return dataset
    if isinstance(dataset, IterableDataset):
        return dataset.take(limit)
    return dataset.select(range(min(limit, len(dataset))))


def corpus_texts(data: PretrainDataOptions, seed: int) -> tuple[Any, Any]:
    """The training and validation texts a run reads (its `data` keys; titles left out, limits applied)."""
    corpus = load_corpus(
        data.dataset, data_files=data.data_files, text_column=data.text_column, seed=seed, streaming=data.streaming,
        exclude_titles=data.exclude_titles or (), keep_titles=data.keep_titles,
    )  # fmt: skip
    train_texts = _first(corpus["train"], data.max_train_samples)
    if data.streaming:  # a fixed held-out set: the validation split's first texts, kept in memory
        return train_texts, held_out(corpus["validation"], data.max_eval_samples or HELD_OUT_TEXTS)
    return train_texts, _first(corpus["validation"], data.max_eval_samples)


def train_run_tokenizer(config: PretrainConfig, train_texts: Any = None) -> PreTrainedTokenizerFast:
    """The tokenizer a run of `config` trains when it names none (`tokenizer_kind`, `vocab_size`, on its training
    texts): made once, it lets several runs (a study's objectives) share one vocabulary through `--tokenizer`."""
    if train_texts is None:
        train_texts, _ = corpus_texts(config.data, config.run.seed)
    vocab_size = config.data.vocab_size or preset_config(config.preset).vocab_size
    return train_tokenizer_on_corpus(train_texts, config.data.tokenizer_kind, vocab_size, preset_family(config.preset))


def _tokenizer(
    config: PretrainConfig, train_texts, output_dir: Path, accelerator: Accelerator, resuming: bool
) -> PreTrainedTokenizerBase:
    """The named tokenizer, or one trained on the training texts and saved in `output_dir` right away.

    Trained once, by the main process: the other processes and a resumed run load the saved copy, so
    every process and every resume uses the same vocabulary.
    """
    if config.data.tokenizer:
        return AutoTokenizer.from_pretrained(config.data.tokenizer)
    with accelerator.main_process_first():
        if accelerator.is_main_process and not resuming:
            tokenizer = train_run_tokenizer(config, train_texts)
            tokenizer.save_pretrained(output_dir)
            return tokenizer
    return AutoTokenizer.from_pretrained(output_dir)


def _tokenizer_folder(config: PretrainConfig, output_dir: Path) -> Path | None:
    """Where the run's tokenizer files are: the output folder (trained there), a local `tokenizer` folder, or none (a
    Hub name)."""
    if config.data.tokenizer is None:
        return output_dir
    return Path(config.data.tokenizer) if Path(config.data.tokenizer).is_dir() else None


def _special_token_ids(tokenizer: PreTrainedTokenizerBase, family: str) -> dict[str, int]:
    """The tokenizer's special ids as model config fields (T5's convention: decoding starts from pad)."""
    ids = {
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id,
        "decoder_start_token_id": tokenizer.pad_token_id,
    }
    fields = {f.name for f in dataclasses.fields(FAMILY_CONFIGS[family])}
    return {key: value for key, value in ids.items() if key in fields and value is not None}


def _validate(model, loader, objective: Objective, tokenizer, config: PretrainConfig, accelerator: Accelerator) -> dict:
    """Validation loss/perplexity; the collator is re-seeded each time, so every evaluation masks alike."""
    if not len(loader.dataset):
        logger.warning("no validation blocks (the validation texts are shorter than one block): evaluation skipped")
        return {}
    collator = objective.make_collator(tokenizer, config.collator, torch.Generator().manual_seed(config.run.seed))
    return evaluate(
        model, loader, collator, accelerator, shifts_labels=objective.shifts_labels,
        max_batches=config.training.eval_batches,
        perplexity_of=objective.perplexity_of, accuracy_of=objective.accuracy_of,
        token_accuracy_of=objective.token_accuracy_of,
    )  # fmt: skip


def pretrain(config: PretrainConfig) -> Path:
    """Train `config.preset` on `config.objective`; returns the output folder holding model, tokenizer and card."""
    data, training, checkpoints, run = config.data, config.training, config.checkpoints, config.run
    objective = get_objective(config.objective, config.preset)
    family = preset_family(config.preset)
    output_dir = Path(config.output_dir)
    check_output_outside_inputs(output_dir, [data.tokenizer])  # never over the folder it reads its tokenizer from
    resume_from = checkpoint_to_resume(output_dir, checkpoints.resume)
    if resume_from is not None:
        # Before anything is written: a changed config (another preset, batch size, seed...) is refused by key.
        saved_step = check_resumed_config(resume_from, config.to_dict()).step
        # ... and so are a changed tokenizer file or data file, by name (they are not in the checkpoint).
        check_resumed_inputs(resume_from, _tokenizer_folder(config, output_dir), (data.dataset, data.data_files))
        if saved_step >= training.max_steps:
            logger.warning(
                "nothing to do: %s is at step %d and max_steps is %d; the run's outputs are left as they are "
                "(raise --max_steps to train further)", resume_from, saved_step, training.max_steps,
            )  # fmt: skip
            return output_dir

    # --- Accelerator: one process, DDP or FSDP, decided by how the script was launched (DeepSpeed is refused).
    # A seedable sampler reshuffles each epoch from (seed, epoch), so a resumed run sees the same order.
    accelerator = run.accelerator(seedable_data=True)
    if checkpoints.save_every < training.max_steps or resume_from is not None:
        check_checkpointable(accelerator)
    # A new run writes into a new or empty folder (or one where a run stopped before training); a finished run's is
    # refused unless overwrite_output_dir.
    reusable = resume_from is not None or stopped_before_training(output_dir)
    check_something_to_resume(output_dir, checkpoints.resume, reusable, run.overwrite_output_dir)
    check_output_folder(output_dir, "pretrain", overwrite=run.overwrite_output_dir, reusable=reusable)
    accelerator.wait_for_everyone()  # no process writes before every one has looked
    set_seed(run.seed)  # same initial weights on every process

    # --- Corpus: `train` and `validation` splits of raw text; read before anything is written, so a missing or
    # malformed file leaves no output folder behind.
    with accelerator.main_process_first():  # the main process fills datasets' cache, the others read it
        train_texts, eval_texts = corpus_texts(data, run.seed)
    if accelerator.is_main_process:
        output_dir.mkdir(parents=True, exist_ok=True)

    # --- Tokenizer, then the corpus as examples of at most block_size tokens: packed into fixed-length blocks, or
    # (next-sentence prediction) pairs of consecutive segments of each document.
    tokenizer = _tokenizer(config, train_texts, output_dir, accelerator, resuming=resume_from is not None)
    inputs = run_inputs(output_dir, _tokenizer_folder(config, output_dir), tokenizer_file_names(tokenizer),
                        (data.dataset, data.data_files))  # what each checkpoint records, to check on resume
    with accelerator.main_process_first():
        train_blocks = None if data.streaming else objective.examples(train_texts, tokenizer, data.block_size)
        eval_blocks = objective.examples(eval_texts, tokenizer, data.block_size)
    if not data.streaming and len(train_blocks) < training.per_device_batch_size * accelerator.num_processes:
        raise ValueError(
            f"the training corpus packs into {len(train_blocks)} blocks of {data.block_size} tokens, "
            "fewer than one batch; use more data or a smaller block_size/per_device_batch_size"
        )

    # --- Model: the preset, with the tokenizer's vocabulary and special ids, randomly initialised.
    model_config = preset_config(
        config.preset, vocab_size=len(tokenizer), **_special_token_ids(tokenizer, family), **config.model
    )
    model = objective.build_model(model_config, config.objective_options)
    # --- Sharding (`--sharding fsdp`): each transformer block is one FSDP unit, before the optimizer sees the weights;
    # unsharded on a CPU, the CPU layouts (hfzoo.core.cpu_layout).
    model = ready_for_training(model, accelerator, run.sharding)

    # --- Collators: all randomness (masks, spans) from a generator per process, saved in checkpoints.
    collator_generator = torch.Generator().manual_seed(run.seed + accelerator.process_index)
    collator = objective.make_collator(tokenizer, config.collator, collator_generator)

    # --- Data loaders: they yield lists of examples; the loop collates (see hfzoo.training.loop).
    # Each loader has its own generator so that creating an iterator does not draw from the global RNG
    # (which drives dropout and must continue exactly after a resume). A stream is read in order, each process its
    # share, and keeps its own position in checkpoints (hfzoo.data.streaming).
    stream = None
    if data.streaming:
        stream = training_stream(train_texts, tokenizer, data.block_size, training.per_device_batch_size,
                                 accelerator.process_index, accelerator.num_processes)  # fmt: skip
    else:
        train_loader = DataLoader(
            train_blocks,
            batch_size=training.per_device_batch_size,
            shuffle=True,
            drop_last=True,
            collate_fn=list,
            generator=torch.Generator().manual_seed(run.seed),
        )
    eval_loader = DataLoader(
        EvalShard(eval_blocks, accelerator.process_index, accelerator.num_processes),
        batch_size=training.per_device_batch_size,
        collate_fn=list,
        generator=torch.Generator().manual_seed(run.seed),
    )

    # --- AdamW, linear warmup + cosine decay. The scheduler is stepped by hand once per optimizer step
    # (accelerate would step a prepared one once per process) and registered so checkpoints include it.
    optimizer = build_optimizer(
        model, training.learning_rate, training.weight_decay, (training.adam_beta1, training.adam_beta2),
        training.adam_epsilon, optimizer=training.optimizer, muon_learning_rate=training.muon_learning_rate,
        embedding_learning_rate=training.embedding_learning_rate,
    )
    scheduler = build_scheduler(optimizer, training.warmup_steps, training.max_steps, training.min_lr_ratio,
                                training.lr_schedule, training.decay_fraction)  # fmt: skip
    if stream is not None:  # a stream splits and batches itself (hfzoo.data.streaming)
        model, optimizer = prepare(accelerator, model, optimizer)
        train_loader = stream
    else:
        model, optimizer, train_loader = prepare(accelerator, model, optimizer, train_loader)
    accelerator.register_for_checkpointing(scheduler)
    set_seed(run.seed, device_specific=True)  # dropout: a different stream on each process

    progress = Progress()
    if resume_from is not None:
        progress = load_checkpoint(accelerator, resume_from, collator_generator, stream)
    # --- Every check passed: the resolved config, then the log (a refused run leaves no config behind).
    if accelerator.is_main_process:
        write_atomic(output_dir / CONFIG_FILE, yaml.safe_dump(config.to_dict(), sort_keys=False))
    log = RunLogger(
        output_dir,
        enabled=accelerator.is_main_process,
        max_steps=training.max_steps,
        start_step=progress.step,
        elapsed=progress.elapsed,
        tensorboard=training.tensorboard,
    )
    per_process = training.per_device_batch_size * run.gradient_accumulation_steps
    global_batch = per_process * accelerator.num_processes
    inexact = None  # why a resume is not exact (none: it is); None: not resumed
    if resume_from is not None:
        inexact = inexact_resume(resume_from, progress, accelerator.num_processes, training.max_steps, per_process)
    log.write(
        "start",
        step=progress.step,
        resumed_from=recorded_path(resume_from, output_dir) if resume_from else None,
        resumed_exactly=None if inexact is None else not inexact,
        not_exact_because=inexact,
        num_processes=accelerator.num_processes,
        distributed_type=accelerator.distributed_type.value,
        sharded=is_sharded(model),
        device=str(accelerator.device),
        mixed_precision=accelerator.mixed_precision,
        global_batch_size=global_batch,
        tokens_per_step=global_batch * data.block_size,
        parameters=accelerator.unwrap_model(model).num_parameters(),
        train_blocks=None if stream is not None else len(train_blocks),
        eval_blocks=len(eval_blocks),
        config=config.to_dict(),
    )

    # --- The loop: micro-batches accumulate into optimizer steps (clipped, scheduled, counted and logged by `steps`,
    # hfzoo.training.loop); between steps, evaluations every eval_every steps and at the end, checkpoints every
    # save_every.
    metrics = {}
    checkpoint = partial(save_checkpoint, accelerator, output_dir, collator_generator=collator_generator,
                         keep=checkpoints.keep_checkpoints, config=config.to_dict(), inputs=inputs, stream=stream,
                         sharded=run.sharding == "fsdp")  # fmt: skip
    steps = TrainingSteps(accelerator, model, scheduler, train_loader, collator, progress, log, training.max_steps, run)
    for batch in steps:
        with accelerator.accumulate(model):
            loss = model(**batch).loss
            steps.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        if not steps.stepped(loss, batch):
            continue
        with steps.paused():
            if steps.due(training.eval_every):
                metrics = _validate(model, eval_loader, objective, tokenizer, config, accelerator)
                if metrics:
                    log.write("eval", step=progress.step, **metrics)
            if steps.checkpoint_due(checkpoints.save_every):
                path = checkpoint(steps.checkpoint_progress())
                log.write("checkpoint", step=progress.step, path=recorded_path(path, output_dir))

    # --- Save: weights (safetensors) + tokenizer + model card, loadable with the Auto classes.
    accelerator.wait_for_everyone()
    unwrapped = accelerator.unwrap_model(model)
    # Replicated weights must agree bit for bit; sharded ones (FSDP) have nothing to compare, and are gathered whole
    # on the main process to be saved as one model.safetensors.
    sharded = is_sharded(model) or accelerator.distributed_type == DistributedType.FSDP
    checksums = None if sharded else gather_object([parameter_checksum(unwrapped)])
    with whole_for_saving(model) as whole:
        kept, state_dict = unwrapped, whole if whole is not None else accelerator.get_state_dict(model)
        if objective.training_model is not None:  # a training-time module (ELECTRA's pair): save the model it keeps
            kept, state_dict = unwrapped.kept_model(state_dict)
        # Staged, then published: transformers' save_pretrained deletes files named like shards in its folder.
        save_published(accelerator, lambda folder: kept.save_pretrained(
            folder, is_main_process=accelerator.is_main_process, save_function=accelerator.save, state_dict=state_dict,
        ), output_dir)  # fmt: skip
    log.write(
        "end",
        step=progress.step,
        tokens_seen=progress.tokens_seen,
        elapsed=round(log.elapsed, 3),
        parameter_checksums=checksums,
        **metrics,
    )
    log.close()
    if accelerator.is_main_process:
        tokenizer.save_pretrained(output_dir)
        record = RunRecord(
            output_dir.name, config.to_dict(), read_log(output_dir), describe_objective(objective),
            kept.config.to_dict(),
        )  # fmt: skip
        write_card(output_dir, record, PRETRAINING_SECTIONS, pretraining_metadata(record))
    accelerator.wait_for_everyone()
    if steps.last_checkpoint_due(checkpoints.save_every):  # after every output: a run extended resumes here
        checkpoint(steps.checkpoint_progress())
    # A DDP wrapper that outlives its process group can hang in gloo's destructor at exit (pytorch#75097):
    # release it (and the cycles its hooks form) while every process is still here, then end. A single process has
    # no group to outlive, and the two full collections cost it half a second.
    if accelerator.num_processes > 1:
        del model
        accelerator.free_memory()
        gc.collect()
    accelerator.end_training()
    return output_dir


def main(argv: Sequence[str] | None = None) -> Path:
    """Entry point of `recipes/pretrain.py` and `hfzoo pretrain`: parse `argv`, then `pretrain`. A checkpoint that
    cannot resume the run (a file missing or altered, a changed config) exits with what is wrong, not a traceback."""
    config = start_recipe(PretrainConfig, argv, "pretrain")
    with exit_on_checkpoint_error("pretrain"), holding_run_folder(config.output_dir, "pretrain"):
        return pretrain(config)
