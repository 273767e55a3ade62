"""What a sentence-transformers folder says about its vectors: the pooling (``1_Pooling/config.json``), the
normalisation (a Normalize module in ``modules.json``), the longest input (``sentence_bert_config.json``) and the
dimension. The generator writes them into an embedding model's parameters; the backend checks them at load.
Standard library only, Python 3.8.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

from .compile_config import read_small
from .errors import SessionError

POOLING_MODES = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls", "pooling_mode_lasttoken": "last"}


class SentenceConfig(NamedTuple):
    """What the folder says (None: it does not say)."""

    pooling: str | None = None
    normalize: bool | None = None
    max_seq_len: int | None = None
    dimension: int | None = None


def json_file(path: Path) -> dict:
    """The JSON object of a small file; {} when the file is absent; SessionError when it is unreadable."""
    try:
        value = json.loads(read_small(path))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise SessionError(f"{path}: cannot read it ({exc})") from None
    return value if isinstance(value, (dict, list)) else {}  # type: ignore[return-value]


def sentence_config(folder: Any) -> SentenceConfig:
    """The folder's sentence-transformers config; an empty one for a folder without ``modules.json`` (or a hub
    name). SessionError for a pooling this backend does not do."""
    if not isinstance(folder, Path):
        return SentenceConfig()
    modules = json_file(folder / "modules.json")
    if not isinstance(modules, list):
        return SentenceConfig()
    types = {str(m.get("type", "")).rsplit(".", 1)[-1]: str(m.get("path", "")) for m in modules if isinstance(m, dict)}
    pooling = dimension = None
    if "Pooling" in types:
        config = json_file(folder / types["Pooling"] / "config.json")
        modes = [mode for key, mode in POOLING_MODES.items() if config.get(key)]
        others = [key for key, on in config.items()
                  if key.startswith("pooling_mode") and on and key not in POOLING_MODES]
        if len(modes) != 1 or others:
            raise SessionError(f"{folder}: pooling {', '.join(modes + others) or 'none'}: this backend pools by one "
                               "of mean, cls or last token")
        pooling, dimension = modes[0], config.get("word_embedding_dimension")
    longest = json_file(folder / "sentence_bert_config.json").get("max_seq_length")
    return SentenceConfig(pooling, "Normalize" in types, longest if isinstance(longest, int) else None,
                          dimension if isinstance(dimension, int) else None)
