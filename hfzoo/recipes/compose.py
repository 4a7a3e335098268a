"""Compose trained task adapters for a new task: the base model and the adapters (PEFT folders, LoRA or bottleneck)
stay frozen; a learned router or AdapterFusion (`hfzoo.adapters.compose`) and a fresh task head train on the target
task with the fine-tuning recipe's data formatting, loop and metrics (`hfzoo.training.task_runs`).

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
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from transformers import PreTrainedModel

from ..adapters import STRATEGIES, ComposedModel, compose, load_composition, read_adapter
from ..adapters.composition.task_adapter import base_differences, describe_base
from ..cards import FINETUNE_METRICS, composition_sections
from ..data.recorded_paths import recorded_path
from ..recipe_config import key, parse_config
from ..tasks import Task
from ..tasks.baselines import majority_class_accuracy
from ..training.checkpointing import exit_on_checkpoint_error
from ..training.evaluation import predict_all
from ..training.logging import start_recipe
from ..training.methods import count_trainable_parameters, head_modules
from ..training.sharding import whole_for_saving, whole_state_dict
from ..training.task_runs import (
    TaskRunOptions,
    evaluate_only,
    load_model,
    log_trainable,
    prepare_run,
    run_output,
    run_summary,
    train_and_evaluate,
    write_results,
)

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
class ComposeConfig(TaskRunOptions):
    """Every setting of a composition run: the task and its data, optimisation and outputs as fine-tuning has them,
    and the composition's own keys. YAML keys and command-line flags have exactly these names; `learning_rate: null`
    means `DEFAULT_LEARNING_RATE`."""

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
    composition: str | None = key(None, "do_train false: a saved composition folder to evaluate on --model (adapters "
                                  "and strategy are then read from it)")  # fmt: skip

    def check(self) -> None:
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
    """Train the `config.strategy` composition of `config.adapters` on `config.task`, after the uniform-average
    baseline for the learned strategies; returns the output folder."""
    # One for both runs (ending it ends the process group). A seedable sampler reshuffles each epoch from (seed,
    # epoch), so a resumed run sees the same order.
    accelerator = config.accelerator(seedable_data=True)
    config = run_output(config, "compose", accelerator, [Path(config.output_dir) / BASELINE_DIR])
    if not config.do_train:  # into output_dir/eval/
        evaluate_composition(config, accelerator)
        accelerator.end_training()
        return Path(config.output_dir)
    baseline = None
    if config.baseline and learned(config.strategy):
        options = {key: value for key, value in config.strategy_options.items() if key == "trainable_modules"}
        baseline = train_composition(
            dataclasses.replace(
                config, strategy="average", strategy_options=options, baseline=False,
                output_dir=str(Path(config.output_dir) / BASELINE_DIR), resume=bool(config.resume),
            ),
            accelerator,
        )  # fmt: skip
    train_composition(config, accelerator, baseline)
    accelerator.end_training()
    return Path(config.output_dir)


def _save_composition(accelerator: Accelerator, prepared, folder: Path) -> None:
    """Save the trained composition (called by every process when training is done, before the final evaluation,
    and at each best evaluation with `save_best`)."""
    accelerator.wait_for_everyone()
    with whole_for_saving(prepared) as whole:  # `--sharding fsdp`: the weights gathered on the main process
        if accelerator.is_main_process:
            accelerator.unwrap_model(prepared).save_pretrained(folder, state_dict=whole)
    accelerator.wait_for_everyone()


def train_composition(config: ComposeConfig, accelerator: Accelerator, baseline: dict | None = None) -> dict | None:
    """One composition run, read top to bottom; returns its metrics.json content (None: resumed from a checkpoint at
    the last step, nothing done)."""
    output_dir = Path(config.output_dir)

    # --- Examples, tokenizer, and the model with a fresh head, exactly as fine-tuning prepares them (seeded: the
    # baseline's head starts where the learned composition's does).
    task, train_examples, eval_examples, model, missing = prepare_run(config, accelerator)
    tokenizer, family, base_model = task.tokenizer, task.family, model.name_or_path

    # --- The composition: base and adapters frozen; the routers or fusion and the head (trainable_modules) train.
    composed = compose_for_task(model, config, head_modules(model, missing) if task.trains_head else [])
    parameters = count_trainable_parameters(composed)
    log_trainable(f"{config.strategy} composition of {', '.join(config.adapters)} on {config.model}", parameters)

    # --- Features, then the shared loop: AdamW on what is trainable, evaluation, log.jsonl.
    train_features = task.encode(train_examples, training=True)
    eval_features = task.encode(eval_examples, training=False)
    # The composition is saved when training is done, before the final evaluation: a failure there keeps it.
    learning_rate = config.learning_rate if config.learning_rate is not None else DEFAULT_LEARNING_RATE
    run = train_and_evaluate(
        config, task, composed, train_features, eval_examples, eval_features, accelerator, learning_rate,
        lambda prepared, folder: _save_composition(accelerator, prepared, folder / COMPOSITION_DIR),
        family=family, strategy=config.strategy, adapters=config.adapters,
        train_examples=len(train_examples), **parameters,
    )  # fmt: skip
    if run is None:
        return None
    trained: ComposedModel = accelerator.unwrap_model(run.model)

    # --- Rebuild the saved composition on a fresh base, then metrics, predictions and the card.
    reload = check_reload(config, task, trained, eval_examples, eval_features, run.records, accelerator)
    method = f"{config.strategy}-composition"
    summary = run_summary(task, base_model, method, parameters, run, len(train_examples), len(eval_examples),
                          output_dir, config.import_native)  # fmt: skip
    summary["composition"] = describe(trained, config.strategy, output_dir)
    summary["baselines"] = baselines(baseline, majority_class_accuracy(train_examples, eval_examples))
    summary["reload_check"] = reload
    if accelerator.is_main_process:
        write_results(output_dir, tokenizer, config, summary, run.records, composition_sections(COMPOSITION_DIR))
    accelerator.wait_for_everyone()
    if not all(reload.values()):
        raise RuntimeError(f"{output_dir / COMPOSITION_DIR} does not reload to the trained composition: {reload}")
    return summary


def evaluate_composition(config: ComposeConfig, accelerator: Accelerator) -> dict:
    """`do_train: false`: rebuild `config.composition` on `config.model` (`load_composition`, which refuses another
    base) and evaluate it; returns the metrics.json content written to `config.output_dir`."""
    task, train_examples, eval_examples, model, _ = prepare_run(config, accelerator)
    base_model = model.name_or_path
    composed = load_composition(model, config.composition)
    parameters = count_trainable_parameters(composed)
    eval_features = task.encode(eval_examples, training=False)
    run = evaluate_only(
        config, task, composed, eval_examples, eval_features, accelerator, family=task.family,
        strategy=composed.strategy, composition=config.composition, train_examples=len(train_examples), **parameters,
    )  # fmt: skip
    method = f"{composed.strategy}-composition"
    summary = run_summary(task, base_model, method, parameters, run, len(train_examples), len(eval_examples),
                          config.output_dir, config.import_native)  # fmt: skip
    summary["composition"] = describe(composed, composed.strategy, config.output_dir)
    if accelerator.is_main_process:
        write_results(Path(config.output_dir), task.tokenizer, config, summary, run.records, None)
    accelerator.wait_for_everyone()
    return summary


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
            f"nothing to train: task {config.task!r} has no head on this model and an 'average' composition has no "
            "parameters; name modules in strategy_options.trainable_modules"
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
    base, _, _ = load_model(config, task, task.tokenizer)
    reloaded = load_composition(base, Path(config.output_dir) / COMPOSITION_DIR).to(accelerator.device)
    expected, found = whole_state_dict(trained), reloaded.state_dict()
    same_parameters = expected.keys() == found.keys() and all(torch.equal(v, found[k]) for k, v in expected.items())
    batch_size = config.eval_batch_size or config.per_device_batch_size
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
    with exit_on_checkpoint_error("compose"):
        return compose_adapters(config)
