"""A Triton model: the bundled backend's real glue and engine loop on a session that computes nothing.

``capacity.write_zero_cost_repo`` copies this file in as a model's ``1/model.py`` (it imports the
installed ``backend_model`` and ``console``). Served, it shows the host cost a card would see: the
generation loop, the response thread, the Python backend and the gRPC stream, with instant logits.
Every sequence generates the digits ``engine.digits_after`` names, so a client can check that each
token arrived once and in order.
"""

from __future__ import annotations

from backend_model.build import BackendSettings
from backend_model.engine.loop import Engine
from backend_model.triton_model import TritonPythonModel as BackendModel
from console.bench.engine import ZeroCostSession, digit_tokens


class TritonPythonModel(BackendModel):
    def build(self, settings: BackendSettings) -> tuple[Engine, str]:
        from transformers import AutoTokenizer

        from backend_model.models import prepare_embedded

        tokenizer = AutoTokenizer.from_pretrained(str(prepare_embedded(progress=lambda m: None)))
        dims = settings.dims(len(tokenizer))
        engine = Engine(ZeroCostSession(dims, digit_tokens(tokenizer)), tokenizer)
        return engine, f"engine=zero-cost full_batch_size={dims.full_batch_size} ctx_len={dims.ctx_len}"
