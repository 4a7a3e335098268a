"""Task adapters read from PEFT folders, checked against a base model, and stacked per adapted module.

A PEFT adapter folder (`adapter_config.json` + `adapter_model.safetensors`; LoRA, or hfzoo's bottleneck method) is
parsed here without PEFT and never through pickle (`read_adapter`). For every adapted module of the base model the
weights of the M adapters that touch it are then stacked into one tensor per factor (`StackedAdapters`):

- LoRA: `A [M+1, R, in]` and `Bt [M+1, R, out]` (B transposed, each adapter's scaling folded in); ranks are
  zero-padded to the largest R, and zero rows/columns add exactly nothing.
- bottleneck: down `[M+1, W, d]` + bias, up (transposed, scaled) `[M+1, W, d]` + bias, LayerNorm affine `[M+1, d]`.
- heads (an adapter's `modules_to_save` copy of an `nn.Linear`, e.g. a classifier): weight `[M+1, out, in]` + bias.

Slot M is "no adapter": zeros (the base output passes unchanged) and, for heads, the base module's own weights. So
rows routed to no adapter take the same gather as all others. Every composition method is built from three batched
operations and nothing else (no Python loop over adapters on the forward path):

- `hidden`: all M adapters at once, one matmul of width M*R (M*W for bottlenecks);
- `combine`: weight that hidden state per adapter, one matmul back to the output width (`key_directions` and
  `score` give AdapterFusion the same low-rank view of every adapter's delta);
- `select`: only the chosen adapters, so the cost does not grow with M. Rows that are sequences gather their
  adapter's weights and `bmm`. Rows that are single tokens (token routing) do the same while they are few; many
  are grouped by adapter and multiplied with `grouped_mm` instead, because gathering the weights per token moves
  R*(in+out) floats per token, several times the data of the token itself (`GATHERED_VALUES_LIMIT`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from peft import LoraConfig
from peft.utils.other import get_pattern_key
from safetensors.torch import load_file
from torch import nn
from torch.utils.flop_counter import flop_registry, register_flop_formula
from transformers.activations import ACT2FN
from transformers.pytorch_utils import Conv1D

from .bottleneck import BottleneckConfig

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
KEY_PREFIX = "base_model.model."  # PEFT's prefix of every saved tensor key
# Token routing gathers each row's adapter weights, rather than grouping the rows by adapter, while the gathered
# weights hold at most this many values. Measured on one adapted module in place (qkv 384 -> 640 of llama-small,
# LoRA r=8, hard routing, 2 threads, no grad; us per call, base product included; N = 2 / 4 / 8 adapters):
# 1 token grouped 137 / 140 / 151, gathered 93 / 93 / 92; 32 tokens 400 / 426 / 467 vs 322 / 327 / 327;
# 128 tokens 587 / 593 / 627 vs 573 / 600 / 605 (the limit: 128 x 8 x 1024 values); 256 tokens 1054 / 1035 / 1124
# vs 1178 / 1248 / 2100.
GATHERED_VALUES_LIMIT = 1 << 20
LAYER_NORM_EPS = 1e-5  # nn.LayerNorm's default, which BottleneckLayer uses

# LoRA options that leave a saved adapter an additive low-rank delta (or that are read below: rank, alpha, rsLoRA,
# per-module patterns). Every other option must be at LoraConfig's default, else `read_adapter` names it.
_LORA_HARMLESS_OPTIONS = {
    "task_type", "peft_type", "auto_mapping", "peft_version", "base_model_name_or_path", "revision", "inference_mode",
    "r", "target_modules", "exclude_modules", "lora_alpha", "lora_dropout", "fan_in_fan_out", "use_rslora",
    "modules_to_save", "init_lora_weights", "layers_to_transform", "layers_pattern", "rank_pattern", "alpha_pattern",
    "megatron_core", "eva_config", "runtime_config", "qalora_group_size", "ensure_weight_tying", "loftq_config",
}
_WHY_UNSUPPORTED = {
    "use_dora": "DoRA rescales the whole adapted weight by a learned magnitude, not an additive low-rank delta",
    "bias": "the adapter trained the base model's biases, which a composition keeps frozen and shared",
    "lora_bias": "a bias on lora_B is not part of the stacked low-rank product",
    "target_parameters": "LoRA on raw parameters (e.g. fused expert weights) adapts no module",
    "trainable_token_indices": "trained embedding rows are not a per-module delta",
    "layer_replication": "it changes the base model's layer structure",
}
# Initialisations that also rewrite the base weights: such an adapter is only valid on that rewritten base.
_PLAIN_LORA_INITS = (True, False, "gaussian", "eva", "orthogonal")


@dataclass
class LoraFactors:
    """One module's LoRA: `delta(x) = x @ A.T @ B.T * scaling`."""

    A: torch.Tensor  # [r, in]
    B: torch.Tensor  # [out, r]
    scaling: float


@dataclass
class BottleneckFactors:
    """One module's bottleneck adapter on the module output y: `delta(y) = up(act(down(norm(y)))) * scaling`."""

    down_weight: torch.Tensor  # [width, d]
    down_bias: torch.Tensor
    up_weight: torch.Tensor  # [d, width]
    up_bias: torch.Tensor
    norm_weight: torch.Tensor | None
    norm_bias: torch.Tensor | None
    activation: str
    scaling: float


@dataclass
class TaskAdapter:
    """A PEFT adapter as plain tensors: per adapted module its factors, per saved head its parameters."""

    name: str
    folder: Path | None
    kind: str  # "lora" or "bottleneck"
    config: dict
    modules: dict[str, LoraFactors | BottleneckFactors] = field(default_factory=dict)
    heads: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)

    @property
    def rank(self) -> int:
        """The LoRA rank, or the bottleneck width (the largest over modules)."""
        return max(
            (f.A.shape[0] if isinstance(f, LoraFactors) else f.down_weight.shape[0] for f in self.modules.values()),
            default=0,
        )


# ----------------------------------------------------------------------------------------------- reading
def read_adapter(name: str, folder: str | Path) -> TaskAdapter:
    """Parse the PEFT adapter in `folder` (safetensors only); unsupported options raise an error naming them."""
    folder = Path(folder)
    config_file, weights_file = folder / ADAPTER_CONFIG, folder / ADAPTER_WEIGHTS
    if not config_file.is_file():
        raise FileNotFoundError(f"adapter {name!r}: no {ADAPTER_CONFIG} in {folder}")
    if not weights_file.is_file():
        pickled = " (there is an adapter_model.bin: compositions read safetensors only, never pickle)"
        raise FileNotFoundError(
            f"adapter {name!r}: no {ADAPTER_WEIGHTS} in {folder}"
            + (pickled if (folder / "adapter_model.bin").exists() else "")
        )
    config = json.loads(config_file.read_text(encoding="utf-8"))
    tensors = load_file(weights_file)
    peft_type = config.get("peft_type")
    if peft_type == "LORA":
        _check_lora_options(name, config)
        adapter = TaskAdapter(name, folder, "lora", config)
    elif peft_type == "BOTTLENECK":
        _check_options(name, config, BottleneckConfig)  # every bottleneck option is supported
        adapter = TaskAdapter(name, folder, "bottleneck", config)
    else:
        raise ValueError(f"adapter {name!r} ({folder}) is a {peft_type} adapter; compositions take LORA and BOTTLENECK")
    _parse_tensors(adapter, tensors)
    return adapter


def _check_lora_options(name: str, config: dict) -> None:
    init = config.get("init_lora_weights", True)
    if init not in _PLAIN_LORA_INITS:
        raise ValueError(
            f"adapter {name!r} uses the LoRA option init_lora_weights={init!r}, which rewrites the base model's "
            "weights at initialisation: the adapter only holds on that rewritten base. Convert it to a plain LoRA "
            "first (PEFT: save_pretrained(..., path_initial_model_for_weight_conversion=...))."
        )
    _check_options(name, config, LoraConfig, _LORA_HARMLESS_OPTIONS)


def _check_options(name: str, config: dict, config_cls: type, supported: set[str] | None = None) -> None:
    """Options outside `supported` (default: all of `config_cls`'s fields) must be unset or at `config_cls`'s
    default; options `config_cls` does not know (a newer PEFT) must be unset."""
    defaults = {
        f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
        for f in dataclasses.fields(config_cls)
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
    }
    supported = set(defaults) if supported is None else supported
    for option, value in config.items():
        if option in supported or not value or value == defaults.get(option):
            continue
        why = _WHY_UNSUPPORTED.get(option, "compositions do not implement it")
        raise ValueError(
            f"adapter {name!r} uses the option {option}={value!r}, which compose() does not support: {why}."
        )


_LORA_KEY = re.compile(r"(?P<module>.+)\.(?P<factor>lora_A|lora_B)\.weight")
_BOTTLENECK_KEY = re.compile(r"(?P<module>.+)\.bottleneck_(?P<part>down|up|norm)\.(?P<param>weight|bias)")


def _parse_tensors(adapter: TaskAdapter, tensors: dict[str, torch.Tensor]) -> None:
    factors: dict[str, dict[str, torch.Tensor]] = {}
    pattern = _LORA_KEY if adapter.kind == "lora" else _BOTTLENECK_KEY
    for key, tensor in tensors.items():
        if not key.startswith(KEY_PREFIX):
            raise ValueError(f"adapter {adapter.name!r}: tensor {key!r} lacks PEFT's {KEY_PREFIX!r} prefix")
        key = key[len(KEY_PREFIX):]
        match = pattern.fullmatch(key)
        if match:
            part = match["factor"] if adapter.kind == "lora" else f"{match['part']}_{match['param']}"
            factors.setdefault(match["module"], {})[part] = tensor
            continue
        module, _, param = key.rpartition(".")
        if not _is_saved_module(module, adapter.config.get("modules_to_save") or []):
            raise ValueError(
                f"adapter {adapter.name!r} holds tensor {key!r}, which is neither a {adapter.kind} factor nor a "
                "`modules_to_save` copy (LoRA on embeddings or other layer kinds is not supported)"
            )
        adapter.heads.setdefault(module, {})[param] = tensor
    for module, parts in factors.items():
        lora = adapter.kind == "lora"
        adapter.modules[module] = _lora(adapter, module, parts) if lora else _bottleneck(adapter, parts)


def _is_saved_module(module: str, modules_to_save: list[str]) -> bool:
    return any(module == saved or module.endswith("." + saved) for saved in modules_to_save)


def _lora(adapter: TaskAdapter, module: str, parts: dict[str, torch.Tensor]) -> LoraFactors:
    config = adapter.config
    alpha_pattern = config.get("alpha_pattern") or {}
    alpha = alpha_pattern.get(get_pattern_key(alpha_pattern.keys(), module), config["lora_alpha"])
    rank = parts["lora_A"].shape[0]
    scaling = alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank
    return LoraFactors(parts["lora_A"], parts["lora_B"], scaling)


def _bottleneck(adapter: TaskAdapter, parts: dict[str, torch.Tensor]) -> BottleneckFactors:
    return BottleneckFactors(
        parts["down_weight"], parts["down_bias"], parts["up_weight"], parts["up_bias"],
        parts.get("norm_weight"), parts.get("norm_bias"),
        adapter.config.get("activation", "relu"), float(adapter.config.get("scaling", 1.0)),
    )


# ----------------------------------------------------------------------------------------------- checking
def linear_shape(module: nn.Module) -> tuple[int, int] | None:
    """(out_features, in_features) of an `nn.Linear` or transformers' `Conv1D` (GPT-2); None for other modules."""
    if isinstance(module, nn.Linear):
        return module.out_features, module.in_features
    if isinstance(module, Conv1D):
        return module.nf, module.weight.shape[0]
    return None


def output_width(module: nn.Module, model: nn.Module) -> int:
    """Width of a module's (first) output: a linear layer's out_features, else the model's hidden size."""
    shape = linear_shape(module)
    return shape[0] if shape else model.config.hidden_size


def check_fits(adapter: TaskAdapter, model: nn.Module) -> None:
    """Raise an error naming the module, the expected and the found shape where `adapter` does not fit `model`."""
    for path, factors in adapter.modules.items():
        module = _module_at(adapter, model, path)
        if isinstance(factors, LoraFactors):
            shape = linear_shape(module)
            if shape is None:
                raise ValueError(
                    f"adapter {adapter.name!r} has LoRA on {path}, a {type(module).__name__}; compositions stack "
                    "LoRA on nn.Linear and Conv1D layers only"
                )
            rank = factors.A.shape[0]
            _expect(adapter, path, "lora_A", (rank, shape[1]), factors.A)
            _expect(adapter, path, "lora_B", (shape[0], rank), factors.B)
        else:
            width, d = factors.down_weight.shape[0], output_width(module, model)
            _expect(adapter, path, "bottleneck_down.weight", (width, d), factors.down_weight)
            _expect(adapter, path, "bottleneck_up.weight", (d, width), factors.up_weight)
    for path, params in adapter.heads.items():
        module = _module_at(adapter, model, path)
        if not isinstance(module, nn.Linear):
            raise ValueError(
                f"adapter {adapter.name!r} saves its own copy of {path} (modules_to_save), a "
                f"{type(module).__name__}; compositions stack saved copies of nn.Linear heads only"
            )
        for param, tensor in params.items():
            _expect(adapter, path, param, tuple(getattr(module, param).shape), tensor)


def _module_at(adapter: TaskAdapter, model: nn.Module, path: str) -> nn.Module:
    try:
        return model.get_submodule(path)
    except AttributeError:
        raise ValueError(
            f"adapter {adapter.name!r} adapts {path}, which the base model ({type(model).__name__}, "
            f"model_type {getattr(model.config, 'model_type', None)!r}) does not have"
        ) from None


def _expect(adapter: TaskAdapter, path: str, what: str, expected: tuple, tensor: torch.Tensor) -> None:
    if tuple(tensor.shape) != tuple(expected):
        raise ValueError(
            f"adapter {adapter.name!r} does not fit the base model at {path}: expected {what} of shape "
            f"{list(expected)}, found {list(tensor.shape)}"
        )


# ----------------------------------------------------------------------------------------------- stacking
def _frozen(tensor: torch.Tensor) -> nn.Parameter:
    return nn.Parameter(tensor, requires_grad=False)


class StackedLoRA(nn.Module):
    """The LoRA factors of M adapters on one module; slot M is zero (no adapter)."""

    def __init__(self, factors: list[LoraFactors], like: torch.Tensor) -> None:
        super().__init__()
        self.size, self.rank = len(factors), max(f.A.shape[0] for f in factors)
        in_features, out_features = factors[0].A.shape[1], factors[0].B.shape[0]
        A = torch.zeros(self.size + 1, self.rank, in_features)
        Bt = torch.zeros(self.size + 1, self.rank, out_features)
        for slot, f in enumerate(factors):
            rank = f.A.shape[0]
            A[slot, :rank] = f.A.float()
            Bt[slot, :rank] = (f.B.float() * f.scaling).T
        self.A = _frozen(A.to(like.device, like.dtype))
        self.Bt = _frozen(Bt.to(like.device, like.dtype))

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        """`x @ A_n.T` for every adapter: [..., M, R], one matmul of width M*R."""
        return F.linear(x, self.A[: self.size].flatten(0, 1)).unflatten(-1, (self.size, self.rank))

    def combine(self, hidden: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """`sum_n weights_n * delta_n` from `hidden`, one matmul of width M*R."""
        return (hidden * weights.unsqueeze(-1)).flatten(-2) @ self.Bt[: self.size].flatten(0, 1)

    @property
    def num_directions(self) -> int:
        return self.size * self.rank

    def key_directions(self) -> torch.Tensor:
        """[M*R, out]: `delta_n = hidden_n @ rows_n` (the rows of B_n^T, scaled)."""
        return self.Bt[: self.size].flatten(0, 1)

    def score(self, hidden: torch.Tensor, projected: torch.Tensor) -> torch.Tensor:
        """`query . delta_n` per adapter from `projected = query @ key_directions().T` [..., M*R]."""
        return (projected.unflatten(-1, (self.size, self.rank)) * hidden).sum(-1)

    def select_grouped(self, x: torch.Tensor, groups: SlotGroups) -> torch.Tensor:
        """The chosen deltas of token rows x [n, in] for `groups` of those rows: [assignments, out], in group order."""
        hidden = F.grouped_mm(x.index_select(0, groups.rows), self.A.transpose(1, 2), offs=groups.offsets)
        if groups.weights is not None:
            hidden = hidden * groups.weights
        return F.grouped_mm(hidden, self.Bt, offs=groups.offsets)

    @property
    def gathered_per_row(self) -> int:
        """Values `select` copies per chosen slot of a row."""
        return self.A[0].numel() + self.Bt[0].numel()

    def select(self, x: torch.Tensor, slots: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
        """Row i ([n, T, in]) gets `sum_j weights[i, j] * delta_{slots[i, j]}` (weights None: one slot, weight 1)."""
        rows, k = slots.shape
        chosen = slots.flatten()
        # index_select of whole flattened slots: a row copy each, cheaper than advanced indexing's element gather
        A = self.A.flatten(1).index_select(0, chosen).view(rows, k * self.rank, -1)
        Bt = self.Bt.flatten(1).index_select(0, chosen).view(rows, k * self.rank, -1)
        hidden = torch.bmm(x, A.transpose(1, 2))
        if weights is not None:
            hidden = (hidden.unflatten(-1, (k, self.rank)) * weights[:, None, :, None]).flatten(-2)
        return torch.bmm(hidden, Bt)


class StackedBottleneck(nn.Module):
    """The bottleneck adapters of M adapters on one module (same activation); slot M is zero (no adapter)."""

    def __init__(self, factors: list[BottleneckFactors], like: torch.Tensor, where: str) -> None:
        super().__init__()
        activations = sorted({f.activation for f in factors})
        if len(activations) > 1:
            raise ValueError(
                f"bottleneck adapters on {where} use different activations {activations}; they cannot be stacked"
            )
        self.act = ACT2FN[activations[0]]
        self.size, self.width = len(factors), max(f.down_weight.shape[0] for f in factors)
        d = factors[0].down_weight.shape[1]
        down, up_t = torch.zeros(self.size + 1, self.width, d), torch.zeros(self.size + 1, self.width, d)
        down_bias, up_bias = torch.zeros(self.size + 1, self.width), torch.zeros(self.size + 1, d)
        norm_weight, norm_bias = torch.ones(self.size + 1, d), torch.zeros(self.size + 1, d)
        has_norm = torch.zeros(self.size + 1, dtype=torch.bool)
        for slot, f in enumerate(factors):
            width = f.down_weight.shape[0]
            down[slot, :width], down_bias[slot, :width] = f.down_weight.float(), f.down_bias.float()
            up_t[slot, :width], up_bias[slot] = (f.up_weight.float() * f.scaling).T, f.up_bias.float() * f.scaling
            if f.norm_weight is not None:
                norm_weight[slot], norm_bias[slot], has_norm[slot] = f.norm_weight.float(), f.norm_bias.float(), True
        place = dict(device=like.device, dtype=like.dtype)
        self.down, self.down_bias = _frozen(down.to(**place)), _frozen(down_bias.to(**place))
        self.up_t, self.up_bias = _frozen(up_t.to(**place)), _frozen(up_bias.to(**place))
        self.uses_norm = bool(has_norm.any())
        self.norm_weight, self.norm_bias = _frozen(norm_weight.to(**place)), _frozen(norm_bias.to(**place))
        self.register_buffer("has_norm", has_norm.to(like.device), persistent=False)

    def _inputs(self, y: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """Each adapter's input, [..., K, d] for `slots` [K] (or [n, 1, k] against y [n, T, d]): y, or its
        LayerNorm with that adapter's affine."""
        normed = F.layer_norm(y, y.shape[-1:], eps=LAYER_NORM_EPS).unsqueeze(-2)
        # addcmul rounds like LayerNorm's fused affine, so a single adapter matches PEFT's output bit for bit
        normed = torch.addcmul(self.norm_bias[slots], normed, self.norm_weight[slots])
        return torch.where(self.has_norm[slots].unsqueeze(-1), normed, y.unsqueeze(-2))

    def hidden(self, y: torch.Tensor) -> torch.Tensor:
        """`act(down_n(norm_n(y)))` for every adapter: [..., M, W]."""
        members = slice(0, self.size)
        if not self.uses_norm:
            down = F.linear(y, self.down[members].flatten(0, 1), self.down_bias[members].flatten())
            return self.act(down.unflatten(-1, (self.size, self.width)))
        inputs = self._inputs(y, torch.arange(self.size, device=y.device))
        return self.act(torch.einsum("...md,mwd->...mw", inputs, self.down[members]) + self.down_bias[members])

    def combine(self, hidden: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        up_t, up_bias = self.up_t[: self.size].flatten(0, 1), self.up_bias[: self.size]
        return (hidden * weights.unsqueeze(-1)).flatten(-2) @ up_t + weights @ up_bias

    @property
    def num_directions(self) -> int:
        return self.size * (self.width + 1)

    def key_directions(self) -> torch.Tensor:
        """[M*W + M, d]: `delta_n = hidden_n @ up rows_n + up bias_n`, so the up rows and then one bias row each."""
        return torch.cat([self.up_t[: self.size].flatten(0, 1), self.up_bias[: self.size]])

    def score(self, hidden: torch.Tensor, projected: torch.Tensor) -> torch.Tensor:
        """`query . delta_n` per adapter from `projected = query @ key_directions().T` [..., M*W + M]."""
        up, bias = projected.split([self.size * self.width, self.size], dim=-1)
        return (up.unflatten(-1, (self.size, self.width)) * hidden).sum(-1) + bias

    def select_grouped(self, y: torch.Tensor, groups: SlotGroups) -> torch.Tensor:
        """The chosen deltas of token rows y [n, d] for `groups` of those rows: [assignments, d], in group order."""
        inputs = y.index_select(0, groups.rows)
        if self.uses_norm:
            inputs = self._inputs(inputs, groups.slots.unsqueeze(-1)).squeeze(-2)
        down = F.grouped_mm(inputs, self.down.transpose(1, 2), offs=groups.offsets)
        hidden, up_bias = self.act(down + self.down_bias[groups.slots]), self.up_bias[groups.slots]
        if groups.weights is not None:
            hidden, up_bias = hidden * groups.weights, up_bias * groups.weights
        return F.grouped_mm(hidden, self.up_t, offs=groups.offsets) + up_bias

    @property
    def gathered_per_row(self) -> int:
        """Values `select` copies per chosen slot of a row."""
        return self.down[0].numel() + self.up_t[0].numel()

    def select(self, y: torch.Tensor, slots: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
        """Row i ([n, T, d]) gets `sum_j weights[i, j] * delta_{slots[i, j]}`: every (row, choice) pair is one batch
        entry of `baddbmm` (einsum over [n, T, k, ...] ran ~3.5x slower here, 8 rows x 128 tokens)."""
        rows, k = slots.shape
        chosen = slots.flatten()
        if self.uses_norm:
            inputs = self._inputs(y, slots.unsqueeze(1)).transpose(1, 2).flatten(0, 1)  # [n*k, T, d]
        else:
            inputs = y if k == 1 else y.repeat_interleave(k, dim=0)
        down_bias, up_bias = self.down_bias[chosen].unsqueeze(1), self.up_bias[chosen].unsqueeze(1)
        hidden = self.act(torch.baddbmm(down_bias, inputs, self.down[chosen].transpose(1, 2)))
        if weights is not None:
            scale = weights.reshape(-1, 1, 1)
            hidden, up_bias = hidden * scale, up_bias * scale
        delta = torch.baddbmm(up_bias, hidden, self.up_t[chosen])
        return delta if k == 1 else delta.unflatten(0, (rows, k)).sum(1)


class StackedHeads(nn.Module):
    """Adapters' own copies of an `nn.Linear` head (modules_to_save); slot M holds the base module's weights."""

    def __init__(self, heads: list[dict[str, torch.Tensor]], base: nn.Linear) -> None:
        super().__init__()
        self.size = len(heads)
        weight = torch.stack([h["weight"].to(base.weight) for h in heads] + [base.weight.detach()])
        self.weight = _frozen(weight.clone())
        if base.bias is not None:
            self.bias = _frozen(torch.stack([h["bias"].to(base.bias) for h in heads] + [base.bias.detach()]).clone())
        else:
            self.bias = None

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        """Every copy's output: [..., M, out]."""
        bias = None if self.bias is None else self.bias[: self.size].flatten()
        return F.linear(x, self.weight[: self.size].flatten(0, 1), bias).unflatten(-1, (self.size, -1))

    def combine(self, outputs: torch.Tensor, weights: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """`y + sum_n weights_n * (output_n - y)`: the weighted mean of the outputs when the weights sum to 1."""
        return y + (weights.unsqueeze(-1) * (outputs - y.unsqueeze(-2))).sum(-2)

    def select(self, x: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """Row i ([n, T, in]) through copy `slots[i, 0]` (slot M: the base module)."""
        slot = slots[:, 0]
        output = torch.bmm(x, self.weight[slot].transpose(1, 2))
        return output if self.bias is None else output + self.bias[slot].unsqueeze(1)


class StackedAdapters(nn.Module):
    """All adapters on one module. Member order: LoRA members, then bottleneck members, then head members.

    `member_of_adapter[a]` is adapter a's member index here (M when adapter a does not touch this module, and for
    the base model, index N); `<kind>_slot[m]` maps a member to its slot in that kind's stack (the kind's zero slot
    for members of another kind or for M), so a gather by member index is correct for every kind at once.
    """

    def __init__(
        self, path: str, module: nn.Module, width: int, entries: list[tuple[int, TaskAdapter]], num_adapters: int
    ) -> None:
        super().__init__()
        like = next(module.parameters())
        by_kind: dict[str, list[tuple[int, object]]] = {"lora": [], "bottleneck": [], "head": []}
        for index, adapter in entries:
            if path in adapter.modules:
                by_kind[adapter.kind].append((index, adapter.modules[path]))
            if path in adapter.heads:
                by_kind["head"].append((index, adapter.heads[path]))
        if by_kind["head"] and len(by_kind["head"]) != sum(map(len, by_kind.values())):
            raise ValueError(
                f"{path} is both a saved head (modules_to_save) and adapted; compositions do not mix these"
            )
        lora, bottleneck, heads = by_kind["lora"], by_kind["bottleneck"], by_kind["head"]
        self.lora = StackedLoRA([f for _, f in lora], like) if lora else None
        self.bottleneck = StackedBottleneck([f for _, f in bottleneck], like, path) if bottleneck else None
        self.heads = StackedHeads([h for _, h in heads], module) if heads else None
        self.members = [index for kind in (lora, bottleneck, heads) for index, _ in kind]
        self.size, self.width = len(self.members), width
        member_of_adapter = torch.full((num_adapters + 1,), self.size, dtype=torch.long)
        member_of_adapter[self.members] = torch.arange(self.size)
        self.register_buffer("member_of_adapter", member_of_adapter.to(like.device), persistent=False)
        offset = 0
        for kind, group in (("lora", lora), ("bottleneck", bottleneck), ("head", heads)):
            slots = torch.full((self.size + 1,), len(group), dtype=torch.long)
            slots[offset : offset + len(group)] = torch.arange(len(group))
            self.register_buffer(f"{kind}_slot", slots.to(like.device), persistent=False)
            offset += len(group)
        self.split = (len(lora), len(bottleneck), len(heads))
        self.one_kind = sum(map(bool, self.split)) == 1  # then every `<kind>_slot` is the identity

    def _slots(self, slot_of_member: torch.Tensor, members: torch.Tensor) -> torch.Tensor:
        return members if self.one_kind else slot_of_member[members]

    def hidden(self, x: torch.Tensor, y: torch.Tensor) -> tuple:
        """Every member's hidden state from the module input x (LoRA, heads) and output y (bottleneck)."""
        return (
            self.lora.hidden(x) if self.lora else None,
            self.bottleneck.hidden(y) if self.bottleneck else None,
            self.heads.hidden(x) if self.heads else None,
        )

    def combine(self, hidden: tuple, weights: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """`y + sum_m weights_m * delta_m`, with `weights` [..., M] broadcastable against y's leading dims."""
        lora_w, bottleneck_w, head_w = weights.split(self.split, dim=-1)
        if self.lora:
            y = y + self.lora.combine(hidden[0], lora_w)
        if self.bottleneck:
            y = y + self.bottleneck.combine(hidden[1], bottleneck_w)
        if self.heads:
            y = self.heads.combine(hidden[2], head_w, y)
        return y

    def key_directions(self) -> torch.Tensor:
        """[P, width]: the LoRA members' then the bottleneck members' `key_directions` (heads have none)."""
        return torch.cat([stack.key_directions() for stack in (self.lora, self.bottleneck) if stack])

    def score(self, hidden: tuple, projected: torch.Tensor) -> torch.Tensor:
        """`query . delta_m` per member, [..., M], from `projected = query @ key_directions().T` [..., P]."""
        stacks = [(stack, h) for stack, h in ((self.lora, hidden[0]), (self.bottleneck, hidden[1])) if stack]
        parts = projected.split([stack.num_directions for stack, _ in stacks], dim=-1)
        return torch.cat([stack.score(h, part) for (stack, h), part in zip(stacks, parts)], dim=-1)

    def select(
        self, x: torch.Tensor, y: torch.Tensor, members: torch.Tensor, weights: torch.Tensor | None
    ) -> torch.Tensor:
        """Adapt y with the members chosen per row: `members` [n, k] (M = none) with `weights` [n, k] (None: k = 1,
        weight 1). x and y are [n, ...] or flatten to n rows; the result has y's shape."""
        rows = members.shape[0]
        xs, ys = x.reshape(rows, -1, x.shape[-1]), y.reshape(rows, -1, y.shape[-1])
        if self.heads:
            return self.heads.select(xs, self._slots(self.head_slot, members)).reshape(y.shape)
        # grouped_mm has no CPU backward (torch 2.13): rows that need a gradient take the bmm path
        needs_grad = torch.is_grad_enabled() and (
            x.requires_grad or y.requires_grad or (weights is not None and weights.requires_grad)
        )
        if ys.shape[1] == 1 and not needs_grad and self._grouping_pays(members.numel()):
            return self._select_tokens(xs[:, 0], ys[:, 0], members, weights).reshape(y.shape)
        out = ys
        if self.lora:
            out = out + self.lora.select(xs, self._slots(self.lora_slot, members), weights)
        if self.bottleneck:
            out = out + self.bottleneck.select(ys, self._slots(self.bottleneck_slot, members), weights)
        return out.reshape(y.shape)

    def _grouping_pays(self, assignments: int) -> bool:
        """Whether token rows are cheaper grouped by slot than gathered. Both compute only the chosen adapters:
        gathering copies every chosen adapter's weights per row; grouping runs one small matmul per slot, with
        more fixed work per call (sorting, offsets, scattering back) that only many rows amortise."""
        per_row = sum(stack.gathered_per_row for stack in (self.lora, self.bottleneck) if stack)
        return assignments * per_row > GATHERED_VALUES_LIMIT

    def _select_tokens(
        self, x: torch.Tensor, y: torch.Tensor, members: torch.Tensor, weights: torch.Tensor | None
    ) -> torch.Tensor:
        """`select` for rows of one token each (x [n, in], y [n, out]): rows grouped by adapter, `grouped_mm`."""
        out = y
        for stack, slot_of_member in ((self.lora, self.lora_slot), (self.bottleneck, self.bottleneck_slot)):
            if stack:
                groups = SlotGroups.of(self._slots(slot_of_member, members), weights, stack.size + 1)
                source = x if stack is self.lora else y
                out = out.index_add(0, groups.rows, stack.select_grouped(source, groups))
        return out


@dataclass
class SlotGroups:
    """The (row, slot) choices of token rows sorted by slot, as `grouped_mm` takes them: assignment j is row `rows[j]`
    through slot `slots[j]` with weight `weights[j]` (None: 1); slot s's group ends at `offsets[s]`. The zero slot is
    a group like the others, so the cost does not depend on the choice."""

    rows: torch.Tensor
    slots: torch.Tensor
    weights: torch.Tensor | None
    offsets: torch.Tensor

    @classmethod
    def of(cls, slots: torch.Tensor, weights: torch.Tensor | None, num_slots: int) -> SlotGroups:
        """Group `slots` [n, k] (and their `weights` [n, k]) of n rows."""
        sorted_slots, order = slots.flatten().sort(stable=True)
        slot_ids = torch.arange(num_slots, device=slots.device)
        offsets = torch.searchsorted(sorted_slots, slot_ids, right=True, out_int32=True)
        rows = order if slots.shape[1] == 1 else order.div(slots.shape[1], rounding_mode="floor")
        chosen_weights = None if weights is None else weights.flatten()[order].unsqueeze(-1)
        return cls(rows, sorted_slots, chosen_weights, offsets)


# FlopCounterMode (torch 2.13) counts no FLOPs for grouped matmuls: without this formula the adapters that token
# routing computes would vanish from every FLOP count (MFU figures, the tests that check what hard routing costs).
if torch.ops.aten._grouped_mm not in flop_registry:

    @register_flop_formula(torch.ops.aten._grouped_mm)
    def _grouped_mm_flops(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
        """2 x output elements x inner size; 2-D x 2-D splits the inner dimension across the groups."""
        if len(a_shape) == 2 and len(b_shape) == 2:
            return 2 * a_shape[0] * a_shape[1] * b_shape[1]
        return 2 * math.prod(out_shape) * a_shape[-1]
