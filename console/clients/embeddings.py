"""How a Triton embedding model is spoken to (:class:`EmbeddingModel`): which inputs take its texts or token ids,
which output holds its vectors, and what its config says (its length limit, the sizes it may be cut to, whether it
normalises).

Two kinds fit: the bundled backend's (``task`` = ``embedding``: optional ``text`` and ``token_ids`` inputs, the
latter a JSON array per row; ``embedding`` FP32 and ``input_tokens`` INT32 outputs) and any other model with one
STRING input and one FP32 output (texts only; its length limit and sizes are not known until it answers). Several
inputs go in one request, one row each, up to the model's ``max_batch_size`` (:meth:`EmbeddingModel.chunks`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import BadRequest, ServerFault
from .events import ModelInfo, Tensor
from .failures import mapped
from .openai_api import api_error, client, request_headers
from .wire import tensor

Item = str | list[int]  # one input: a text or its token ids
Vectors = tuple[np.ndarray, list[int] | None]  # one float32 row per input; each input's tokens (None: not sent)
TASK = "embedding"


def _single(tensors: Sequence[Tensor], datatype: str) -> Tensor | None:
    kinds = [t for t in tensors if t.datatype == datatype]
    return kinds[0] if len(kinds) == 1 and len(tensors) == 1 else None


@dataclass(frozen=True)
class EmbeddingModel:
    """A served model that returns one vector per input: ``text`` takes texts, ``ids`` token ids (None: texts
    only), ``output`` the vectors, ``tokens`` each input's token count (None: not sent)."""

    info: ModelInfo
    text: str
    ids: str | None
    output: str
    tokens: str | None

    @classmethod
    def of(cls, info: ModelInfo) -> EmbeddingModel | None:
        """The embedding model ``info`` describes; None when it is not one."""
        if info.parameters.get("task") == TASK and info.input("text") and info.output("embedding"):
            return cls(info, "text", "token_ids" if info.input("token_ids") else None, "embedding",
                       "input_tokens" if info.output("input_tokens") else None)
        text, vector = _single(info.inputs, "BYTES"), _single(info.outputs, "FP32")
        if text is None or vector is None:
            return None
        return cls(info, text.name, None, vector.name, None)

    @classmethod
    def required(cls, info: ModelInfo) -> EmbeddingModel:
        """:meth:`of`, or BadRequest saying what an embedding model is."""
        model = cls.of(info)
        if model is None:
            raise BadRequest(f"model {info.name} is not an embedding model: one needs a STRING input and an FP32 "
                             "output (qaic-console's embedding backend, or any model with one of each)")
        return model

    @property
    def max_length(self) -> int | None:
        """The most tokens one input may have (None: not known)."""
        value = self.info.parameters.get("max_seq_len", "")
        return int(value) if value.isdigit() else None

    @property
    def sizes(self) -> tuple[int, ...] | None:
        """The vector sizes the model allows (its full size and any it was trained to be cut to); None: not known
        (then only the size it answers with)."""
        listed = [int(s) for s in self.info.parameters.get("dimensions", "").split(",") if s.strip().isdigit()]
        if listed:
            return tuple(sorted(set(listed)))
        dims = self.info.output(self.output).dims  # type: ignore[union-attr]
        return (dims[-1],) if dims and dims[-1] > 0 else None

    @property
    def normalizes(self) -> bool:
        """The model's vectors have unit length (so a cut one is normalised again)."""
        return self.info.parameters.get("normalize", "").strip().lower() == "true"

    @property
    def batch(self) -> int:
        """The most inputs one request carries (the model's ``max_batch_size``; 1 without a batch dimension)."""
        return max(self.info.max_batch_size, 1)

    def chunks(self, items: Sequence[Item]) -> list[Sequence[Item]]:
        """``items`` in requests of at most :attr:`batch` inputs."""
        return [items[i:i + self.batch] for i in range(0, len(items), self.batch)]

    def check(self, items: Sequence[Item]) -> None:
        """BadRequest for inputs the model surely refuses: token ids where it takes texts only, or more ids than its
        length (a text's length is the model's to check: it has the tokenizer)."""
        limit = self.max_length
        for i, item in enumerate(items):
            if isinstance(item, str):
                continue
            if self.ids is None:
                raise BadRequest(f"model {self.info.name} takes texts only, not token ids")
            if limit is not None and len(item) > limit:
                raise BadRequest(f"input {i} has {len(item)} tokens, over the {limit} model {self.info.name} takes "
                                 "(max_seq_len)")

    def inputs(self, module: Any, items: Sequence[Item]) -> list[Any]:
        """The InferInputs (tritonclient.http or .grpc ``module``) of one request for ``items`` (all texts or all token
        ids, :meth:`check` ed; at most :attr:`batch`)."""
        if all(isinstance(item, str) for item in items):
            name, values = self.text, list(items)
        else:
            name, values = self.ids or self.text, [json.dumps(item) for item in items]
        shape = [len(values), 1] if self.info.max_batch_size > 0 else [1]
        return [tensor(module, name, "BYTES", values, shape)]

    def outputs(self, module: Any) -> list[Any]:
        names = [self.output, *([self.tokens] if self.tokens else [])]
        return [module.InferRequestedOutput(name) for name in names]

    def read(self, result: Any, n: int) -> Vectors:
        """A result's ``n`` vectors (one row each, float32) and token counts (None: not sent)."""
        array = result.as_numpy(self.output)
        if array is None or array.size == 0 or array.size % n:
            raise ServerFault(f"model {self.info.name} returned no {self.output} output of {n} vectors")
        tokens = result.as_numpy(self.tokens) if self.tokens else None
        counts = None if tokens is None else [int(t) for t in tokens.reshape(-1)]
        return array.reshape(n, -1).astype(np.float32), counts


def joined(parts: Sequence[Vectors]) -> Vectors:
    """The vectors of several requests, in order (token counts: None unless every part sent them)."""
    counts = [part[1] for part in parts]
    return (np.concatenate([part[0] for part in parts]),
            None if None in counts else [n for part in counts for n in part or ()])


def triton_embed(url: str, model: EmbeddingModel, items: Sequence[Item], timeout: float | None) -> Vectors:
    """``items``' vectors from the tritonserver at ``url`` (HTTP), one request per :meth:`EmbeddingModel.chunks`;
    ClientError (Refused: the model's refusal, e.g. an input over its length)."""
    import tritonclient.http as httpclient

    model.check(items)
    with mapped(url, "http"):
        http = httpclient.InferenceServerClient(url, network_timeout=timeout or 1e9, connection_timeout=timeout or 60)
        try:
            return joined([model.read(http.infer(model.info.name, model.inputs(httpclient, chunk),
                                                 outputs=model.outputs(httpclient)), len(chunk))
                           for chunk in model.chunks(items)])
        finally:
            http.close()


def openai_embed(base: str, model: str, items: Sequence[Item], timeout: float | None) -> Vectors:
    """``items``' vectors from the OpenAI-compatible server at ``base`` (``POST /v1/embeddings``, floats); per-input
    token counts are not sent there (None)."""
    try:
        answer = client(base).embeddings.create(model=model, input=list(items), encoding_format="float",
                                                timeout=timeout, extra_headers=request_headers(base))
    except Exception as exc:
        raise api_error(exc, base) from None
    rows = sorted(answer.data, key=lambda d: d.index)
    if len(rows) != len(items):
        raise ServerFault(f"{base} returned {len(rows)} vectors for {len(items)} inputs")
    return np.array([row.embedding for row in rows], dtype=np.float32), None
