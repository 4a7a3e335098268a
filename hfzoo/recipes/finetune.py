"""Fine-tune a pretrained model on a labelled task: config -> examples -> tokenizer -> model (+ adapter) ->
features -> AdamW -> loop -> model or adapter -> validation metrics -> metrics.json, predictions, card.

Read `finetune` top to bottom; it is the recipe. What it shares with the composition recipe (preparing the run, the
training run with its evaluations, the files it leaves) is in `hfzoo.training.task_runs`. The task (`hfzoo.tasks`:
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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from peft import PeftModel
from torch import nn
from transformers import PreTrainedModel

from ..adapters.peft_warnings import building_peft_model
from ..adapters.composition.task_adapter import (
    ADAPTER_CONFIG, adapter_weights_file, base_identity, check_adapter_fits, check_recorded_base, describe_base,
    recorded_base, save_base_identity,
)  # fmt: skip
from ..cards import FINETUNE_SECTIONS
from ..models.checkpoint_files import read_json_file
from ..presets import list_presets
from ..recipe_config import key, parse_config
from ..training.checkpointing import exit_on_checkpoint_error
from ..training.logging import start_recipe
from ..training.methods import MethodOptions, apply_method, count_trainable_parameters, head_modules, peft_config_for
from ..training.options import ULMFiTOptions
from ..training.sharding import whole_for_saving
from ..training.task_runs import (
    TaskRunOptions,
    evaluate_only,
    log_trainable,
    prepare_run,
    run_output,
    run_summary,
    train_and_evaluate,
    write_results,
)


@dataclass
class FinetuneConfig(MethodOptions, TaskRunOptions, ULMFiTOptions):
    """Every setting of a fine-tuning run: the task and its data, the method, optimisation, outputs. YAML keys and
    command-line flags have exactly these names; `learning_rate: null` means the method's default."""

    output_dir: str = key("runs/finetune", "where metrics, predictions, the model or adapter and the card go")
    adapter: str | None = key(None, "do_train false: a trained adapter folder (PEFT format) to evaluate on --model")

    def check(self) -> None:
        if self.adapter is not None and self.do_train:
            raise ValueError("config key 'adapter' names a trained adapter to evaluate: use it with --do_train false.")
        if self.from_scratch and not self.do_train:
            raise ValueError("config key 'from_scratch': an evaluation-only run (do_train false) would score random "
                             "weights; drop from_scratch.")  # fmt: skip
        if self.lr_schedule == "slanted_triangular" and (self.warmup_ratio != 0.06 or self.warmup_steps is not None):
            raise ValueError("config keys 'warmup_ratio'/'warmup_steps': the slanted triangular schedule warms up for "
                             "its own stlr_cut_frac of the steps; drop them.")  # fmt: skip
        if self.model in list_presets() and not Path(self.model).exists():
            if not self.from_scratch:
                raise ValueError(f"config key 'model': {self.model} is a preset, an architecture without weights: "
                                 "add --from_scratch true, or give a trained checkpoint.")  # fmt: skip
            if not self.train_tokenizer and self.tokenizer is None:
                raise ValueError(f"config key 'model': the preset {self.model} has no tokenizer: add --train_tokenizer "
                                 "true or --tokenizer <path>.")  # fmt: skip
        if self.train_tokenizer and self.tokenizer is not None:
            raise ValueError("config keys 'train_tokenizer' and 'tokenizer': a run trains a tokenizer or uses one, "
                             "not both.")  # fmt: skip


def parse_args(argv: Sequence[str] | None = None) -> FinetuneConfig:
    """The config from `argv` (default: `sys.argv[1:]`): YAML file, then overrides, then checks."""
    return parse_config(FinetuneConfig, argv, "finetune")


def finetune(config: FinetuneConfig) -> Path:
    """Fine-tune `config.model` on `config.task`; returns the output folder (metrics, predictions, model, card;
    evaluation only: metrics and predictions in `output_dir/eval/`)."""
    # A seedable sampler reshuffles each epoch from (seed, epoch), so a resumed run sees the same order.
    accelerator = config.accelerator(seedable_data=True)
    config = run_output(config, "finetune", accelerator)  # evaluation only: into output_dir/eval/
    output_dir = Path(config.output_dir)

    # --- Examples, tokenizer and model with the task's head (hfzoo.training.task_runs.prepare_run).
    task, train_examples, eval_examples, model, missing = prepare_run(config, accelerator, config.from_scratch, config)
    tokenizer, family = task.tokenizer, task.family
    base_model = model.name_or_path  # a local folder's absolute path: what an adapter reloads onto

    # --- The method: an adapter freezes the body (and trains the head with it). Evaluation only: the trained model.
    if config.do_train:
        heads = head_modules(model, missing) if task.trains_head else []
        model = apply_method(model, peft_config_for(config, task.peft_task_types[family], heads))
        method = config.peft_config or config.method
    else:
        model, method = load_trained(model, missing, config)
    parameters = count_trainable_parameters(model)
    log_trainable(f"{task.name} on {config.model} ({family}), method {method}", parameters)

    # --- Features: token ids and targets laid out for the family (see hfzoo/tasks/task.py).
    eval_features = task.encode(eval_examples, training=False)

    def save_model(trained, folder: Path) -> None:
        """The adapter (PEFT format, with the base it must reload onto) or the full model, and the tokenizer: into
        `output_dir` before the final evaluation (a failure there or in writing the results loses no training), and
        into `best/` at each best evaluation."""
        unwrapped = accelerator.unwrap_model(trained)
        accelerator.wait_for_everyone()
        main_process = accelerator.is_main_process
        # The recipe never resizes the vocabulary (a tokenizer larger than the model is refused), so an adapter never
        # needs the base's embedding matrices. Saying so also skips PEFT's check for a resize, which re-reads the
        # base's config.json with the model's config class: a native one, for an imported base (import_native).
        embeddings = {"save_embedding_layers": False} if isinstance(unwrapped, PeftModel) else {}
        with whole_for_saving(trained) as whole:  # `--sharding fsdp`: the weights gathered on the main process
            if whole is None or main_process:
                gathered = {} if whole is None else {"state_dict": whole}
                unwrapped.save_pretrained(folder, is_main_process=main_process, save_function=accelerator.save,
                                          **embeddings, **gathered)  # fmt: skip
        if main_process:
            tokenizer.save_pretrained(folder)
            if isinstance(unwrapped, PeftModel):
                save_base_identity(folder, unwrapped.get_base_model())
        accelerator.wait_for_everyone()

    # --- AdamW, the loop (checkpoints, the best model, the model when training is done), metrics and the log.
    fields = {"family": family, "method": method, "train_examples": len(train_examples), **parameters}
    if config.do_train:
        learning_rate = config.learning_rate if config.learning_rate is not None else config.default_learning_rate()
        train_features = task.encode(train_examples, training=True)
        run = train_and_evaluate(config, task, model, train_features, eval_examples, eval_features, accelerator,
                                 learning_rate, save_model, config, **fields)  # fmt: skip
    else:
        run = evaluate_only(config, task, model, eval_examples, eval_features, accelerator, **fields)

    # --- Save: metrics, predictions, tokenizer, card (none when only evaluating: this folder holds no model).
    accelerator.wait_for_everyone()
    if run is not None:  # None: resumed from a checkpoint at the last step, nothing done
        summary = run_summary(task, base_model, method, parameters, run, len(train_examples), len(eval_examples),
                              output_dir, config.import_native)  # fmt: skip
        if accelerator.is_main_process:
            sections = FINETUNE_SECTIONS if config.do_train else None
            write_results(output_dir, tokenizer, config, summary, run.records, sections)
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return output_dir


def load_trained(model: PreTrainedModel, missing: list[str], config: FinetuneConfig) -> tuple[nn.Module, str]:
    """(`do_train: false`) the model to evaluate and its method: `model` itself (a fine-tuned checkpoint, which must
    hold every weight: a head initialised at random would be scored), or `config.adapter` on it, which must have
    been trained on this base (its record, else its keys and shapes, are checked before PEFT loads it; safetensors
    only) and must hold what the base lacks (its `modules_to_save`)."""
    if config.adapter is None:
        if missing:
            raise ValueError(
                f"config key 'model': {config.model} holds no trained weights for {', '.join(missing[:4])}: "
                "evaluating it would score a randomly initialised head. Give a fine-tuned model, or its base with "
                "--adapter <trained adapter folder>."
            )
        return model, "full"
    folder = Path(config.adapter)
    adapter_config = read_json_file(folder / ADAPTER_CONFIG)  # names the file when missing or broken
    adapter_weights_file(folder)  # safetensors only, and whole: PEFT would unpickle adapter_model.bin
    check_recorded_base(folder.name, folder, recorded_base(folder, adapter_config), model)
    saved = adapter_config.get("modules_to_save") or []
    untrained = [key for key in missing if not _saved_by(key, saved)]
    if untrained:
        raise ValueError(
            f"config key 'adapter': {folder} does not hold {', '.join(untrained[:4])}, which --model lacks too "
            "(the adapter's modules_to_save): its head would be scored at random."
        )
    with torch.device("meta"):  # the base's module kinds and shapes, without its weights
        shell = type(model)(copy.deepcopy(model.config))
    check_adapter_fits(folder, shell, f"{config.model} ({describe_base(base_identity(model))})")
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
    with exit_on_checkpoint_error("finetune"):
        return finetune(config)
