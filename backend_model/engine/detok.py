"""Incremental detokenisation: exactly the new text per token, never half a character."""

from __future__ import annotations

import codecs
import re
from functools import lru_cache

_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


@lru_cache(maxsize=1)
def _gpt2_byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's bytes_to_unicode map used by byte-level BPE tokenizers."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    bs += list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def _decoder_kinds(tokenizer) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None) or getattr(tokenizer, "_tokenizer", None)
    if backend is None or backend.decoder is None:
        return ""
    return repr(backend.decoder)


def token_bytes_table(tokenizer) -> list[bytes] | None:
    """Bytes of every token id (special tokens empty), or None when the decoder is not known."""
    kinds = _decoder_kinds(tokenizer)
    vocab = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    special = set(tokenizer.all_special_ids)
    table: list[bytes] = []
    if "ByteLevel" in kinds:
        dec = _gpt2_byte_decoder()
        for i, tok in enumerate(vocab):
            if i in special or tok is None:
                table.append(b"")
            elif all(ch in dec for ch in tok):
                table.append(bytes(dec[ch] for ch in tok))
            else:  # an added token stored as plain text
                table.append(tok.encode())
        return table
    if "Metaspace" in kinds or "ByteFallback" in kinds or "Replace" in kinds:
        for i, tok in enumerate(vocab):
            m = _BYTE_TOKEN.match(tok or "")
            if i in special or tok is None:
                table.append(b"")
            elif m:
                table.append(bytes([int(m.group(1), 16)]))
            else:
                table.append(tok.replace("\u2581", " ").encode())
        return table
    return None


UTF8_SHRINK = 4  # the most a normalizer (NFKC, lowercasing) shrinks text in UTF-8 bytes: 4-byte "𝐀" becomes "A"


def longest_token_bytes(tokenizer, table: list[bytes] | None) -> int | None:
    """The most bytes of text one token stands for: its bytes, an added token's text, or one character
    (an unknown character becomes one token: 4 bytes); None when the tokenizer cannot say."""
    try:
        pieces = [len(b) for b in table] if table is not None else [len(t.encode()) for t in tokenizer.get_vocab()]
        added = [len(t.encode()) for t in tokenizer.get_added_vocab()]
    except (AttributeError, TypeError):
        return None
    return max([*pieces, *added, 4])


def max_prompt_bytes(tokenizer, table: list[bytes] | None, ctx_len: int) -> int | None:
    """The UTF-8 length over which a prompt surely has ``ctx_len`` tokens or more (so it is refused before
    tokenising); None when no bound is known (a tokenizer without a fast backend).

    A fast tokenizer keeps every byte of the text (byte-level BPE, SentencePiece): each token stands for
    at most :func:`longest_token_bytes` of it; one with a normalizer gets :data:`UTF8_SHRINK` times the room.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    longest = longest_token_bytes(tokenizer, table) if backend is not None else None
    if backend is None or longest is None:
        return None
    return ctx_len * longest * (1 if backend.normalizer is None else UTF8_SHRINK)


class Detokenizer:
    """Turns token ids into text one token at a time for one sequence."""

    def __init__(self, tokenizer, table: list[bytes] | None) -> None:
        self._tokenizer = tokenizer
        self._table = table
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._ids: list[int] = []
        self._emitted = 0  # characters of the full decode already returned (fallback path)

    def add(self, token_id: int) -> str:
        """New complete text after ``token_id``; a character split across tokens waits."""
        if self._table is not None:
            piece = self._table[token_id] if token_id < len(self._table) else b""
            return self._utf8.decode(piece)
        self._ids.append(token_id)
        text = self._tokenizer.decode(self._ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):
            return ""
        new, self._emitted = text[self._emitted :], len(text)
        return new

    def flush(self) -> str:
        """Whatever is left at the end (an incomplete character becomes U+FFFD)."""
        if self._table is not None:
            return self._utf8.decode(b"", final=True)
        text = self._tokenizer.decode(self._ids, skip_special_tokens=True)
        new, self._emitted = text[self._emitted :], len(text)
        return new
