"""An encoder model ready to serve: its tokenizer, its encoder on the engine chosen, and the model's normalisation."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..build import pick_engine
from ..contract.errors import BadRequest, SessionError
from ..contract.sentence_config import sentence_config
from ..models import Progress
from ..sessions.threads import choose_threads
from .encoders import CpuEncoder, Encoder, QaicEncoder, TwinEncoder
from .settings import EmbeddingSettings
from .source import model_folder

MAX_TEXT_BYTES = 1 << 20  # one input's text: checked before it is tokenised


class Embedder:
    """Texts or token ids -> one vector per input (pooled, normalised as the model says)."""

    def __init__(self, settings: EmbeddingSettings, tokenizer, encoder: Encoder, description: str) -> None:
        self.settings, self.tokenizer, self.encoder, self.description = settings, tokenizer, encoder, description
        self.vocab = len(tokenizer)

    def tokens(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's token ids, the model's special tokens included (as sentence-transformers encodes it);
        BadRequest naming the first empty or too long text."""
        for i, text in enumerate(texts):
            if not text.strip():
                raise BadRequest(f"input {i} is empty: an embedding needs text")
            if len(text.encode("utf-8")) > MAX_TEXT_BYTES:
                raise BadRequest(f"input {i} is over {MAX_TEXT_BYTES} bytes")
        return self.checked([list(ids) for ids in self.tokenizer(list(texts), add_special_tokens=True,
                                                                  truncation=False)["input_ids"]])

    def checked(self, rows: list[list[int]]) -> list[list[int]]:
        """``rows`` when each is 1 to max_seq_len ids of the vocabulary; BadRequest naming the first that is not."""
        longest = self.settings.max_seq_len
        for i, row in enumerate(rows):
            if not row:
                raise BadRequest(f"input {i} is empty: an embedding needs tokens")
            if len(row) > longest:
                raise BadRequest(f"input {i} is {len(row)} tokens, over this model's max_seq_len of {longest} "
                                 "(it is not truncated)")
            bad = next((t for t in row if not 0 <= t < self.vocab), None)
            if bad is not None:
                raise BadRequest(f"input {i} has token id {bad}, outside the vocabulary [0, {self.vocab})")
        return rows

    def embed(self, rows: Sequence[Sequence[int]]) -> np.ndarray:
        """``[len(rows), dimension]`` float32: pooled, and L2-normalised when the model normalises."""
        vectors = self.encoder.pooled(rows)
        if self.settings.normalize and len(vectors):
            vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return vectors.astype(np.float32)


def build_embedder(settings: EmbeddingSettings, progress: Progress) -> Embedder:
    """The embedder of ``settings``: the card (QEFFAutoModel), its twin (the exported graph) or the CPU (torch)."""
    import transformers
    from transformers import AutoTokenizer

    transformers.logging.set_verbosity_error()
    kind = pick_engine(settings)
    folder = model_folder(settings.hf_model_name)
    told = sentence_config(folder)
    if told.pooling and told.pooling != settings.pooling:
        raise SessionError(f"parameter pooling {settings.pooling} but the model pools by {told.pooling} "
                           "(its 1_Pooling/config.json)")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    pad = tokenizer.pad_token_id or 0
    threads, chosen = choose_threads(settings.cpu_threads, settings.cpu_models)
    encoder: Encoder
    if kind == "qaic":
        encoder, extra = QaicEncoder(settings, pad, folder), ""
    elif kind == "onnx":
        encoder = TwinEncoder(settings, pad, threads)
        extra = f" graph={encoder.graph} threads={threads} ({chosen})"
    else:
        encoder = CpuEncoder(settings, pad, folder, threads)
        extra = f" precision={settings.precision} threads={threads} ({chosen})"
    c = settings.compile
    compiled = f" batch_size={c['batch_size']} seq_len={','.join(map(str, c['seq_len']))}" if kind != "cpu" else ""
    description = (f"engine={kind} task=embedding model={settings.hf_model_name} pooling={settings.pooling} "
                   f"normalize={str(settings.normalize).lower()} max_seq_len={settings.max_seq_len}{compiled}{extra}")
    return Embedder(settings, tokenizer, encoder, description)
