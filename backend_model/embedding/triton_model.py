"""Triton glue of an embedding model: ``TritonPythonModel`` with Triton's dynamic batching.

Triton hands ``execute`` the requests it batched (``max_batch_size`` rows at most); each is read and checked on its
own (a bad one gets its INVALID_ARG error, the others their vectors), then every good row is embedded together and
each request gets its rows' ``embedding`` and ``input_tokens``.
"""

from __future__ import annotations

import json
import traceback
from functools import partial
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from ..contract.errors import READ_FAILED, BadRequest
from ..sessions.qaic import qaic_available
from ..sessions.threads import served_cpu_models
from ..triton import heap
from ..triton_model import _array, _error, _log
from .embedder import Embedder, build_embedder
from .rows import request_rows
from .settings import EmbeddingSettings


def _answer(vectors: np.ndarray, rows: list[list[int]]) -> Any:
    return pb_utils.InferenceResponse(output_tensors=[
        pb_utils.Tensor("embedding", vectors.astype(np.float32)),
        pb_utils.Tensor("input_tokens", np.array([[len(r)] for r in rows], dtype=np.int32)),
    ])


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        with heap.loading():
            config = json.loads(args["model_config"])
            self.name = args["model_name"]
            params = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
            settings = EmbeddingSettings.from_model_dir(args["model_repository"], params,
                                                        args.get("model_instance_name", ""))
            if not settings.cpu_threads:  # share the CPUs with the server's other CPU models
                settings.cpu_models = served_cpu_models(args["model_repository"], card=qaic_available())
            self.embedder: Embedder = build_embedder(settings, lambda m: _log("info", f"{self.name}: {m}"))
            _log("info", f"{self.name}: {self.embedder.description} instance={settings.instance}")

    def execute(self, requests: list[Any]) -> list[Any]:
        responses: list[Any] = [None] * len(requests)
        good = []  # (index, rows)
        for i, request in enumerate(requests):
            try:
                good.append((i, request_rows(partial(_array, request), self.embedder)))
            except BadRequest as exc:
                _log("warn", f"{self.name}: rejected request: {exc}")
                responses[i] = pb_utils.InferenceResponse(error=_error(str(exc), invalid=True))
        try:
            vectors = self.embedder.embed([row for _, rows in good for row in rows])
        except Exception as exc:  # a bug or a failing device: the clients get one line, the server log the traceback
            _log("error", f"{self.name}: embedding failed: {traceback.format_exc()}")
            failed = _error(f"{READ_FAILED} to embed ({type(exc).__name__}); see the server log", invalid=False)
            return [r or pb_utils.InferenceResponse(error=failed) for r in responses]
        start = 0
        for i, rows in good:
            responses[i] = _answer(vectors[start:start + len(rows)], rows)
            start += len(rows)
        return responses

    def finalize(self) -> None:
        pass
