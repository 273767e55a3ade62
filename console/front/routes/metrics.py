"""``GET /metrics``: the front's own figures and its models' under vLLM's names (:mod:`console.front.metrics_route`)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from console.clients import ModelInfo

from ..errors import APIError
from ..metrics_route import render
from ..state import Front


def router(front: Front) -> APIRouter:
    routes = APIRouter()

    @routes.get("/metrics")
    async def metrics() -> Response:
        try:
            served: list[ModelInfo] | None = await front.upstream.models()
        except APIError:
            served = None
        page, kind = render(front.metrics, await front.upstream.metrics_page(), served)
        return Response(page, media_type=kind)

    return routes
