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
  and its sampler and MoE packing rely on it. The twin gives each such ScatterND a scratch
  position past every indexed axis, points the constant at it (-1) and cuts it off afterwards:
  the cache is left exactly as it was.

Position -1 in a regular graph reaches its ScatterND as -1 itself (no constant): the last cache
position, as ONNX and PyTorch define a negative index. No valid read reaches it before a real
token overwrites it, so it stays as it is. The weights are never loaded here: ONNX Runtime reads
them from the file (:mod:`.onnx_weights`). ``onnx`` is imported lazily: only the twin needs it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import onnx_weights

INVALID_INDEX = 2**31 - 1  # torch.iinfo(torch.int32).max: QEfficient's invalid cache index
READS = {"GatherND": "gather", "ScatterND": "scatter"}  # ops whose input 1 is an index
OPAQUE = {"Shape", "Size"}  # what flows on from these is a shape, not the constant's value


@dataclass(frozen=True)
class Prepared:
    """What was done to a graph to make it ready for ONNX Runtime."""

    gathers: int  # INT32_MAX constants feeding a gather index: read position 0
    scatters: int  # INT32_MAX constants feeding a scatter index: write nothing
    inlined: int  # local functions (custom ops) inlined


def prepare(path: str | Path) -> tuple[bytes, Prepared]:
    """The graph at ``path`` with its custom ops inlined and the invalid-index rules applied, serialized
    without its weights: ONNX Runtime reads them from the files in the graph's folder.

    Raises ValueError for a constant the rules cannot place (it reaches both kinds of index).
    """
    import onnx
    import onnx.inliner

    weightless, ranges = onnx_weights.without_weights(path)
    model = onnx.load_from_string(weightless)
    onnx_weights.refer(model, Path(path).name, ranges)
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
            value.CopyFrom(_scalar(value, 0 if kind == "gather" else -1))
            counts[kind] += 1
            scatters |= reached if kind == "scatter" else set()
    if scatters:
        _with_scratch(graph, nodes, scatters)
    return model.SerializeToString(), Prepared(counts["gather"], counts["scatter"], inlined)


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


def _with_scratch(graph: Any, nodes: list[Any], targets: set[int]) -> None:
    """Give each target ScatterND one scratch position past every indexed axis (where index -1 now
    points) and cut it off after the write, so an invalid write changes nothing."""
    from onnx import NodeProto, helper

    out = []
    for n, node in enumerate(nodes):
        if n not in targets:
            out.append(NodeProto())
            out[-1].CopyFrom(node)  # the old list is cleared below
            continue
        data, indices, updates = node.input[:3]
        p = f"twin_scratch_{n}_"  # unique names for what this rewrite adds
        out += [
            helper.make_node("Constant", [], [p + "zero"], value_int=0),
            helper.make_node("Constant", [], [p + "one"], value_int=1),
            helper.make_node("Constant", [], [p + "last"], value_int=-1),
            helper.make_node("Shape", [data], [p + "shape"]),
            helper.make_node("Size", [p + "shape"], [p + "rank"]),
            helper.make_node("Range", [p + "zero", p + "rank", p + "one"], [p + "axes"]),
            helper.make_node("Shape", [indices], [p + "index_shape"]),
            helper.make_node("Gather", [p + "index_shape", p + "last"], [p + "indexed"]),  # axes an index names
            helper.make_node("Less", [p + "axes", p + "indexed"], [p + "is_indexed"]),
            helper.make_node("Cast", [p + "is_indexed"], [p + "after"], to=7),  # int64: one more at the end
            helper.make_node("Mul", [p + "after", p + "zero"], [p + "before"]),
            helper.make_node("Concat", [p + "before", p + "after"], [p + "pads"], axis=0),
            helper.make_node("Pad", [data, p + "pads"], [p + "padded"]),
            helper.make_node("ScatterND", [p + "padded", indices, updates], [p + "written"],
                             **{a.name: helper.get_attribute_value(a) for a in node.attribute}),
            helper.make_node("Slice", [p + "written", p + "before", p + "shape"], list(node.output[:1])),
        ]
    graph.ClearField("node")
    graph.node.extend(out)
