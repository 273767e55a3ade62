"""The HTTP side the routes share: the JSON body read within its limits, the watch for a client that goes away, and
server-sent events whose end (however it comes) cancels the Triton request."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Awaitable, Mapping
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import StreamingResponse

from .errors import APIError, bad_request

MAX_BODY = 8 * 1024 * 1024
T = TypeVar("T")


class Gone(Exception):
    """The client went away before its answer was ready."""


async def _disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_gone(request: Request, work: Awaitable[T]) -> T:
    """``work``'s result, or Gone (``work`` cancelled, and so its Triton request) when the client disconnects first."""
    task, watch = asyncio.ensure_future(work), asyncio.ensure_future(_disconnect(request))
    try:
        await asyncio.wait((task, watch), return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            raise Gone()
        return task.result()
    finally:
        for pending in (task, watch):
            pending.cancel()
        await asyncio.gather(task, watch, return_exceptions=True)


async def read_body(request: Request) -> Any:
    """The JSON body: its size is checked before it is read whole, its nesting by the parser."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY:
        raise APIError(413, f"the request body is {int(declared)} bytes, over the {MAX_BODY} this server reads")
    data = bytearray()
    async for part in request.stream():
        data += part
        if len(data) > MAX_BODY:
            raise APIError(413, f"the request body is over the {MAX_BODY} bytes this server reads")
    try:
        return json.loads(data)
    except RecursionError:
        raise bad_request("the request body nests too deeply") from None
    except ValueError as exc:
        raise bad_request(f"the request body is not JSON: {str(exc).splitlines()[0][:120]}") from None


class EventStream(StreamingResponse):
    """Server-sent events whose iterator is closed however the response ends (a disconnect cancels the send):
    closing it cancels the Triton request."""

    media_type = "text/event-stream"

    def __init__(self, events: AsyncGenerator[bytes, None], headers: Mapping[str, str] | None = None) -> None:
        super().__init__(events, headers=headers)
        self.events = events

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.events.aclose()
