"""The card's twin: QEfficient's ``QAICInferenceSession`` surface over an ONNX graph on ONNX Runtime.

A QPC is a QEfficient ONNX graph compiled for its specializations. The twin takes such a graph
(dynamic ``batch_size`` / ``seq_len`` / ``ctx_len`` / ``full_batch_size`` input axes; QEfficient's
own export or ``qaic-console onnx export``), made ready as the card runs it (:mod:`.graph`:
custom ops inlined, invalid-index constants), and those specializations, and behaves as the
card does: ``bindings`` and ``allowed_shapes`` (empty for a fixed-shape build, as qaicrt reports
it), output buffers that fix the output shape, skipped buffers whose retained state stays inside
between runs, and QEfficient's ValueError listing the allowed shapes for a call no specialization
allows. Input dims come from the specialization's symbols; output dims are what the graph gives
under it (as the compiler fixes them; QEfficient leaves names such as ``Castlogits_dim_0``).
``QaicSession`` drives it unchanged through its ``opener`` seam. onnxruntime is imported lazily.

With the compile config's MX formats (``mx_formats.Mx``) it computes what such a QPC computes: the MatMul
weights are overridden at load by their MXFP6 values, and each run's new KV cache entries are stored as
MXINT8 once the run ends (the positions it was given; storing a stored entry again changes nothing).

Compute-context lengths: specializations with a ``comp_ctx_lengths`` symbol give the program a
``comp_ctx_lengths`` input of that length, as QEfficient's CCL export has. A graph without that input (ours)
attends its whole cache, which is what the card computes only while every position a run reads lies inside
the chosen length: the twin checks that, and refuses a run that would attend past it (the card's answer
would be wrong there). With ``include_sampler`` the twin is the card's sampler too (:mod:`.sampler`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..contract import specializations
from ..contract.specializations import CCL, Symbols
from ..mx_formats import NO_MX, Mx, quantize_kv, quantize_weight
from ..sessions.protocol import SessionError
from ..sessions.qaic import Opener
from .graph import Prepared, prepare

RETAINED_SUFFIX = "_RetainedState"
KV_CACHE = ("past_key.", "past_value.")  # what mxint8_kv_cache stores (QEfficient's custom IO)
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

    virtual: frozenset[str] = frozenset()  # the program's inputs the graph does not take (comp_ctx_lengths)

    def __init__(self, onnx_path: str | Path, specs: list[Symbols], threads: int = 0, source: str = "",
                 mx: Mx = NO_MX) -> None:
        real = Path(onnx_path).resolve()  # its weights lie beside the file a link points to
        model, self.prepared = _prepare(real)
        self.specializations_from = source  # where ``specs`` came from, for the log line
        self.mx = mx
        # ONNX Runtime reads an overriding initializer from its OrtValue, which must outlive the session
        self._weights = _mxfp6_weights(model, real, self.prepared.matmul_weights) if mx.mxfp6_matmul else {}
        self._ort = _open(model, real, threads, self._weights)
        inputs, outputs = self._ort.get_inputs(), self._ort.get_outputs()
        args = [(a, True) for a in inputs] + [(a, False) for a in outputs]
        dtypes = [np.dtype(DTYPES.get(a.type, np.float32)) for a, _ in args]
        shapes = []
        for n, spec in enumerate(specs):
            try:
                dims = [_resolve(a.shape, spec, a.name) for a in inputs]
            except SessionError as exc:
                raise SessionError(f"{exc} in {source or 'the specializations'}") from None
            shapes.append(dims + self._probe(dims, dtypes, n, spec))
        names = [a.name for a, _ in args]
        if any(CCL in spec for spec in specs) and CCL not in names:  # the program's input, not the graph's
            self.virtual = frozenset({CCL})
            names.append(CCL)
            dtypes.append(np.dtype(np.int64))
            args.append((None, True))
            for dims, spec in zip(shapes, specs):
                dims.append([int(spec.get(CCL, 0))])
        self.bindings = [Binding(n, i, shapes[0][i], dtypes[i], is_in) for i, (n, (_, is_in)) in
                         enumerate(zip(names, args))]
        self.binding_index_map = {b.name: b.index for b in self.bindings}
        self.input_names = [b.name for b in self.bindings if b.is_input]
        self.output_names = [b.name for b in self.bindings if not b.is_input]
        self._specs = shapes
        self.allowed_shapes = [] if len(shapes) == 1 else [
            [(b.dtype.itemsize, dims[b.index]) for b in self.bindings] for dims in shapes
        ]
        self._dims = [list(b.dims) for b in self.bindings]  # the buffer dims set so far
        self._inputs: dict[str, np.ndarray] = {}
        self._skipped: set[str] = set()
        # the retained inputs, in input order (a dict as an ordered set)
        self._retained = dict.fromkeys(n for n in self.input_names if n + RETAINED_SUFFIX in self.binding_index_map)
        # a retained input's state, once set or first run: (current, spare the next run writes into), each an
        # OrtValue and the numpy array it holds (mxint8_kv_cache stores a run's entries in place)
        self._state: dict[str, tuple[Any, Any]] = {}
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}

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
                    self._state[name] = self._pair_for(name, buffer)

    def skip_buffers(self, names: list[str]) -> None:
        """Zero-size buffers: retained state stays inside, nothing is sent or returned."""
        self.set_buffers({n: np.array([]) for n in names})

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.set_buffers(inputs)
        self._check_shapes()
        if CCL in self.virtual:
            self._check_ccl()
        binding = self._ort.io_binding()
        returned = [n for n in self.output_names if not self._is_retained_output(n) and n not in self._skipped]
        for name in returned:  # bound first: get_outputs() lists them first
            binding.bind_output(name)
        for name in self.input_names:
            if name in self._retained:
                current = self._state.get(name) or self._zero_state(name)
                binding.bind_ortvalue_input(name, current[0])
                binding.bind_ortvalue_output(name + RETAINED_SUFFIX, current[1])
            elif name in self.virtual:
                continue
            elif name in self._inputs:
                binding.bind_cpu_input(name, np.ascontiguousarray(self._inputs[name]))
            else:
                raise ValueError(f"no buffer set for input {name}")
        self._ort.run_with_iobinding(binding)
        outputs = {name: value.numpy() for name, value in zip(returned, binding.get_outputs())}
        for name in self._retained:  # the run wrote the spare (every retained input is bound: it has a state)
            current, spare = self._state[name]
            self._state[name] = (spare, current)
            self._arrays[name] = self._arrays[name][::-1]
            if self.mx.mxint8_kv_cache and name.startswith(KV_CACHE):
                self._store(self._arrays[name][0])
            if name + RETAINED_SUFFIX not in self._skipped:
                outputs[name + RETAINED_SUFFIX] = spare.numpy().copy()
        return outputs

    # -- internals ------------------------------------------------------------------------------
    def _probe(self, dims: list[list[int]], dtypes: list[Any], n: int, spec: Symbols) -> list[list[int]]:
        """The output dims of one specialization: one run on zeros of its input dims (not kept)."""
        feeds = {a.name: np.zeros(d, dtype=t) for a, d, t in zip(self._ort.get_inputs(), dims, dtypes)}
        try:
            return [list(out.shape) for out in self._ort.run(None, feeds)]
        except Exception as exc:  # onnxruntime's own error types
            raise SessionError(f"the graph does not run under specialization {n} ({_symbols(spec)}): "
                               f"{_first_line(exc)}") from None

    def _is_retained_output(self, name: str) -> bool:
        return name.endswith(RETAINED_SUFFIX) and name[: -len(RETAINED_SUFFIX)] in self._retained

    def _store(self, cache: np.ndarray) -> None:
        """The entries the last run wrote in ``cache`` [rows, kv_heads, ctx_len, head_dim], stored as MXINT8 in
        place: every position its ``position_ids`` name in each row it ran (a negative one is the last position,
        where a regular graph writes it; a position it did not write was stored before or is zero: unchanged)."""
        positions = np.asarray(self._inputs["position_ids"]) % cache.shape[2]
        rows = self._inputs.get("batch_index", np.arange(len(positions)).reshape(-1, 1))
        for row, slot in zip(positions, np.asarray(rows).reshape(-1)):
            written = np.unique(row)
            cache[slot, :, written] = quantize_kv(cache[slot, :, written])

    def _pair_for(self, name: str, value: np.ndarray) -> tuple[Any, Any]:
        """``name``'s state: a copy of ``value`` and a spare the next run writes into (the OrtValues hold the
        arrays' memory)."""
        from onnxruntime import OrtValue

        arrays = (np.ascontiguousarray(value).copy(), np.empty_like(value))
        self._arrays[name] = arrays
        return OrtValue.ortvalue_from_numpy(arrays[0]), OrtValue.ortvalue_from_numpy(arrays[1])

    def _zero_state(self, name: str) -> tuple[Any, Any]:
        """Retained state starts as zeros of its compiled shape (the same in every specialization)."""
        binding = self.bindings[self.binding_index_map[name]]
        self._state[name] = self._pair_for(name, np.zeros(binding.dims, dtype=binding.dtype))
        return self._state[name]

    def _check_ccl(self) -> None:
        """A run reads its rows' positions up to the largest: past the compute-context length it chose, the card
        would attend only that length's first positions (a wrong answer, which the twin does not give)."""
        length = self._dims[self.binding_index_map[CCL]][0]
        last = int(np.max(self._inputs["position_ids"]))
        if last >= length:
            raise ValueError(f"position {last} is past the compute-context length {length} this run chose: the "
                             f"card would attend only positions 0 to {length - 1}")

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


def _prepare(path: Path) -> tuple[bytes, Prepared]:
    try:
        return prepare(path)
    except OSError as exc:
        raise SessionError(f"cannot read ONNX graph {path}: {_first_line(exc)}") from None
    except Exception as exc:  # onnx's DecodeError, an invalid-index constant no rule places ...
        raise SessionError(f"{path} is not a usable ONNX graph: {_first_line(exc)}") from None


def _mxfp6_weights(model: bytes, path: Path, names: tuple) -> dict[str, Any]:
    """Each MatMul weight of the prepared graph as ``mxfp6_matmul`` stores it (an OrtValue by initializer name),
    read from the file its entry names (the graph's own, or an external data file beside it)."""
    import onnx
    from onnx import numpy_helper
    from onnxruntime import OrtValue

    wanted = set(names)
    graph = onnx.load_from_string(model).graph
    return {t.name: OrtValue.ortvalue_from_numpy(quantize_weight(numpy_helper.to_array(t, str(path.parent)), -2))
            for t in graph.initializer if t.name in wanted}


def _open(model: bytes, path: Path, threads: int, weights: dict[str, Any]) -> Any:
    """An ONNX Runtime session on the prepared graph; its weights are read from the files beside ``path``, but for
    ``weights`` (OrtValues by initializer name), which take their place."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    for name, value in weights.items():
        options.add_initializer(name, value)
    if threads:
        options.intra_op_num_threads = threads
    options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(path.parent))
    try:
        return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's Fail / InvalidGraph / NotImplemented
        raise SessionError(f"ONNX Runtime cannot open {path}: {_first_line(exc)}") from None


def _first_line(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def _symbols(spec: Symbols) -> str:
    return ", ".join(f"{k}={v}" for k, v in spec.items())


def onnx_opener(fallback: list[dict[str, Any]] | None = None, threads: int = 0,
                fallback_from: str = "the compile config", mx: Mx = NO_MX, max_top_k_ids: int = 0) -> Opener:
    """The twin's opener for ``QaicSession``: the graph and the specializations.json beside it.

    ``fallback`` (named entries, e.g. built from compile_config.json: ``fallback_from`` names it)
    compiles a graph that has no specializations.json (QEfficient's export writes none), as
    QEfficient's compile does with the compile config's dimensions; ``mx``, its MX formats. ``max_top_k_ids`` > 0:
    the program samples, as a QPC compiled with ``include_sampler`` (:mod:`.sampler`).
    """

    def open_onnx(path: Path, device_ids: list[int] | None) -> tuple[Any, Path]:
        graph = specializations.find_graph(path)
        beside = specializations.beside(graph)
        source = str(beside) if beside else f"{fallback_from} (no {specializations.FILE} beside the graph)"
        try:
            specs = specializations.read(beside) if beside else specializations.parse({"specializations": fallback})
        except ValueError as exc:
            raise SessionError(f"{exc}: the twin needs the shapes to compile {graph.name} for") from None
        session = OnnxInferenceSession(graph, specs, threads, source, mx)
        if not max_top_k_ids:
            return session, graph
        from .sampler import SamplingProgram

        return SamplingProgram(session, max_top_k_ids), graph

    return open_onnx
