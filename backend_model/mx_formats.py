"""OCP Microscaling (MX) formats: a tensor quantised and dequantised as the card stores it.

The OCP Microscaling Formats (MX) v1.0 spec
(https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf) cuts a tensor
into blocks of 32 consecutive elements along one axis. A block shares one E8M0 scale X (a power of two,
2^-127 to 2^127, or NaN) and each element keeps a narrow value P; the block holds X * P. Cloud AI 100
uses two of them: MXFP6 for the MatMul weights (``mxfp6_matmul``; QEfficient's compile help says
E2M3 elements) and MXINT8 for the KV cache (``mxint8_kv_cache``).

The rules, as the spec's section 6.3 gives them and torchao's ``to_mx`` (FLOOR) and Microsoft's
microxcaling compute them: X = 2^(floor(log2(max |V|)) - emax), emax being the element format's largest
power of two, the exponent clamped to -127 at the bottom (a block of zeros or tiny values); each V / X is
rounded to the element grid, ties to even, and saturated to the element's largest magnitude (the MX
element formats have no infinity). A block holding an infinity or a NaN gets the NaN scale: all of it
reads NaN. Signed zeros keep their sign. A last block shorter than 32 shares one scale, as if padded with
zeros. numpy only, so the twin and the CPU engine both use it (a torch tensor: ``t.numpy()``).

``Mx`` is what a compile config asks of them, as a QPC applies it: ``mxfp6_matmul`` stores every MatMul
weight that is a constant of the graph (the projections and the output head, tied or not: QEfficient's
export writes the head's own ``[hidden, vocab]`` initializer; not the embedding, a Gather) as MXFP6,
blocks along the reduction axis; ``mxint8_kv_cache`` stores the KV cache (``past_key.*`` / ``past_value.*``,
QEfficient's custom IO) as MXINT8, blocks along the head dimension. The twin and the CPU engine both
store a run's new cache positions when the run ends: a run attends to its own new keys as computed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

BLOCK = 32  # elements per shared scale (the spec's k for every MX format)
SCALE_MIN = -127  # the smallest E8M0 exponent (2^-127); 0xFF is NaN


@dataclass(frozen=True)
class Element:
    """An MX element format, as the rounding needs it: every magnitude below 2^(emin + 1) is a multiple of
    2^(emin - mbits); above, each binade 2^e holds 2^mbits steps of 2^(e - mbits), up to ``largest``."""

    name: str
    emax: int  # the exponent of the largest power of two the element holds (the spec's emax_elem)
    emin: int  # the exponent of its smallest normal (an integer element is fixed point: all "subnormal")
    mbits: int  # fraction bits
    largest: float  # saturation: the largest magnitude
    signed_zero: bool = True  # a float element has -0; a two's complement integer has one zero, +0


# E2M3: bias 1, 0.125 steps below 1, largest 7.5; E3M2: bias 3, 0.0625 steps below 0.25, largest 28;
# INT8: two's complement with an implicit 2^-6, kept symmetric (+-127/64) as microxcaling keeps it.
FORMATS = {
    "mxfp6_e2m3": Element("mxfp6_e2m3", emax=2, emin=0, mbits=3, largest=7.5),
    "mxfp6_e3m2": Element("mxfp6_e3m2", emax=4, emin=-2, mbits=2, largest=28.0),
    "mxint8": Element("mxint8", emax=0, emin=0, mbits=6, largest=127 / 64, signed_zero=False),
}
MXFP6 = "mxfp6_e2m3"  # what mxfp6_matmul stores (QEfficient: "Compress constant MatMul weights to MXFP6 E2M3")
MXINT8 = "mxint8"  # what mxint8_kv_cache stores


TERMS = {"mxfp6": "mxfp6_matmul", "mxint8kv": "mxint8_kv_cache"}  # eval's names for the compile options


@dataclass(frozen=True)
class Mx:
    """The MX formats a compiled model computes with (both off: fp32 as exported)."""

    mxfp6_matmul: bool = False  # the constant MatMul weights as MXFP6 (E2M3)
    mxint8_kv_cache: bool = False  # the KV cache as MXINT8

    @classmethod
    def of(cls, compile_config: Mapping[str, Any]) -> Mx:
        """What a (validated) compile config asks, read as QEfficient passes it to the compiler."""
        return cls(bool(compile_config.get("mxfp6_matmul")), bool(compile_config.get("mxint8_kv_cache")))

    @classmethod
    def parse(cls, terms: str) -> Mx:
        """``mxfp6``, ``mxint8kv`` or both joined by ``+``; a ValueError names an unknown term."""
        names = [t.strip() for t in terms.split("+")]
        unknown = [t for t in names if t not in TERMS]
        if unknown:
            raise ValueError(f"{unknown[0]!r} is not an MX format: use {' or '.join(TERMS)} (joined by +)")
        return cls(**{TERMS[t]: True for t in names})

    def __bool__(self) -> bool:
        return self.mxfp6_matmul or self.mxint8_kv_cache

    @property
    def label(self) -> str:
        """``mxfp6+mxint8kv``, ``mxfp6``, ``mxint8kv`` or empty (the terms ``parse`` reads)."""
        return "+".join(t for t, key in TERMS.items() if getattr(self, key))


NO_MX = Mx()  # fp32 as exported


def quantize_weight(weight: np.ndarray, reduction_axis: int) -> np.ndarray:
    """A MatMul weight as ``mxfp6_matmul`` stores it: MXFP6 blocks along the axis the product sums over
    (1 of a torch ``[out, in]`` Linear weight, 0 of an ONNX MatMul's ``[in, out]`` constant)."""
    return quantize(weight, MXFP6, reduction_axis)


def quantize_kv(values: np.ndarray) -> np.ndarray:
    """KV cache entries ``[..., head_dim]`` as ``mxint8_kv_cache`` stores them (in their own dtype)."""
    return quantize(values, MXINT8).astype(values.dtype, copy=False)


def element(name: str) -> Element:
    """The element format called ``name`` (a key of FORMATS); a ValueError lists them otherwise."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"MX format must be one of {', '.join(FORMATS)}, got {name!r}") from None


def quantize(values: np.ndarray, fmt: str, axis: int = -1) -> np.ndarray:
    """``values`` as the MX format ``fmt`` holds them (float32, same shape), blocks of 32 along ``axis``."""
    elem = element(fmt)
    x = np.moveaxis(np.asarray(values, dtype=np.float32), axis, -1)
    n = x.shape[-1]
    pad = -n % BLOCK
    if pad:  # zeros change no block's largest magnitude
        x = np.concatenate([x, np.zeros(x.shape[:-1] + (pad,), np.float32)], axis=-1)
    blocks = x.reshape(x.shape[:-1] + (x.shape[-1] // BLOCK, BLOCK))
    largest = np.abs(blocks).max(axis=-1)
    exponent = scale_exponents(largest, elem)[..., None]
    with np.errstate(invalid="ignore"):  # NaN inputs: their blocks are NaN below whatever they round to
        out = round_to_element(blocks * np.ldexp(np.float32(1), -exponent), elem)
    out *= np.ldexp(np.float32(1), exponent)
    out[~np.isfinite(largest)] = np.nan  # the NaN scale
    out = out.reshape(x.shape)[..., :n]
    return np.moveaxis(out, -1, axis)


def scale_exponents(largest: np.ndarray, elem: Element) -> np.ndarray:
    """Each block's shared exponent from its largest magnitude: floor(log2(largest)) - emax, at least -127.
    floor(log2) is read from the float32 bits (a log2 in floating point can round up just below a power of
    two); zero and subnormals read -127. A non-finite block reads 0 (nothing overflows): the caller makes
    it NaN."""
    biased = (largest.view(np.int32) >> 23) & 0xFF
    exponent = biased - 127 - elem.emax
    exponent[biased == 0xFF] = 0
    return np.maximum(exponent, SCALE_MIN)


def round_to_element(scaled: np.ndarray, elem: Element) -> np.ndarray:
    """float32 values rounded to the element grid (ties to even), saturated at its largest magnitude, signs
    kept (a zero's too, where the element has -0).

    A magnitude in binade 2^e (at least emin) is a multiple of 2^(e - mbits): it is multiplied by the
    power of two 2^-(e - mbits), rounded to an integer and multiplied back, both products exact. The
    powers of two are built from their float32 bits: faster than ldexp. Magnitudes are below 2^128, so
    e - mbits stays within float32's normal exponents."""
    magnitude = np.abs(scaled)
    step = np.maximum((magnitude.view(np.int32) >> 23) - 127, elem.emin) - elem.mbits
    up, down = ((127 - step) << 23).view(np.float32), ((127 + step) << 23).view(np.float32)
    rounded = np.minimum(np.rint(magnitude * up) * down, np.float32(elem.largest))
    signed = np.copysign(rounded, scaled)
    return signed if elem.signed_zero else signed + np.float32(0)  # -0 + 0 is +0; every other value stays
