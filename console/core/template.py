"""Chat templates: the model's tokenizer (transformers) turns a conversation into the prompt text."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from console.clients import ClientError, ModelInfo

_CACHE: dict[str, Any] = {}
_LOCK = threading.Lock()
Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


def tokenizer_folder(tokenizer: str | None, info: ModelInfo, progress: Progress = _quiet) -> Path:
    """The local folder whose tokenizer ``info``'s model uses (``tokenizer``: given by the user)."""
    if tokenizer:
        path = Path(tokenizer).expanduser()
        if not path.is_dir():
            raise ClientError(f"tokenizer folder {tokenizer} does not exist")
        return path
    if info.embedded:
        from backend_model.models import ModelSourceError, prepare_embedded

        try:
            return prepare_embedded(progress=progress)  # at once when already prepared
        except ModelSourceError as exc:  # the embedded model's package is not installed here
            raise ClientError(str(exc)) from None
    own = Path(info.hf_model_name).expanduser() if info.hf_model_name else None
    if own is not None and own.is_absolute() and own.is_dir():  # the model's weights are a local folder
        return own
    raise ClientError(
        f"the chat template of {info.name} needs a local tokenizer folder (--tokenizer, or the Tokenizer "
        "control), or send raw prompts"
    )


def chat_tokenizer(tokenizer: str | None, info: ModelInfo, progress: Progress = _quiet) -> Any:
    """The tokenizer whose chat template the model uses, loaded once per folder."""
    path = tokenizer_folder(tokenizer, info, progress)
    with _LOCK:
        if str(path) not in _CACHE:
            _CACHE[str(path)] = _load(path)
        return _CACHE[str(path)]


def _load(path: Path) -> Any:
    import transformers
    from transformers import AutoTokenizer

    transformers.logging.set_verbosity_error()
    try:
        tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ClientError(f"cannot load a tokenizer from {path}: {str(exc).splitlines()[0][:200]}") from None
    if not getattr(tok, "chat_template", None):
        raise ClientError(f"the tokenizer in {path} has no chat template")
    return tok


def chat_messages(prompts: Sequence[str], *, system: str | None = None,
                  history: Sequence[dict[str, str]] = ()) -> list[list[dict[str, str]]]:
    """Each prompt's conversation: ``system``, the ``history`` turns, then the prompt as the user's message."""
    head = [{"role": "system", "content": system}] if system else []
    return [[*head, *history, {"role": "user", "content": p}] for p in prompts]


def chat_prompts(prompts: Sequence[str], info: ModelInfo, *, system: str | None = None,
                 history: Sequence[dict[str, str]] = (), tokenizer: str | None = None,
                 progress: Progress = _quiet) -> list[str]:
    """Each prompt as the model's chat template renders it after ``system`` and the ``history`` turns."""
    tok = chat_tokenizer(tokenizer, info, progress)
    return [tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            for messages in chat_messages(prompts, system=system, history=history)]
