"""The OpenAI-compatible app (FastAPI) in front of one upstream: :func:`create_app` wires the route families of
:mod:`.routes` (``/v1/models``, ``/v1/completions``, ``/v1/chat/completions``, ``/v1/responses``,
``/v1/embeddings``, vLLM's tokenizer routes and runtime LoRA routes, ``/metrics``, ``/health``, ``/version``), the API
key's check, the error shape and the front's counters.
What a route does is its module's; what a request becomes is :mod:`.mapping`'s; its answer :mod:`.answer`'s.
"""

from __future__ import annotations

import contextlib
import hmac
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from .errors import APIError
from .metrics_route import Measured
from .routes import chat, completions, embeddings, lora, metrics, models, responses, server, tokenize
from .state import Front


async def api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, APIError)
    return JSONResponse(exc.body(), status_code=exc.status)


async def http_error(request: Request, exc: Exception) -> JSONResponse:
    """The framework's own refusals (an unknown route, a wrong method) in OpenAI's shape."""
    assert isinstance(exc, HTTPException)
    return JSONResponse(APIError(exc.status_code, str(exc.detail)).body(), status_code=exc.status_code,
                        headers=exc.headers)


def authorizer(api_key: str | None) -> Callable[[Request], Coroutine[Any, Any, None]]:
    """The check of the key a client must bring (None: none asked)."""

    async def authorize(request: Request) -> None:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if api_key is not None and (scheme.lower() != "bearer" or not hmac.compare_digest(
                given.strip().encode(), api_key.encode())):
            raise APIError(401, "a valid API key is needed: send it as 'Authorization: Bearer <key>'",
                           code="invalid_api_key")

    return authorize


def create_app(front: Front) -> FastAPI:
    """The app serving ``front``."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await front.upstream.close()

    app = FastAPI(title="qaic-console OpenAI-compatible API", version=server.VERSION, lifespan=lifespan,
                  docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(Measured, metrics=front.metrics)
    app.add_exception_handler(APIError, api_error)
    app.add_exception_handler(HTTPException, http_error)
    keyed = [Depends(authorizer(front.api_key))]
    app.include_router(server.router(front))
    app.include_router(metrics.router(front))
    for family in (tokenize, models, completions, chat, responses, embeddings):
        app.include_router(family.router(front), dependencies=keyed)
    if front.runtime_lora:
        app.include_router(lora.router(front), dependencies=keyed)
    return app
