"""Encoders: rows of token ids in, one pooled vector per row out (normalised after, by the caller's settings).

Each runs chunks of at most ``batch_size`` rows, padded on the right: on the CPU (torch, fp32) to the
chunk's longest row; on a card and its twin to the smallest compiled sequence length that holds it, in chunks of
exactly the compiled batch size (missing rows are empty), as QEfficient's ``QEFFAutoModel`` runs its QPC. A graph
exported with pooling (``QEFFAutoModel.from_pretrained(..., pooling=...)``: output ``[batch, hidden]``) pools itself:
its pooling must be the model's ``pooling`` parameter (the export does not record it); an unpooled graph's hidden
states are pooled here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..contract.embedding_config import MAX_BATCH, seq_len_for
from ..contract.errors import SessionError
from .settings import EmbeddingSettings

Rows = Sequence[Sequence[int]]


def pool(hidden: np.ndarray, mask: np.ndarray, how: str) -> np.ndarray:
    """``[batch, seq, hidden]`` states -> ``[batch, hidden]``: the mask-weighted mean, the first (CLS) or the last
    unmasked position (right padding)."""
    if how == "cls":
        return hidden[:, 0]
    if how == "last":
        return hidden[np.arange(len(hidden)), np.maximum(mask.sum(axis=1) - 1, 0)]
    weights = mask[..., None].astype(np.float32)
    return (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)


def padded(rows: Rows, seq_len: int, batch: int, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(input_ids, attention_mask), int64 ``[batch, seq_len]``: the rows on the right of padding, empty rows below."""
    ids = np.full((batch, seq_len), pad_id, dtype=np.int64)
    mask = np.zeros((batch, seq_len), dtype=np.int64)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return ids, mask


class Encoder:
    """Rows in chunks, pooled: a subclass runs one padded chunk (``run``)."""

    batch_size = MAX_BATCH  # the rows of one run
    fixed_batch = False  # a compiled batch: every run has exactly batch_size rows
    seq_lens: list[int] | None = None  # compiled lengths (None: the chunk's longest row)

    def __init__(self, settings: EmbeddingSettings, pad_id: int) -> None:
        self.pooling = settings.pooling
        self.pad_id = pad_id

    def run(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """One padded chunk -> ``[rows, hidden]`` pooled, or ``[rows, seq, hidden]`` hidden states."""
        raise NotImplementedError

    def pooled(self, rows: Rows) -> np.ndarray:
        """``[len(rows), hidden]`` float32: the rows sorted by length into chunks (less padding), in their order."""
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        out: list[Any] = [None] * len(rows)
        for start in range(0, len(order), self.batch_size):
            chunk = [rows[i] for i in order[start:start + self.batch_size]]
            longest = max(len(r) for r in chunk)
            seq_len = seq_len_for(longest, self.seq_lens) if self.seq_lens else longest
            ids, mask = padded(chunk, seq_len, self.batch_size if self.fixed_batch else len(chunk), self.pad_id)
            result = np.asarray(self.run(ids, mask), dtype=np.float32)
            vectors = pool(result, mask, self.pooling) if result.ndim == 3 else result
            for i, vector in zip(order[start:start + self.batch_size], vectors):
                out[i] = vector
        return np.stack(out) if out else np.zeros((0, 0), np.float32)


class CpuEncoder(Encoder):
    """transformers' ``AutoModel`` on the CPU in torch, fp32."""

    def __init__(self, settings: EmbeddingSettings, pad_id: int, folder: Path | str, threads: int) -> None:
        super().__init__(settings, pad_id)
        import torch
        from transformers import AutoModel

        torch.set_num_threads(threads)
        model = AutoModel.from_pretrained(folder, dtype=torch.float32)
        self.model, self.torch = model.eval(), torch

    def run(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        with self.torch.inference_mode():
            out = self.model(input_ids=self.torch.from_numpy(ids), attention_mask=self.torch.from_numpy(mask))
        return out.last_hidden_state.numpy()


class TwinEncoder(Encoder):
    """The exported graph (``onnx_path``) on ONNX Runtime, run as the card runs its QPC: the compiled batch size and
    sequence lengths."""

    fixed_batch = True

    def __init__(self, settings: EmbeddingSettings, pad_id: int, threads: int) -> None:
        super().__init__(settings, pad_id)
        import onnxruntime as ort

        graph = Path(settings.compile["onnx_path"])
        if graph.is_dir():
            found = sorted(graph.glob("*.onnx"))
            if len(found) != 1:
                raise SessionError(f"onnx_path {graph}: a folder must hold one .onnx graph, it holds {len(found)}")
            graph = found[0]
        if not graph.is_file():
            raise SessionError(f"onnx_path {graph} does not exist")
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        self.session = ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
        names = {i.name for i in self.session.get_inputs()}
        if not {"input_ids", "attention_mask"} <= names:
            raise SessionError(f"onnx_path {graph}: inputs {', '.join(sorted(names))}, not QEFFAutoModel's "
                               "input_ids and attention_mask")
        self.graph = graph
        self.batch_size, self.seq_lens = settings.compile["batch_size"], settings.compile["seq_len"]

    def run(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return self.session.run(None, {"input_ids": ids, "attention_mask": mask})[0]


def _last_token(last_hidden_states: Any, attention_mask: Any) -> Any:
    """QEfficient's pooling callable for ``last`` (its built-ins are mean, avg, cls and max)."""
    import torch

    last = attention_mask.sum(dim=1) - 1
    return last_hidden_states[torch.arange(last_hidden_states.shape[0]), last]


class QaicEncoder(Encoder):
    """QEfficient's ``QEFFAutoModel`` on a card: compiled for the compile config (or its QPC, ``aic_binary_dir``),
    run by its ``generate``. Written against QEfficient's API (``ebf55e8``); no card runs it here."""

    fixed_batch = True

    def __init__(self, settings: EmbeddingSettings, pad_id: int, folder: Path | str) -> None:
        super().__init__(settings, pad_id)
        import torch
        from QEfficient import QEFFAutoModel

        pooling = _last_token if settings.pooling == "last" else settings.pooling
        self.model = QEFFAutoModel.from_pretrained(str(folder), pooling=pooling)
        c = settings.compile
        if settings.aic_binary_dir:
            self.model.qpc_path = Path(settings.aic_binary_dir)
        else:
            self.model.compile(seq_len=c["seq_len"], batch_size=c["batch_size"], num_cores=c["num_cores"],
                               num_devices=c["num_devices"], mxfp6_matmul=c["mxfp6_matmul"])
        self.device_ids, self.torch = settings.device_ids, torch
        self.batch_size, self.seq_lens = c["batch_size"], c["seq_len"]

    def run(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        inputs = {"input_ids": self.torch.from_numpy(ids), "attention_mask": self.torch.from_numpy(mask)}
        return self.model.generate(inputs, device_ids=self.device_ids)["output"]
