"""Compose trained task adapters for a new task: the base model and the adapters (PEFT folders, LoRA or bottleneck)
stay frozen; a learned router or AdapterFusion (`hfzoo.adapters.compose`) and a fresh task head train on the target
task with the fine-tuning recipe's data formatting, loop pieces and metrics (`hfzoo.training.task_run`). Read
`compose_adapters`, then `run_composition` (one run: examples, tokenizer, model, composition, AdamW and the
schedule, the Accelerator's wrapping, checkpoints and resume, the loop, the saves) top to bottom; the config has the
fine-tuning recipe's sections (`config.data`, `config.training`, `config.checkpoints`, `config.run`) and the
composition's own keys.

A learned composition is only worth having if it beats the uniform average of the same adapters with a head trained
the same way, so a `soft`, `hard` or `fusion` run first trains that baseline (same data, steps and seed, in
`average-baseline/`) and reports both in metrics.json and the card, beside the majority class. `--baseline false`
skips it; `--strategy average` is the baseline on its own.

    python recipes/compose.py --config recipes/configs/compose/stdlib-area-fusion.yaml
    hfzoo compose --model runs/bert-tiny-mlm --task sequence-classification \\
        --train_file runs/data/area/train.csv --validation_file runs/data/area/validation.csv \\
        --adapters module=runs/module-lora,area=runs/area-bottleneck --strategy soft --max_steps 200

Outputs in `output_dir`: `metrics.json` (validation metrics, trainable parameters, the composition, the baselines,
the reload check), `predictions.jsonl`, `composition/` (`ComposedModel.save_pretrained`: the spec, the router/fusion
and head weights, a copy of each adapter), the tokenizer, `log.jsonl` and the model card. Before finishing, the
saved composition is rebuilt with `load_composition` on a freshly loaded base model and must reproduce every
parameter and every validation prediction.

With `--save_every N` it checkpoints and `--resume` continues a killed run exactly (the baseline and the composition
each in their own folder); `--save_best true` keeps the best evaluation's composition in `best/composition/`;
`--do_train false --composition <folder>` only evaluates a saved composition on `--model`, into `<output_dir>/eval/`.
A new run into a folder that holds files (a finished run) is refused unless `--overwrite_output_dir true`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from transformers import PreTrainedModel

from ..adapters import STRATEGIES, ComposedModel, compose, load_composition, read_adapter
from ..adapters.composition.task_adapter import base_differences, describe_base
from ..adapters.methods import count_trainable_parameters, head_modules
from ..card_writing import FINETUNE_METRICS, composition_sections
from ..core.files import check_output_outside_inputs
from ..core.recipe_config import config_dict, key, parse_config, section
from ..core.recorded_paths import config_path, config_paths, recorded_path
from ..integrations.accelerate import forget_checkpointed_objects
from ..models.checkpoint_files import read_json_file
from ..tasks import Task, TaskOptions
from ..tasks.baselines import majority_class_accuracy
from ..training.checkpointing import exit_on_checkpoint_error
from ..training.evaluation import predict_all
from ..training.logging import start_recipe
from ..training.loop import build_optimizer, build_scheduler, run_length, train_loader
from ..training.losses import smoothed_loss_function
from ..training.options import (
    CheckpointOptions, RunOptions, TaskTrainingOptions, check_adapter_overrides, check_task_run,
)  # fmt: skip
from ..training.run_folder import run_output
from ..training.run_lock import holding_run_folder
from ..training.sharding import prepare, ready_for_training, whole_for_saving, whole_state_dict
from ..training.task_model import load_model, load_task_model, load_tokenizer, log_trainable
from ..training.task_results import METRICS_FILE, run_summary, write_results
from ..training.task_run import TaskTraining, evaluate_only, read_task_examples

# Routers, fusion layers and the head all start fresh (routers at zero, fusion's value at the identity), as adapters
# do, so they take adapter-sized steps rather than full fine-tuning's (AdapterFusion used 5e-5 on a trained head).
DEFAULT_LEARNING_RATE = 1e-3
COMPOSITION_DIR = "composition"
BASELINE_DIR = "average-baseline"
# What this recipe trains: every strategy but `fixed`, which applies the adapter each example names at inference.
TRAINABLE_STRATEGIES = tuple(name for name in STRATEGIES if name != "fixed")
_NOT_A_METHOD = (
    "picks a fine-tuning method; a composition trains its router or fusion and a head over frozen adapters "
    "(choose how with --strategy)."
)


def learned(strategy: str) -> bool:
    """Whether `strategy` has parameters of its own, so that it must beat the uniform average to be worth having."""
    return STRATEGIES[strategy].learned


def parse_adapter_list(text: str) -> dict[str, str]:
    """`name=path,name=path` (how `adapters` is written on the command line) as a mapping."""
    adapters: dict[str, str] = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        name, equals, folder = (piece.strip() for piece in entry.partition("="))
        if not (equals and name and folder):
            raise ValueError(f"{entry!r} is not name=path; write name=path,name=path")
        if name in adapters:
            raise ValueError(f"the name {name!r} is given twice")
        adapters[name] = folder
    return adapters


@dataclass
class ComposeConfig:
    """Every setting of a composition run: the composition's own keys, and the sections fine-tuning has too (the task
    and its data, optimisation, checkpoints, how the run executes). YAML keys and command-line flags have exactly the
    keys' names, wherever they live; `learning_rate: null` means `DEFAULT_LEARNING_RATE`."""

    foreign_keys = {name: _NOT_A_METHOD for name in ("method", "peft_config", "method_options", "from_scratch")}

    adapters: dict = key({}, "name -> trained PEFT adapter folder (LoRA or bottleneck); or name=path,name=path",
                         parse=parse_adapter_list)  # fmt: skip
    strategy: str = key("fusion", f"{' | '.join(TRAINABLE_STRATEGIES)}: how the adapters combine")
    strategy_options: dict = key(
        {}, "the strategy's options, e.g. {granularity: sequence}, {top_k: 2}, {temperature: 2.0}, "
        "{weights: [0.7, 0.3]}; trainable_modules: modules to train beside the head"
    )
    baseline: bool = key(True, "a learned strategy: first train the head on the uniform average of the same adapters")
    output_dir: str = key("runs/compose", "where metrics, predictions, the composition and the card go")
    do_train: bool = key(True, "false = only evaluate a saved composition (--composition on --model) and write "
                         "metrics.json")  # fmt: skip
    composition: str | None = key(None, "do_train false: a saved composition folder to evaluate on --model (adapters "
                                  "and strategy are then read from it)")  # fmt: skip
    data: TaskOptions = section(TaskOptions, "what to train, on which data, formatted how")
    training: TaskTrainingOptions = section(TaskTrainingOptions, "batches, AdamW, warmup, run length, evaluations")
    checkpoints: CheckpointOptions = section(CheckpointOptions, "checkpoints to resume from, the best composition")
    run: RunOptions = section(RunOptions, "devices, precision, gradient steps, logging, seed")

    def to_dict(self) -> dict:
        """Every key, flat, as written on the command line and saved in `training_config.yaml` and checkpoints."""
        return config_dict(self)

    def model_folders(self) -> list[str]:
        """The folders of the frozen base and adapters, which each checkpoint fingerprints: a resume on another
        adapter of the same shape would train on, then fail the reload check after writing the composition."""
        return [self.data.model, *self.adapters.values()]

    def check(self) -> None:
        check_task_run(self.data, self.training, self.checkpoints, self.do_train)
        check_adapter_overrides(self.data)  # trained or evaluated, adapters run on their base as saved
        if not self.do_train:
            if self.composition is None:
                raise ValueError("config key 'composition' is required with --do_train false: the saved composition "
                                 "to evaluate (a compose run's composition/ folder).")  # fmt: skip
            return
        if self.composition is not None:
            raise ValueError("config key 'composition' names a saved composition to evaluate: use it with "
                             "--do_train false.")  # fmt: skip
        if self.strategy == "fixed":
            raise ValueError(
                "config key 'strategy': 'fixed' applies the adapter each example names at inference and has "
                "nothing to train; to train a head on one adapter alone, compose just that one with 'average'."
            )
        if self.strategy not in TRAINABLE_STRATEGIES:
            raise ValueError(
                f"config key 'strategy': unknown value {self.strategy!r}. Valid: {', '.join(TRAINABLE_STRATEGIES)}."
            )
        check_adapters(self.adapters)


def parse_args(argv: Sequence[str] | None = None) -> ComposeConfig:
    """The config from `argv` (default: `sys.argv[1:]`): YAML file, then overrides, then checks."""
    return parse_config(ComposeConfig, argv, "compose")


def check_adapters(adapters: dict[str, str]) -> None:
    """Read every adapter now, so a missing folder or an unsupported adapter fails before any data or model is
    loaded (shapes are checked against the model by `compose`)."""
    if not adapters:
        raise ValueError("config key 'adapters' is required: --adapters name=path,name=path (or a YAML mapping).")
    loaded = []
    for name, folder in adapters.items():
        try:
            loaded.append(read_adapter(name, folder))
        except (OSError, ValueError) as error:
            raise ValueError(f"config key 'adapters': {error}") from None
    recorded = [adapter for adapter in loaded if adapter.base is not None]  # hfzoo saved their base's identity
    for adapter in recorded[1:]:
        if base_differences(recorded[0].base, adapter.base):
            first = recorded[0]
            raise ValueError(
                f"config key 'adapters': {first.name!r} was trained on {describe_base(first.base)}, {adapter.name!r} "
                f"on {describe_base(adapter.base)}; compose adapters trained on the same base."
            )


# ----------------------------------------------------------------------------------------------- the recipe
def compose_adapters(config: ComposeConfig) -> Path:
    """Train the `config.strategy` composition of `config.adapters` on `config.data.task`, after the uniform-average
    baseline for the learned strategies (or, `do_train: false`, evaluate `config.composition`); returns the output
    folder."""
    # A training run never writes over its model or adapters (an evaluation writes beside them, into eval/).
    inputs = [config.data.model, config.data.tokenizer, *config.adapters.values()] if config.do_train else []
    check_output_outside_inputs(config.output_dir, inputs)

    # --- Accelerator: one for both runs (ending it ends the process group). A seedable sampler reshuffles each epoch
    # from (seed, epoch), so a resumed run sees the same order. The output folder is checked on every process before
    # any writes (the baseline's may hold its checkpoints); evaluation only writes into output_dir/eval/.
    accelerator = config.run.accelerator(seedable_data=True)
    output_dir = run_output(config.output_dir, config.do_train, config.run.overwrite_output_dir, "compose",
                            accelerator, [Path(config.output_dir) / BASELINE_DIR],
                            config.checkpoints.resume)  # fmt: skip
    config = dataclasses.replace(config, output_dir=str(output_dir))

    # --- The baseline (a learned strategy's): the uniform average of the same adapters, with the same head, data,
    # steps and seed, in its own folder; then the composition itself.
    baseline = None
    if config.do_train and config.baseline and learned(config.strategy):
        options = {key: value for key, value in config.strategy_options.items() if key == "trainable_modules"}
        checkpoints = dataclasses.replace(config.checkpoints, resume=bool(config.checkpoints.resume))
        baseline = run_composition(
            dataclasses.replace(
                config, strategy="average", strategy_options=options, baseline=False,
                output_dir=str(output_dir / BASELINE_DIR), checkpoints=checkpoints,
            ),
            accelerator,
        )  # fmt: skip
    run_composition(config, accelerator, baseline)
    accelerator.end_training()
    return output_dir


def run_composition(config: ComposeConfig, accelerator: Accelerator, baseline: dict | None = None) -> dict:
    """One composition run, read top to bottom (`do_train: false`: `config.composition` rebuilt on `config.data.model`
    by `load_composition`, which refuses another base, and evaluated); returns its metrics.json content (resumed from
    its last step's checkpoint, nothing to do: the one it wrote then)."""
    data, training, run = config.data, config.training, config.run
    output_dir = Path(config.output_dir)

    # --- Examples, tokenizer, and the model with a fresh head, exactly as fine-tuning prepares them (seeded: the
    # baseline's head starts where the learned composition's does); a changed resumed run refused.
    task, train_examples, eval_examples = read_task_examples(config, accelerator)
    tokenizer = load_tokenizer(data)
    model, family, missing = load_task_model(data, task, tokenizer)
    base_model = model.name_or_path

    # --- The composition: base and adapters frozen; the routers or fusion and the head (trainable_modules) train.
    # Evaluation only: the saved one.
    if config.do_train:
        composed = compose_for_task(model, config, head_modules(model, missing) if task.trains_head else [])
    else:
        composed = load_composition(model, config.composition)
    composed.check_base_weights(data.allow_other_base)
    strategy, method = composed.strategy, f"{composed.strategy}-composition"
    parameters = count_trainable_parameters(composed)
    log_trainable(f"{strategy} composition of {', '.join(a.name for a in composed.adapters)} on {data.model}",
                  parameters)  # fmt: skip

    # --- Features: token ids and targets laid out for the family (see hfzoo/tasks/task.py). Evaluation only: metrics
    # and predictions, no card (this folder holds no composition).
    eval_features = task.encode(eval_examples, training=False)
    summary = partial(run_summary, task, base_model, method, parameters, train_examples=len(train_examples),
                      eval_examples=len(eval_examples), output_dir=output_dir, imported=data.import_native)
    if not config.do_train:
        evaluated = evaluate_only(config, task, composed, eval_examples, eval_features, accelerator, family=family,
                                  strategy=strategy, composition=config_path(config.composition),
                                  train_examples=len(train_examples), **parameters)  # fmt: skip
        results = summary(evaluated) | {"composition": describe(composed, strategy, output_dir)}
        write_results(accelerator, output_dir, tokenizer, config.to_dict(), results, evaluated.records, None)
        return results
    train_features = task.encode(train_examples, training=True)

    # --- AdamW on what is trainable; the Accelerator wraps model, optimizer and batches (its objects from the
    # baseline's run forgotten, so that checkpoints hold this run's); linear warmup, then cosine decay to zero.
    accelerator.free_memory()
    forget_checkpointed_objects(accelerator)
    learning_rate = training.learning_rate if training.learning_rate is not None else DEFAULT_LEARNING_RATE
    # `--sharding fsdp`: each transformer block of the base one FSDP unit, before the optimizer sees the weights;
    # unsharded on a CPU, the CPU layouts (hfzoo.core.cpu_layout).
    composed = ready_for_training(composed, accelerator, run.sharding)
    batches = train_loader(train_features, training.per_device_batch_size, run.seed, training.group_by_length)
    optimizer = build_optimizer(composed, learning_rate, training.weight_decay, (0.9, 0.999), 1e-8,
                                optimizer=training.optimizer, muon_learning_rate=training.muon_learning_rate)
    composed, optimizer, batches = prepare(accelerator, composed, optimizer, batches)
    steps_per_epoch, max_steps, warmup_steps = run_length(len(batches), training, run.gradient_accumulation_steps)
    scheduler = build_scheduler(optimizer, warmup_steps, max_steps, 0.0)
    accelerator.register_for_checkpointing(scheduler)

    # --- Checkpoints and the best composition (save_best, into best/composition/); a resumed run continues exactly.
    save_model = partial(save_composition, accelerator, composed)
    trainer = TaskTraining(config, accelerator, task, save_model, max_steps)
    if trainer.nothing_to_do():  # its metrics.json was written before its last step's checkpoint
        return read_json_file(output_dir / METRICS_FILE)

    # --- The loop: micro-batches accumulate into optimizer steps (clipped, scheduled, counted and logged by
    # `steps`); after each step, the trainer saves the composition after the last one, evaluates every eval_every
    # steps and at the end, and checkpoints every save_every (hfzoo.training.task_run).
    fields = {"family": family, "strategy": strategy, "adapters": config_paths(config.adapters),
              "train_examples": len(train_examples), **parameters}  # fmt: skip
    steps = trainer.start(composed, scheduler, batches, len(train_features), eval_examples, eval_features, **fields)
    smoothed = smoothed_loss_function(task, accelerator, training.label_smoothing)
    for batch in steps:
        with accelerator.accumulate(composed):
            loss = composed(**batch).loss if smoothed is None else smoothed(composed, batch)
            steps.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        if steps.stepped(loss, batch):
            trainer.between_steps()
    trained_run = trainer.finish(steps_per_epoch)
    trained: ComposedModel = accelerator.unwrap_model(composed)

    # --- Rebuild the saved composition on a fresh base, then metrics, predictions and the card.
    reload = check_reload(config, task, trained, eval_examples, eval_features, trained_run.records, accelerator)
    results = summary(trained_run) | {
        "composition": describe(trained, strategy, output_dir),
        "baselines": baselines(baseline, majority_class_accuracy(train_examples, eval_examples)),
        "reload_check": reload,
    }
    write_results(accelerator, output_dir, tokenizer, config.to_dict(), results, trained_run.records,
                  composition_sections(COMPOSITION_DIR))  # fmt: skip
    if not all(reload.values()):
        raise RuntimeError(f"{output_dir / COMPOSITION_DIR} does not reload to the trained composition: {reload}")
    trainer.checkpoint_last_step()  # last, and only for a composition that reloads: a resume there has nothing to do
    return results


def save_composition(accelerator: Accelerator, prepared, folder: Path) -> None:
    """Save the trained composition into `folder`/composition (called by every process when training is done,
    before the final evaluation, and at each best evaluation with `save_best`)."""
    accelerator.wait_for_everyone()
    with whole_for_saving(prepared) as whole:  # `--sharding fsdp`: the weights gathered on the main process
        if accelerator.is_main_process:
            accelerator.unwrap_model(prepared).save_pretrained(folder / COMPOSITION_DIR, state_dict=whole)
    accelerator.wait_for_everyone()


# ----------------------------------------------------------------------------------------------- its steps
def compose_for_task(model: PreTrainedModel, config: ComposeConfig, heads: list[str]) -> ComposedModel:
    """`compose()` the configured adapters on `model` with `heads` (and any configured `trainable_modules`) trained;
    an adapter that does not fit the model raises an error naming it, the module and the shapes."""
    options = dict(config.strategy_options)
    trainable = [*heads, *options.pop("trainable_modules", [])]
    composed = compose(model, config.adapters, config.strategy, trainable_modules=trainable, **options)
    if not any(p.requires_grad for p in composed.parameters()):
        composed.unload()
        raise ValueError(
            f"nothing to train: task {config.data.task!r} has no head on this model and an 'average' composition has "
            "no parameters; name modules in strategy_options.trainable_modules"
        )
    return composed


def learned_modules(composed: ComposedModel) -> list[str]:
    """The adapted modules where the composition has parameters (a router or fusion layer)."""
    return [path for path, layer in composed.composed_layers.items() if any(True for _ in layer.combiner.parameters())]


def check_reload(
    config: ComposeConfig, task: Task, trained: ComposedModel, eval_examples: list, eval_features: list[dict],
    records: list[dict], accelerator: Accelerator,
) -> dict[str, bool]:  # fmt: skip
    """Rebuild the saved composition on a freshly loaded base model, as a user would (`load_composition`), and
    compare: every parameter (so the frozen base and adapters did not move) and every validation prediction."""
    base, _, _ = load_model(config.data, task, task.tokenizer)
    reloaded = load_composition(base, Path(config.output_dir) / COMPOSITION_DIR).to(accelerator.device)
    expected, found = whole_state_dict(trained), reloaded.state_dict()
    same_parameters = expected.keys() == found.keys() and all(torch.equal(v, found[k]) for k, v in expected.items())
    batch_size = config.training.eval_batch_size or config.training.per_device_batch_size
    with accelerator.autocast():  # as the prepared model predicted
        outputs = predict_all(task, reloaded, eval_features, accelerator, batch_size)
    _, reloaded_records = task.finish(eval_examples, eval_features, outputs)
    return {"parameters_equal": same_parameters, "predictions_equal": reloaded_records == records}


def describe(composed: ComposedModel, strategy: str, output_dir: str | Path) -> dict[str, Any]:
    """metrics.json's account of the composition: strategy, options, adapters (their folders relative to
    `output_dir`, which holds metrics.json), what trained where."""
    return {
        "strategy": strategy,
        "options": composed.options,
        "adapters": [
            {"name": a.name, "kind": a.kind, "rank": a.rank, "modules": len(a.modules),
             "folder": recorded_path(a.folder, output_dir)}
            for a in composed.adapters
        ],
        "composed_modules": len(composed.composed_layers),
        "learned_modules": len(learned_modules(composed)),
        "trainable_modules": composed.trainable_modules,
    }


def baselines(average: dict | None, majority: float | None) -> dict[str, dict]:
    """The comparison rows: the uniform average of the same adapters (its metrics.json) and the majority class."""
    rows = {}
    if average is not None:
        keys = [*FINETUNE_METRICS, "trainable_parameters", "trainable_fraction"]
        rows["average"] = {key: average[key] for key in keys if key in average} | {"output_dir": BASELINE_DIR}
    if majority is not None:
        rows["majority_class"] = {"accuracy": majority, "trainable_parameters": 0}
    return rows


def main(argv: Sequence[str] | None = None) -> Path:
    """Entry point of `recipes/compose.py` and `hfzoo compose`: parse `argv`, then `compose_adapters`. A checkpoint
    that cannot resume the run (a file missing or altered, a changed config) exits with what is wrong."""
    config = start_recipe(ComposeConfig, argv, "compose")
    with exit_on_checkpoint_error("compose"), holding_run_folder(config.output_dir, "compose"):
        return compose_adapters(config)
