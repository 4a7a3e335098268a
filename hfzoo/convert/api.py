"""`from_native` and `to_native`: a whole model, its config and its weights, between hfzoo and transformers' own
classes; and the save that makes a converted folder load with the plain Auto classes.
"""

import copy
import json
import os
import shutil
from pathlib import Path

import transformers
from transformers import AutoConfig, PreTrainedConfig, PreTrainedModel

from .. import models
from ..core.files import check_output_folder, staged
from ..core.presets import preset_config
from ..integrations.transformers import model_from_config
from ..models.checked_loading import load_checked
from ..models.checkpoint_files import check_checkpoint_folder
from . import bart, bert, deberta_v2, distilbert, electra, gemma, gpt2, llama, mistral, modernbert, mt5, qwen2, roberta, t5
from .family import NativeFamily
from .mapping import convert_state, load_converted

FAMILIES: dict[str, NativeFamily] = {
    family.model_type: family
    for family in (
        gpt2.FAMILY, gemma.FAMILY, mistral.FAMILY, llama.FAMILY, qwen2.FAMILY, electra.FAMILY, bert.FAMILY,
        roberta.FAMILY, t5.FAMILY, mt5.FAMILY, bart.FAMILY, distilbert.FAMILY, deberta_v2.FAMILY, modernbert.FAMILY,
    )  # electra before bert: it is the one an encoder with narrower embeddings (embedding_size) exports to
}


def native_types_help() -> str:
    """One line per native type `hfzoo convert` handles: its `model_type` and the native classes converted both
    ways, read from `FAMILIES` so that the CLI's help cannot fall behind the converters."""
    width = max(map(len, FAMILIES))
    return "\n".join(
        f"  {model_type:<{width}}  {', '.join(head.native_class for head in family.heads)}"
        for model_type, family in FAMILIES.items()
    )


# Fields that do not change what a model computes in eval mode: a preset given to `from_native` may differ there
# (and its values are kept), nowhere else.
TRAINING_FIELDS = {
    "hidden_dropout", "attention_dropout", "classifier_dropout", "initializer_range", "router_aux_loss_coef", "use_cache",
}
# Fields taken from the native config even when a preset is given: they describe the native tokenizer.
TOKEN_FIELDS = {"pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"}
# The commands whose outputs these are (an output folder records it: a later run of the same command may replace it).
FROM_NATIVE, TO_NATIVE = "hfzoo convert from-native", "hfzoo convert to-native"
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.txt",
    "vocab.json", "merges.txt", "spiece.model", "sentencepiece.bpe.model", "tokenizer.model", "chat_template.jinja",
)
# A sentence-transformers checkpoint's own files, carried over with its module folders (`sentence_transformers_modules`).
SENTENCE_TRANSFORMERS_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")


def from_native(
    model_or_path: PreTrainedModel | str | os.PathLike, preset_or_config: str | PreTrainedConfig | None = None
) -> PreTrainedModel:
    """The hfzoo model that computes what a native transformers model computes, with its weights.

    `model_or_path` is a native model (`GPT2LMHeadModel`, `LlamaForCausalLM`, `BertModel`, `BertForMaskedLM`,
    `RobertaForMaskedLM`, `T5ForConditionalGeneration`, `BartForConditionalGeneration`, or a task head both sides
    have) or a folder holding one, loaded with the class its config names. The hfzoo config is inferred from the
    native one; `preset_or_config` (a preset name or an hfzoo config) instead names the config to use, which must
    agree with the inferred one on every field that changes the computation (dropouts and initialisation may
    differ). Returns the model in eval mode, in the native model's dtype.
    """
    native = load_native(model_or_path)
    family = FAMILIES.get(native.config.model_type)
    if family is None:
        raise ValueError(
            f"model_type {native.config.model_type!r} has no hfzoo conversion; supported: {', '.join(FAMILIES)}."
        )
    head = family.head_for_native(type(native).__name__)
    config = family.zoo_config_class(**family.zoo_config(native))
    if preset_or_config is not None:
        config = _agreeing_config(config, preset_or_config)
    # Recorded in the config (and so in a saved checkpoint's config.json) for `to_native` to export back to.
    config.native_model_type = family.model_type
    zoo = model_from_config(head.zoo_class, config, dtype=native.dtype)
    rules = family.rules(head, config, native.config)
    tensors = convert_state(native.state_dict(), rules, to_zoo=True, source_name=type(native).__name__)
    load_converted(zoo, tensors, type(zoo).__name__)
    # Where the weights came from: `to_native` copies that folder's tokenizer, `adapter_to_native` names it as the
    # mapped adapter's base. Not `name_or_path`: that is where a model loads from with its own classes, and PEFT
    # re-reads `<name_or_path>/config.json` with the model's config class when it saves an adapter.
    zoo.imported_from = native.name_or_path or None
    return zoo.eval()


def to_native(
    model_or_path: PreTrainedModel | str | os.PathLike,
    out_dir: str | os.PathLike,
    native_type: str | None = None,
    overwrite: bool = False,
) -> PreTrainedModel:
    """Save an hfzoo model as the native transformers class that computes the same thing, and return that model.

    The native family follows the hfzoo config's switches (decoder: learned positions -> GPT-2, rotary -> Llama,
    or Mistral with a sliding window, Qwen2 with q/k/v biases only; encoder: BERT, or RoBERTa without token types,
    ELECTRA with narrower embeddings or for the discriminator head, DeBERTa-v2 with disentangled attention, ModernBERT
    with rotary positions; encoder-decoder: relative bias -> T5, learned -> BART) unless `native_type` names one (a key
    of `FAMILIES`). A component the native class cannot
    express is refused, naming the switch. `out_dir` loads with the plain Auto classes (no remote code) and gets
    the tokenizer files of the folder the model came from (`model_or_path`, or the native folder a `from_native` model
    was imported from, else the model's `name_or_path`) when it has them. `out_dir` is written as `save_converted`
    says; a folder of other files is refused unless `overwrite`, checked before anything is loaded.
    """
    source = model_or_path if isinstance(model_or_path, (str, os.PathLike)) else None
    check_output_folder(out_dir, TO_NATIVE, overwrite=overwrite, inputs=[source])
    given = isinstance(model_or_path, PreTrainedModel)
    config = model_or_path.config if given else AutoConfig.from_pretrained(model_or_path)
    head_name = type(model_or_path).__name__ if given else (config.architectures or [None])[0]
    family, native_config = export_target(config, native_type, head_name)  # refused before any weight is read
    zoo = load_zoo(model_or_path)
    head = family.head_for_zoo(type(zoo))
    native_cls = getattr(transformers, head.native_class)
    native = model_from_config(native_cls, native_config, dtype=zoo.dtype, **family.head_kwargs(head, zoo.config))
    family.prepare_native(native, zoo.config)
    rules = family.rules(head, zoo.config, native_config)
    tensors = convert_state(zoo.state_dict(), rules, to_zoo=False, source_name=type(zoo).__name__)
    load_converted(native, tensors, head.native_class)
    save_converted(native, out_dir, source or zoo_source(zoo), TO_NATIVE, overwrite)
    return native.eval()


def native_model(config: PreTrainedConfig, native_class: str) -> PreTrainedModel:
    """A freshly initialised native `native_class` ("GPT2LMHeadModel", "T5ForConditionalGeneration", ...) of the
    shape an hfzoo model of `config` has, parameter for parameter: what the benchmarks compare hfzoo against."""
    families = [family for family in FAMILIES.values() if native_class in {head.native_class for head in family.heads}]
    if not families:
        raise ValueError(f"{native_class} has no hfzoo counterpart; hfzoo.convert converts {', '.join(FAMILIES)}.")
    family = native_family(config, families[0].model_type)
    model = getattr(transformers, native_class)(
        family.native_config(config), **family.head_kwargs(family.head_for_native(native_class), config)
    )
    family.prepare_native(model, config)
    return model


def zoo_source(zoo: PreTrainedModel) -> str:
    """The folder (or Hub name) a model's weights came from: the native checkpoint `from_native` imported, else the
    folder it was loaded from."""
    return getattr(zoo, "imported_from", None) or zoo.name_or_path


def import_checkpoint(source: str | os.PathLike, out_dir: str | os.PathLike) -> PreTrainedModel:
    """Import the native checkpoint `source` (a folder or a Hub name) and save it as an hfzoo checkpoint in `out_dir`:
    what the recipes' `import_native` key trains. Returns the hfzoo model.

    The model type is checked before any weight is read: one without an hfzoo family is refused, naming it and the
    supported ones. The checkpoint loads with the class its config names when hfzoo has that head, else as its
    bare model (a pre-training head such as `BertForPreTraining` has no hfzoo pair; a task adds its own head).
    """
    _check_folder(source)
    config = AutoConfig.from_pretrained(source)
    if config.model_type.startswith("hfzoo"):
        raise ValueError(f"{source} is already an hfzoo checkpoint ({config.model_type}): train it without "
                         "import_native.")  # fmt: skip
    family = FAMILIES.get(config.model_type)
    if family is None:
        raise ValueError(
            f"{source} is a {config.model_type!r} model, which hfzoo.convert cannot import: it converts "
            f"{', '.join(FAMILIES)}. Train it as a native model (without import_native)."
        )
    names = {head.native_class for head in family.heads}
    class_name = next((name for name in config.architectures or [] if name in names), family.heads[0].native_class)
    native, _ = load_checked(getattr(transformers, class_name), source, config=config)
    zoo = from_native(native)
    zoo.save_pretrained(out_dir)
    return zoo


def native_family(
    config: PreTrainedConfig, native_type: str | None = None, head_name: str | None = None
) -> NativeFamily:
    """The native family an hfzoo config exports to: `native_type`; else the family the model was imported from
    (`config.native_model_type`, set by `from_native`); else the first family whose positions the config has and
    that prefers it, among those with a counterpart of the hfzoo head `head_name` when any has one (ELECTRA's
    discriminator exports to ELECTRA, which alone has it), the first with those positions if none prefers it."""
    candidates = [family for family in FAMILIES.values() if family.zoo_config_class is type(config)]
    if not candidates:
        raise ValueError(f"{type(config).__name__} is not an hfzoo config; to_native converts hfzoo models.")
    native_type = native_type or getattr(config, "native_model_type", None)
    if native_type is not None:
        family = FAMILIES.get(native_type)
        if family not in candidates:
            raise ValueError(
                f"native_type={native_type!r} cannot hold a {type(config).__name__}; choose one of "
                f"{', '.join(family.model_type for family in candidates)}."
            )
        return family
    with_head = [family for family in candidates if head_name in {head.zoo_class.__name__ for head in family.heads}]
    kind = config.position_embedding
    positioned = [family for family in with_head or candidates if family.position_embedding == kind]
    for family in positioned:
        if family.prefers(config):
            return family
    if with_head and positioned:
        return positioned[0]
    kinds = ", ".join(f"{family.position_embedding!r} ({family.model_type})" for family in candidates)
    raise ValueError(
        f"No native class expresses position_embedding={config.position_embedding!r} in a {type(config).__name__}: "
        f"the native families for it need {kinds}."
    )


def export_target(
    config: PreTrainedConfig, native_type: str | None = None, head_name: str | None = None
) -> tuple[NativeFamily, PreTrainedConfig]:
    """(family, native config) an hfzoo config exports to (`native_family`), or a `ValueError` naming a switch.

    A family picked by the config's positions can refuse a switch it was not picked by (rotary positions pick Llama,
    which refuses a GPT-2 preset's activation): then every family's refusal is named, so the message shows the switch
    the user set (position_embedding='rotary', which GPT-2 lacks) beside the one the picked family lacks.
    """
    family = native_family(config, native_type, head_name)
    try:
        return family, family.native_config(config)
    except ValueError as error:
        if native_type or getattr(config, "native_model_type", None):  # the family was named: its refusal says it all
            raise
        picked_refusal = str(error)
    refusals, holding = [], []
    for candidate in (f for f in FAMILIES.values() if f.zoo_config_class is type(config)):
        try:
            candidate.native_config(config)
            holding.append(candidate.model_type)
        except ValueError as error:
            refusals.append(str(error))
    if holding:
        raise ValueError(f"{picked_refusal} --native-type {holding[0]} can hold it.")
    raise ValueError(f"No native class holds this {type(config).__name__}: {' '.join(refusals)}")


def _agreeing_config(inferred: PreTrainedConfig, preset_or_config: str | PreTrainedConfig) -> PreTrainedConfig:
    """`preset_or_config` as the config, after checking it computes what the native weights need."""
    target = preset_config(preset_or_config) if isinstance(preset_or_config, str) else preset_or_config
    if type(target) is not type(inferred):
        raise ValueError(
            f"The native model converts to a {type(inferred).__name__}, not the given {type(target).__name__}."
        )
    differing = [
        f"{name}={getattr(target, name)!r} (the native model has {getattr(inferred, name)!r})"
        for name in type(inferred).field_types()
        if name not in TRAINING_FIELDS | TOKEN_FIELDS and getattr(target, name) != getattr(inferred, name)
    ]
    if differing:
        raise ValueError(f"The given config cannot hold the native weights: {'; '.join(differing)}.")
    config = copy.deepcopy(target)
    for name in TOKEN_FIELDS & set(type(inferred).field_types()):
        setattr(config, name, getattr(inferred, name))
    config.id2label, config.label2id = inferred.id2label, inferred.label2id
    return config


def load_native(model_or_path: PreTrainedModel | str | os.PathLike) -> PreTrainedModel:
    """A native model, or the one a folder holds, built with the transformers class its config names."""
    return _load(model_or_path, transformers, "transformers class (e.g. load it with BertForMaskedLM and pass the model)")


def load_zoo(model_or_path: PreTrainedModel | str | os.PathLike) -> PreTrainedModel:
    """An hfzoo model, or the one an hfzoo checkpoint folder holds, built with the class its config names."""
    return _load(model_or_path, models, "hfzoo model class (to_native converts hfzoo checkpoints)")


def _load(model_or_path: PreTrainedModel | str | os.PathLike, namespace, expected: str) -> PreTrainedModel:
    """The model of a folder, built with the class of `namespace` (hfzoo's `models`, or `transformers`) its config
    names. An hfzoo folder given as native is named as such (its `architectures` name no transformers class, which
    says less); a native one given as hfzoo's is refused before, by `export_target`."""
    if isinstance(model_or_path, PreTrainedModel):
        return model_or_path
    _check_folder(model_or_path)
    config = AutoConfig.from_pretrained(model_or_path)
    if namespace is transformers and config.model_type.startswith("hfzoo"):
        raise ValueError(f"{model_or_path} is already an hfzoo checkpoint ({config.model_type}): nothing to import; "
                         "`hfzoo convert to-native` makes a native checkpoint of it.")  # fmt: skip
    names = getattr(config, "architectures", None) or [""]
    model_cls = getattr(namespace, names[0], None)
    if model_cls is None:
        raise ValueError(f"{model_or_path}/config.json: `architectures` is {names}, which names no {expected}.")
    return load_checked(model_cls, model_or_path, config=config)[0]


def _check_folder(source: str | os.PathLike) -> None:
    """A local checkpoint folder's config and safetensors weights, checked before anything loads: a missing,
    truncated or pickled (`pytorch_model.bin`) weights file is refused naming it."""
    if Path(source).is_dir():
        check_checkpoint_folder(source)


def save_converted(
    model: PreTrainedModel,
    out_dir: str | os.PathLike,
    tokenizer_folder: str | os.PathLike | None,
    command: str = FROM_NATIVE,
    overwrite: bool = False,
) -> None:
    """`model.save_pretrained(out_dir)` plus the tokenizer files of `tokenizer_folder` (and, of a sentence-transformers
    checkpoint, its `modules.json`, module folders and settings: how it pools), as the output of `command`
    (`hfzoo.core.files.publish_output`): an interrupted conversion leaves no half-written file, and only the files of
    this conversion (and of an earlier one of `command` there) change. A folder of other files is refused unless
    `overwrite`; so are `tokenizer_folder` itself and a folder inside it or holding it."""
    check_output_folder(out_dir, command, overwrite=overwrite, inputs=[tokenizer_folder])
    with staged(out_dir, command) as staging:
        model.save_pretrained(staging)
        for name in TOKENIZER_FILES + SENTENCE_TRANSFORMERS_FILES if tokenizer_folder else ():
            if (Path(tokenizer_folder) / name).is_file():
                shutil.copy2(Path(tokenizer_folder) / name, staging / name)
        for name in sentence_transformers_modules(Path(tokenizer_folder)) if tokenizer_folder else ():
            shutil.copytree(Path(tokenizer_folder) / name, staging / name)


def sentence_transformers_modules(folder: Path) -> list[str]:
    """The module folders (`1_Pooling`, ...) the `modules.json` of a sentence-transformers checkpoint names, those
    present inside `folder`: without them `SentenceTransformer` silently pools by its default (the mean) instead of
    the checkpoint's own way."""
    if not (folder / "modules.json").is_file():
        return []
    try:
        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
    except ValueError as error:  # not UTF-8, or not JSON
        raise ValueError(f"{folder / 'modules.json'} is not valid JSON ({error})") from None
    paths = [module.get("path") for module in modules if isinstance(module, dict)] if isinstance(modules, list) else []
    root = folder.resolve()
    return [path for path in paths if isinstance(path, str) and path and not Path(path).is_absolute()
            and (folder / path).is_dir() and (folder / path).resolve().is_relative_to(root)]  # fmt: skip
