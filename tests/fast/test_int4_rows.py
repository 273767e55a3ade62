"""int4 on fp32 activations: a batch's rows are exactly what each row gives alone, at every batch size."""

from __future__ import annotations

import torch

from backend_model.cpu_session import DTYPES, _Linear


def test_int4_batches_are_row_exact_and_keep_the_activation_dtype() -> None:
    torch.manual_seed(0)
    weight = torch.randn(320, 576) * 0.05
    bias = torch.randn(320) * 0.01
    linear = _Linear(weight, bias, "int4")
    assert linear.int4 is not None and DTYPES["int4"] == torch.float32
    x = torch.randn(9, 1, 576)
    for rows in (2, 4, 5, 8, 9):  # the kernel takes rows in blocks of 4: every block shape
        batch = linear(x[:rows])
        assert batch.dtype == torch.float32 and batch.shape == (rows, 1, 320)
        alone = torch.cat([linear(x[r : r + 1]) for r in range(rows)])
        assert torch.equal(batch, alone)
    dense = torch.nn.functional.linear(x, weight, bias)
    assert (linear(x) - dense).norm() < 0.1 * dense.norm()  # 4-bit weights: close, not equal
