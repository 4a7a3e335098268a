"""Atomic, verified checkpoints that resume a run exactly and hold no code.

No code: a checkpoint holds safetensors and JSON only, and resuming unpickles nothing. accelerate's
`save_state` pickles the registered objects (the LR scheduler) and the RNG states, and unpickling runs
whatever a crafted file says; so the state is written here, tensor by tensor: weights
(`model.safetensors`), optimizer tensors (`optimizer.safetensors`, its hyperparameters in
`optimizer.json`), the registered objects' and the gradient scaler's `state_dict`s as JSON, and per
process the RNG states (torch CPU and CUDA generators and the collator's as tensors, Python's and
NumPy's as JSON), and per process the position in a streamed corpus (JSON, `stream_N.json`). Any other file in
the folder (a planted `*.pkl`) is never opened.

Verified: `manifest.json`, written last, lists every file with its size and SHA-256; resuming checks
them all and refuses, naming the file, when one is missing, truncated or altered (a missing RNG file
would otherwise resume silently inexact).

Atomic: a checkpoint is written into `checkpoints/.tmp-step-N`, flushed to disk and published with one rename to
`checkpoints/step-N` (`hfzoo.core.files.replace_folder`). A crash at any moment (even SIGKILL mid-write) leaves either
a complete checkpoint or a `.tmp-*` folder, which `latest_checkpoint` never returns and the next save removes. A
step saved again (resuming from an older checkpoint) is swapped whole: the older copy is moved aside before the new
one is renamed in, so the published step-N is always complete.

Sharded (`sharding: fsdp`, `hfzoo.training.sharding`): the model and optimizer tensors are written by every process,
each its own shards, with torch.distributed.checkpoint as safetensors (`hfzoo.training.sharded_state`); the rest is
as above. Such a checkpoint also resumes on another number of processes (DCP reshards), though not bit-exactly.

Exact: besides the tensors, a resumed run needs where it was in the data (`Progress`: the epoch and the
micro-batches of it already consumed, to skip them) and each process's collator generator (masking and
span noise must continue, not restart). Checkpoints are only taken right after an optimizer step:
gradients accumulated mid-step are not part of any state and would be lost. A resumed run must also
have the same config: `check_resumed_config` refuses a change that would break exactness.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import random
import re
import shutil
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType
from safetensors import SafetensorError
from safetensors.torch import load_file, load_model, save_file, save_model

from ..convert.api import TOKENIZER_FILES
from ..core.files import folder_entries, replace_folder, write_atomic
from ..core.recipe_config import CONFIG_FILE
from ..core.refusals import refusing
from ..integrations.accelerate import checkpointed_objects, prepared_models, prepared_optimizers
from .sharded_state import load_sharded_state, save_sharded_state

logger = logging.getLogger(__name__)

CHECKPOINTS = "checkpoints"
PROGRESS_FILE = "progress.json"
MANIFEST_FILE = "manifest.json"
RUN_CONFIG_FILE = "run_config.json"
INPUTS_FILE = "inputs.json"  # the tokenizer and data files' fingerprints (`hfzoo.training.run_inputs`)
MODEL_FILE = "model.safetensors"
OPTIMIZER_TENSORS, OPTIMIZER_JSON = "optimizer.safetensors", "optimizer.json"
SCALER_FILE = "scaler.json"
_COMPLETE = re.compile(r"step-(\d+)")
_PARTIAL_PREFIX = ".tmp-"


class CheckpointError(ValueError):
    """A checkpoint file is missing, truncated, altered or unreadable, or the resumed run does not match it."""


@dataclass
class Progress:
    """Where a run is: the part of the training state that is not tensors."""

    step: int = 0  # optimizer steps done
    epoch: int = 0
    batches_in_epoch: int = 0  # micro-batches of `epoch` consumed, per process
    tokens_seen: int = 0  # input tokens over all processes
    elapsed: float = 0.0  # training seconds before this process started (summed over resumes)
    meter: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])  # loss, micro-batches, tokens not yet logged
    max_steps: int | None = None  # the run's length when saved, over which its learning-rate schedule was planned


def checkpoint_dir(output_dir: str | os.PathLike, step: int) -> Path:
    return Path(output_dir) / CHECKPOINTS / f"step-{step:08d}"


def list_checkpoints(output_dir: str | os.PathLike) -> list[Path]:
    """Complete checkpoints under `output_dir`, oldest first; partial (`.tmp-*`) folders are not listed."""
    root = Path(output_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _COMPLETE.fullmatch(p.name))]
    return [p for _, p in sorted(found)]


def latest_checkpoint(output_dir: str | os.PathLike) -> Path | None:
    checkpoints = list_checkpoints(output_dir)
    return checkpoints[-1] if checkpoints else None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _write_json(path: Path, value: Any) -> None:
    try:
        text = json.dumps(value, indent=1, allow_nan=True)
    except TypeError as error:
        message = f"{path.name}: a checkpoint holds JSON and tensors only, and this state is neither: {error}"
        raise TypeError(message) from None
    path.write_text(text)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path} cannot be read as JSON ({error}); resume from another checkpoint") from None


def _stream_file(process_index: int) -> str:
    return f"stream_{process_index}.json"


def _rng_files(process_index: int) -> tuple[str, str]:
    return f"rng_{process_index}.safetensors", f"rng_{process_index}.json"


def _save_rng(folder: Path, process_index: int, collator_generator: torch.Generator | None) -> None:
    """This process's random streams: tensors for the torch generators, JSON for Python's and NumPy's."""
    tensors = {"torch": torch.get_rng_state()}
    if collator_generator is not None:
        tensors["collator"] = collator_generator.get_state()
    if torch.cuda.is_available():
        tensors |= {f"cuda.{i}": state for i, state in enumerate(torch.cuda.get_rng_state_all())}
    kind, keys, position, has_gauss, cached = np.random.get_state()
    tensors["numpy_keys"] = torch.from_numpy(keys.astype(np.int64))
    version, python_state, gauss_next = random.getstate()
    tensors_file, json_file = _rng_files(process_index)
    save_file(tensors, folder / tensors_file)
    _write_json(folder / json_file, {"python": [version, list(python_state), gauss_next],
                                     "numpy": [kind, position, has_gauss, cached]})  # fmt: skip


def _load_rng(folder: Path, process_index: int, collator_generator: torch.Generator | None) -> None:
    tensors_file, json_file = _rng_files(process_index)
    tensors, states = _load_tensors(folder / tensors_file), _read_json(folder / json_file)
    torch.set_rng_state(tensors["torch"])
    if collator_generator is not None:
        collator_generator.set_state(tensors["collator"])
    cuda = [tensors[key] for key in sorted((k for k in tensors if k.startswith("cuda.")), key=lambda k: int(k[5:]))]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)
    kind, position, has_gauss, cached = states["numpy"]
    np.random.set_state((kind, tensors["numpy_keys"].numpy().astype(np.uint32), position, has_gauss, cached))
    version, python_state, gauss_next = states["python"]
    random.setstate((version, tuple(python_state), gauss_next))


def _load_tensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(path)
    except (SafetensorError, OSError) as error:
        raise CheckpointError(
            f"{path} is not a readable safetensors file ({error}); resume from another checkpoint"
        ) from None


def _optimizer_state(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The optimizer's `state_dict` split into tensors (moments, step counts) and JSON (groups, other values)."""
    state = optimizer.state_dict()
    tensors, other = {}, {}
    for index, values in state["state"].items():
        for name, value in values.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{index}.{name}"] = value.detach().cpu().contiguous()
            else:
                other[f"{index}.{name}"] = value
    return tensors, {"param_groups": state["param_groups"], "values": other}


def _optimizer_state_dict(tensors: dict[str, torch.Tensor], described: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for key, value in [*tensors.items(), *described["values"].items()]:
        index, name = key.split(".", 1)
        state.setdefault(int(index), {})[name] = value
    return {"state": state, "param_groups": described["param_groups"]}


def check_checkpointable(accelerator: Accelerator) -> None:
    """Refuse runs sharded by accelerate (its FSDP or DeepSpeed launch configs): their checkpoint formats pickle.
    hfzoo's own sharding (`--sharding fsdp`) checkpoints as safetensors. A recipe calls this at its start, not at its
    first checkpoint."""
    if accelerator.distributed_type in (DistributedType.FSDP, DistributedType.DEEPSPEED):
        raise CheckpointError(
            f"checkpoints of accelerate's {accelerator.distributed_type.value} runs are not supported (their formats "
            "pickle; hfzoo checkpoints are safetensors and JSON): launch with `torchrun --nproc_per_node N "
            "recipes/<recipe>.py ... --sharding fsdp`, whose checkpoints are sharded safetensors, or set save_every "
            ">= max_steps to train without checkpoints"
        )


def save_checkpoint(
    accelerator: Accelerator,
    output_dir: str | os.PathLike,
    progress: Progress,
    collator_generator: torch.Generator | None,
    keep: int,
    config: dict[str, Any] | None = None,
    inputs: dict[str, Any] | None = None,
    *,
    sharded: bool = False,
    stream: Any = None,
) -> Path:
    """Save the full training state of every process as checkpoint `progress.step`; keep the `keep` latest.

    What is saved: the prepared model(s) and optimizer(s), the objects registered with
    `accelerator.register_for_checkpointing` (their `state_dict` must be JSON), the gradient scaler, every
    process's RNG states (with the collator's generator, when the collator draws at random), `progress`,
    `config` (what `check_resumed_config` compares) and `inputs` (the tokenizer and data files' fingerprints, what
    `run_inputs.check_resumed_inputs` compares), and `stream`'s `state_dict()` on every process (a streamed corpus
    keeps its own position, `hfzoo.data.streaming`). `sharded` (`sharding: fsdp`): every process writes its shards
    of the models and optimizers (`sharded_state`). Call it on all processes, right after an optimizer step.
    """
    check_checkpointable(accelerator)
    final = checkpoint_dir(output_dir, progress.step)
    partial = final.with_name(_PARTIAL_PREFIX + final.name)
    if accelerator.is_main_process:
        final.parent.mkdir(parents=True, exist_ok=True)
        for stale in final.parent.glob(_PARTIAL_PREFIX + "*"):  # left by a crash; never valid
            shutil.rmtree(stale)
        partial.mkdir()
    accelerator.wait_for_everyone()
    _save_rng(partial, accelerator.process_index, collator_generator)
    if stream is not None:
        _write_json(partial / _stream_file(accelerator.process_index), stream.state_dict())
    if sharded:
        models = [accelerator.unwrap_model(model) for model in prepared_models(accelerator)]
        for i, described in enumerate(save_sharded_state(partial, models, prepared_optimizers(accelerator))):
            if accelerator.is_main_process:
                _write_json(partial / _indexed(OPTIMIZER_JSON, i), described)
    if accelerator.is_main_process and not sharded:
        for i, model in enumerate(prepared_models(accelerator)):
            save_model(accelerator.unwrap_model(model), partial / _indexed(MODEL_FILE, i), force_contiguous=True)
        for i, optimizer in enumerate(prepared_optimizers(accelerator)):
            tensors, described = _optimizer_state(optimizer)
            save_file(tensors, partial / _indexed(OPTIMIZER_TENSORS, i))
            _write_json(partial / _indexed(OPTIMIZER_JSON, i), described)
    if accelerator.is_main_process:
        for i, registered in enumerate(checkpointed_objects(accelerator)):
            _write_json(partial / f"registered_{i}.json", registered.state_dict())
        if accelerator.scaler is not None:
            _write_json(partial / SCALER_FILE, accelerator.scaler.state_dict())
        _write_json(partial / PROGRESS_FILE, dataclasses.asdict(progress))
        if config is not None:
            _write_json(partial / RUN_CONFIG_FILE, config)
        if inputs is not None:
            _write_json(partial / INPUTS_FILE, inputs)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        _write_manifest(partial, accelerator.num_processes, sharded)
        replace_folder(partial, final)  # a step saved again is swapped whole: never a half-replaced step-N
        for old in [*final.parent.glob(_PARTIAL_PREFIX + "*"), *list_checkpoints(output_dir)[:-keep]]:
            shutil.rmtree(old)
    accelerator.wait_for_everyone()
    return final


def _indexed(name: str, index: int) -> str:
    """`model.safetensors` for the first prepared object, `model_1.safetensors` for the second."""
    stem, suffix = name.split(".", 1)
    return name if index == 0 else f"{stem}_{index}.{suffix}"


def _write_manifest(folder: Path, num_processes: int, sharded: bool) -> None:
    """Every file's size and SHA-256, written last (to a temporary name, then renamed): a checkpoint whose
    manifest exists is complete. `sharded`: its model and optimizer tensors are `sharded_state`'s."""
    files = {
        path.relative_to(folder).as_posix(): {"size": path.stat().st_size, "sha256": _sha256(path)}
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }
    manifest = {"num_processes": num_processes, "sharded": sharded, "files": files}
    write_atomic(folder / MANIFEST_FILE, json.dumps(manifest, indent=1))


def verify_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """The checkpoint's manifest, after checking every file it lists (present, same size, same SHA-256).

    Raises `CheckpointError` naming the manifest when there is none (a partial or older checkpoint), else naming
    the first bad file.
    Files the manifest does not list (nothing hfzoo wrote) are never read: they are reported and ignored.
    """
    path = Path(path)
    if not (path / MANIFEST_FILE).is_file():
        raise CheckpointError(
            f"{path / MANIFEST_FILE} is missing: {path} is not a complete checkpoint of this version of hfzoo "
            "(which lists every file there); resume from another checkpoint or start a new run"
        )
    manifest = _read_json(path / MANIFEST_FILE)
    for name, expected in manifest["files"].items():
        file = path / name
        what = None
        if not file.is_file():
            what = "is missing"
        elif file.stat().st_size != expected["size"]:
            what = f"is truncated or altered: {file.stat().st_size} bytes, the manifest says {expected['size']}"
        elif _sha256(file) != expected["sha256"]:
            what = "is altered: its SHA-256 differs from the one in the manifest"
        if what:
            raise CheckpointError(
                f"{file} {what}, so the checkpoint cannot resume the run exactly; resume from another checkpoint "
                "(--resume <checkpoint path>) or start a new run"
            )
    listed = {*manifest["files"], MANIFEST_FILE}
    present = sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file())
    if unlisted := [name for name in present if name not in listed]:
        logger.warning("%s: ignoring files hfzoo did not write (never opened): %s", path, ", ".join(unlisted))
    return manifest


def load_checkpoint(
    accelerator: Accelerator,
    path: str | os.PathLike,
    collator_generator: torch.Generator | None = None,
    stream: Any = None,
) -> Progress:
    """Restore what `save_checkpoint` saved (into the prepared model, optimizer, registered objects and `stream`),
    after `verify_checkpoint`.

    A sharded checkpoint (`sharding: fsdp`) also resumes on another number of processes: DCP reshards the weights and
    moments, and the data position is carried over as the examples consumed. Such a run is not bit-exact (each
    process draws dropout and masks from its own stream, the gradient is summed in another order, and the global batch
    changes), which `inexact_resume` says; an unsharded checkpoint is refused there, and so is a streamed corpus
    (each process's position is in its own share of the stream)."""
    check_checkpointable(accelerator)
    path = Path(path)
    manifest = verify_checkpoint(path)
    saved_processes, sharded = manifest["num_processes"], manifest.get("sharded", False)
    if saved_processes != accelerator.num_processes and not sharded:
        raise CheckpointError(
            f"{path} was saved by {saved_processes} processes, this run has {accelerator.num_processes}: "
            "resume with the number of processes that saved it (a run with --sharding fsdp can change it)"
        )
    if saved_processes != accelerator.num_processes and stream is not None:
        raise CheckpointError(
            f"{path} was saved by {saved_processes} processes, this run has {accelerator.num_processes}: a streamed "
            "corpus resumes with the number of processes that saved it (each one's position is in its own share)"
        )
    progress = Progress(**_read_json(path / PROGRESS_FILE))
    if sharded:
        models = [accelerator.unwrap_model(model) for model in prepared_models(accelerator)]
        optimizers = prepared_optimizers(accelerator)
        described = [_read_json(path / _indexed(OPTIMIZER_JSON, i)) for i in range(len(optimizers))]
        load_sharded_state(path, models, optimizers, described)
    if saved_processes != accelerator.num_processes:
        # The micro-batches of the epoch already consumed, in this run's share per process.
        progress.batches_in_epoch = progress.batches_in_epoch * saved_processes // accelerator.num_processes
    for i, model in enumerate([] if sharded else prepared_models(accelerator)):
        try:
            load_model(accelerator.unwrap_model(model), path / _indexed(MODEL_FILE, i), device="cpu")
        except (RuntimeError, SafetensorError) as error:
            raise CheckpointError(f"{path / _indexed(MODEL_FILE, i)} does not fit this run's model: {error}") from None
    for i, optimizer in enumerate([] if sharded else prepared_optimizers(accelerator)):
        described = _read_json(path / _indexed(OPTIMIZER_JSON, i))
        optimizer.load_state_dict(
            _optimizer_state_dict(_load_tensors(path / _indexed(OPTIMIZER_TENSORS, i)), described)
        )
    for i, registered in enumerate(checkpointed_objects(accelerator)):
        registered.load_state_dict(_read_json(path / f"registered_{i}.json"))
    if accelerator.scaler is not None:
        accelerator.scaler.load_state_dict(_read_json(path / SCALER_FILE))
    if accelerator.process_index < saved_processes:  # a process the checkpoint did not have keeps its seeded streams
        _load_rng(path, accelerator.process_index, collator_generator)
    if stream is not None:
        stream.load_state_dict(_read_json(path / _stream_file(accelerator.process_index)))
    return progress


def inexact_resume(
    path: str | os.PathLike, progress: Progress, num_processes: int, max_steps: int, examples_per_process: int
) -> list[str]:
    """Why resuming checkpoint `path` (loaded into `progress`) on `num_processes` for a run of `max_steps` does not
    continue its run bit for bit, each reason also one warning on the console; none: it does, and the run's log says
    `resumed_exactly`. `examples_per_process`: what one process adds to an optimizer step (per-device batch x
    gradient accumulation, which a resumed config keeps), so the global batch changes with the number of processes.

    A changed `max_steps` is allowed (it is how a finished run is extended) but never exact: the learning-rate
    schedule (cosine decay, slanted triangular, a warmup ratio) is planned over the run's length, so the steps after
    the checkpoint are trained at rates neither the saved run nor an uninterrupted run of the new length had."""
    reasons = []
    saved_processes = _read_json(Path(path) / MANIFEST_FILE)["num_processes"]
    if saved_processes != num_processes:
        reasons.append(
            f"saved by {saved_processes} processes, resumed on {num_processes}: the global batch changes from "
            f"{saved_processes * examples_per_process} to {num_processes * examples_per_process} examples per "
            "optimizer step; weights and optimizer state are resharded exactly, but dropout, masks and float sums "
            "differ too"
        )  # fmt: skip
    if progress.max_steps is not None and progress.max_steps != max_steps:
        reasons.append(
            f"resumed with max_steps {max_steps}, the checkpoint's run planned {progress.max_steps}: the "
            f"learning-rate schedule changes from step {progress.step + 1} on, so the result is neither run's"
        )  # fmt: skip
    for reason in reasons:
        logger.warning("resume from %s is not exact: %s", path, reason)
    return reasons


# Keys a resumed run may change without changing what it computes up to its checkpoint's step.
RESUMABLE_KEYS = frozenset(
    {"max_steps", "num_epochs", "log_every", "eval_every", "eval_batches", "save_every", "keep_checkpoints",
     "tensorboard", "output_dir", "resume", "compile", "overwrite_output_dir"}
)  # fmt: skip


# Keys added after checkpoints were first written, with the value that computes what those checkpoints' runs did: a
# saved config without the key was saved by such a run, and resuming it with this value changes nothing.
ADDED_KEY_DEFAULTS = {"lr_schedule": "cosine", "decay_fraction": 0.2, "optimizer": "adamw", "muon_learning_rate": 0.02}


def check_resumed_config(path: str | os.PathLike, config: dict[str, Any], resumable=RESUMABLE_KEYS) -> Progress:
    """Refuse to resume checkpoint `path` with a config that differs from the saved one in a key outside
    `resumable` (batch size, seed, preset, data... would make the resumed run inexact or fail in torch), naming
    the key and both values. Returns the checkpoint's `Progress`. Verifies the checkpoint first."""
    path = Path(path)
    verify_checkpoint(path)
    if (path / RUN_CONFIG_FILE).is_file():
        saved, current = _read_json(path / RUN_CONFIG_FILE), json.loads(json.dumps(config))
        saved = {**{key: value for key, value in ADDED_KEY_DEFAULTS.items() if key in current}, **saved}
        changed = [key for key in sorted({*saved, *current} - resumable) if saved.get(key) != current.get(key)]
        if changed:
            differences = "; ".join(f"{key!r} was {saved.get(key)!r}, now {current.get(key)!r}" for key in changed)
            raise CheckpointError(
                f"resume: config differs from the one {path} was saved with: {differences}. A resumed run keeps "
                f"its config (only {', '.join(sorted(resumable - {'resume'}))} may change); use the saved values or "
                "start a new run in another --output_dir"
            )
    return Progress(**_read_json(path / PROGRESS_FILE))


def resume_state(
    accelerator: Accelerator, output_dir: str | os.PathLike, resume: bool | str, checkpoints: bool
) -> tuple[Path | None, Progress]:
    """(the checkpoint this run resumes from or None, where the run starts): the checkpoint `checkpoint_to_resume`
    picks, loaded into the prepared objects. A run that `checkpoints` or resumes must be checkpointable."""
    resume_from = checkpoint_to_resume(output_dir, resume)
    if checkpoints or resume_from is not None:
        check_checkpointable(accelerator)
    if resume_from is None:
        return None, Progress()
    return resume_from, load_checkpoint(accelerator, resume_from)


def exit_on_checkpoint_error(command: str) -> AbstractContextManager[None]:
    """A recipe's `main`: a checkpoint that cannot resume the run (a file missing or altered, a changed config)
    ends it with one line saying what is wrong, prefixed by `command`, not a traceback (`hfzoo.core.refusals`)."""
    return refusing(command, CheckpointError)


def stopped_before_training(output_dir: str | os.PathLike) -> bool:
    """Whether `output_dir` holds only what a run writes before its first step (its resolved config, the tokenizer
    it trained): a run stopped by an error in its setup, which a new run may replace without overwrite_output_dir."""
    entries = folder_entries(output_dir)
    return bool(entries) and {entry.name for entry in entries} <= {CONFIG_FILE, *TOKENIZER_FILES}


def checkpoint_to_resume(output_dir: str | os.PathLike, resume: bool | str) -> Path | None:
    """The checkpoint a run starts from: `resume=True` takes the latest one (none: start fresh), a path that one.

    Starting fresh where checkpoints exist is an error rather than a silent overwrite of a run's history.
    """
    latest = latest_checkpoint(output_dir)
    if resume is False:
        if latest is not None:
            raise FileExistsError(
                f"{output_dir} already holds checkpoints (latest: {latest.name}); pass --resume to continue that run "
                "or choose another --output_dir"
            )
        return None
    if resume is True:
        return latest
    path = Path(resume)
    if not (path / MANIFEST_FILE).is_file():
        raise FileNotFoundError(f"resume: {path} is not a complete checkpoint (no {MANIFEST_FILE})")
    return path
