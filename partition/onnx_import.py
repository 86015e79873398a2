"""ONNX model → operator graph.

Shapes come from ONNX shape inference (with data propagation) on a copy whose symbolic input
dims are pinned by the user (``dims``); where it leaves a dim unknown, onnxruntime's symbolic
shape inference is tried; a dim still unknown is an error naming the tensor and the axis.

Weights are never loaded (``load_external_data=False``): their dims are all partitioning
needs, so a graph whose external data file is absent imports all the same. Only small integer
tensors in a *present* external file are read, since they may hold shapes.

Constant folding is symbolic: initializers, ``Constant``/``ConstantOfShape`` nodes, nodes whose
every input is constant (``Identity``/``Transpose``/``Cast`` of a weight, shape arithmetic), and
``Shape``/``Size`` of statically shaped tensors produce *constants*, which cost nothing and
never cross a cut. Each constant remembers the stored tensors (*roots*: initializers,
``Constant`` and ``ConstantOfShape`` outputs) it derives from; a real op consuming a constant
holds those roots as weights. Shape-only subgraphs (Shape→Gather→Concat→Reshape) have no roots,
so they fold away entirely.

Tied weights (GPT-2's token embedding, read by the embedding ``Gather`` and the LM head): one
root used by ops in two stages is stored in both stages — the evaluator's rule for any weight
shared across stages — rather than forcing the two ops into one stage. Memory is then counted
conservatively, and the partitioner stays free to split the model.

Control-flow ops (``If``/``Loop``/``Scan``) are single ops: their FLOPs include their subgraphs
(the costlier ``If`` branch; a ``Loop`` body times its trip count when that is a constant) and
tensors their subgraphs read from the enclosing graph are inputs of the op.

Op ids are the node name, or ``OpType_i`` (topological position) when it is empty, with a
``#n`` suffix on repeats. The module path comes from a ``/``-separated node name (torch's
TorchScript exporter) or from the ``pkg.torch.onnx.name_scopes`` metadata of the dynamo exporter;
a node with neither (made by a graph optimizer) takes the module of its first consumer, or else of
its first input's producer.
"""

from __future__ import annotations

import ast
import heapq
import logging
import math
from collections import Counter
from collections.abc import Container, Iterable
from dataclasses import replace
from pathlib import Path

import onnx
from onnx import TensorProto, numpy_helper, shape_inference

from .errors import ModelError
from .flops import NodeShapes, op_cost
from .graph import Op, OpClass, OpGraph, Tensor
from .jsonio import require_file

log = logging.getLogger("partition")

Known = dict[str, tuple[tuple[int | None, ...], int]]

_DTYPE = {TensorProto.FLOAT16: "fp16", TensorProto.BFLOAT16: "bf16"}
_SHAPE_ONLY = {"Shape", "Size"}
_ROOTS = {"Constant", "ConstantOfShape"}  # constant nodes whose output is stored, like an initializer
_NONDETERMINISTIC = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial"}
_INTEGER = {TensorProto.INT64, TensorProto.INT32, TensorProto.INT16, TensorProto.INT8, TensorProto.UINT8}
_READ_EXTERNAL_INTEGERS = 1 << 16  # bytes: larger integer tensors are not shapes
MIN_OPSET, MAX_OPSET = 7, onnx.defs.onnx_opset_version()
NAME_SCOPES = "pkg.torch.onnx.name_scopes"
# The graph names torch.onnx's exporters give every model (dynamo, TorchScript): where one of
# these names the graph, the model's file name says more (instance names, tables, messages).
_EXPORTER_GRAPH_NAMES = frozenset({"main_graph", "torch_jit", "torch-jit-export"})


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
    require_file(path, "model", ModelError)
    try:
        model = onnx.load(str(path), load_external_data=False)
    except OSError as error:
        raise ModelError(f"{path}: cannot read the model file ({error.strerror or error})") from None
    except Exception as error:  # protobuf raises several unrelated types for corrupt input
        raise ModelError(
            f"{path}: not a readable ONNX model (truncated or corrupt: {type(error).__name__})"
        ) from None
    if not model.graph.node:
        raise ModelError(f"{path}: the ONNX model has no nodes (truncated or not a model)")
    _read_external_integers(model, path.parent)
    return model, path.stem


def _external_location(tensor: TensorProto) -> str | None:
    if tensor.data_location != TensorProto.EXTERNAL:
        return None
    return next((e.value for e in tensor.external_data if e.key == "location"), "")


def _read_external_integers(model: onnx.ModelProto, base: Path) -> None:
    """Load small integer initializers from external files that exist: they may hold shapes."""
    absent: set[str] = set()
    for tensor in model.graph.initializer:
        location = _external_location(tensor)
        if location is None:
            continue
        if not (base / location).is_file():
            absent.add(location)
            continue
        size = math.prod(tensor.dims) * _element_size(tensor.data_type)
        if tensor.data_type in _INTEGER and size <= _READ_EXTERNAL_INTEGERS:
            try:
                onnx.external_data_helper.load_external_data_for_tensor(tensor, str(base))
                tensor.data_location = TensorProto.DEFAULT
                del tensor.external_data[:]
            except (OSError, ValueError):
                absent.add(location)
    if absent:
        log.info("external data %s absent: weights are measured from their dims", ", ".join(sorted(absent)))


def _check_opset(model: onnx.ModelProto, where: str) -> None:
    default = [e for e in model.opset_import if e.domain in ("", "ai.onnx")]
    if not default:
        raise ModelError(f"{where}: the model imports no default-domain opset")
    for entry in default:
        if not MIN_OPSET <= entry.version <= MAX_OPSET:
            raise ModelError(
                f"{where}: unsupported opset {entry.version} (supported: {MIN_OPSET}–{MAX_OPSET})"
            )


def _pin_dims(model: onnx.ModelProto, dims: dict[str, int], where: str) -> None:
    """Give every symbolic input dim its value from ``dims`` (by name, or ``input:axis``)."""
    initializers = {i.name for i in model.graph.initializer}
    used: set[str] = set()
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor_type = value.type.tensor_type
        if value.type.HasField("tensor_type") and not tensor_type.HasField("shape"):
            raise ModelError(f"{where}: input {value.name!r} declares no shape (not even its rank)")
        for axis, dim in enumerate(tensor_type.shape.dim):
            if dim.HasField("dim_value"):
                if dim.dim_value <= 0:
                    raise ModelError(
                        f"{where}: input {value.name!r} dim {axis} has size {dim.dim_value}:"
                        " an empty tensor cannot be partitioned"
                    )
                continue
            key = dim.dim_param if dim.dim_param in dims else f"{value.name}:{axis}"
            if key in dims:
                dim.dim_value = dims[key]
                used.add(key)
            else:
                label = f"'{dim.dim_param}'" if dim.dim_param else "unnamed"
                hint = dim.dim_param or f"{value.name}:{axis}"
                raise ModelError(
                    f"{where}: input {value.name!r} dim {axis} ({label}) has no value; pass --dim {hint}=N"
                )
    if set(dims) - used:
        log.warning("%s: --dim %s matches no symbolic input dim", where, ", ".join(sorted(set(dims) - used)))


def _value_shapes(values: Iterable[onnx.ValueInfoProto], known: Known) -> None:
    for value in values:
        tensor_type = value.type.tensor_type
        if not value.type.HasField("tensor_type") or not tensor_type.HasField("shape"):
            continue
        shape = tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor_type.shape.dim)
        known[value.name] = (shape, tensor_type.elem_type)


def _shapes(graph: onnx.GraphProto) -> Known:
    """Name → (shape, elem_type) of every tensor of a graph whose shape is known."""
    known: Known = {}
    _value_shapes([*graph.input, *graph.value_info, *graph.output], known)
    for init in graph.initializer:
        known[init.name] = (tuple(init.dims), init.data_type)
    return known


def _unresolved(graph: onnx.GraphProto, known: Known) -> int:
    """How many used tensors have no shape or an unknown dim (0: inference is complete)."""
    used = {x for node in graph.node for x in _node_inputs(node)} | {v.name for v in graph.output}
    return sum(
        1
        for node in graph.node
        for x in node.output
        if x in used and (x not in known or any(d is None for d in known[x][0]))
    )


def _infer(model: onnx.ModelProto, where: str) -> onnx.ModelProto:
    """ONNX shape inference; onnxruntime's symbolic inference when dims stay unknown or it fails.

    onnx refuses some models outright (e.g. contrib ops whose domain has no opset import, as
    onnxruntime's own transformer optimizer writes them); its error is reported only when the
    symbolic inference cannot help either.
    """
    failure = ""
    try:
        inferred = shape_inference.infer_shapes(model, data_prop=True)
    except Exception as error:
        failure = str(error).splitlines()[0]
        inferred = onnx.ModelProto.FromString(model.SerializeToString())
    missing = _unresolved(inferred.graph, _shapes(inferred.graph))
    if not missing:
        return inferred
    stripped, weights = _weights_as_inputs(model)
    try:
        symbolic = _symbolic_shapes(stripped)
    except Exception as error:  # it raises bare Exceptions and asserts on models it cannot handle
        if failure:
            raise ModelError(f"{where}: shape inference failed ({failure})") from None
        log.info("%s: onnxruntime symbolic shape inference failed (%s)", where, type(error).__name__)
        return inferred
    if _unresolved(symbolic.graph, _shapes(symbolic.graph)) >= missing:
        if failure:
            raise ModelError(f"{where}: shape inference failed ({failure})")
        return inferred
    log.info("%s: shapes completed by onnxruntime's symbolic shape inference", where)
    inferred.graph.ClearField("value_info")  # keep the initializers; take the shapes
    inferred.graph.value_info.extend(v for v in symbolic.graph.value_info if v.name not in weights)
    del inferred.graph.output[:]
    inferred.graph.output.extend(symbolic.graph.output)
    return inferred


def _weights_as_inputs(model: onnx.ModelProto) -> tuple[onnx.ModelProto, set[str]]:
    """A copy whose externally stored initializers are typed graph inputs instead.

    onnxruntime's inference reads the value of any initializer an element-wise op touches; the
    data of external weights may be absent, and only their dims matter for shapes.
    """
    copy = onnx.ModelProto.FromString(model.SerializeToString())
    external = [t for t in copy.graph.initializer if t.data_location == TensorProto.EXTERNAL]
    inline = [t for t in copy.graph.initializer if t.data_location != TensorProto.EXTERNAL]
    del copy.graph.initializer[:]
    copy.graph.initializer.extend(inline)
    declared = {v.name for v in copy.graph.input}
    for tensor in external:
        if tensor.name not in declared:
            copy.graph.input.append(
                onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, tensor.dims)
            )
    return copy, {t.name for t in external}


def _symbolic_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnxruntime's symbolic shape inference, keeping what it resolved when it cannot finish.

    Its ``infer_shapes`` entry point discards partial results and writes a debug file into the
    working directory when some shape stays unknown; its own steps, run here, do neither.
    """
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    inference = SymbolicShapeInference(2**31 - 1, auto_merge=True, guess_output_rank=False, verbose=0)
    inference._preprocess(model)
    while inference.run_:
        inference._infer_impl()
    inference._update_output_from_vi()
    return inference.out_mp_


def _topological_nodes(graph: onnx.GraphProto, where: str) -> list[onnx.NodeProto]:
    producer = {out: i for i, node in enumerate(graph.node) for out in node.output if out}
    indegree = [0] * len(graph.node)
    users: list[list[int]] = [[] for _ in graph.node]
    for i, node in enumerate(graph.node):
        for name in {x for x in _node_inputs(node) if x in producer}:
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


def _subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    graphs = []
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            graphs.append(attribute.g)
        elif attribute.type == onnx.AttributeProto.GRAPHS:
            graphs.extend(attribute.graphs)
    return graphs


def _free_names(graph: onnx.GraphProto) -> set[str]:
    """Tensors a subgraph reads from enclosing scopes (not produced or declared inside it)."""
    local = {v.name for v in graph.input} | {i.name for i in graph.initializer}
    local |= {x for node in graph.node for x in node.output}
    free: set[str] = set()
    for node in graph.node:
        free |= {x for x in node.input if x and x not in local}
        for sub in _subgraphs(node):
            free |= _free_names(sub) - local
    return free


def _node_inputs(node: onnx.NodeProto) -> list[str]:
    """Explicit inputs, then the enclosing-scope tensors its subgraphs read (control flow)."""
    inputs = [x for x in node.input if x]
    for sub in _subgraphs(node):
        inputs.extend(sorted(_free_names(sub)))
    return list(dict.fromkeys(inputs))


def _is_constant(node: onnx.NodeProto, inputs: list[str], constants: Container[str], known: Known) -> bool:
    """Whether a node's outputs are known before the model runs (so they fold away)."""
    if node.op_type in _NONDETERMINISTIC:
        return False
    if node.op_type == "Constant":
        return True
    if node.op_type in _SHAPE_ONLY and inputs:
        shape = known.get(inputs[0], ((None,), 0))[0]
        return inputs[0] in constants or all(d is not None for d in shape)
    return bool(inputs) and all(x in constants for x in inputs)


def _op_type(node: onnx.NodeProto) -> str:
    """The op type, prefixed by its domain unless that is the default one."""
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"


def _module_path(node: onnx.NodeProto) -> str:
    """``/a/b.3/c`` from a TorchScript-style node name or the dynamo exporter's name scopes."""
    if node.name.startswith("/"):
        return node.name.rsplit("/", 1)[0]
    scopes = next((p.value for p in node.metadata_props if p.key == NAME_SCOPES), None)
    try:
        names = ast.literal_eval(scopes) if scopes else []
    except (ValueError, SyntaxError):
        return ""
    # qualified module names from the root (``''``) down; the last entry names the op itself
    if not isinstance(names, list) or len(names) < 2 or not names[-2]:
        return ""
    path = ""
    for part in str(names[-2]).split("."):
        path += f".{part}" if part.isdigit() and path else f"/{part}"
    return path


def _fill_modules(ops: list[Op], consumers: dict[str, list[str]], producers: dict[str, str]) -> list[Op]:
    """Give ops without a module path (made by a graph optimizer) the module of their neighbours.

    The first consumer's module is preferred (a fused attention node belongs to the layer that
    reads its output, not to the layer norm feeding it), else the first input's producer's.
    """
    module = {op.id: op.module for op in ops}
    missing = [op for op in ops if not op.module]
    for op in reversed(missing):
        users = (c for x in op.outputs for c in consumers.get(x, ()))
        module[op.id] = next((module[c] for c in users if module[c]), "")
    for op in missing:
        if not module[op.id]:
            sources = (producers[x] for x in op.inputs if x in producers)
            module[op.id] = next((module[p] for p in sources if module[p]), "")
    return [op if op.module == module[op.id] else replace(op, module=module[op.id]) for op in ops]


class _Shapes:
    """Shape look-ups that fail with one line naming the tensor, the axis and the node."""

    def __init__(self, known: Known, where: str, unreadable: list[str]) -> None:
        self.known = known
        self.where = where
        self.fix = "pin input dims with --dim"
        if unreadable:  # integer tensors (shape values) whose external data file is absent
            self.fix = f"integer tensors in absent external data ({', '.join(unreadable)}) may hold shapes"

    def shape(self, tensor: str, node: onnx.NodeProto) -> tuple[int, ...]:
        at = f"(at node {node.name or node.op_type!r})"
        if tensor not in self.known:
            raise ModelError(f"{self.where}: shape of tensor {tensor!r} {at} is unknown; {self.fix}")
        shape, _ = self.known[tensor]
        for axis, dim in enumerate(shape):
            if dim is None:
                raise ModelError(f"{self.where}: tensor {tensor!r} dim {axis} is unknown {at}; {self.fix}")
        return tuple(int(d) for d in shape)

    def bytes(self, tensor: str, node: onnx.NodeProto) -> float:
        return float(math.prod(self.shape(tensor, node)) * _element_size(self.known[tensor][1]))


def _inline_int(graph: onnx.GraphProto, name: str) -> int | None:
    for tensor in graph.initializer:
        if tensor.name == name and tensor.data_location != TensorProto.EXTERNAL:
            return int(numpy_helper.to_array(tensor).reshape(-1)[0])
    for node in graph.node:
        if node.op_type == "Constant" and node.output[0] == name:
            value = next((a for a in node.attribute if a.name == "value"), None)
            if value is not None:
                return int(numpy_helper.to_array(value.t).reshape(-1)[0])
    return None


def _control_flow_flops(
    node: onnx.NodeProto, shapes: Known, root: onnx.GraphProto, unknown: Counter[str]
) -> float:
    """FLOPs of a control-flow op's subgraphs: max over If branches, × iterations for Loop/Scan."""
    costs = [_graph_flops(sub, shapes, unknown) for sub in _subgraphs(node)]
    if not costs:
        return 0.0
    if node.op_type == "If":
        return max(costs)
    iterations = 1
    if node.op_type == "Loop" and node.input and node.input[0]:
        trips = _inline_int(root, node.input[0])
        if trips is None:
            log.warning("Loop %r: trip count is not a constant; its body is counted once", node.name)
        iterations = max(trips or 1, 1)
    elif node.op_type == "Scan":
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        scan_inputs = int(attributes.get("num_scan_inputs", 1))
        first = node.input[len(node.input) - scan_inputs]
        axis = (attributes.get("scan_input_axes") or [0])[0]
        shape = shapes.get(first, ((None,), 0))[0]
        iterations = shape[axis] if len(shape) > axis and shape[axis] else 1
    return iterations * sum(costs)


def _graph_flops(graph: onnx.GraphProto, outer: Known, unknown: Counter[str]) -> float:
    """FLOPs of every node of a subgraph whose shapes inference resolved."""
    known = {**outer, **_shapes(graph)}
    total = 0.0
    for node in graph.node:
        in_shapes = [known.get(x, (None, 0))[0] if x else None for x in node.input]
        out_shapes = [known.get(x, (None, 0))[0] for x in node.output if x]
        if any(s is None or None in s for s in [*out_shapes, *(s for s in in_shapes if s is not None)]):
            unknown[f"{node.op_type} (in a subgraph, shape unknown)"] += 1
            continue
        if _subgraphs(node):
            total += _control_flow_flops(node, known, graph, unknown)
            continue
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        counted = op_cost(_op_type(node), NodeShapes(in_shapes, out_shapes, attributes))
        if counted is None:
            unknown[_op_type(node)] += 1
        else:
            total += counted[1]
    return total


def import_onnx(source: str | Path | onnx.ModelProto, *, dims: dict[str, int] | None = None) -> OpGraph:
    """Build the op graph of an ONNX model; see the module docstring for what becomes what."""
    model, name = load_model(source)
    where = str(source) if not isinstance(source, onnx.ModelProto) else name
    _check_opset(model, where)
    model = onnx.ModelProto.FromString(model.SerializeToString())  # never mutate the caller's
    _pin_dims(model, dict(dims or {}), where)
    model = _infer(model, where)
    graph = model.graph
    known = _shapes(graph)
    unreadable = sorted(
        {x for t in graph.initializer if t.data_type in _INTEGER and (x := _external_location(t)) is not None}
    )
    shapes = _Shapes(known, where, unreadable)
    nodes = _topological_nodes(graph, where)

    roots: dict[str, frozenset[str]] = {i.name: frozenset([i.name]) for i in graph.initializer}
    needed = {x for node in nodes for x in _node_inputs(node)} | {v.name for v in graph.output}
    graph_inputs = [v.name for v in graph.input if v.name not in roots]

    ops: list[Op] = []
    weights: dict[str, float] = {}
    consumers: dict[str, list[str]] = {}
    activation_bytes: dict[str, float] = {}
    producers: dict[str, str] = {}
    used_ids: Counter[str] = Counter()
    unknown_types: Counter[str] = Counter()
    for position, node in enumerate(nodes):
        inputs = _node_inputs(node)
        if _is_constant(node, inputs, roots, known):
            derived = (
                frozenset(x for x in node.output if x)
                if node.op_type in _ROOTS
                else frozenset()
                if node.op_type in _SHAPE_ONLY
                else frozenset().union(*(roots[x] for x in inputs))
            )
            roots.update((x, derived) for x in node.output if x)
            continue
        base = node.name or f"{node.op_type}_{position}"
        used_ids[base] += 1
        op_id = base if used_ids[base] == 1 else f"{base}#{used_ids[base]}"
        activations = [x for x in inputs if x not in roots]
        op_weights = sorted(frozenset().union(*(roots[x] for x in inputs if x in roots)))
        for w in op_weights:
            weights[w] = shapes.bytes(w, node)
        # an optional output nobody reads (e.g. Dropout's mask) may have no inferred shape
        outputs = [x for x in node.output if x and (x in needed or x in known)]
        in_shapes = [shapes.shape(x, node) if x else None for x in node.input]
        out_shapes = [shapes.shape(x, node) for x in outputs]
        if _subgraphs(node):
            counted = (OpClass.OTHER, _control_flow_flops(node, known, graph, unknown_types))
        else:
            attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            counted = op_cost(_op_type(node), NodeShapes(in_shapes, out_shapes, attributes))
        if counted is None:
            unknown_types[_op_type(node)] += 1
            counted = (OpClass.OTHER, 0.0)
        float_types = [known[x][1] for x in [*inputs, *outputs] if x in known]
        dtype = next((_DTYPE[t] for t in float_types if t in _DTYPE), "fp32")
        ops.append(
            Op(
                id=op_id,
                op_type=_op_type(node),
                name=node.name,
                module=_module_path(node),
                op_class=counted[0],
                flops=counted[1],
                bytes_read=sum(shapes.bytes(x, node) for x in activations)
                + sum(weights[w] for w in op_weights),
                bytes_written=sum(shapes.bytes(x, node) for x in outputs),
                dtype=dtype,
                inputs=tuple(activations),
                outputs=tuple(outputs),
                weights=tuple(op_weights),
            )
        )
        for x in activations:
            consumers.setdefault(x, []).append(op_id)
            activation_bytes[x] = shapes.bytes(x, node)
        for x in outputs:
            producers[x] = op_id
    if not ops:
        raise ModelError(f"{where}: every node is constant; there is nothing to partition")
    ops = _fill_modules(ops, consumers, producers)
    if unknown_types:
        listed = ", ".join(f"{t} ({n})" for t, n in sorted(unknown_types.items()))
        log.warning("%s: no FLOP count for op types %s; costed by bytes moved only", where, listed)

    tensors = []
    for x, users in consumers.items():
        producer = producers.get(x)
        if producer is None and x not in graph_inputs:
            raise ModelError(f"{where}: tensor {x!r} is used but never produced (missing input)")
        tensors.append(Tensor(x, activation_bytes[x], producer, tuple(dict.fromkeys(users))))
    if graph.name and graph.name not in _EXPORTER_GRAPH_NAMES:
        name = graph.name
    return OpGraph(name=name, ops=tuple(ops), tensors=tuple(tensors), weights=weights)
