"""Loading a checkpoint whose weights must match its config: a weight the config declares but the file lacks, or one
the file holds but the config does not declare, is an error naming the file and the keys.

transformers initialises every weight its file lacks and drops every one it does not use, and only says so in a load
report (a table logged as a warning). A `config.json` declaring 4 layers over weights for 2 then loads with two random
layers, which fine-tuning would train as if they were a new head. Here the checkpoint's own class (the `architectures`
its config names) decides: a missing weight that class has should have been in the file (an error); one it lacks is
new for the task (a classifier, BERT's pooler over a masked-LM checkpoint) and is named in one line. A weight the file
holds in the body (`base_model_prefix`) that the model has no place for is an error; one outside it is the
checkpoint's own head the task replaces (a masked-LM head under a classifier), and so is a body weight the
checkpoint's class has but the task's model leaves out (BERT's pooler under a token-classification head), which
are named in one line too. transformers' table is held back for these loads and shown only when the load fails
otherwise. Weights of another shape (an edited `intermediate_size`) are refused too, naming the keys and both shapes.

Not imported by the modeling files, so not copied next to checkpoints.
"""

from __future__ import annotations

import copy
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from transformers import PreTrainedModel

from .checkpoint_files import CONFIG_NAME, CheckpointFileError, read_json_file, weight_files

logger = logging.getLogger(__name__)
_REPORT_LOGGER = "transformers.modeling_utils"  # the logger `log_state_dict_report` writes its table to


def load_checked(model_class, source: str | os.PathLike, **kwargs) -> tuple[PreTrainedModel, list[str]]:
    """`model_class.from_pretrained(source, **kwargs)` from safetensors only, refusing weights that do not match the
    config (`CheckpointFileError` naming the file and the keys). Returns (model, the keys it initialised as new for
    the task, which are logged in one line)."""
    with _load_report_held():
        # Mismatched shapes load as new weights here, and `check_loaded_keys` refuses them naming keys and shapes.
        model, loading = model_class.from_pretrained(
            source, output_loading_info=True, use_safetensors=True, ignore_mismatched_sizes=True, **kwargs
        )
    new, unused = check_loaded_keys(model, loading, source)
    report = [f"new for the task, initialised: {', '.join(_grouped(new))}"] if new else []
    if unused:
        report.append(f"in the checkpoint, not used: {', '.join(_grouped(unused))}")
    if report:  # not naming `source`: for `import_native` it is a temporary folder
        logger.info("%s: %s", type(model).__name__, "; ".join(report))
    return model, new


def check_loaded_keys(model: PreTrainedModel, loading: dict, source: str | os.PathLike) -> tuple[list[str], list[str]]:
    """(the new keys, the checkpoint's unused head keys) of a load with `output_loading_info`; raises
    `CheckpointFileError` naming the file and the keys where the weights do not match the config."""
    prefix = f"{model.base_model_prefix}." if model.base_model_prefix else ""
    own = _checkpoint_class_keys(model, prefix)
    body = {name for name, _ in model.base_model.named_children()} if prefix else set()

    def in_body(key: str) -> bool:
        return key.startswith(prefix) or key.split(".")[0] in body

    new, lacking = [], []
    for key in sorted(loading["missing_keys"]):
        in_checkpoint_class = key.removeprefix(prefix) in own if own is not None else in_body(key)
        (lacking if in_checkpoint_class else new).append(key)
    undeclared, unused = [], []
    for key in sorted(loading["unexpected_keys"]):
        # A body weight of the checkpoint's own class that the task's model leaves out (BERT's pooler under a
        # token-classification or QA head) is declared, and dropped like a replaced head.
        declared = own is not None and key.removeprefix(prefix) in own
        (undeclared if in_body(key) and not declared else unused).append(key)
    reshaped = [f"{key} {list(saved)} where the config makes {list(built)}"
                for key, saved, built in sorted(loading.get("mismatched_keys") or [])]  # fmt: skip
    if lacking or undeclared or reshaped:
        problems = [f"{len(reshaped)} weights have other shapes ({listed_keys(reshaped)})"] if reshaped else []
        if lacking:
            problems.append(
                f"its config declares {len(lacking)} weights the file lacks: {listed_keys(_grouped(lacking))}"
            )
        if undeclared:
            problems.append(
                f"it holds {len(undeclared)} weights its config does not declare: {listed_keys(_grouped(undeclared))}"
            )
        raise CheckpointFileError(
            f"{_weights_named(source)} does not match {Path(source) / CONFIG_NAME}: {'; '.join(problems)}. The config "
            "was edited or belongs to another checkpoint (e.g. num_hidden_layers, intermediate_size); loading would "
            "put random weights in their place. Use the config saved with these weights."
        )
    return new, unused


def _checkpoint_class_keys(model: PreTrainedModel, prefix: str) -> set[str] | None:
    """The state-dict keys (without `prefix`) of the class the checkpoint's config names (`architectures`), built on
    the meta device with the model's config; None when that class is not beside the model's own (another model type),
    so the body stands for it."""
    names = getattr(model.config, "architectures", None) or []
    module = sys.modules.get(type(model).__module__)
    checkpoint_class = getattr(module, names[0], None) if names else None
    if checkpoint_class is None:
        return None
    if checkpoint_class is type(model):
        return {key.removeprefix(prefix) for key in model.state_dict()}
    with torch.device("meta"):
        built = checkpoint_class(copy.deepcopy(model.config))
    return {key.removeprefix(prefix) for key in built.state_dict()}


def _weights_named(source: str | os.PathLike) -> str:
    """The weight file(s) of a local checkpoint folder as a message names them; else the source itself."""
    folder = Path(source)
    if not folder.is_dir():
        return str(source)
    config = read_json_file(folder / CONFIG_NAME) if (folder / CONFIG_NAME).is_file() else {}
    files = weight_files(folder, config)
    return str(files[0]) if len(files) == 1 else f"the weights of {folder}"


def listed_keys(keys: list[str], shown: int = 6) -> str:
    """The first `shown` keys and how many more, for an error message that names them without flooding."""
    more = f" and {len(keys) - shown} more" if len(keys) > shown else ""
    return ", ".join(keys[:shown]) + more


def _grouped(keys: list[str]) -> list[str]:
    """Keys grouped by layer ("model.layers.4.* (12 tensors)") or, outside the layers, by module ("classifier
    (2 tensors)"): a missing layer is one entry, not a dozen."""
    groups: dict[str, int] = {}
    for key in keys:
        parts = key.split(".")
        layer = next((i for i, part in enumerate(parts) if part.isdigit()), None)
        group = ".".join(parts[: layer + 1]) + ".*" if layer is not None else key.rpartition(".")[0] or key
        groups[group] = groups.get(group, 0) + 1
    return [f"{group} ({count} tensor{'s' * (count > 1)})" for group, count in groups.items()]


@contextmanager
def _load_report_held() -> Iterator[None]:
    """Hold back transformers' load report (its "LOAD REPORT" table) for one load: `check_loaded_keys` judges the
    keys instead. A load that fails (transformers refuses mismatched shapes after the table) shows it after all."""
    held: list[logging.LogRecord] = []

    def hold(record: logging.LogRecord) -> bool:
        if "LOAD REPORT" in str(record.msg):
            held.append(record)
            return False
        return True

    report_logger = logging.getLogger(_REPORT_LOGGER)
    report_logger.addFilter(hold)
    try:
        yield
    except BaseException:
        report_logger.removeFilter(hold)
        for record in held:
            report_logger.handle(record)
        raise
    finally:
        report_logger.removeFilter(hold)
