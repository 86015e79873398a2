"""ONNX model → operator graph.

Shapes come from ONNX shape inference on a copy whose symbolic input dims are pinned by the
user (``dims``); weights are never loaded (``load_external_data=False``) since their dims are
all partitioning needs. Constant folding is symbolic: initializers, ``Constant`` nodes, nodes
whose every input is constant, and ``Shape``/``Size`` of statically shaped tensors produce
*constants*. A constant consumed by a real op is a weight of that op (stored in every stage
that uses it), never a tensor crossing a cut, and constant-only nodes cost nothing.
"""

from __future__ import annotations

import heapq
import logging
import math
from collections import Counter
from pathlib import Path

import onnx
from onnx import TensorProto, shape_inference

from .errors import ModelError
from .flops import NodeShapes, op_cost
from .graph import Op, OpClass, OpGraph, Tensor

log = logging.getLogger("partition")

_DTYPE = {TensorProto.FLOAT16: "fp16", TensorProto.BFLOAT16: "bf16"}
_SHAPE_ONLY = {"Shape", "Size"}
_NONDETERMINISTIC = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial"}
MIN_OPSET, MAX_OPSET = 7, onnx.defs.onnx_opset_version()


def _element_size(elem_type: int) -> int:
    try:
        return onnx.helper.tensor_dtype_to_np_dtype(elem_type).itemsize
    except (KeyError, TypeError, ValueError):
        return 4


def load_model(source: str | Path | onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    """Read a model without its weights' data; errors are one line naming the file."""
    if isinstance(source, onnx.ModelProto):
        return source, source.graph.name or "model"
    path = Path(source)
    if not path.is_file():
        raise ModelError(f"{path}: model file not found")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as error:  # protobuf raises several unrelated types for corrupt input
        raise ModelError(
            f"{path}: not a readable ONNX model (truncated or corrupt: {type(error).__name__})"
        ) from None
    if not model.graph.node:
        raise ModelError(f"{path}: the ONNX model has no nodes (truncated or not a model)")
    return model, path.stem


def _check_opset(model: onnx.ModelProto, where: str) -> None:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx") and not MIN_OPSET <= entry.version <= MAX_OPSET:
            raise ModelError(
                f"{where}: unsupported opset {entry.version} (supported: {MIN_OPSET}–{MAX_OPSET})"
            )


def _pin_dims(model: onnx.ModelProto, dims: dict[str, int], where: str) -> None:
    initializers = {i.name for i in model.graph.initializer}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            if dim.HasField("dim_value"):
                if dim.dim_value <= 0:
                    raise ModelError(
                        f"{where}: input {value.name!r} dim {axis} has size {dim.dim_value}:"
                        " an empty tensor cannot be partitioned"
                    )
                continue
            if dim.dim_param and dim.dim_param in dims:
                dim.dim_value = dims[dim.dim_param]
            elif f"{value.name}:{axis}" in dims:
                dim.dim_value = dims[f"{value.name}:{axis}"]
            else:
                label = f"'{dim.dim_param}'" if dim.dim_param else "unnamed"
                hint = dim.dim_param or f"{value.name}:{axis}"
                raise ModelError(
                    f"{where}: input {value.name!r} dim {axis} ({label}) has no value; pass --dim {hint}=N"
                )


def _shapes(model: onnx.ModelProto) -> dict[str, tuple[tuple[int | None, ...], int]]:
    """Name → (shape, elem_type) of every tensor shape inference resolved."""
    known: dict[str, tuple[tuple[int | None, ...], int]] = {}
    graph = model.graph
    for value in [*graph.input, *graph.value_info, *graph.output]:
        tensor_type = value.type.tensor_type
        if not tensor_type.HasField("shape"):
            continue
        shape = tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor_type.shape.dim)
        known[value.name] = (shape, tensor_type.elem_type)
    for init in graph.initializer:
        known[init.name] = (tuple(init.dims), init.data_type)
    return known


def _topological_nodes(graph: onnx.GraphProto, where: str) -> list[onnx.NodeProto]:
    producer = {out: i for i, node in enumerate(graph.node) for out in node.output if out}
    indegree = [0] * len(graph.node)
    users: list[list[int]] = [[] for _ in graph.node]
    for i, node in enumerate(graph.node):
        for name in {x for x in node.input if x in producer}:
            indegree[i] += 1
            users[producer[name]].append(i)
    ready = [i for i, d in enumerate(indegree) if d == 0]  # a heap: keeps the file's order if valid
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in users[i]:
            indegree[j] -= 1
            if indegree[j] == 0:
                heapq.heappush(ready, j)
    if len(order) != len(graph.node):
        stuck = next(graph.node[i] for i, d in enumerate(indegree) if d > 0)
        raise ModelError(f"{where}: the graph has a cycle (through node {stuck.name or stuck.op_type!r})")
    return [graph.node[i] for i in order]


def _is_constant(
    node: onnx.NodeProto,
    inputs: list[str],
    constants: set[str],
    known: dict[str, tuple[tuple[int | None, ...], int]],
) -> bool:
    """Whether a node's outputs are known before the model runs (so they fold away)."""
    if node.op_type in _NONDETERMINISTIC:
        return False
    if node.op_type == "Constant":
        return True
    if node.op_type in _SHAPE_ONLY and inputs:
        shape = known.get(inputs[0], ((None,), 0))[0]
        return inputs[0] in constants or all(d is not None for d in shape)
    return bool(inputs) and all(x in constants for x in inputs)


def import_onnx(source: str | Path | onnx.ModelProto, *, dims: dict[str, int] | None = None) -> OpGraph:
    """Build the op graph of an ONNX model; see the module docstring for what becomes what."""
    model, name = load_model(source)
    where = str(source) if not isinstance(source, onnx.ModelProto) else name
    _check_opset(model, where)
    model = onnx.ModelProto.FromString(model.SerializeToString())  # never mutate the caller's
    _pin_dims(model, dict(dims or {}), where)
    try:
        model = shape_inference.infer_shapes(model, data_prop=True)
    except Exception as error:
        raise ModelError(f"{where}: shape inference failed ({str(error).splitlines()[0]})") from None
    graph = model.graph
    known = _shapes(model)
    nodes = _topological_nodes(graph, where)

    constants: set[str] = {i.name for i in graph.initializer}
    needed = {x for node in nodes for x in node.input} | {v.name for v in graph.output}
    graph_inputs = [v.name for v in graph.input if v.name not in constants]

    def shape_of(tensor: str, node: onnx.NodeProto) -> tuple[int, ...]:
        if tensor not in known:
            raise ModelError(
                f"{where}: shape of tensor {tensor!r} (at node {node.name or node.op_type!r})"
                " is unknown; pin input dims with --dim"
            )
        shape, _ = known[tensor]
        for axis, dim in enumerate(shape):
            if dim is None:
                raise ModelError(
                    f"{where}: tensor {tensor!r} dim {axis} is unknown"
                    f" (at node {node.name or node.op_type!r}); pin input dims with --dim"
                )
        return tuple(int(d) for d in shape)

    def size_of(tensor: str, node: onnx.NodeProto) -> float:
        return float(math.prod(shape_of(tensor, node)) * _element_size(known[tensor][1]))

    ops: list[Op] = []
    weights: dict[str, float] = {}
    consumers: dict[str, list[str]] = {}
    activation_bytes: dict[str, float] = {}
    producers: dict[str, str] = {}
    used_ids: Counter[str] = Counter()
    unknown_types: Counter[str] = Counter()
    for position, node in enumerate(nodes):
        inputs = [x for x in node.input if x]
        if _is_constant(node, inputs, constants, known):
            constants.update(x for x in node.output if x)
            continue
        base = node.name or f"{node.op_type}_{position}"
        used_ids[base] += 1
        op_id = base if used_ids[base] == 1 else f"{base}#{used_ids[base]}"
        activations = [x for x in dict.fromkeys(inputs) if x not in constants]
        op_weights = [x for x in dict.fromkeys(inputs) if x in constants]
        for w in op_weights:
            weights[w] = size_of(w, node)
        # an optional output nobody reads (e.g. Dropout's mask) may have no inferred shape
        outputs = [x for x in node.output if x and (x in needed or x in known)]
        in_shapes = [shape_of(x, node) if x else None for x in node.input]
        out_shapes = [shape_of(x, node) for x in outputs]
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        counted = op_cost(node.op_type, NodeShapes(in_shapes, out_shapes, attributes))
        if counted is None:
            unknown_types[node.op_type] += 1
            counted = (OpClass.OTHER, 0.0)
        float_types = [known[x][1] for x in [*inputs, *outputs] if x in known]
        dtype = next((_DTYPE[t] for t in float_types if t in _DTYPE), "fp32")
        module = node.name.rsplit("/", 1)[0] if node.name.startswith("/") else ""
        ops.append(
            Op(
                id=op_id,
                op_type=node.op_type
                if not node.domain or node.domain == "ai.onnx"
                else f"{node.domain}.{node.op_type}",
                name=node.name,
                module=module,
                op_class=counted[0],
                flops=counted[1],
                bytes_read=sum(size_of(x, node) for x in dict.fromkeys(inputs)),
                bytes_written=sum(size_of(x, node) for x in outputs),
                dtype=dtype,
                inputs=tuple(activations),
                outputs=tuple(outputs),
                weights=tuple(op_weights),
            )
        )
        for x in activations:
            consumers.setdefault(x, []).append(op_id)
            activation_bytes[x] = size_of(x, node)
        for x in outputs:
            producers[x] = op_id
    if not ops:
        raise ModelError(f"{where}: every node is constant; there is nothing to partition")
    if unknown_types:
        listed = ", ".join(f"{t} ({n})" for t, n in sorted(unknown_types.items()))
        log.warning("%s: no FLOP count for op types %s; costed by bytes moved only", where, listed)

    tensors = []
    for x, users in consumers.items():
        producer = producers.get(x)
        if producer is None and x not in graph_inputs:
            raise ModelError(f"{where}: tensor {x!r} is used but never produced (missing input)")
        tensors.append(Tensor(x, activation_bytes[x], producer, tuple(dict.fromkeys(users))))
    return OpGraph(name=graph.name or name, ops=tuple(ops), tensors=tuple(tensors), weights=weights)
