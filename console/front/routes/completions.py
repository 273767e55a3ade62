"""``POST /v1/completions``: the body checked (:mod:`console.front.mapping`), answered as a
:class:`~console.front.completions.Completion`."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from .. import mapping
from ..answer import answer
from ..state import Front
from ..wire import read_body


def router(front: Front) -> APIRouter:
    routes = APIRouter()

    @routes.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await answer(front, request, mapping.parse(await read_body(request), chat=False))

    return routes
