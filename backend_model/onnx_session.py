"""The card's twin: QEfficient's ``QAICInferenceSession`` surface over an ONNX graph on ONNX Runtime.

A QPC is a QEfficient ONNX graph compiled for its specializations. The twin takes such a graph
(dynamic ``batch_size`` / ``seq_len`` / ``ctx_len`` / ``full_batch_size`` axes) and those
specializations, and behaves as the card does: ``bindings`` and ``allowed_shapes`` (empty for a
fixed-shape build, as qaicrt reports it), output buffers that fix the output shape, skipped
buffers whose retained state stays inside between runs, and QEfficient's ValueError listing the
allowed shapes for a call no specialization allows. ``QaicSession`` drives it unchanged through
its ``opener`` seam. onnxruntime is imported lazily: only this engine needs it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import specializations
from .contract import SessionError
from .qaic_session import Opener
from .specializations import Symbols

RETAINED_SUFFIX = "_RetainedState"
DTYPES = {"tensor(int64)": np.int64, "tensor(float)": np.float32, "tensor(float16)": np.float16,
          "tensor(int32)": np.int32, "tensor(int8)": np.int8}


@dataclass(frozen=True)
class Binding:
    """One input or output of the compiled program, as qaicrt's IO descriptor lists it."""

    name: str
    index: int
    dims: list[int]  # of the selected (first) specialization
    dtype: Any
    is_input: bool


def _resolve(shape: list[Any], symbols: Symbols, name: str) -> list[int]:
    """A graph binding's dims under one specialization (its symbols name the dynamic axes)."""
    dims = []
    for dim in shape:
        if isinstance(dim, int):
            dims.append(dim)
        elif dim in symbols:
            dims.append(int(symbols[dim]))
        else:
            raise SessionError(f"dimension {dim!r} of {name} is not a specialization symbol ({', '.join(symbols)})")
    return dims


class OnnxInferenceSession:
    """QAICInferenceSession's twin on ONNX Runtime (CPU)."""

    def __init__(self, onnx_path: str | Path, specs: list[Symbols], threads: int = 0) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        self._ort = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
        args = [(a, True) for a in self._ort.get_inputs()] + [(a, False) for a in self._ort.get_outputs()]
        shapes = [[_resolve(a.shape, spec, a.name) for a, _ in args] for spec in specs]
        self.bindings = [Binding(a.name, i, shapes[0][i], np.dtype(DTYPES.get(a.type, np.float32)), is_in)
                         for i, (a, is_in) in enumerate(args)]
        self.binding_index_map = {b.name: b.index for b in self.bindings}
        self.input_names = [b.name for b in self.bindings if b.is_input]
        self.output_names = [b.name for b in self.bindings if not b.is_input]
        self._specs = shapes
        self.allowed_shapes = [] if len(shapes) == 1 else [
            [(b.dtype.itemsize, dims[b.index]) for b in self.bindings] for dims in shapes
        ]
        self._dims = [list(b.dims) for b in self.bindings]  # the buffer dims set so far
        self._inputs: dict[str, np.ndarray] = {}
        self._skipped: set = set()
        # retained state: input name -> (current OrtValue, spare OrtValue the next run writes into)
        self._retained = {n: None for n in self.input_names if n + RETAINED_SUFFIX in self.binding_index_map}

    # -- QAICInferenceSession's surface -------------------------------------------------------
    def set_buffers(self, buffers: dict[str, np.ndarray]) -> None:
        """Input data, output placeholders (they fix the output shape), or empty arrays (skipped)."""
        for name, buffer in buffers.items():
            if name not in self.binding_index_map:
                warnings.warn(f'Buffer: "{name}" not found', stacklevel=2)
                continue
            buffer = np.asarray(buffer)
            self._dims[self.binding_index_map[name]] = list(buffer.shape) if buffer.ndim else [1]
            if buffer.size == 0:
                self._skipped.add(name)
                continue
            self._skipped.discard(name)
            if name in self.input_names:
                self._inputs[name] = buffer
                if name in self._retained:  # data given for a retained buffer replaces the state
                    self._retained[name] = self._pair(buffer)

    def skip_buffers(self, names: list[str]) -> None:
        """Zero-size buffers: retained state stays inside, nothing is sent or returned."""
        self.set_buffers({n: np.array([]) for n in names})

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.set_buffers(inputs)
        self._check_shapes()
        binding = self._ort.io_binding()
        returned = [n for n in self.output_names if not self._is_retained_output(n) and n not in self._skipped]
        for name in returned:  # bound first: get_outputs() lists them first
            binding.bind_output(name)
        for name in self.input_names:
            if name in self._retained:
                current = self._retained[name] or self._zero_state(name)
                binding.bind_ortvalue_input(name, current[0])
                binding.bind_ortvalue_output(name + RETAINED_SUFFIX, current[1])
            elif name in self._inputs:
                binding.bind_cpu_input(name, np.ascontiguousarray(self._inputs[name]))
            else:
                raise ValueError(f"no buffer set for input {name}")
        self._ort.run_with_iobinding(binding)
        outputs = {name: value.numpy() for name, value in zip(returned, binding.get_outputs())}
        for name, (current, spare) in list(self._retained.items()):  # the run wrote the spare
            self._retained[name] = (spare, current)
            if name + RETAINED_SUFFIX not in self._skipped:
                outputs[name + RETAINED_SUFFIX] = spare.numpy().copy()
        return outputs

    # -- internals ------------------------------------------------------------------------------
    def _is_retained_output(self, name: str) -> bool:
        return name.endswith(RETAINED_SUFFIX) and name[: -len(RETAINED_SUFFIX)] in self._retained

    def _pair(self, value: np.ndarray) -> tuple[Any, Any]:
        from onnxruntime import OrtValue

        value = np.ascontiguousarray(value)
        return OrtValue.ortvalue_from_numpy(value.copy()), OrtValue.ortvalue_from_numpy(np.empty_like(value))

    def _zero_state(self, name: str) -> tuple[Any, Any]:
        """Retained state starts as zeros of its compiled shape (the same in every specialization)."""
        binding = self.bindings[self.binding_index_map[name]]
        self._retained[name] = self._pair(np.zeros(binding.dims, dtype=binding.dtype))
        return self._retained[name]

    def _check_shapes(self) -> None:
        """Every non-skipped buffer must have one specialization's dims, as on the card."""
        live = [b for b in self.bindings if b.name not in self._skipped]
        for dims in self._specs:
            if all(self._dims[b.index] == dims[b.index] for b in live):
                return
        allowed = "".join(
            f"\n{i}\n" + "".join(f"{b.name}:\t{b.dtype.itemsize}\t{dims[b.index]}\n" for b in live)
            for i, dims in enumerate(self._specs)
        )
        passed = "".join(f"{b.name}:\t{b.dtype.itemsize}\t{self._dims[b.index]}\n" for b in live)
        raise ValueError(f"Failed to run\n\nAllowed shapes:{allowed}\n\nPassed shapes:\n{passed}")


def onnx_opener(fallback: list[dict[str, Any]] | None = None, threads: int = 0) -> Opener:
    """The twin's opener for ``QaicSession``: the graph and the specializations.json beside it.

    ``fallback`` (named entries, e.g. built from compile_config.json) compiles a graph that has no
    specializations.json, as QEfficient's compile does with the compile config's dimensions.
    """

    def open_onnx(path: Path, device_ids: list[int] | None) -> tuple[OnnxInferenceSession, Path]:
        graph = specializations.find_graph(path)
        beside = graph.parent / specializations.FILE
        try:
            specs = specializations.read(beside) if beside.is_file() else specializations.parse(
                {"specializations": fallback})
        except ValueError as exc:
            raise SessionError(f"{exc}: the twin needs the shapes to compile {graph.name} for") from None
        return OnnxInferenceSession(graph, specs, threads), graph

    return open_onnx
