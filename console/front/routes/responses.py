"""``POST /v1/responses``: the body read as the chat it asks for (:mod:`console.front.responses`), answered as a
:class:`~console.front.responses.ResponseAnswer`."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from .. import responses
from ..answer import answer
from ..state import Front
from ..wire import read_body


def router(front: Front) -> APIRouter:
    routes = APIRouter()

    @routes.post("/v1/responses")
    async def create_response(request: Request) -> Response:
        return await answer(front, request, responses.job(await read_body(request)), responses.ResponseAnswer)

    return routes
