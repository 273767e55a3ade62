"""``POST /v1/chat/completions``: the body checked (:mod:`console.front.mapping`), answered as an
:class:`~console.front.answer.Answer`."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from .. import mapping
from ..answer import answer
from ..state import Front
from ..wire import read_body


def router(front: Front) -> APIRouter:
    routes = APIRouter()

    @routes.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await answer(front, request, mapping.parse(await read_body(request), chat=True))

    return routes
