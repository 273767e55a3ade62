"""``GET /health`` (the upstream answers) and ``GET /version`` (how a console recognises this front)."""

from __future__ import annotations

from importlib import metadata

from fastapi import APIRouter
from fastapi.responses import Response

from console.clients.openai_api import FRONT as OWNER  # ``owned_by``: how a console recognises this front

from ..errors import APIError
from ..protocol import Version
from ..state import Front

VERSION = metadata.version("qaic-console")


def router(front: Front) -> APIRouter:
    routes = APIRouter()

    @routes.get("/health")
    async def health() -> Response:
        if not await front.upstream.live():
            raise APIError(503, f"tritonserver at {front.upstream.url} does not answer")
        return Response(status_code=200)

    @routes.get("/version")
    async def version() -> Version:
        return Version(server=OWNER, version=VERSION)

    return routes
