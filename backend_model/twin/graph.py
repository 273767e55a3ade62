"""A QEfficient ONNX graph made ready for ONNX Runtime, so that it computes what the card computes.

QEfficient's custom ops (``CtxScatter`` / ``CtxGather`` and their ``CB`` variants in domain
``com.qualcomm.cloud``, ``CustomRMSNorm`` in ``com.qti.aisw.onnx``) are local ONNX functions; they
are inlined here, so every cache access is a plain ``ScatterND`` or ``GatherND``. QEfficient marks
an invalid cache index with INT32_MAX scalar constants (``QEffDynamicLayer.update`` in
``QEfficient/transformers/cache_utils.py``). The card's program accepts them; ONNX Runtime refuses
them (``invalid index found, index = 2147483647``). The rule for a constant follows the index it
reaches:

* **gather** (the cache positions past a row's last position): what the card reads there is
  discarded: the graph replaces those scores with the mask value and those values with zeros
  (``torch.where`` on ``invalid_mask``). The twin reads position 0, as QEfficient's own
  PyTorch ops do (``CtxGatherFunc.forward``) and its exporter writes when it avoids the constant
  (``InvalidIndexProvider``).
* **scatter** (continuous batching maps position -1, prefill padding, to INT32_MAX): the card
  writes nothing. QEfficient's generalized scatter ops, exported as the same ``ScatterND``, define
  it so ("preserves ``data`` at invalid (INT32_MAX) positions", ``CtxScatterFunc3DGeneralized``),
  and its sampler and MoE packing rely on it. The twin leaves the index rows holding INT32_MAX
  (and their updates) out of each such ScatterND: the cache keeps exactly what it held there.

Position -1 in a regular graph reaches its ScatterND as -1 itself (no constant): the last cache
position, as ONNX and PyTorch define a negative index. No valid read reaches it before a real
token overwrites it, so it stays as it is. The weights are never loaded here: ONNX Runtime reads
them from the file (:mod:`.weights`). ``onnx`` is imported lazily: only the twin needs it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .weights import refer, without_weights

INVALID_INDEX = 2**31 - 1  # torch.iinfo(torch.int32).max: QEfficient's invalid cache index
READS = {"GatherND": "gather", "ScatterND": "scatter"}  # ops whose input 1 is an index
OPAQUE = {"Shape", "Size"}  # what flows on from these is a shape, not the constant's value


@dataclass(frozen=True)
class Prepared:
    """What was done to a graph to make it ready for ONNX Runtime."""

    gathers: int  # INT32_MAX constants feeding a gather index: read position 0
    scatters: int  # INT32_MAX constants feeding a scatter index: write nothing
    inlined: int  # local functions (custom ops) inlined
    matmul_weights: tuple = ()  # the initializers MatMuls take as their weight (input 1): what mxfp6_matmul stores


def prepare(path: str | Path) -> tuple[bytes, Prepared]:
    """The graph at ``path`` with its custom ops inlined and the invalid-index rules applied, serialized
    without its weights: ONNX Runtime reads them from the files in the graph's folder.

    Raises ValueError for a constant the rules cannot place (it reaches both kinds of index).
    """
    import onnx
    import onnx.inliner

    weightless, ranges = without_weights(path)
    model = onnx.load_from_string(weightless)
    refer(model, Path(path).name, ranges)
    inlined = len(model.functions)
    if inlined:
        model = onnx.inliner.inline_local_functions(model)
    graph = model.graph
    nodes = list(graph.node)
    consumers: dict[str, list[tuple[int, int]]] = {}  # value name -> (node number, input slot)
    for n, node in enumerate(nodes):
        for slot, name in enumerate(node.input):
            consumers.setdefault(name, []).append((n, slot))
    counts = {"gather": 0, "scatter": 0}
    scatters: set[int] = set()
    for name, value in _invalid_constants(graph):
        kinds = _reached(name, nodes, consumers)
        if len(kinds) > 1:
            raise ValueError(f"INT32_MAX constant {name} feeds both a gather and a scatter index")
        for kind, reached in kinds.items():
            counts[kind] += 1
            if kind == "gather":
                value.CopyFrom(_scalar(value, 0))
            else:
                scatters |= reached
    if scatters:
        _skipping_invalid(graph, nodes, scatters)
    initializers = {t.name for t in graph.initializer}
    weights = tuple(sorted({n.input[1] for n in graph.node if n.op_type == "MatMul" and n.input[1] in initializers}))
    return model.SerializeToString(), Prepared(counts["gather"], counts["scatter"], inlined, weights)


def _invalid_constants(graph: Any) -> list[tuple[str, Any]]:
    """(value name, its TensorProto) of every scalar INT32_MAX, in Constant nodes and initializers."""
    from onnx import TensorProto, numpy_helper

    found = [(n.output[0], a.t) for n in graph.node if n.op_type == "Constant"
             for a in n.attribute if a.name == "value"]
    found += [(t.name, t) for t in graph.initializer if not t.dims and t.data_location != TensorProto.EXTERNAL]
    return [(name, t) for name, t in found if not t.dims and numpy_helper.to_array(t).item() == INVALID_INDEX]


def _reached(name: str, nodes: list[Any], consumers: dict[str, list[tuple[int, int]]]) -> dict[str, set[int]]:
    """The gather/scatter nodes (by number) whose index the value ``name`` flows into, by kind."""
    kinds: dict[str, set[int]] = {}
    queue, seen = deque([name]), {name}
    while queue:
        for n, slot in consumers.get(queue.popleft(), []):
            node = nodes[n]
            if node.op_type in READS:
                if slot == 1:
                    kinds.setdefault(READS[node.op_type], set()).add(n)
                continue
            if node.op_type in OPAQUE:
                continue
            for out in node.output:
                if out not in seen:
                    seen.add(out)
                    queue.append(out)
    return kinds


def _scalar(like: Any, value: int) -> Any:
    import numpy as np
    from onnx import numpy_helper

    return numpy_helper.from_array(np.array(value, dtype=numpy_helper.to_array(like).dtype), like.name)


def _skipping_invalid(graph: Any, nodes: list[Any], targets: set[int]) -> None:
    """Each target ScatterND writes only the rows of its index that hold no INT32_MAX: the others are
    left out (Compress) before the write, so the cache keeps what it held there."""
    from onnx import NodeProto, TensorProto, helper

    def constant(name: str, value: Any, dtype: int = TensorProto.INT64) -> Any:
        dims = [] if not isinstance(value, list) else [len(value)]
        return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, dtype, dims, value))

    out = []
    for n, node in enumerate(nodes):
        if n not in targets:
            out.append(NodeProto())
            out[-1].CopyFrom(node)  # the old list is cleared below
            continue
        data, indices, updates = node.input[:3]
        p = f"twin_skip_{n}_"  # unique names for what this rewrite adds
        out += [
            constant(p + "rest", [-1]), constant(p + "end", [2**63 - 1]), constant(p + "invalid", INVALID_INDEX),
            constant(p + "one", [1]), constant(p + "zero", 0.0, TensorProto.FLOAT),
            helper.make_node("Shape", [indices], [p + "index_shape"]),
            helper.make_node("Slice", [p + "index_shape", p + "rest", p + "end"], [p + "depth"]),  # [K]
            helper.make_node("Concat", [p + "rest", p + "depth"], [p + "rows_shape"], axis=0),
            helper.make_node("Reshape", [indices, p + "rows_shape"], [p + "rows"]),  # [N, K]
            helper.make_node("Shape", [data], [p + "data_shape"]),
            helper.make_node("Slice", [p + "data_shape", p + "depth", p + "end"], [p + "slice_dims"]),
            helper.make_node("Concat", [p + "rest", p + "slice_dims"], [p + "updates_shape"], axis=0),
            helper.make_node("Reshape", [updates, p + "updates_shape"], [p + "row_updates"]),  # [N, ...]
            helper.make_node("Equal", [p + "rows", p + "invalid"], [p + "is_invalid"]),
            helper.make_node("Cast", [p + "is_invalid"], [p + "invalid_coords"], to=TensorProto.FLOAT),
            helper.make_node("Concat", [p + "depth", p + "one"], [p + "column_shape"], axis=0),  # [K, 1]
            helper.make_node("ConstantOfShape", [p + "column_shape"], [p + "ones"],
                             value=helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])),
            helper.make_node("MatMul", [p + "invalid_coords", p + "ones"], [p + "invalid_count"]),  # [N, 1]
            helper.make_node("Equal", [p + "invalid_count", p + "zero"], [p + "keep_column"]),
            helper.make_node("Reshape", [p + "keep_column", p + "rest"], [p + "keep"]),  # [N]
            helper.make_node("Compress", [p + "rows", p + "keep"], [p + "kept_rows"], axis=0),
            helper.make_node("Compress", [p + "row_updates", p + "keep"], [p + "kept_updates"], axis=0),
            helper.make_node("ScatterND", [data, p + "kept_rows", p + "kept_updates"], list(node.output[:1]),
                             **{a.name: helper.get_attribute_value(a) for a in node.attribute}),
        ]
    graph.ClearField("node")
    graph.node.extend(out)
