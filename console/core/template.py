"""Chat templates: the model's tokenizer (transformers) turns a conversation into the prompt text.

The tokenizers are loaded once per folder (:func:`chat_tokenizer`); a console loads a model's ahead of its first
chat send with a :class:`Warmup`, which keeps each one's state for a status line.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from console.clients import BadRequest, ClientError, ModelInfo, UsageError

_CACHE: dict[str, Any] = {}
_LOCK = threading.Lock()
Progress = Callable[[str], None]
Key = tuple[str, str]  # (model, tokenizer folder: '' for the model's own)
LOADING, READY = "loading", "ready"


def _quiet(_: str) -> None:
    pass


def embedded_here() -> bool:
    """Whether the embedded model's package is installed here (its tokenizer gives the chat template)."""
    from backend_model.models import ModelSourceError, embedded_gguf

    try:
        embedded_gguf()
    except ModelSourceError:
        return False
    return True


def tokenizer_folder(tokenizer: str | None, info: ModelInfo, progress: Progress = _quiet) -> Path:
    """The local folder whose tokenizer ``info``'s model uses (``tokenizer``: given by the user)."""
    if tokenizer:
        path = Path(tokenizer).expanduser()
        if not path.is_dir():
            raise UsageError(f"tokenizer folder {tokenizer} does not exist")
        return path
    if info.embedded:
        from backend_model.models import ModelSourceError, prepare_embedded

        try:
            return prepare_embedded(progress=progress)  # at once when already prepared
        except ModelSourceError as exc:  # the embedded model's package is not installed here
            raise BadRequest(str(exc)) from None
    own = Path(info.hf_model_name).expanduser() if info.hf_model_name else None
    if own is not None and own.is_absolute() and own.is_dir():  # the model's weights are a local folder
        return own
    raise BadRequest(
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
        raise UsageError(f"cannot load a tokenizer from {path}: {str(exc).splitlines()[0][:200]}") from None
    if not getattr(tok, "chat_template", None):
        raise BadRequest(f"the tokenizer in {path} has no chat template")
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


class Warmup:
    """Chat templates loaded in a thread ahead of a model's first chat send: the state of each (model, tokenizer)
    key, LOADING, READY or why it could not be loaded; ``on_change(key)`` is called (from the loading thread) when
    one is loaded or fails."""

    def __init__(self, on_change: Callable[[Key], object] | None = None) -> None:
        self._lock = threading.Lock()
        self._state: dict[Key, str] = {}
        self._on_change = on_change

    def state(self, key: Key) -> str | None:
        return self._state.get(key)

    def mark(self, key: Key, state: str) -> None:
        with self._lock:
            self._state[key] = state

    def clear(self) -> None:
        """Forget the states (the models changed; loaded tokenizers stay in the cache)."""
        with self._lock:
            self._state.clear()

    def warm(self, info: ModelInfo, tokenizer: str = "") -> None:
        """Load ``info``'s chat template (``tokenizer``: a folder given for it) in a thread, unless known already;
        the caller checked that it is applied here (:meth:`~.adapters.Adapter.template_side`)."""
        key = (info.name, tokenizer)
        with self._lock:
            if key in self._state:
                return
            self._state[key] = LOADING
        threading.Thread(target=self._load, args=(key, info), name="qc-template", daemon=True).start()

    def _load(self, key: Key, info: ModelInfo) -> None:
        try:
            chat_tokenizer(key[1] or None, info)
            state = READY
        except Exception as exc:  # said in the status; the send says it again
            state = str(exc) if isinstance(exc, ClientError) else repr(exc)
        self.mark(key, state)
        if self._on_change is not None:
            self._on_change(key)
