"""``GET /v1/models`` and ``/v1/models/{model}``: the served models as cards; ``POST /v1/embeddings`` refused."""

from __future__ import annotations

from fastapi import APIRouter

from console.clients import CONTROLS, ModelInfo, interface_of
from console.clients.openai_api import FRONT as OWNER  # ``owned_by``: how a console recognises this front

from ..errors import APIError
from ..protocol import ModelCard, ModelList
from ..state import Front

NO_EMBEDDINGS = ("/v1/embeddings is not served here: it needs an embedding model (one that returns vectors, e.g. vLLM "
                 "or Text Embeddings Inference serving one), and the models this front serves generate text")


def model_card(info: ModelInfo, max_model_len: int | None = None) -> ModelCard:
    """``info`` as a card: its controls are those its interface has an input for."""
    interface = interface_of(info)
    return ModelCard(id=info.name, owned_by=OWNER, max_model_len=max_model_len,
                     controls=[c.name for c in CONTROLS if interface.wire_input(c) is not None])


def router(front: Front) -> APIRouter:
    routes = APIRouter()

    async def card(info: ModelInfo) -> ModelCard:
        return model_card(info, await front.upstream.context_length(info.name))

    @routes.get("/v1/models")
    async def models() -> ModelList:
        return ModelList(data=[await card(info) for info in await front.upstream.models()])

    @routes.get("/v1/models/{model:path}")
    async def model(model: str) -> ModelCard:
        return await card(await front.upstream.info(model))

    @routes.post("/v1/embeddings")
    async def embeddings() -> None:
        raise APIError(404, NO_EMBEDDINGS, "model", "model_not_found")

    return routes
