"""``POST /v1/completions``: the body checked (:func:`console.front.mapping.parse`), answered as a
:class:`~console.front.completions.Completion` (one prompt or several, ``n`` answers each, ``echo`` scored)."""

from __future__ import annotations

from functools import partial

from fastapi import APIRouter

from .. import mapping
from ..answer import answering
from ..state import Front


def router(front: Front) -> APIRouter:
    return answering(front, "/v1/completions", partial(mapping.parse, chat=False))
