"""An embedding request's rows, read and checked: ``text`` (a string a row) or ``token_ids`` (a JSON array of token
ids a row, strings so that ragged rows batch), never both. Free of ``triton_python_backend_utils``: ``read(name)``
gives an input's array, or None when absent."""

from __future__ import annotations

import json

from ..contract.errors import BadRequest
from ..triton.inputs import Read, _decode
from .embedder import MAX_TEXT_BYTES, Embedder


def _ids(item: object, i: int) -> list[int]:
    if isinstance(item, bytes) and len(item) > MAX_TEXT_BYTES:
        raise BadRequest(f"token_ids {i} is over {MAX_TEXT_BYTES} bytes")
    try:
        ids = json.loads(_decode(item, f"token_ids {i}"))
    except ValueError:
        raise BadRequest(f"token_ids {i} is not JSON: give a JSON array of token ids") from None
    if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise BadRequest(f"token_ids {i} must be a JSON array of integers")
    return ids


def request_rows(read: Read, embedder: Embedder) -> list[list[int]]:
    """The token ids of each row of one request (BadRequest naming the input and the row at fault)."""
    texts, ids = read("text"), read("token_ids")
    if (texts is None) == (ids is None):
        raise BadRequest("give text or token_ids (one row per input), " + ("not both" if texts is not None else
                                                                           "neither was given"))
    if texts is not None:
        return embedder.tokens([_decode(item, f"text {i}") for i, item in enumerate(texts.reshape(-1))])
    return embedder.checked([_ids(item, i) for i, item in enumerate(ids.reshape(-1))])  # type: ignore[union-attr]
