"""``POST /v1/chat/completions``: the conversation checked (:func:`console.front.mapping.parse`) and rendered by the
model's chat template, answered as an :class:`~console.front.answer.Answer` (tool calls read out of its text)."""

from __future__ import annotations

from functools import partial

from fastapi import APIRouter

from .. import mapping
from ..answer import answering
from ..state import Front


def router(front: Front) -> APIRouter:
    return answering(front, "/v1/chat/completions", partial(mapping.parse, chat=True))
