"""Structured output: the ``structured_outputs`` control as a grammar that masks a row's logits every step.

The request names its constraint as vLLM's ``StructuredOutputsParams`` do: ``{"json": <schema or its text>}``,
``{"json_object": true}`` (any JSON object), ``{"regex": "<pattern>"}`` or ``{"choice": ["yes", "no"]}`` (one of
those strings exactly). llguidance compiles it against the model's tokenizer (imported here, lazily: an
environment without it refuses such a request and serves the rest); each compiled grammar is kept by its
text, so a request pays only for a matcher of its own. A row whose grammar has nothing left to match but the
end of sequence is finished (``stop``). JSON is written compact, without whitespace between items
(``{"a":1,"b":[2,3]}``), so a small model cannot pad it forever.

The mask is one row's own: masking keeps a row's tokens independent of its neighbours (batch invariance).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..contract.errors import BadRequest

LIBRARY = "llguidance"
KINDS = ("json", "json_object", "regex", "choice")
MAX_CHOICES = 256
CACHED = 64  # compiled grammars kept
JSON_OPTIONS = {"whitespace_flexible": False}
_lock = threading.Lock()


def _library() -> Any:
    try:
        import llguidance
        import llguidance.hf  # noqa: F401 (the tokenizer bridge)
        import llguidance.numpy  # noqa: F401 (the bitmask helpers)
    except ImportError:
        raise BadRequest(f"structured_outputs needs {LIBRARY}, which this model's Python environment does not have "
                         f"(pip install {LIBRARY})") from None
    return llguidance


def grammar_of(spec: dict[str, Any]) -> str:
    """The library's grammar for a ``structured_outputs`` object (BadRequest when it asks for nothing we do)."""
    asked = [k for k in spec if spec[k] not in (None, False)]
    if len(asked) != 1 or asked[0] not in KINDS:
        other = [k for k in asked if k not in KINDS]
        what = f"{other[0]} is not supported" if other else f"it sets {len(asked)} of them"
        raise BadRequest(f"structured_outputs takes one of {', '.join(KINDS)} ({what})")
    kind, value = asked[0], spec[asked[0]]
    matcher = _library().LLMatcher
    if kind == "regex":
        if not isinstance(value, str) or not value:
            raise BadRequest("structured_outputs regex must be a non-empty string (a regular expression)")
        return matcher.grammar_from_regex(value)
    if kind == "choice":
        if not (isinstance(value, list) and 0 < len(value) <= MAX_CHOICES and all(isinstance(c, str) and c
                                                                               for c in value)):
            raise BadRequest(f"structured_outputs choice must be a list of 1 to {MAX_CHOICES} non-empty strings")
        return matcher.grammar_from_lark("start: " + " | ".join(json.dumps(c) for c in value))  # JSON-quoted literals
    if kind == "json_object":
        if value is not True:
            raise BadRequest("structured_outputs json_object must be true")
        value = {"type": "object"}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise BadRequest("structured_outputs json must be a JSON schema (an object, or its text)") from None
    if not isinstance(value, dict):
        raise BadRequest("structured_outputs json must be a JSON schema (an object, or its text)")
    try:
        return matcher.grammar_from_json_schema(value, defaults=JSON_OPTIONS)
    except (ValueError, TypeError) as exc:
        raise BadRequest(f"structured_outputs json: {str(exc).splitlines()[0][:200]}") from None


class Matcher:
    """One sequence's grammar state: ``mask`` a logits row, ``accept`` the token chosen from it."""

    def __init__(self, matcher: Any, vocab: int) -> None:
        self._matcher = matcher
        self._vocab = vocab
        self._bits = np.zeros((1, (vocab + 31) // 32), dtype=np.int32)

    def mask(self, row: np.ndarray) -> None:
        """Set the logits of every token the grammar does not allow next to -inf (in place)."""
        _library().numpy.fill_next_token_bitmask(self._matcher, self._bits, 0)
        allowed = np.unpackbits(self._bits.view(np.uint8), bitorder="little")[: self._vocab].view(bool)
        row[~allowed] = -np.inf

    def accept(self, token: int) -> None:
        """Advance past ``token``; RuntimeError when the grammar does not allow it."""
        if not self._matcher.consume_token(token):
            raise RuntimeError(f"the grammar refused token {token}: {self._matcher.get_error()}")

    @property
    def finished(self) -> bool:
        """Nothing but the end of sequence can follow."""
        return self._matcher.is_stopped()


class Grammars:
    """One engine's grammars: the tokenizer converted once (on the first request), compiled grammars cached."""

    def __init__(self, tokenizer, vocab: int, eos_ids: Iterable[int]) -> None:
        self._tokenizer = tokenizer
        self._vocab = vocab
        self._eos = sorted(eos_ids)
        self._llg_tokenizer: Any = None
        self._compiled: OrderedDict[str, Any] = OrderedDict()

    def matcher(self, spec: dict[str, Any]) -> Matcher:
        """A fresh matcher for ``spec``, compiled once per grammar text; BadRequest when it cannot compile."""
        llg = _library()
        text = grammar_of(spec)
        with _lock:
            if self._llg_tokenizer is None:
                self._llg_tokenizer = llg.hf.from_tokenizer(self._tokenizer, n_vocab=self._vocab,
                                                                eos_token=self._eos)
            compiled = self._compiled.get(text)
            if compiled is not None:
                self._compiled.move_to_end(text)
        if compiled is None:
            compiled = llg.LLMatcher(self._llg_tokenizer, text, log_level=0)
            if compiled.is_error():
                raise BadRequest(f"structured_outputs cannot be compiled: {compiled.get_error().splitlines()[0][:200]}")
            with _lock:
                self._compiled[text] = compiled
                while len(self._compiled) > CACHED:
                    self._compiled.popitem(last=False)
        return Matcher(compiled.deep_copy(), self._vocab)
