"""Fine-tune a pretrained model on a labelled task: config -> examples -> tokenizer -> model (+ adapter) ->
features -> AdamW -> loop -> model or adapter -> validation metrics -> metrics.json, predictions, card.

Read `finetune` top to bottom; it is the recipe: its config's sections (`config.data`, `config.tuning`,
`config.training`, `config.ulmfit`, `config.checkpoints`, `config.run`), then examples, tokenizer, model, method,
AdamW and the schedule, the Accelerator's wrapping, checkpoints and resume, the loop with its evaluations, and the
saves. The parts it shares with the composition recipe are in `hfzoo.training.task_run`. The task (`hfzoo.tasks`:
sequence-classification, token-classification, question-answering, seq2seq) decides how examples become token ids
for the model's family and how outputs become predictions and metrics. It runs as one process or under
`accelerate launch` / `torchrun`:

    python recipes/finetune.py --config recipes/configs/finetune/sst2.yaml
    hfzoo finetune --model runs/bert-small-mlm --task sequence-classification --dataset ../shared/data/sst2 \\
        --text_column sentence --method lora --max_steps 200

With `--save_every N` it checkpoints (model, optimizer, schedule, RNG states, data position) and `--resume` continues
a killed run to the weights an uninterrupted one has, bit for bit; `--save_best true` keeps the best evaluation's
model in `best/`; `--do_train false` only evaluates a fine-tuned model (`--model`, or `--adapter` on its base), into
`<output_dir>/eval/`, so the record of the run it evaluates is never touched. A new run into a folder that holds
files (a finished run) is refused unless `--overwrite_output_dir true`.
ULMFiT's options (`--discriminative_lr_decay 2.6 --lr_schedule slanted_triangular --gradual_unfreezing true`) work
on any model, hfzoo's or transformers', fully fine-tuned or with an adapter (`hfzoo.training.ulmfit`). The original
Transformer's training, from a preset with a tokenizer trained on the task (`--model transformer-small --from_scratch
true --train_tokenizer true --label_smoothing 0.1 --lr_schedule inverse_sqrt --warmup_steps 400 --num_beams 4`).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
from accelerate import Accelerator
from peft import PeftModel
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..adapters.composition.task_adapter import (
    ADAPTER_CONFIG, adapter_weights_file, base_identity, check_adapter_fits, check_base_files, check_recorded_base,
    describe_base, recorded_base, recorded_base_path, save_base_identity,
)  # fmt: skip
from ..adapters.methods import MethodOptions, apply_method, count_trainable_parameters, head_modules, peft_config_for
from ..adapters.peft_warnings import building_peft_model
from ..card_writing import FINETUNE_SECTIONS
from ..core.files import check_output_outside_inputs
from ..core.presets import list_presets
from ..core.recipe_config import config_dict, key, parse_config, section
from ..models.checkpoint_files import read_json_file
from ..tasks import TaskOptions
from ..training.checkpointing import exit_on_checkpoint_error
from ..training.logging import start_recipe
from ..training.loop import build_optimizer, build_task_scheduler, run_length, train_loader
from ..training.losses import smoothed_loss_function
from ..training.options import (
    CheckpointOptions, RunOptions, TaskTrainingOptions, ULMFiTOptions, check_adapter_overrides, check_task_run,
)  # fmt: skip
from ..training.run_folder import run_output
from ..training.run_lock import holding_run_folder
from ..training.sharding import prepare, ready_for_training, whole_for_saving
from ..training.task_model import load_task_model, load_tokenizer, log_trainable, train_task_tokenizer
from ..training.task_results import run_summary, write_results
from ..training.task_run import TaskTraining, evaluate_only, read_task_examples
from ..training.ulmfit import GradualUnfreezing, discriminative_learning_rates, layer_groups


@dataclass
class FinetuneConfig:
    """Every setting of a fine-tuning run: its own keys, and its sections (what to train on which data, the method,
    optimisation, ULMFiT's techniques, checkpoints, how the run executes). YAML keys and command-line flags have
    exactly the keys' names, wherever they live (`--lr_schedule`, or `--ulmfit.lr_schedule`); `learning_rate: null`
    means the method's default."""

    output_dir: str = key("runs/finetune", "where metrics, predictions, the model or adapter and the card go")
    do_train: bool = key(True, "false = only evaluate the trained model (--model, or --adapter on it) and write "
                         "metrics.json")  # fmt: skip
    adapter: str | None = key(None, "do_train false: a trained adapter folder (PEFT format) to evaluate on --model")
    data: TaskOptions = section(TaskOptions, "what to train, on which data, formatted how")
    tuning: MethodOptions = section(MethodOptions, "which weights train (all, or an adapter's), from which start")
    training: TaskTrainingOptions = section(TaskTrainingOptions, "batches, AdamW, warmup, run length, evaluations")
    ulmfit: ULMFiTOptions = section(ULMFiTOptions, "the learning-rate schedule and ULMFiT's techniques")
    checkpoints: CheckpointOptions = section(CheckpointOptions, "checkpoints to resume from, the best model")
    run: RunOptions = section(RunOptions, "devices, precision, gradient steps, logging, seed")

    def check(self) -> None:
        data, tuning, ulmfit, training = self.data, self.tuning, self.ulmfit, self.training
        check_task_run(data, training, self.checkpoints, self.do_train)
        if self.adapter is not None and self.do_train:
            raise ValueError("config key 'adapter' names a trained adapter to evaluate: use it with --do_train false.")
        if data.allow_other_base and self.adapter is None:
            raise ValueError("config key 'allow_other_base' lets --adapter run on another base; without --adapter "
                             "there is none: drop it.")  # fmt: skip
        trains_adapter = self.do_train and (tuning.method != "full" or bool(tuning.peft_config))
        if self.adapter is not None or trains_adapter:
            check_adapter_overrides(data)
        if tuning.from_scratch and not self.do_train:
            raise ValueError("config key 'from_scratch': an evaluation-only run (do_train false) would score random "
                             "weights; drop from_scratch.")  # fmt: skip
        custom_warmup = training.warmup_ratio != 0.06 or training.warmup_steps is not None
        if ulmfit.lr_schedule == "slanted_triangular" and custom_warmup:
            raise ValueError("config keys 'warmup_ratio'/'warmup_steps': the slanted triangular schedule warms up for "
                             "its own stlr_cut_frac of the steps; drop them.")  # fmt: skip
        if data.model in list_presets() and not Path(data.model).exists():
            if not tuning.from_scratch:
                raise ValueError(f"config key 'model': {data.model} is a preset, an architecture without weights: "
                                 "add --from_scratch true, or give a trained checkpoint.")  # fmt: skip
            if not tuning.train_tokenizer and data.tokenizer is None:
                raise ValueError(f"config key 'model': the preset {data.model} has no tokenizer: add --train_tokenizer "
                                 "true or --tokenizer <path>.")  # fmt: skip
        if tuning.train_tokenizer and data.tokenizer is not None:
            raise ValueError("config keys 'train_tokenizer' and 'tokenizer': a run trains a tokenizer or uses one, "
                             "not both.")  # fmt: skip

    def to_dict(self) -> dict:
        """Every key, flat, as written on the command line and saved in `training_config.yaml` and checkpoints."""
        return config_dict(self)

    def model_folders(self) -> list[str]:
        """The folder a training run takes its starting weights from, which each checkpoint fingerprints: a resume
        on another model of the same shape there would be refused by nothing else."""
        return [self.data.model]


def parse_args(argv: Sequence[str] | None = None) -> FinetuneConfig:
    """The config from `argv` (default: `sys.argv[1:]`): YAML file, then overrides, then checks."""
    return parse_config(FinetuneConfig, argv, "finetune")


def finetune(config: FinetuneConfig) -> Path:
    """Fine-tune `config.data.model` on `config.data.task`; returns the output folder (metrics, predictions, model,
    card; evaluation only: metrics and predictions in `output_dir/eval/`)."""
    data, tuning, training, ulmfit, checkpoints, run = (
        config.data, config.tuning, config.training, config.ulmfit, config.checkpoints, config.run
    )  # fmt: skip

    # A training run never writes over the model it starts from (an evaluation writes beside it, into eval/).
    check_output_outside_inputs(config.output_dir, [data.model, data.tokenizer] if config.do_train else [])

    # --- Accelerator: one process, DDP, FSDP or DeepSpeed, decided by how the script was launched. A seedable
    # sampler reshuffles each epoch from (seed, epoch), so a resumed run sees the same order. The output folder is
    # checked on every process before any writes; evaluation only writes into output_dir/eval/.
    accelerator = run.accelerator(seedable_data=True)
    output_dir = run_output(config.output_dir, config.do_train, run.overwrite_output_dir, "finetune", accelerator,
                            resume=checkpoints.resume)  # fmt: skip
    config = dataclasses.replace(config, output_dir=str(output_dir))

    # --- Examples, read and checked, labels from train; a changed resumed run refused (hfzoo.training.task_run).
    task, train_examples, eval_examples = read_task_examples(config, accelerator, tuning.train_tokenizer)

    # --- Tokenizer: the model's, or one trained on the training examples (deterministic: a resumed run trains the
    # same one again). Model: the pretrained body (or its architecture, from scratch) with the task's head.
    vocab_size = None
    if tuning.train_tokenizer:
        tokenizer = train_task_tokenizer(data, task, train_examples, tuning.tokenizer_kind, tuning.vocab_size)
        vocab_size = len(tokenizer)
    else:
        tokenizer = load_tokenizer(data)
        if tuning.from_scratch and data.model in list_presets():  # a preset's vocab_size is a placeholder: fit it
            vocab_size = len(tokenizer)
    model, family, missing = load_task_model(data, task, tokenizer, tuning.from_scratch, vocab_size)
    base_model = model.name_or_path  # a local folder's absolute path: what an adapter reloads onto

    # --- The method: an adapter freezes the body (and trains the head with it). Evaluation only: the trained model.
    if config.do_train:
        heads = head_modules(model, missing) if task.trains_head else []
        model = apply_method(model, peft_config_for(tuning, task.peft_task_types[family], heads))
        method = tuning.peft_config or tuning.method
    else:
        model, method = load_trained(model, missing, data.model, config.adapter, data.allow_other_base)
    parameters = count_trainable_parameters(model)
    log_trainable(f"{task.name} on {data.model} ({family}), method {method}", parameters)

    # --- Features: token ids and targets laid out for the family (see hfzoo/tasks/task.py). Evaluation only: metrics
    # and predictions, no card (this folder holds no model).
    eval_features = task.encode(eval_examples, training=False)
    fields = {"family": family, "method": method, "train_examples": len(train_examples), **parameters}
    summary = partial(run_summary, task, base_model, method, parameters, train_examples=len(train_examples),
                                eval_examples=len(eval_examples), output_dir=output_dir, imported=data.import_native)
    if not config.do_train:
        evaluated = evaluate_only(config, task, model, eval_examples, eval_features, accelerator, **fields)
        write_results(accelerator, output_dir, tokenizer, config.to_dict(), summary(evaluated), evaluated.records,
                      None)  # fmt: skip
        accelerator.end_training()
        return output_dir
    train_features = task.encode(train_examples, training=True)

    # --- AdamW on the trainable parameters (whatever is frozen stays frozen), per layer group with ULMFiT's
    # discriminative learning rates; the Accelerator wraps model, optimizer and batches; then the schedule over the
    # run's length: linear warmup and cosine decay, the slanted triangular one, or the inverse square root.
    learning_rate = training.learning_rate if training.learning_rate is not None else tuning.default_learning_rate()
    # `--sharding fsdp`: each transformer block one FSDP unit, before the optimizer and layer groups see the weights;
    # unsharded on a CPU, the CPU layouts (hfzoo.core.cpu_layout).
    model = ready_for_training(model, accelerator, run.sharding)
    batches = train_loader(train_features, training.per_device_batch_size, run.seed, training.group_by_length)
    groups = layer_groups(model) if ulmfit.uses_layer_groups else None
    layers = None
    if ulmfit.discriminative_lr_decay is not None:
        layers = discriminative_learning_rates(groups, learning_rate, ulmfit.discriminative_lr_decay)
    optimizer = build_optimizer(model, learning_rate, training.weight_decay, (0.9, 0.999), 1e-8, layers,
                                training.optimizer, training.muon_learning_rate)  # fmt: skip
    model, optimizer, batches = prepare(accelerator, model, optimizer, batches)
    steps_per_epoch, max_steps, warmup_steps = run_length(len(batches), training, run.gradient_accumulation_steps)
    scheduler = build_task_scheduler(optimizer, ulmfit, max_steps, warmup_steps)
    accelerator.register_for_checkpointing(scheduler)
    # AdaLoRA reallocates its ranks from the gradients after each optimizer step; it keeps its rank allocator's
    # importance scores outside the model and optimizer, so a checkpoint could not resume it exactly.
    reallocate = getattr(accelerator.unwrap_model(model).base_model, "update_and_allocate", None)
    if reallocate is not None and (checkpoints.save_every is not None or checkpoints.resume):
        raise ValueError("config key 'save_every'/'resume': AdaLoRA keeps its rank allocator's importance scores "
                         "outside the model and optimizer, so a checkpoint could not resume it exactly; train AdaLoRA "
                         "without checkpoints")  # fmt: skip

    # --- Checkpoints and the best model (save_best, into best/); a resumed run continues exactly from its checkpoint,
    # gradual unfreezing at its checkpoint's stage.
    trainer = TaskTraining(config, accelerator, task, partial(save_trained, accelerator, tokenizer, model), max_steps)
    progress = trainer.progress
    unfreezing = None
    if ulmfit.gradual_unfreezing:
        # Frozen parameters would break DDP's gradient all-reduce, which expects every registered parameter.
        if accelerator.num_processes > 1:
            raise ValueError("config key 'gradual_unfreezing' works in one process only: launch without DDP/FSDP.")
        unfreezing = GradualUnfreezing(groups, ulmfit.unfreeze_every or steps_per_epoch)
        unfreezing.apply(progress.step)
    if trainer.nothing_to_do():
        accelerator.end_training()
        return output_dir

    # --- The loop: micro-batches accumulate into optimizer steps (clipped, scheduled, counted and logged by
    # `steps`); after each step, the trainer saves the model after the last one, evaluates every eval_every steps and
    # at the end, and checkpoints every save_every (hfzoo.training.task_run).
    smoothed = smoothed_loss_function(task, accelerator, training.label_smoothing)
    steps = trainer.start(model, scheduler, batches, len(train_features), eval_examples, eval_features, **fields)
    for batch in steps:
        with accelerator.accumulate(model):
            loss = model(**batch).loss if smoothed is None else smoothed(model, batch)
            steps.backward(loss)
            optimizer.step()
            if accelerator.sync_gradients and reallocate is not None:
                reallocate(progress.step + 1)
            if accelerator.sync_gradients and unfreezing is not None:
                unfreezing.apply(progress.step + 1)
            optimizer.zero_grad()
        if steps.stepped(loss, batch):
            trainer.between_steps()

    # --- Save: metrics, predictions, tokenizer, card (the model or adapter is in output_dir already); then, the last
    # step's checkpoint (a run extended with a larger max_steps resumes there).
    trained = trainer.finish(steps_per_epoch)
    write_results(accelerator, output_dir, tokenizer, config.to_dict(), summary(trained), trained.records,
                  FINETUNE_SECTIONS)  # fmt: skip
    trainer.checkpoint_last_step()
    accelerator.end_training()
    return output_dir


def save_trained(accelerator: Accelerator, tokenizer: PreTrainedTokenizerBase, model: nn.Module, folder: Path) -> None:
    """The adapter (PEFT format, with the base it must reload onto) or the full model, and the tokenizer, into
    `folder` (called by every process): into `output_dir` before the final evaluation, into `best/` at each best
    evaluation."""
    unwrapped = accelerator.unwrap_model(model)
    accelerator.wait_for_everyone()
    main_process = accelerator.is_main_process
    # The recipe never resizes the vocabulary (a tokenizer larger than the model is refused), so an adapter never
    # needs the base's embedding matrices. Saying so also skips PEFT's check for a resize, which re-reads the
    # base's config.json with the model's config class: a native one, for an imported base (import_native).
    embeddings = {"save_embedding_layers": False} if isinstance(unwrapped, PeftModel) else {}
    if isinstance(unwrapped, PeftModel):  # PEFT names the base as hfzoo_base.json does: no path of the machine
        for peft_config in unwrapped.peft_config.values():
            peft_config.base_model_name_or_path = recorded_base_path(folder, unwrapped.get_base_model())
    with whole_for_saving(model) as whole:  # `--sharding fsdp`: the weights gathered on the main process
        if whole is None or main_process:
            gathered = {} if whole is None else {"state_dict": whole}
            unwrapped.save_pretrained(folder, is_main_process=main_process, save_function=accelerator.save,
                                      **embeddings, **gathered)  # fmt: skip
    if main_process:
        tokenizer.save_pretrained(folder)
        if isinstance(unwrapped, PeftModel):
            save_base_identity(folder, unwrapped.get_base_model())
    accelerator.wait_for_everyone()


def load_trained(
    model: PreTrainedModel, missing: list[str], model_name: str, adapter: str | None, allow_other_base: bool = False
) -> tuple[nn.Module, str]:
    """(`do_train: false`) the model to evaluate and its method: `model` itself (`model_name`: a fine-tuned
    checkpoint, which must hold every weight: a head initialised at random would be scored), or `adapter` on it,
    which must have been trained on this base (its record, else its keys and shapes, are checked before PEFT loads
    it; safetensors only) and must hold what the base lacks (its `modules_to_save`)."""
    if adapter is None:
        if missing:
            raise ValueError(
                f"config key 'model': {model_name} holds no trained weights for {', '.join(missing[:4])}: "
                "evaluating it would score a randomly initialised head. Give a fine-tuned model, or its base with "
                "--adapter <trained adapter folder>."
            )
        return model, "full"
    folder = Path(adapter)
    adapter_config = read_json_file(folder / ADAPTER_CONFIG)  # names the file when missing or broken
    adapter_weights_file(folder)  # safetensors only, and whole: PEFT would unpickle adapter_model.bin
    recorded = recorded_base(folder, adapter_config)
    check_recorded_base(folder.name, folder, recorded, model)
    check_base_files(folder.name, folder, recorded, base_identity(model), allow_other_base)
    saved = adapter_config.get("modules_to_save") or []
    untrained = [key for key in missing if not _saved_by(key, saved)]
    if untrained:
        raise ValueError(
            f"config key 'adapter': {folder} does not hold {', '.join(untrained[:4])}, which --model lacks too "
            "(the adapter's modules_to_save): its head would be scored at random."
        )
    with torch.device("meta"):  # the base's module kinds and shapes, without its weights
        shell = type(model)(copy.deepcopy(model.config))
    check_adapter_fits(folder, shell, f"{model_name} ({describe_base(base_identity(model))})")
    with building_peft_model():
        adapted = PeftModel.from_pretrained(model, folder)
    return adapted, str(adapter_config.get("peft_type", "adapter")).lower()


def _saved_by(parameter: str, modules_to_save: list[str]) -> bool:
    """Whether PEFT's `modules_to_save` (matched as module-name suffixes) covers `parameter`."""
    parts = parameter.split(".")[:-1]
    modules = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return any(module == saved or module.endswith("." + saved) for module in modules for saved in modules_to_save)


def main(argv: Sequence[str] | None = None) -> Path:
    """Entry point of `recipes/finetune.py` and `hfzoo finetune`: parse `argv`, then `finetune`. A checkpoint that
    cannot resume the run (a file missing or altered, a changed config) exits with what is wrong, not a traceback."""
    config = start_recipe(FinetuneConfig, argv, "finetune")
    with exit_on_checkpoint_error("finetune"), holding_run_folder(config.output_dir, "finetune"):
        return finetune(config)
