"""An embedding model's compile_config.json and config.pbtxt parameters: what the generator writes, the backend reads.

The compile config holds what QEfficient's ``QEFFAutoModel.compile`` takes: ``seq_len`` (several sequence lengths,
one specialization each: an input is padded to the smallest that holds it), ``batch_size``, ``num_cores``,
``num_devices``, ``mxfp6_matmul``; and ``onnx_path`` (its exported graph, for the card's ONNX Runtime twin). The
pooling is a ``config.pbtxt`` parameter (``QEFFAutoModel.from_pretrained`` takes it), with ``normalize``,
``max_seq_len`` and ``dimensions`` (the interface of docs/embeddings.md). Standard library only, Python 3.8.
"""

from __future__ import annotations

from typing import Any

from . import compile_config
from .compile_config import SCHEMA as DECODER_SCHEMA
from .compile_config import CompileConfigError, Schema

TASK = "embedding"  # the model type, and the config.pbtxt parameter ``task`` of an embedding model
POOLINGS = ("mean", "cls", "last")
# The CPU's precision: fp32 alone. int8 (torch's dynamic quantisation of the Linear layers) was measured on the
# embedded MiniLM at a cosine of 0.934 to fp32 (16 sentences, the least): under the 0.999 an embedding must keep.
PRECISIONS = ("fp32",)
MAX_BATCH = 64  # config.pbtxt's max_batch_size: the rows one execution of the model takes at most
MAX_SEQ_LEN = 32768


def _lengths(value: Any) -> bool:
    items = value if isinstance(value, list) else [value]
    ok = all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_SEQ_LEN for v in items)
    return ok and bool(items) and items == sorted(set(items))


SCHEMA: Schema = {
    "onnx_path": DECODER_SCHEMA["onnx_path"],
    "seq_len": ((list, int), [32], _lengths, f"an integer or a list of increasing integers in [1, {MAX_SEQ_LEN}]"),
    "batch_size": (int, 1, lambda v: 1 <= v <= MAX_BATCH, f"an integer in [1, {MAX_BATCH}]"),
    "num_cores": DECODER_SCHEMA["num_cores"],
    "num_devices": DECODER_SCHEMA["num_devices"],
    "mxfp6_matmul": DECODER_SCHEMA["mxfp6_matmul"],
}


def validate(raw: Any, source: str = "compile config") -> dict[str, Any]:
    """``raw`` checked, defaults filled in; ``seq_len`` always a list."""
    out = compile_config.validate(raw, source, SCHEMA)
    if isinstance(out["seq_len"], int):
        out["seq_len"] = [out["seq_len"]]
    return out


def load(path: Any) -> dict[str, Any]:
    """Read and validate an embedding model's compile_config.json."""
    return validate(compile_config.read(path), str(path))


def seq_len_for(length: int, seq_lens: list[int]) -> int:
    """The smallest compiled sequence length that holds ``length`` tokens (the caller checked the largest does)."""
    return next(s for s in seq_lens if s >= length)


def check_parameters(pooling: str, normalize: str, max_seq_len: str, dimensions: str, seq_lens: list[int]) -> str:
    """The first thing wrong with an embedding model's parameters (against its compile config), or ''."""
    if pooling not in POOLINGS:
        return f"parameter pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}"
    if normalize not in ("true", "false"):
        return f"parameter normalize must be true or false, got {normalize!r}"
    if not max_seq_len.isdigit() or not 1 <= int(max_seq_len) <= seq_lens[-1]:
        return (f"parameter max_seq_len must be an integer in [1, {seq_lens[-1]}] (the compile config's largest "
                f"seq_len), got {max_seq_len!r}")
    sizes = dimensions.split(",") if dimensions else []
    if not all(s.strip().isdigit() and int(s) > 0 for s in sizes):
        return f"parameter dimensions must be positive integers separated by commas, got {dimensions!r}"
    return ""


__all__ = ["MAX_BATCH", "POOLINGS", "PRECISIONS", "SCHEMA", "TASK", "CompileConfigError", "check_parameters", "load",
           "seq_len_for", "validate"]
