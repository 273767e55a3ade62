"""``GET /v1/models`` and ``/v1/models/{model}``: the served models and their LoRA adapters as cards (vLLM's: an
adapter's ``parent`` is its base model)."""

from __future__ import annotations

from fastapi import APIRouter

from console.clients import CONTROLS, ModelInfo, interface_of
from console.clients.embeddings import EmbeddingModel
from console.clients.openai_api import FRONT as OWNER  # ``owned_by``: how a console recognises this front

from ..protocol import ModelCard, ModelList
from ..served import Target
from ..state import Front


def model_card(info: ModelInfo, max_model_len: int | None = None, adapter: str = "") -> ModelCard:
    """``info`` (or its ``adapter``) as a card: its controls are those its interface has an input for; an adapter's
    root is its folder and its parent the model."""
    embedding = EmbeddingModel.of(info)
    if embedding is not None:
        return ModelCard(id=info.name, owned_by=OWNER, max_model_len=embedding.max_length or max_model_len)
    interface = interface_of(info)
    return ModelCard(id=adapter or info.name, owned_by=OWNER, max_model_len=max_model_len,
                     root=info.adapters[adapter] if adapter else info.name, parent=info.name if adapter else None,
                     controls=[c.name for c in CONTROLS if interface.wire_input(c) is not None])


def router(front: Front) -> APIRouter:
    routes = APIRouter()

    async def card(target: Target) -> ModelCard:
        return model_card(target.info, await front.upstream.context_length(target.info.name), target.adapter)

    @routes.get("/v1/models")
    async def models() -> ModelList:
        targets = [Target(info, adapter) for info in await front.upstream.models() for adapter in ("", *info.adapters)]
        return ModelList(data=[await card(target) for target in targets])

    @routes.get("/v1/models/{model:path}")
    async def model(model: str) -> ModelCard:
        return await card(await front.served.target(model))

    return routes
