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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from peft import PeftModel

from ..adapters.task_adapter import save_base_identity
from ..cards import FINETUNE_SECTIONS
from ..recipe_config import key, parse_config
from ..training.logging import start_recipe
from ..training.methods import MethodOptions, apply_method, count_trainable_parameters, head_modules, peft_config_for
from ..training.task_runs import (
    TaskRunOptions,
    log_trainable,
    prepare_run,
    run_summary,
    train_and_evaluate,
    write_results,
)


@dataclass
class FinetuneConfig(MethodOptions, TaskRunOptions):
    """Every setting of a fine-tuning run: the task and its data, the method, optimisation, outputs. YAML keys and
    command-line flags have exactly these names; `learning_rate: null` means the method's default."""

    output_dir: str = key("runs/finetune", "where metrics, predictions, the model or adapter and the card go")


def parse_args(argv: Sequence[str] | None = None) -> FinetuneConfig:
    """The config from `argv` (default: `sys.argv[1:]`): YAML file, then overrides, then checks."""
    return parse_config(FinetuneConfig, argv, "finetune")


def finetune(config: FinetuneConfig) -> Path:
    """Fine-tune `config.model` on `config.task`; returns the output folder (metrics, predictions, model, card)."""
    output_dir = Path(config.output_dir)
    accelerator = config.accelerator()

    # --- Examples, tokenizer and model with the task's head (hfzoo.training.task_runs.prepare_run).
    task, train_examples, eval_examples, model, missing = prepare_run(config, accelerator, config.from_scratch)
    tokenizer, family = task.tokenizer, task.family
    base_model = model.name_or_path  # a local folder's absolute path: what an adapter reloads onto

    # --- The method: an adapter freezes the body (and trains the head with it).
    heads = head_modules(model, missing) if task.trains_head else []
    model = apply_method(model, peft_config_for(config, task.peft_task_types[family], heads))
    parameters = count_trainable_parameters(model)
    method = config.peft_config or config.method
    log_trainable(f"{task.name} on {config.model} ({family}), method {method}", parameters)

    # --- Features: token ids and targets laid out for the family (see hfzoo/tasks/task.py).
    train_features = task.encode(train_examples, training=True)
    eval_features = task.encode(eval_examples, training=False)

    def save_model(trained) -> None:
        """The adapter (PEFT format, with the base it must reload onto) or the full model: before the final
        evaluation, so that a failure there or in writing the results loses no training."""
        unwrapped = accelerator.unwrap_model(trained)
        accelerator.wait_for_everyone()
        main_process = accelerator.is_main_process
        unwrapped.save_pretrained(output_dir, is_main_process=main_process, save_function=accelerator.save)
        if accelerator.is_main_process and isinstance(unwrapped, PeftModel):
            save_base_identity(output_dir, unwrapped.get_base_model())
        accelerator.wait_for_everyone()

    # --- AdamW, the loop (saving the model when training is done), validation metrics and the log.
    learning_rate = config.learning_rate if config.learning_rate is not None else config.default_learning_rate()
    run = train_and_evaluate(
        config, task, model, train_features, eval_examples, eval_features, accelerator, learning_rate, save_model,
        family=family, method=method, train_examples=len(train_examples), **parameters,
    )  # fmt: skip

    # --- Save: metrics, predictions, tokenizer, card.
    accelerator.wait_for_everyone()
    summary = run_summary(task, base_model, method, parameters, run, len(train_examples), len(eval_examples))
    if accelerator.is_main_process:
        write_results(output_dir, tokenizer, config, summary, run.records, FINETUNE_SECTIONS)
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return output_dir


def main(argv: Sequence[str] | None = None) -> Path:
    """Entry point of `recipes/finetune.py` and `hfzoo finetune`: parse `argv`, then `finetune`."""
    return finetune(start_recipe(FinetuneConfig, argv, "finetune"))
