"""``GET /v1/models`` and ``/v1/models/{model}``: the served models as cards."""

from __future__ import annotations

from fastapi import APIRouter

from console.clients import CONTROLS, ModelInfo, interface_of
from console.clients.embeddings import EmbeddingModel
from console.clients.openai_api import FRONT as OWNER  # ``owned_by``: how a console recognises this front

from ..protocol import ModelCard, ModelList
from ..state import Front


def model_card(info: ModelInfo, max_model_len: int | None = None) -> ModelCard:
    """``info`` as a card: its controls are those its interface has an input for (an embedding model: none, and its
    length the longest input it takes)."""
    embedding = EmbeddingModel.of(info)
    if embedding is not None:
        return ModelCard(id=info.name, owned_by=OWNER, max_model_len=embedding.max_length or max_model_len)
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

    return routes
