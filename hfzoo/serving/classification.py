"""`POST /v1/classify`: classification and tagging adapters, served beside the completions and batched across adapters.

A classification adapter is a PEFT adapter whose `task_type` is SEQ_CLS or TOKEN_CLS, with its own copy of the head
(`modules_to_save`). Where `hfzoo finetune` trained it, its run's files give the label names (`metrics.json`) and the
input format (`training_config.yaml`: max_length, text pairs), so an input is laid out exactly as that run's
evaluation laid it out, by the task's own `encode`; an adapter saved by other tools gets transformers' `LABEL_<i>`
names and the task's default max_length (at most the model's context). An input that would be truncated is
refused, not cut.

Fixed routing stacks the adapters' heads per row, which needs one head shape, so adapters are grouped by head (task
and label count). Each group is one model of the base with that head and the group's adapters composed
(`compose_fixed`); a saved composition trained for a classification task by `hfzoo compose` (learned routing,
fusion) is a group of its own. Each weight of a group's model equal to one already held (the generating model's,
another group's) shares that tensor (`share_weights`), so the base is held once. Inputs that arrive within
`max_wait_ms` of an idle engine are classified together: one forward per group present, whatever adapter each
input names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..adapters.composition import ComposedModel, load_composition
from ..adapters.composition.model import COMPOSITION_CONFIG
from ..adapters.composition.task_adapter import ADAPTER_CONFIG, base_identity, read_adapter
from ..commands.compose import COMPOSITION_DIR
from ..core.recipe_config import CONFIG_FILE, from_dict, load_yaml
from ..generation import compose_fixed
from ..models.checkpoint_files import read_json_file
from ..tasks import TASK_CLASSES, Task, TaskOptions
from ..tasks.sequence_classification import ClassificationExample
from ..tasks.token_classification import TaggedSentence
from ..training.task_model import load_model
from ..training.task_results import METRICS_FILE
from .scheduler import EngineThread, QueueFull

CLASSIFYING_TASKS = {"SEQ_CLS": "sequence-classification", "TOKEN_CLS": "token-classification"}


def classifying_task(folder: str | Path) -> str | None:
    """The task of the adapter in `folder` if it classifies (by its PEFT task_type), else None."""
    config_file = Path(folder) / ADAPTER_CONFIG
    return CLASSIFYING_TASKS.get(read_json_file(config_file).get("task_type")) if config_file.is_file() else None


def composition_folders(path: str | Path) -> tuple[Path, Path | None]:
    """(the saved composition, the `hfzoo compose` run that trained it, if any) of `path`, which is either."""
    path = Path(path)
    if (path / COMPOSITION_DIR / COMPOSITION_CONFIG).is_file():
        return path / COMPOSITION_DIR, path
    if (path / COMPOSITION_CONFIG).is_file():
        return path, path.parent if (path.parent / CONFIG_FILE).is_file() else None
    raise FileNotFoundError(f"{path} holds no saved composition ({COMPOSITION_CONFIG}, or a compose run's "
                            f"{COMPOSITION_DIR}/)")  # fmt: skip


def composition_task(path: str | Path) -> str | None:
    """The task of the composition at `path` if its compose run trained it to classify, else None."""
    _, run = composition_folders(path)
    task = run_options(run).task if run is not None else None
    return task if task in CLASSIFYING_TASKS.values() else None


def run_options(run: Path) -> TaskOptions:
    """The task options a finetune or compose run recorded in its (flat) `training_config.yaml`; its other keys are
    not read, so the folders it trained from (adapters, data) need not be here."""
    names = {field.name for field in dataclasses.fields(TaskOptions)}
    return from_dict(TaskOptions, {k: v for k, v in load_yaml(run / CONFIG_FILE).items() if k in names})


def share_weights(model: PreTrainedModel | ComposedModel, held: list[PreTrainedModel | ComposedModel]) -> None:
    """Let each weight of `model` that equals one of `held`'s (by name and value) use that tensor, so that models of
    one base with other heads or compositions hold the base once."""
    weights: dict[str, torch.Tensor] = {}
    for other in held:
        weights.update((name, p) for name, p in _base_weights(other).items() if name not in weights)
    for name, parameter in _base_weights(model).items():
        other = weights.get(name)
        if other is not None and other.shape == parameter.shape and torch.equal(other, parameter):
            parameter.data = other.data


def _base_weights(model: PreTrainedModel | ComposedModel) -> dict[str, torch.Tensor]:
    """The parameters of the base under its compositions, by the names they have in the plain model."""
    plain = model.base_model if isinstance(model, ComposedModel) else model
    return {name.replace(".base_layer.", "."): p for name, p in plain.named_parameters()}


@dataclass
class Classifier:
    """One served classification adapter: its task (bound to the tokenizer, formatting as its run did) and labels."""

    name: str
    folder: str  # the adapter, or the saved composition
    task: Task
    max_length: int  # the longest input it takes untruncated
    pairs: bool | None  # trained on text pairs, on single texts, or not known (not trained by hfzoo finetune)
    composition: bool = False

    @property
    def labels(self) -> list[str]:
        return self.task.labels

    @property
    def head(self) -> tuple[str, int]:
        """The group it is served in: adapters whose heads have one shape share a model; a composition has its own."""
        return (f"composition {self.name}" if self.composition else self.task.name), len(self.task.labels)

    def encode(self, texts: list[str], pairs: list[str] | None) -> list[dict]:
        """The features of each input, as the adapter's run encoded its validation examples; `ValueError` naming
        the first input that would be truncated."""
        labels = self.labels
        if self.task.name == "token-classification":
            examples = [TaggedSentence(text.split(), [labels[0]] * len(text.split()), f"input {i}")
                        for i, text in enumerate(texts)]  # fmt: skip
        else:
            examples = [ClassificationExample(text, pair, labels[0], f"input {i}")
                        for i, (text, pair) in enumerate(zip(texts, pairs or [None] * len(texts)))]  # fmt: skip
        features = self.task.encode(examples, training=False)  # at max_length + 1: a longer input shows
        for index, feature in enumerate(features):
            if len(feature["input_ids"]) > self.max_length:
                raise ValueError(f"input {index} is longer than the {self.max_length} tokens adapter {self.name!r} "
                                 "reads; shorten it")  # fmt: skip
        return features


def read_classifier(name: str, folder: str, model_path: str, tokenizer: PreTrainedTokenizerBase, family: str,
                    context_length: int, composition: bool = False) -> Classifier:  # fmt: skip
    """The classification adapter in `folder` (or with `composition`, the composition trained by the compose run
    or saved composition at `folder`) for the base `model_path`, whose inputs fit in `context_length` tokens;
    `ValueError` naming what is missing."""
    if composition:
        kept, run = composition_folders(folder)
        task_name = composition_task(folder)
    else:
        kept, run, task_name = Path(folder), Path(folder), classifying_task(folder)
    if task_name is None:
        what = "a composition trained by hfzoo compose for" if composition else "an adapter (task_type) of"
        raise ValueError(f"{name!r} ({folder}) is not {what} classification or tagging")
    if family == "encoder_decoder":
        raise ValueError(f"{name!r}: an encoder-decoder classifies by generating its label words, which hfzoo serve "
                         "does not serve")  # fmt: skip
    if run is not None and (run / CONFIG_FILE).is_file():
        options = run_options(run)
        if options.task != task_name:
            raise ValueError(f"adapter {name!r}: its {CONFIG_FILE} says task {options.task!r}, its adapter_config.json "
                             f"{task_name!r}")  # fmt: skip
        pairs = options.text_pair_column is not None
    else:
        options, pairs = TaskOptions(model=model_path, task=task_name), None
    max_length = min(options.max_length, context_length)
    options = dataclasses.replace(options, model=model_path, max_length=max_length + 1, import_native=False)
    task = TASK_CLASSES[task_name](options)
    task.labels = _labels(name, run, kept)
    task.bind(tokenizer, family)
    return Classifier(name, str(kept), task, max_length, pairs, composition)


def _labels(name: str, run: Path | None, adapter: Path) -> list[str]:
    """The label names its run recorded, else transformers' `LABEL_<i>` for each row of the adapter's saved head."""
    metrics = run / METRICS_FILE if run is not None else None
    recorded = None
    if metrics is not None and metrics.is_file():
        recorded = read_json_file(metrics).get("model_kwargs", {}).get("id2label")
    if recorded:
        return [recorded[str(index)] for index in range(len(recorded))]
    heads = [params["weight"] for params in read_adapter(name, adapter).heads.values() if "weight" in params]
    if not heads:
        raise ValueError(f"adapter {name!r} ({adapter}) saves no head of its own (modules_to_save): a classification "
                         "adapter needs one")  # fmt: skip
    return [f"LABEL_{index}" for index in range(heads[0].shape[0])]


@dataclass(eq=False)
class Item:
    """One input: its adapter, its features, and the future its class probabilities are set on."""

    classifier: Classifier
    feature: dict
    future: Future = dataclasses.field(default_factory=Future)


class ClassifyEngine(EngineThread):
    """The classification adapters' models (one per head shape), and the thread that runs their forwards."""

    def __init__(
        self,
        model_path: str,
        family: str,
        tokenizer: PreTrainedTokenizerBase,
        device: torch.device | str,
        context_length: int,
        held: Sequence[PreTrainedModel | ComposedModel] = (),
        max_batch_size: int = 16,
        max_wait_ms: float = 10.0,
        max_queue: int = 256,
    ) -> None:
        super().__init__(max_batch_size, max_wait_ms, max_queue)
        self.model_path, self.family, self.tokenizer, self.device = model_path, family, tokenizer, torch.device(device)
        self.context_length = context_length
        self.classifiers: dict[str, Classifier] = {}
        self.models: dict[tuple[str, int], PreTrainedModel | ComposedModel] = {}
        self.held = list(held)  # the generating models, whose weights the groups share
        self.forwards = 0
        self._start("hfzoo-serve-classify")

    # ---------------------------------------------------------------------------------------- called by the server
    def submit(self, classifier: Classifier, features: list[dict]) -> list[Future]:
        """Queue one input per feature; raises `QueueFull` (nothing queued) past `max_queue`."""
        items = [Item(classifier, feature) for feature in features]
        with self.condition:
            if classifier.name not in self.classifiers:
                raise KeyError(classifier.name)
            if len(self.waiting) + len(items) > self.max_queue:
                raise QueueFull(f"{len(self.waiting)} inputs are waiting to be classified")
            self.waiting.extend(items)
            self.condition.notify()
        return [item.future for item in items]

    def add(self, name: str, folder: str) -> Future:
        """Serve the adapter in `folder` as `name`; a refusal (not a classifier, does not fit the base) leaves every
        served model as it was."""

        def add() -> Classifier:
            classifier = read_classifier(name, folder, self.model_path, self.tokenizer, self.family,
                                         self.context_length)  # fmt: skip
            self._compose(classifier.head, {**self._folders(classifier.head), name: folder}, classifier.task)
            self.classifiers[name] = classifier
            return classifier

        return self._between_steps(add)

    def add_composition(self, name: str, path: str) -> Future:
        """Serve the composition trained for classification at `path` (a compose run or its saved composition)."""

        def add() -> Classifier:
            classifier = read_classifier(name, path, self.model_path, self.tokenizer, self.family, self.context_length,
                                         composition=True)
            model = self._load(classifier.task)
            base = base_identity(model)  # read before the composition's heads change the model
            composed = load_composition(model, classifier.folder)
            composed.check_base_weights(False, base)
            self.models[classifier.head] = composed
            self.classifiers[name] = classifier
            return classifier

        return self._between_steps(add)

    def remove(self, name: str) -> Future:
        def remove() -> None:
            if any(item.classifier.name == name for item in self.waiting):
                raise ValueError(f"adapter {name!r} is still named by queued inputs; retry when they are done")
            classifier = self.classifiers.pop(name)
            if classifier.composition:
                del self.models[classifier.head]
            else:
                self._compose(classifier.head, self._folders(classifier.head), None)

        return self._between_steps(remove)

    # ------------------------------------------------------------------------------------------ the engine thread
    def _folders(self, head: tuple[str, int]) -> dict[str, str]:
        return {c.name: c.folder for c in self.classifiers.values() if c.head == head and not c.composition}

    def _compose(self, head: tuple[str, int], adapters: dict[str, str], task: Task | None) -> None:
        """The group `head` with `adapters` composed (dropped when none are left); unchanged if that fails."""
        model = self.models.get(head)
        if model is None:
            model = self._load(task)
        base = model.unload() if isinstance(model, ComposedModel) else model
        try:
            composed = compose_fixed(base, adapters) if adapters else None
        except Exception:
            if head in self.models:
                self.models[head] = compose_fixed(base, self._folders(head))
            raise
        if composed is None:
            self.models.pop(head, None)
        else:
            self.models[head] = composed

    def _load(self, task: Task) -> PreTrainedModel:
        """The base with `task`'s head, its weights sharing the tensors of equal weights already held."""
        model, _, _ = load_model(task.config, task, self.tokenizer)
        model = model.to(self.device).eval()
        share_weights(model, [*self.held, *self.models.values()])
        return model

    def _loop(self) -> None:
        while True:
            with self.condition:
                self._next_work(busy=False)
                batch = [self.waiting.popleft() for _ in range(min(self.max_batch_size, len(self.waiting)))]
            groups: dict[tuple[str, int], list[Item]] = {}
            for item in batch:
                groups.setdefault(item.classifier.head, []).append(item)
            for head, items in groups.items():
                try:
                    for item, probabilities in zip(items, self._forward(head, items)):
                        item.future.set_result(probabilities)
                except Exception as error:  # a failed forward fails its inputs, not the server
                    for item in items:
                        if not item.future.done():
                            item.future.set_exception(error)

    def _forward(self, head: tuple[str, int], items: list[Item]) -> list[torch.Tensor]:
        """Each input's label probabilities: [labels], or [tokens, labels] for tagging."""
        task = items[0].classifier.task
        batch = {key: value.to(self.device) for key, value in task.collate([item.feature for item in items]).items()}
        batch.pop("labels", None)
        routing = {} if items[0].classifier.composition else {"adapter_names": [i.classifier.name for i in items]}
        with torch.inference_mode():
            logits = self.models[head](**batch, **routing).logits.float()
        self.forwards += 1
        probabilities = torch.softmax(logits, dim=-1).cpu()
        lengths = [len(item.feature["input_ids"]) for item in items]
        return [p[:length] if p.dim() == 2 else p for p, length in zip(probabilities, lengths)]
