"""LoRA adapters: a PEFT adapter folder as the generator checks it and the backend serves it.

A model serves the adapters its ``config.pbtxt`` names in ``lora_adapters``, a JSON object {adapter name: its
folder, inside the model's folder (relative to it, or absolute)} (the generator copies each into
``adapters/<name>/``); ``max_loras`` is how
many one batch mixes. A folder holds ``adapter_config.json`` and ``adapter_model.safetensors``, as PEFT's
``save_pretrained`` writes them. The rules are QEfficient's finite LoRAX (``QEffAutoLoraModelForCausalLM``): every
adapter of a model has the same rank and target modules, and the targets are attention projections; adapter id 0
is the base, the others follow the order of ``lora_adapters`` (QEfficient's ``lora_ids`` input).

Standard library only, Python 3.8: the generator imports it.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from .compile_config import read_small
from .errors import BadRequest

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
FOLDER = "adapters"  # where the generator puts them, inside the model's folder
PARAMETER, MAX_PARAMETER = "lora_adapters", "max_loras"
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")  # what QEfficient's LinearMultiLoRA replaces
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
MAX_HEADER = 16 * 1024 * 1024  # a safetensors header of a small adapter is a few kilobytes
KEY_RE = re.compile(r"^base_model\.model\.(model\.layers\.(\d+)\.self_attn\.(\w+))\.lora_([AB])\.weight$")
# what a LoRA adapter may set that changes its product: refused, with the reason, rather than served wrong
UNSERVED = {"use_dora": "DoRA", "rank_pattern": "per-module ranks", "alpha_pattern": "per-module alphas",
            "layers_to_transform": "some layers only", "modules_to_save": "whole modules saved beside it"}
EMBEDDED_BASES = ("smollm2-135m",)  # the embedded model's names (its hub name, its prepared folders)


class AdapterError(ValueError):
    """An adapter folder, or a model's list of adapters, that cannot be served; the message names it."""


@dataclass(frozen=True)
class AdapterConfig:
    """What an adapter's ``adapter_config.json`` says that serving needs."""

    rank: int
    alpha: float
    targets: tuple[str, ...]
    base: str  # base_model_name_or_path ('' when not given)
    rslora: bool = False

    @property
    def scale(self) -> float:
        """The factor of its product B A (PEFT's ``scaling``)."""
        return self.alpha / (math.sqrt(self.rank) if self.rslora else self.rank)


def _json(path: Path) -> Any:
    try:
        return json.loads(read_small(path))
    except FileNotFoundError:
        raise AdapterError(f"{path.parent}: no {path.name} (a PEFT adapter folder has {CONFIG_FILE} and "
                           f"{WEIGHTS_FILE})") from None
    except (OSError, ValueError) as exc:
        raise AdapterError(f"{path}: cannot read it ({exc})") from None


def read_config(folder: Path) -> AdapterConfig:
    """The adapter's configuration; AdapterError for what is not a LoRA adapter this project serves."""
    raw = _json(folder / CONFIG_FILE)
    where = folder / CONFIG_FILE
    kind = raw.get("peft_type") if isinstance(raw, dict) else None
    if not isinstance(raw, dict) or str(kind).upper() != "LORA":
        raise AdapterError(f"{where}: not a LoRA adapter (peft_type {kind!r})")
    for key, what in UNSERVED.items():
        if raw.get(key):
            raise AdapterError(f"{where}: {key} is set ({what}): not served")
    if str(raw.get("bias", "none")) != "none":
        raise AdapterError(f"{where}: bias {raw.get('bias')!r}: only adapters without biases are served")
    rank, alpha, targets = raw.get("r"), raw.get("lora_alpha", raw.get("r")), raw.get("target_modules")
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        raise AdapterError(f"{where}: r must be an integer >= 1, got {rank!r}")
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool):
        raise AdapterError(f"{where}: lora_alpha must be a number, got {alpha!r}")
    if isinstance(targets, str):
        targets = [targets]  # one module's name; a regular expression is not one of TARGETS
    if not isinstance(targets, list) or not targets or not set(targets) <= set(TARGETS):
        raise AdapterError(f"{where}: target_modules must be among {', '.join(TARGETS)} (QEfficient's finite "
                           f"LoRAX adapts the attention projections), got {targets!r}")
    base = raw.get("base_model_name_or_path") or ""
    return AdapterConfig(rank, float(alpha), tuple(sorted(targets, key=TARGETS.index)), str(base),
                         bool(raw.get("use_rslora")))


def tensor_shapes(path: Path) -> dict[str, list[int]]:
    """The tensors' shapes of a safetensors file, read from its header (no tensor is read)."""
    try:
        with open(path, "rb") as file:
            size_bytes = file.read(8)
            size = struct.unpack("<Q", size_bytes)[0] if len(size_bytes) == 8 else -1
            if not 0 < size <= MAX_HEADER:
                raise AdapterError(f"{path}: not a safetensors file")
            header = json.loads(file.read(size).decode("utf-8"))
    except FileNotFoundError:
        raise AdapterError(f"{path.parent}: no {path.name}") from None
    except (OSError, ValueError) as exc:
        raise AdapterError(f"{path}: cannot read its header ({exc})") from None
    return {k: list(v.get("shape", [])) for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)}


def module_sizes(base_config: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """(inputs, outputs) of each target projection of a Llama-family config."""
    hidden, heads = int(base_config["hidden_size"]), int(base_config["num_attention_heads"])
    head = int(base_config.get("head_dim") or hidden // heads)
    kv = int(base_config.get("num_key_value_heads") or heads)
    return {"q_proj": (hidden, heads * head), "k_proj": (hidden, kv * head), "v_proj": (hidden, kv * head),
            "o_proj": (heads * head, hidden)}


def weight_name(layer: int, target: str, part: str) -> str:
    """The PEFT name of one factor (``part`` A or B) of ``target`` in ``layer``."""
    return f"base_model.model.model.layers.{layer}.self_attn.{target}.lora_{part}.weight"


def check_weights(folder: Path, config: AdapterConfig, base_config: dict[str, Any] | None = None) -> int:
    """The adapter's tensors against its configuration (and the base model's sizes when ``base_config`` is given);
    the number of layers it adapts. AdapterError naming the first tensor that does not fit."""
    path = folder / WEIGHTS_FILE
    shapes = tensor_shapes(path)
    layers = set()
    for key in shapes:
        match = KEY_RE.match(key)
        if match is None or match.group(3) not in config.targets:
            raise AdapterError(f"{path}: {key} is not a LoRA factor of {', '.join(config.targets)} (its "
                               f"{CONFIG_FILE}'s target_modules)")
        layers.add(int(match.group(2)))
    sizes = module_sizes(base_config) if base_config else {}
    count = int(base_config["num_hidden_layers"]) if base_config else None
    if count is not None and layers and max(layers) >= count:
        raise AdapterError(f"{path}: adapts layer {max(layers)}, but the base model has {count} layers")
    for layer in sorted(layers):
        for target in config.targets:
            a, b = (shapes.get(weight_name(layer, target, part)) for part in "AB")
            if a is None or b is None or len(a) != 2 or len(b) != 2 or a[0] != config.rank or b[1] != config.rank:
                raise AdapterError(f"{path}: layer {layer} {target}: lora_A {a} and lora_B {b} are not rank "
                                   f"{config.rank} factors")
            if target in sizes and (a[1], b[0]) != sizes[target]:
                raise AdapterError(f"{path}: layer {layer} {target} maps {a[1]} -> {b[0]}, the base model's "
                                   f"{sizes[target][0]} -> {sizes[target][1]}: an adapter of another model")
    if not layers:
        raise AdapterError(f"{path}: holds no LoRA factor")
    return len(layers)


def same_base(adapter_base: str, model: str) -> bool:
    """Whether an adapter trained on ``adapter_base`` fits ``model`` (a hub name, a folder, or ``embedded``):
    their last path parts are the same name (case aside); no base named: it fits."""
    if not adapter_base:
        return True
    theirs = PurePosixPath(adapter_base.rstrip("/")).name.lower()
    if model in ("", "embedded"):
        return theirs.startswith(EMBEDDED_BASES)
    return theirs == PurePosixPath(model.rstrip("/")).name.lower()


def check_alike(configs: dict[str, AdapterConfig]) -> None:
    """QEfficient's rule for the adapters of one model: one rank and one set of target modules."""
    items = list(configs.items())
    for name, config in items[1:]:
        first, other = items[0]
        if (config.rank, config.targets) != (other.rank, other.targets):
            raise AdapterError(f"adapter {name} (rank {config.rank}, {', '.join(config.targets)}) differs from "
                               f"{first} (rank {other.rank}, {', '.join(other.targets)}): the adapters of one model "
                               "share their rank and target modules (QEfficient's finite LoRAX)")


def check_name(name: str) -> str:
    if not NAME_RE.fullmatch(name or "") or ".." in name:
        raise AdapterError(f"unsafe adapter name {name!r}: use letters, digits, '_', '-' and '.', starting with a "
                           "letter or digit")
    return name


def parse_adapters(text: str) -> dict[str, str]:
    """``lora_adapters`` as {name: folder relative to the model's folder}, in order; AdapterError naming the fault."""
    if not text.strip():
        return {}
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise AdapterError(f"parameter {PARAMETER} is not JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise AdapterError(f"parameter {PARAMETER} must be a JSON object {{adapter name: folder}}")
    for name, folder in raw.items():
        check_name(name)
        parts = PurePosixPath(folder).parts if isinstance(folder, str) else ("..",)
        if not parts or ".." in parts:
            raise AdapterError(f"parameter {PARAMETER}: adapter {name}'s folder must be a path inside the model's "
                               f"folder, got {folder!r}")
    return dict(raw)


def folder_in(model_dir: Path, folder: str) -> Path:
    """An adapter's folder (relative to the model's folder ``model_dir``, or absolute) as it is read: AdapterError
    when it is not inside the model's folder, symbolic links followed. The model's folder is the one root adapters
    are served from: the operator puts them there (the generator in ``adapters/``), and a folder named at run time
    (the repository API's config, the front's ``/v1/load_lora_adapter``) is found there or nowhere."""
    root = Path(os.path.realpath(model_dir))
    found = Path(os.path.realpath(model_dir / folder))
    if root not in found.parents:
        raise AdapterError(f"adapter folder {folder!r} is not inside the model's folder {model_dir}: adapters are "
                           f"served from there (put it in {model_dir / FOLDER})")
    return found


def parse_max_loras(text: str, count: int) -> int:
    """``max_loras``: adapters one batch mixes (blank: all of them)."""
    text = text.strip()
    if not text:
        return count
    if not text.isdigit() or not 1 <= int(text) <= max(count, 1):
        raise AdapterError(f"parameter {MAX_PARAMETER} must be an integer from 1 to {max(count, 1)} (the adapters "
                           f"served), got {text!r}")
    return int(text)


def unknown(name: str, served: list[str]) -> BadRequest:
    """The error of a request for an adapter the model does not serve."""
    return BadRequest(f"unknown adapter '{name}'; this model serves: {', '.join(served) or 'no adapters'}")
