"""``POST /v1/responses``: the body read as the chat it asks for (:func:`console.front.responses.job`), answered as a
:class:`~console.front.responses.ResponseAnswer` (a ``response`` object, or the ``response.*`` events)."""

from __future__ import annotations

from fastapi import APIRouter

from .. import responses
from ..answer import answering
from ..state import Front


def router(front: Front) -> APIRouter:
    return answering(front, "/v1/responses", responses.job, responses.ResponseAnswer)
