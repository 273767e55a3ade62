"""What a grammar's mask costs per decode step at 8 rows with the embedded SmolLM2's tokenizer: llguidance (the
backend's pick, through ``backend_model.engine.grammar``), xgrammar and outlines-core, on the same JSON schema and
token walk.

Each step fills every row's mask of allowed tokens, applies it to the row's logits and advances the row past the next
token of a valid answer. xgrammar and outlines-core are not dependencies: put them on PYTHONPATH to compare, e.g.
``pip install --no-deps --target /tmp/g xgrammar apache-tvm-ffi outlines-core; PYTHONPATH=/tmp/g .venv/bin/python
scripts/grammar_cost.py``. A library that is missing is skipped.
"""

from __future__ import annotations

import json
import statistics
import time

import numpy as np
from transformers import AutoTokenizer

from backend_model.engine.detok import token_bytes_table
from backend_model.engine.grammar import Grammars
from backend_model.models import prepare_embedded

ROWS = 8
SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "age", "job", "tags"],
          "properties": {"name": {"type": "string", "maxLength": 32}, "age": {"type": "integer"},
                         "job": {"enum": ["baker", "pilot", "nurse", "poet"]},
                         "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4}}}
ANSWER = '{"name":"Ann Marie Baker","age":42,"job":"baker","tags":["bread","early mornings","flour"]}'


def unpack(bits: np.ndarray, vocab: int) -> np.ndarray:
    return np.unpackbits(bits.view(np.uint8), bitorder="little")[:vocab].view(bool)


def llguidance_rows(tokenizer, vocab: int, eos: int):
    grammars = Grammars(tokenizer, vocab, [eos])
    grammars.matcher({"regex": "a"})  # the tokenizer is converted once per engine, with its first grammar
    started = time.perf_counter()
    grammars.matcher({"json": SCHEMA})
    compiled = time.perf_counter() - started
    rows = [grammars.matcher({"json": SCHEMA}) for _ in range(ROWS)]
    return compiled, [(m.mask, m.accept) for m in rows]


def xgrammar_rows(tokenizer, vocab: int, eos: int):
    import torch
    import xgrammar as xgr

    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab)
    started = time.perf_counter()
    compiled = xgr.GrammarCompiler(info).compile_json_schema(json.dumps(SCHEMA), any_whitespace=False,
                                                                       separators=(",", ":"))
    took = time.perf_counter() - started

    def row():
        matcher, bits = xgr.GrammarMatcher(compiled), xgr.allocate_token_bitmask(1, vocab)

        def mask(logits: np.ndarray) -> None:
            matcher.fill_next_token_bitmask(bits)
            xgr.apply_token_bitmask_inplace(torch.from_numpy(logits).unsqueeze(0), bits)

        return mask, matcher.accept_token

    return took, [row() for _ in range(ROWS)]


def outlines_rows(tokenizer, vocab: int, eos: int):
    from outlines_core import Guide, Index, Vocabulary
    from outlines_core.json_schema import build_regex_from_schema

    table = token_bytes_table(tokenizer)
    pieces: dict[bytes, list[int]] = {}
    for i, piece in enumerate(table):
        if i != eos and piece:
            pieces.setdefault(piece, []).append(i)
    started = time.perf_counter()
    index = Index(build_regex_from_schema(json.dumps(SCHEMA)), Vocabulary(eos, pieces))
    took = time.perf_counter() - started

    def row():
        guide, bits = Guide(index), np.zeros((1, (vocab + 31) // 32), dtype=np.int32)

        def mask(logits: np.ndarray) -> None:
            guide.write_mask_into(bits.ctypes.data, bits.size, 4)
            logits[~unpack(bits, vocab)] = -np.inf

        return mask, guide.advance

    return took, [row() for _ in range(ROWS)]


def main() -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(prepare_embedded(progress=lambda m: None)))
    vocab, eos = len(tokenizer), tokenizer.eos_token_id
    walk = tokenizer(ANSWER, add_special_tokens=False).input_ids
    logits = np.random.default_rng(0).standard_normal((ROWS, vocab)).astype(np.float32)
    print(f"{ROWS} rows, vocab {vocab}, {len(walk)} steps of a {len(ANSWER)}-character JSON answer")
    for name, make in (("llguidance", llguidance_rows), ("xgrammar", xgrammar_rows), ("outlines-core", outlines_rows)):
        try:
            compiled, rows = make(tokenizer, vocab, eos)
        except ImportError as exc:
            print(f"{name}: skipped ({exc})")
            continue
        steps = []
        for token in walk:
            scratch = logits.copy()
            started = time.perf_counter()
            for (mask, accept), row in zip(rows, scratch):
                mask(row)
                assert np.isfinite(row[token]), f"{name} refused token {token}"
                accept(token)
            steps.append(time.perf_counter() - started)
        print(f"{name}: compile {compiled * 1e3:.1f} ms; per step at {ROWS} rows median "
              f"{statistics.median(steps) * 1e3:.2f} ms, mean {statistics.mean(steps) * 1e3:.2f} ms,"
              f" p90 {sorted(steps)[int(len(steps) * 0.9)] * 1e3:.2f} ms, "
              f"max {max(steps) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
