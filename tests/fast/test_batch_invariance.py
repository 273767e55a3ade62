"""Batch invariance on the CPU: a decode row's result does not depend on the rows that share its step.

Kernel level, on the embedded model's shapes (random weights): ``Linear.rowwise`` gives every row what
it gives that row alone, at every row count and any position among other rows, at fp32, bf16 and int4.
Session level, on the embedded model: a row's logits are the same alone, beside rows of other lengths,
and in any slot. int8 is marked as varying with the batch (``VARIES_WITH_BATCH``): the last test shows
why, so the mark stays true.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import engine_threads  # noqa: F401 (autouse: the engine's threads)

from backend_model.contract.parameters import VARIES_WITH_BATCH
from backend_model.models import load_pretrained
from backend_model.sessions.cpu import CpuKVSession
from backend_model.sessions.cpu_kernels import DTYPES, Linear
from backend_model.sessions.protocol import Dims

SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536), (49152, 576)]  # SmolLM2: qkv, o, gate_up, down, head
ROW_COUNTS = (*range(1, 10), 16)
STEPS = 4
NEIGHBOURS = ["Maroon bells are mountains in Colorado, and", "1, 2,", "Once upon a time, in a faraway kingdom,", "Hi"]


@pytest.fixture(scope="module")
def smol():
    return load_pretrained("embedded", progress=lambda m: None)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int4"])
def test_rowwise_gives_each_row_what_it_gives_alone(precision: str) -> None:
    torch.manual_seed(0)
    dtype = DTYPES[precision] if precision != "int4" else torch.float32
    for n, k in SHAPES:
        linear = Linear(torch.randn(n, k) * 0.05, torch.randn(n) * 0.01, precision)
        x = torch.randn(max(ROW_COUNTS), 1, k).to(dtype)
        alone = [linear.rowwise(x[r : r + 1])[0] for r in range(len(x))]
        for rows in ROW_COUNTS:
            batch = linear.rowwise(x[:rows])
            assert batch.dtype == dtype and batch.shape == (rows, 1, n)
            assert all(torch.equal(batch[r], alone[r]) for r in range(rows)), (precision, (n, k), rows)
        others = torch.randn(7, 1, k).to(dtype)
        others[6] = x[0]  # row 0 again, last among rows it has never met
        assert torch.equal(linear.rowwise(others)[6], alone[0]), (precision, (n, k))


def greedy_logits(session: CpuKVSession, rows: dict[int, list[int]], steps: int) -> dict[int, list[np.ndarray]]:
    """Prefill each slot's prompt, then decode all the slots together for ``steps`` greedy steps: every step's
    logits per slot."""
    logits = {}
    for slot, ids in rows.items():
        n = len(ids)
        out = session.run({"input_ids": np.array([ids]), "position_ids": np.arange(n).reshape(1, n),
                           "batch_index": np.array([[slot]])})["logits"]
        logits[slot] = [out[0, 0]]
    slots = np.array(sorted(rows)).reshape(-1, 1)
    for step in range(steps):
        ids = [int(logits[s][-1].argmax()) for s in slots[:, 0]]
        pos = [len(rows[s]) + step for s in slots[:, 0]]
        out = session.run({"input_ids": np.array(ids).reshape(-1, 1), "position_ids": np.array(pos).reshape(-1, 1),
                           "batch_index": slots})["logits"]
        for r, s in enumerate(slots[:, 0]):
            logits[s].append(out[r, 0])
    return logits


@pytest.mark.parametrize("precision", ["fp32", "int4"])
def test_a_decode_row_is_the_same_alone_beside_others_and_in_any_slot(smol, precision: str) -> None:
    model, tokenizer = smol
    session = CpuKVSession.of(model, Dims(1, 8, 64, model.config.vocab_size, 8), precision)
    prompt = tokenizer("My name is").input_ids
    others = [tokenizer(p).input_ids for p in NEIGHBOURS]
    assert len({len(prompt), *map(len, others)}) == 5  # every row has its own length
    alone = greedy_logits(session, {0: prompt}, STEPS)[0]
    for slot, beside in ((1, [4]), (3, [4, 5, 6, 7]), (7, [0, 2, 5])):
        rows = {slot: prompt, **{s: others[i % len(others)] for i, s in enumerate(beside)}}
        got = greedy_logits(session, rows, STEPS)[slot]
        assert all(np.array_equal(a, b) for a, b in zip(alone, got)), (precision, slot, beside)


def test_int8_varies_with_its_neighbours_as_marked() -> None:
    assert "int8" in VARIES_WITH_BATCH and not {"fp32", "bf16", "int4"} & set(VARIES_WITH_BATCH)
    torch.manual_seed(0)
    linear = Linear(torch.randn(576, 576) * 0.05, None, "int8")
    row, loud = torch.randn(1, 576), torch.randn(1, 576) * 50  # a neighbour that widens the activation scale
    assert not torch.equal(linear.rowwise(torch.cat([row, loud]))[0], linear.rowwise(row)[0])
