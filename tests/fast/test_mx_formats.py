"""The MX quantisers (``backend_model.mx_formats``) against well-kept references, bit for bit.

Two references, each with known departures from the OCP spec, so each is compared where it keeps to it
and every block is compared with at least one:

* torchao 0.18's ``prototype.mx_formats`` (``to_mx`` in its default FLOOR mode, then ``to_dtype``), for
  MXFP6 E2M3 (the card's) and E3M2. Two of its blocks depart from the spec, both fixed on torchao's main
  branch since: a block holding an infinity gets a finite scale (the spec, and main, give it the NaN
  scale), and a block whose scale is 2^-127 is divided by 2^-126 but multiplied back by 2^-127.
* Microsoft's microxcaling ``quantize_mx_op`` (round "even"), as neural-compressor ships it (microxcaling
  is not on PyPI; torchao has no integer elements), for all three. It takes floor(log2(max)) from a float32
  log2, which rounds up just below a power of two (from 2^4 up): the scale is then twice the spec's. It
  emulates the integer element in floating point, so a negative value that rounds to zero reads -0.0;
  an int8 element has one zero, and ours gives +0.0 there.

Each format on 10^6 values whose blocks mix normal values, a wide dynamic range (fp32 subnormals to near
its largest), zeros of both signs, subnormal-only blocks, exact ties, values that saturate, and NaN and
infinities. Then small cases computed by hand from the spec's rules, the departures above among them.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from neural_compressor.torch.algorithms.mx_quant.utils import quantize_mx_op
from torchao.prototype.mx_formats.constants import DTYPE_FP6_E2M3, DTYPE_FP6_E3M2
from torchao.prototype.mx_formats.mx_tensor import to_dtype, to_mx

from backend_model.mx_formats import BLOCK, FORMATS, MXFP6, MXINT8, SCALE_MIN, quantize

VALUES = 10**6
KINDS = 8  # kinds of block in the random tensor: see _block_mix
TORCHAO = {"mxfp6_e2m3": DTYPE_FP6_E2M3, "mxfp6_e3m2": DTYPE_FP6_E3M2}
MICROXCALING = {"mxint8": "int8", "mxfp6_e2m3": "fp6_e2m3", "mxfp6_e3m2": "fp6_e3m2"}


def torchao_mx(x: np.ndarray, fmt: str) -> np.ndarray:
    scale, data = to_mx(torch.from_numpy(x), TORCHAO[fmt], BLOCK)
    return to_dtype(data, scale, TORCHAO[fmt], BLOCK, torch.float32).numpy()


def microxcaling_mx(x: np.ndarray, fmt: str) -> np.ndarray:
    """Its zeros' signs are its float emulation's (see the top): they are compared as values."""
    return quantize_mx_op(torch.from_numpy(x), MICROXCALING[fmt], "even", BLOCK, scale_bits=8, axes=[-1]).numpy()


def _floor_log2(largest: np.ndarray) -> np.ndarray:
    """floor(log2) of positive finite float32 values, exactly (from the bits; subnormals read -127)."""
    return ((largest.view(np.int32) >> 23) & 0xFF).astype(np.int64) - 127


def torchao_departs(x: np.ndarray, fmt: str) -> np.ndarray:
    """The blocks torchao 0.18 computes off the spec: those holding an infinity, those scaled by 2^-127."""
    largest = np.abs(x).max(-1)
    with np.errstate(invalid="ignore"):
        tiny = _floor_log2(largest) - FORMATS[fmt].emax <= SCALE_MIN
    return np.isinf(x).any(-1) & ~np.isnan(x).any(-1) | tiny


def microxcaling_departs(x: np.ndarray, fmt: str) -> np.ndarray:
    """The blocks whose scale microxcaling's float32 log2 doubles (it rounds up to the next power of two)."""
    largest = np.abs(x).max(-1)
    finite = np.isfinite(largest) & (largest > 0)
    rounded = np.floor(torch.log2(torch.from_numpy(np.where(finite, largest, 1))).numpy())
    emax = FORMATS[fmt].emax
    return finite & (np.maximum(rounded - emax, SCALE_MIN) != np.maximum(_floor_log2(largest) - emax, SCALE_MIN))


def _block_mix(seed: int) -> np.ndarray:
    """10^6 float32 values as [blocks, 32], each block of one kind, the kinds shuffled."""
    rng = np.random.default_rng(seed)
    blocks = VALUES // BLOCK
    kind = rng.integers(0, KINDS, blocks)
    sign = rng.choice([-1.0, 1.0], (blocks, BLOCK))
    exps = rng.integers(-140, 120, (blocks, 1))  # one magnitude per block

    normal = rng.standard_normal((blocks, BLOCK))
    wide = sign * rng.uniform(1, 2, (blocks, BLOCK)) * 2.0 ** rng.integers(-149, 128, (blocks, BLOCK))
    zeros = np.where(rng.random((blocks, BLOCK)) < 0.5, sign * 0.0, normal * 2.0**exps)
    subnormal = sign * rng.integers(0, 2**23, (blocks, BLOCK)) * 2.0**-149
    ties = rng.integers(-255, 256, (blocks, BLOCK)) * 2.0 ** (exps - 8)  # many exact midpoints
    saturate = sign * rng.uniform(1.7, 2.0, (blocks, BLOCK)) * 2.0**exps  # above the elements' largest
    special = normal.copy()
    special[np.arange(blocks), rng.integers(0, BLOCK, blocks)] = rng.choice([np.nan, np.inf, -np.inf], blocks)
    extreme = np.where(rng.random((blocks, BLOCK)) < 0.2, sign * 3e38, normal * 1e-30)  # the smalls underflow
    kinds = [normal * 2.0**exps, wide, zeros, subnormal, ties, saturate, special, extreme]
    with np.errstate(over="ignore"):
        return np.choose(kind[:, None], kinds).astype(np.float32)


def assert_same_bits(ours: np.ndarray, ref: np.ndarray, zero_signs: bool = True) -> None:
    """Equal bit patterns where the reference has a number (the signs of zeros too, unless told not to); NaN
    where it has NaN."""
    if not zero_signs:
        ours, ref = ours + np.float32(0), ref + np.float32(0)  # -0 + 0 is +0, every other value stays
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(ours), nan), f"NaN at {np.argwhere(np.isnan(ours) != nan)[:5].tolist()}"
    differ = (ours.view(np.int32) != ref.view(np.int32)) & ~nan
    assert not differ.any(), f"{differ.sum()} values differ, e.g. ours {ours[differ][:5]} vs {ref[differ][:5]}"


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_million_values_match_the_references_bit_for_bit(fmt: str) -> None:
    x = _block_mix(seed=len(fmt))
    ours = quantize(x, fmt)
    checked = np.zeros(len(x), bool)
    keeps = ~microxcaling_departs(x, fmt)
    assert_same_bits(ours[keeps], microxcaling_mx(x, fmt)[keeps], zero_signs=False)
    checked |= keeps
    if fmt in TORCHAO:
        keeps = ~torchao_departs(x, fmt)
        assert_same_bits(ours[keeps], torchao_mx(x, fmt)[keeps])
        checked |= keeps
    assert checked.all(), f"{(~checked).sum()} blocks neither reference computes as the spec does"
    kinds_seen = (np.isnan(ours).all(-1).sum(), (ours == 0).all(-1).sum(), (np.signbit(ours) & (ours == 0)).sum())
    assert all(kinds_seen[:2]) and bool(kinds_seen[2]) == (fmt != MXINT8), kinds_seen  # NaN, zero blocks, -0


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_blocks_along_another_axis_and_a_short_last_block(fmt: str) -> None:
    x = _block_mix(seed=7)[:64].reshape(64, 32)
    assert_same_bits(quantize(x.T, fmt, axis=0), quantize(x, fmt).T)
    short = x[:, :20]  # one block of 20: as if padded with zeros
    padded = np.concatenate([short, np.zeros((64, 12), np.float32)], axis=1)
    assert_same_bits(quantize(short, fmt), quantize(padded, fmt)[:, :20])


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_quantising_twice_changes_nothing(fmt: str) -> None:
    # a KV cache quantised again at every write keeps what it held
    once = quantize(_block_mix(seed=3), fmt)
    assert_same_bits(quantize(once, fmt), once)


def _one_block(*values: float) -> np.ndarray:
    return np.array(list(values) + [0.0] * (BLOCK - len(values)), np.float32)


def test_mxfp6_is_e2m3_and_rounds_ties_to_even_within_a_block() -> None:
    # largest 6.0: floor(log2 6) = 2 = E2M3's emax, so X = 1 and the values are on E2M3's own grid:
    # 0.125 steps below 2, 0.25 below 4, 0.5 below 8
    got = quantize(_one_block(6.0, 0.3, 0.1875, 0.0625, 3.125, 3.375, 5.25, -0.05, -0.0), MXFP6)
    assert got[:9].tolist() == [6.0, 0.25, 0.25, 0.0, 3.0, 3.5, 5.0, -0.0, -0.0]
    assert np.signbit(got[7]) and np.signbit(got[8])


def test_the_shared_scale_is_the_largest_power_of_two_less_its_emax() -> None:
    # largest 100: floor(log2 100) = 6, X = 2^(6 - 2) = 16; 100 / 16 = 6.25 is a tie of 6 and 6.5 -> 6 (even)
    assert quantize(_one_block(100.0, 1.0, 7.9), MXFP6)[:3].tolist() == [96.0, 0.0, 8.0]
    # E3M2: emax 4, so X = 2^(6 - 4) = 4; 100 / 4 = 25 -> 24 (0.25 * 2^4 steps: 24 or 28, 25 nearer 24)
    assert quantize(_one_block(100.0, 1.0), "mxfp6_e3m2")[:2].tolist() == [96.0, 1.0]
    # MXINT8: emax 0, X = 64; 100 / 64 * 64 = 100 exactly; 1 / 64 * 64 = 1
    assert quantize(_one_block(100.0, 1.0, 0.5), MXINT8)[:3].tolist() == [100.0, 1.0, 0.0]


def test_saturation_at_the_elements_largest() -> None:
    # 7.9 / X with X = 1: above E2M3's 7.5, saturates; MXINT8's X = 4: 7.9 / 4 * 64 = 126.4 -> 126
    assert quantize(_one_block(7.9, -7.9), MXFP6)[:2].tolist() == [7.5, -7.5]
    assert quantize(_one_block(7.9, -7.9), MXINT8)[:2].tolist() == [7.875, -7.875]
    # 1.999 with X = 1: 127.94 rounds to 128, kept at 127 (symmetric: -128 is not used either)
    assert quantize(_one_block(1.999, -1.999), MXINT8)[:2].tolist() == [127 / 64, -127 / 64]


def test_the_exponent_is_exact_just_below_a_power_of_two() -> None:
    # 16 - 2^-20: floor(log2) is 3 (a float32 log2 rounds it to 4): X = 8, 127.99 -> 128 -> kept at 127
    below = np.nextafter(np.float32(16.0), np.float32(0))
    assert quantize(_one_block(below), MXINT8)[0] == 127 / 64 * 8


def test_zeros_tiny_blocks_and_the_smallest_scale() -> None:
    assert quantize(np.zeros(BLOCK, np.float32), MXFP6).tolist() == [0.0] * BLOCK
    # largest 2^-140: X clamps to 2^-127, every element is far below E2M3's 0.125 step: zero
    assert not quantize(_one_block(2.0**-140, -(2.0**-141)), MXFP6).any()
    # largest 2^-120 (MXINT8): X = 2^-120, the element is 1 exactly; 2^-127 is half a step: a tie, to 0
    assert quantize(_one_block(2.0**-120, 2.0**-127), MXINT8)[:2].tolist() == [2.0**-120, 0.0]
    # fp32 subnormals keep their value where X = 2^-127 can hold them: 2^-130 is 0.125 X, E2M3's smallest
    assert quantize(_one_block(2.0**-130, 2.0**-128), MXFP6)[:2].tolist() == [2.0**-130, 2.0**-128]


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_nan_or_an_infinity_makes_its_block_nan_and_no_other(fmt: str) -> None:
    for special in (np.nan, np.inf, -np.inf):
        x = np.ones((2, BLOCK), np.float32)
        x[0, 3] = special
        got = quantize(x, fmt)
        assert np.isnan(got[0]).all() and (got[1] == 1.0).all()


def test_an_unknown_format_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match="mxfp6_e2m3, mxfp6_e3m2, mxint8"):
        quantize(np.ones(BLOCK, np.float32), "mxfp4")
