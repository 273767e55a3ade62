"""``POST /v1/embeddings``: one vector per input from an embedding model (:class:`~console.clients.embeddings.
EmbeddingModel`: the bundled backend's, or any Triton model with one STRING input and one FP32 output).

``input`` is a text, a list of texts, token ids or a list of token-id lists (at most :data:`MAX_INPUTS`, as OpenAI
takes); they go to the model batched (:meth:`~console.front.upstream.TritonUpstream.embed`). ``dimensions`` cuts each
vector to a size the model allows (its ``dimensions`` parameter; a model that normalises has the cut vector
normalised again); ``encoding_format`` ``base64`` sends each vector's little-endian float32 bytes. An input longer
than the model takes is refused by the model (never cut), as a 400 naming ``input``.
"""

from __future__ import annotations

import base64

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from console.clients import ClientError, ModelInfo
from console.clients.embeddings import EmbeddingModel, Item

from .. import mapping
from ..errors import bad_request
from ..protocol import Embedding, EmbeddingRequest, EmbeddingResponse, EmbeddingUsage, validated
from ..state import Front
from ..wire import Gone, read_body, unless_gone

MAX_INPUTS = 2048


def items_of(value: object) -> list[Item]:
    """``input`` as its items, all texts or all token-id lists; APIError 400 naming ``input``."""
    items = mapping.texts_or_ids(value, "input")
    if len(items) > MAX_INPUTS:
        raise bad_request(f"input has {len(items)} items, over the {MAX_INPUTS} one request may carry", "input")
    if len({isinstance(item, str) for item in items}) > 1:
        raise bad_request("input mixes texts and token ids: send one kind per request", "input")
    return items


def model_of(info: ModelInfo) -> EmbeddingModel:
    """The model as an embedding model; APIError 400 naming ``model`` when it returns no vectors."""
    model = EmbeddingModel.of(info)
    if model is None:
        raise bad_request(f"model {info.name} returns no vectors: /v1/embeddings needs an embedding model (GET "
                          "/v1/models lists the served ones)", "model")
    return model


def held(model: EmbeddingModel, items: list[Item], dimensions: int | None) -> None:
    """APIError 400 for what the model surely refuses: a size it does not allow, token ids it cannot take."""
    if dimensions is not None and model.sizes is not None and dimensions not in model.sizes:
        allowed = ", ".join(map(str, model.sizes))
        raise bad_request(f"dimensions {dimensions} is not a size model {model.info.name} allows ({allowed})",
                          "dimensions")
    try:
        model.check(items)
    except ClientError as exc:
        raise bad_request(str(exc), "input") from None


def cut(model: EmbeddingModel, vectors: np.ndarray, dimensions: int | None) -> np.ndarray:
    """``vectors`` cut to ``dimensions`` (None: whole), normalised again when the model normalises."""
    if dimensions is None or dimensions == vectors.shape[1]:
        return vectors
    if dimensions > vectors.shape[1] or model.sizes is None:
        raise bad_request(f"dimensions {dimensions} is not a size model {model.info.name} allows (its vectors have "
                          f"{vectors.shape[1]})", "dimensions")
    part = vectors[:, :dimensions]
    if model.normalizes:
        part = part / np.maximum(np.linalg.norm(part, axis=1, keepdims=True), 1e-12)
    return part


async def usage(front: Front, model: EmbeddingModel, items: list[Item], counts: list[int] | None) -> EmbeddingUsage:
    """The model's token counts; else the ids given, or the front's tokenizer's count of each text (null: none)."""
    if counts is None:
        found = [len(i) if isinstance(i, list) else await front.tokenizers.count(model.info, i) for i in items]
        counts = None if None in found else [int(n or 0) for n in found]
    total = None if counts is None else sum(counts)
    return EmbeddingUsage(prompt_tokens=total, total_tokens=total)


def encoded(vector: np.ndarray, encoding: str) -> list[float] | str:
    if encoding == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode()
    return vector.tolist()


def router(front: Front) -> APIRouter:
    routes = APIRouter()

    @routes.post("/v1/embeddings")
    async def embeddings(request: Request) -> Response:
        body = validated(EmbeddingRequest, await read_body(request))
        items = items_of(body.taken("input"))
        info = (await (front.served.target(body.model) if body.model else front.served.only())).info
        model = model_of(info)
        held(model, items, body.dimensions)
        try:
            vectors, counts = await unless_gone(request, front.upstream.embed(info, items, info.default_timeout))
        except Gone:
            return Response(status_code=499)
        vectors = cut(model, vectors, body.dimensions)
        data = [Embedding(object="embedding", index=i, embedding=encoded(v, body.encoding_format))
                for i, v in enumerate(vectors)]
        answer = EmbeddingResponse(object="list", data=data, model=info.name,
                                   usage=await usage(front, model, items, counts))
        return JSONResponse(answer.wire())

    return routes
