"""Export a placement as runnable stages: one ONNX model per pipeline stage and a ``pipeline.json``.

A stage model holds the original nodes of the ops placed on it, in the original order, under
their original tensor names. Only activations cross stages: every constant a stage reads —
initializers and the constant subgraphs the importer folds (``Constant``, ``ConstantOfShape``,
nodes whose inputs are all constant, see :mod:`partition.onnx_import`) — is duplicated into
every stage that reads it, as the formulation stores a shared weight in each stage that uses
it. A ``Shape``/``Size`` of a statically shaped *activation* is folded to a ``Constant`` with
the inferred value, since its input may live in another stage.

Weights kept in external data files are carried into the stages that use them; when such a
file is missing (a model shipped with shapes only), the weights are materialised by
:mod:`partition.fill`, the same values on every load, so that the whole model and its stages
still compute the same function.

``pipeline.json`` (schema ``partition.pipeline``, version 1) lists, per stage, its device, its
model file, its op ids, the tensors it receives and from where (a stage or the graph input),
the tensors it sends and to which stages, and the graph outputs it produces.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .errors import InputError, ModelError
from .evaluator import evaluate
from .fill import inferred_types, load_runnable_model
from .graph import OpGraph
from .instance import Instance
from .jsonio import dumps, read_json, write_atomic
from .onnx_import import _topological_nodes, load_model
from .placement import Placement

log = logging.getLogger("partition")

PIPELINE_SCHEMA = "partition.pipeline"
PIPELINE_VERSION = 1
PIPELINE_FILE = "pipeline.json"
GRAPH_INPUT = -1  # the "stage" that sends graph inputs: the driver of a run
_INLINE_LIMIT = 1_500_000_000  # protobuf cannot serialise 2 GB; larger stages use external data
_SHAPE_OPS = {"Shape", "Size"}


@dataclass(frozen=True)
class TensorSpec:
    """A tensor crossing a stage boundary: its name, numpy dtype and static shape."""

    name: str
    dtype: str
    shape: tuple[int | None, ...]


@dataclass(frozen=True)
class StageSpec:
    """One exported stage; ``receives`` maps each input to its source stage (``GRAPH_INPUT``)."""

    index: int
    device: str
    model_file: str
    ops: tuple[str, ...]
    receives: Mapping[str, int]
    sends: Mapping[str, tuple[int, ...]]
    final_outputs: tuple[str, ...]

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(self.receives)

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([*self.sends, *self.final_outputs]))


@dataclass(frozen=True)
class Pipeline:
    """What ``partition run`` needs: the stages, the graph's inputs and outputs, the source."""

    model: str
    dims: Mapping[str, int]
    graph_inputs: tuple[TensorSpec, ...]
    graph_outputs: tuple[str, ...]
    stages: tuple[StageSpec, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": PIPELINE_SCHEMA,
            "version": PIPELINE_VERSION,
            "model": self.model,
            "dims": dict(self.dims),
            "graph_inputs": [
                {"name": t.name, "dtype": t.dtype, "shape": list(t.shape)} for t in self.graph_inputs
            ],
            "graph_outputs": list(self.graph_outputs),
            "stages": [
                {
                    "stage": s.index,
                    "device": s.device,
                    "model_file": s.model_file,
                    "ops": list(s.ops),
                    "inputs": [{"name": x, "from": source} for x, source in s.receives.items()],
                    "outputs": list(s.outputs),
                    "sends": {x: list(targets) for x, targets in s.sends.items()},
                    "final_outputs": list(s.final_outputs),
                }
                for s in self.stages
            ],
        }


def load_pipeline(directory: str | Path) -> Pipeline:
    """Read ``directory/pipeline.json``; every problem is one :class:`InputError`."""
    path = Path(directory) / PIPELINE_FILE
    document = read_json(path, "pipeline")
    if not isinstance(document, Mapping) or document.get("schema") != PIPELINE_SCHEMA:
        raise InputError(f"{path}: not a partition pipeline file")
    if document.get("version") != PIPELINE_VERSION:
        raise InputError(f"{path}: unsupported pipeline version {document.get('version')!r}")
    try:
        stages = tuple(
            StageSpec(
                index=int(row["stage"]),
                device=str(row["device"]),
                model_file=str(row["model_file"]),
                ops=tuple(row["ops"]),
                receives={str(x["name"]): int(x["from"]) for x in row["inputs"]},
                sends={str(x): tuple(int(t) for t in targets) for x, targets in row["sends"].items()},
                final_outputs=tuple(row["final_outputs"]),
            )
            for row in document["stages"]
        )
        pipeline = Pipeline(
            model=str(document["model"]),
            dims={str(k): int(v) for k, v in document.get("dims", {}).items()},
            graph_inputs=tuple(
                TensorSpec(str(t["name"]), str(t["dtype"]), tuple(t["shape"]))
                for t in document["graph_inputs"]
            ),
            graph_outputs=tuple(document["graph_outputs"]),
            stages=stages,
        )
    except (KeyError, TypeError, ValueError) as error:
        raise InputError(f"{path}: malformed pipeline file ({error!r})") from None
    for s, stage in enumerate(pipeline.stages):
        if stage.index != s or not (Path(directory) / stage.model_file).is_file():
            raise InputError(f"{path}: stage {s} is misnumbered or its model file is missing")
    return pipeline


def _subgraph_references(node: onnx.NodeProto) -> set[str]:
    """Outer-scope tensors read inside a node's subgraphs (``If``/``Loop`` bodies)."""
    names: set[str] = set()
    for attribute in node.attribute:
        graphs = list(attribute.graphs) + ([attribute.g] if attribute.HasField("g") else [])
        for graph in graphs:
            defined = {x.name for x in graph.input} | {x.name for x in graph.initializer}
            for inner in graph.node:
                names |= {x for x in [*inner.input, *_subgraph_references(inner)] if x and x not in defined}
                defined |= set(inner.output)
    return names


def _reads(node: onnx.NodeProto) -> list[str]:
    return list(dict.fromkeys([x for x in node.input if x] + sorted(_subgraph_references(node))))


def _shape_constant(node: onnx.NodeProto, shape: tuple[int | None, ...]) -> onnx.NodeProto:
    """A ``Constant`` with the value ``Shape``/``Size`` would compute from a static shape."""
    if any(d is None for d in shape):
        raise ModelError(f"node {node.name or node.op_type!r}: input shape is not static")
    if node.op_type == "Size":
        value = np.array(int(np.prod(shape)), dtype=np.int64)
    else:
        attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        start, end = attributes.get("start", 0), attributes.get("end", len(shape))
        value = np.array(shape[start:end], dtype=np.int64)
    return helper.make_node(
        "Constant",
        [],
        [node.output[0]],
        name=f"{node.name or node.output[0]}_folded",
        value=numpy_helper.from_array(value),
    )


def _spec(value: onnx.ValueInfoProto) -> TensorSpec:
    tensor_type = value.type.tensor_type
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)).str
    shape = tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor_type.shape.dim)
    return TensorSpec(value.name, dtype, shape)


def input_specs(path: str | Path, dims: Mapping[str, int] | None = None) -> tuple[TensorSpec, ...]:
    """Name, dtype and pinned shape of each graph input that is not a weight."""
    model, _ = load_model(path)
    initializers = {t.name for t in model.graph.initializer}
    types = inferred_types(path, dims or {})
    return tuple(_spec(types[v.name]) for v in model.graph.input if v.name not in initializers)


def op_nodes(nodes: list[onnx.NodeProto], graph: OpGraph, where: str) -> list[onnx.NodeProto]:
    """The ONNX node of every op of ``graph`` (found by its first output, else by its name)."""
    producer = {x: node for node in nodes for x in node.output if x}
    by_name = {node.name: node for node in nodes if node.name}
    found = []
    for op in graph.ops:
        node = producer.get(op.outputs[0]) if op.outputs else by_name.get(op.name)
        if node is None or not op.op_type.endswith(node.op_type):
            raise InputError(f"{where}: op {op.id!r} of the placement is not a node of this model")
        found.append(node)
    return found


class _Model:
    """The original model, its inferred tensor types and which nodes are ops or constants."""

    def __init__(self, path: str | Path, graph: OpGraph, dims: Mapping[str, int]) -> None:
        where = str(path)
        self.model = load_runnable_model(path, dims)
        self.types = inferred_types(path, dims)
        self.nodes = _topological_nodes(self.model.graph, where)
        self.position = {id(node): i for i, node in enumerate(self.nodes)}
        self.op_node = op_nodes(self.nodes, graph, where)
        op_ids = {id(node) for node in self.op_node}
        self.initializers = {t.name: t for t in self.model.graph.initializer}
        self.constant_producer = {
            x: node for node in self.nodes if id(node) not in op_ids for x in node.output if x
        }
        self.graph_inputs = [v.name for v in self.model.graph.input if v.name not in self.initializers]

    def is_constant(self, name: str) -> bool:
        return name in self.initializers or name in self.constant_producer

    def value_info(self, name: str) -> onnx.ValueInfoProto:
        if name not in self.types:
            raise ModelError(f"type of tensor {name!r} is unknown; cannot declare it as a stage input/output")
        return self.types[name]

    def static_shape(self, name: str) -> tuple[int | None, ...]:
        return _spec(self.value_info(name)).shape


def _constant_closure(
    source: _Model, names: list[str]
) -> tuple[list[tuple[int, onnx.NodeProto]], list[onnx.TensorProto]]:
    """The constant nodes and initializers that compute ``names``, with their positions."""
    nodes: dict[int, tuple[int, onnx.NodeProto]] = {}
    initializers: dict[str, onnx.TensorProto] = {}
    stack = list(names)
    while stack:
        name = stack.pop()
        if name in source.initializers:
            initializers[name] = source.initializers[name]
            continue
        node = source.constant_producer[name]
        if id(node) in nodes:
            continue
        reads = _reads(node)
        position = source.position[id(node)]
        if node.op_type in _SHAPE_OPS and reads and not source.is_constant(reads[0]):
            nodes[id(node)] = (position, _shape_constant(node, source.static_shape(reads[0])))
            continue
        nodes[id(node)] = (position, node)
        stack.extend(reads)
    return list(nodes.values()), list(initializers.values())


def _stage_model(
    source: _Model, s: int, nodes: list[onnx.NodeProto], receives: list[str], outputs: list[str]
) -> onnx.ModelProto:
    produced = {x for node in nodes for x in node.output if x}
    constant_reads = [
        x for node in nodes for x in _reads(node) if x not in produced and source.is_constant(x)
    ]
    constant_nodes, initializers = _constant_closure(source, list(dict.fromkeys(constant_reads)))
    positioned = [*constant_nodes, *((source.position[id(n)], n) for n in nodes)]
    all_nodes = [node for _, node in sorted(positioned, key=lambda pair: pair[0])]
    inside = {x for node in nodes for x in node.output if x} - set(outputs)
    original = source.model
    graph = helper.make_graph(
        all_nodes,
        f"{original.graph.name or 'model'}_stage{s}",
        [source.value_info(x) for x in receives],
        [source.value_info(x) for x in outputs],
        initializer=initializers,
        value_info=[source.types[x] for x in sorted(inside) if x in source.types],
    )
    model = helper.make_model(
        graph,
        opset_imports=list(original.opset_import),
        producer_name="partition",
        ir_version=max(original.ir_version, 4),  # IR ≥ 4: initializers need not be graph inputs
        functions=list(original.functions),
    )
    return model


def _check(model: onnx.ModelProto | Path, s: int) -> None:
    """``onnx.checker`` on the proto, or on the saved file for a stage too large to serialise."""
    try:
        onnx.checker.check_model(model if isinstance(model, onnx.ModelProto) else str(model))
    except onnx.checker.ValidationError as error:
        raise ModelError(
            f"stage {s}: exported model fails onnx.checker ({str(error).splitlines()[0]})"
        ) from None


def build_stages(
    model_path: str | Path,
    instance: Instance,
    placement: Placement,
    *,
    dims: Mapping[str, int] | None = None,
) -> tuple[Pipeline, list[onnx.ModelProto]]:
    """Cut the model into stage models; refuses an invalid placement before building anything."""
    evaluation = evaluate(instance, placement)
    if not evaluation.valid:
        extra = f" (and {len(evaluation.violations) - 1} more)" if len(evaluation.violations) > 1 else ""
        raise InputError(f"invalid placement: {evaluation.violations[0]}{extra}")
    source = _Model(model_path, instance.graph, dims or {})
    k = placement.num_stages
    stage_nodes: list[list[onnx.NodeProto]] = [[] for _ in range(k)]
    stage_of_tensor: dict[str, int] = {x: GRAPH_INPUT for x in source.graph_inputs}
    for v, node in enumerate(source.op_node):
        stage_nodes[placement.stage_of[v]].append(node)
    for s in range(k):
        stage_nodes[s].sort(key=lambda n: source.position[id(n)])
        for node in stage_nodes[s]:
            stage_of_tensor.update({x: s for x in node.output if x})
    graph_outputs = [v.name for v in source.model.graph.output]
    for x in graph_outputs:
        if stage_of_tensor.get(x, GRAPH_INPUT) == GRAPH_INPUT:
            raise ModelError(f"{model_path}: graph output {x!r} is not computed by any op; nothing to export")

    receives: list[dict[str, int]] = [{} for _ in range(k)]
    sends: list[dict[str, list[int]]] = [{} for _ in range(k)]
    for s, nodes in enumerate(stage_nodes):
        produced = {x for node in nodes for x in node.output if x}
        for node in nodes:
            for x in _reads(node):
                if x in produced or source.is_constant(x):
                    continue
                if x not in stage_of_tensor:
                    raise ModelError(f"{model_path}: tensor {x!r} is read but never produced")
                origin = stage_of_tensor[x]
                if origin > s:
                    raise InputError(
                        f"invalid placement: tensor {x!r} flows from stage {origin} back to stage {s}"
                    )
                if x not in receives[s]:
                    receives[s][x] = origin
                    if origin != GRAPH_INPUT:
                        sends[origin].setdefault(x, []).append(s)

    specs, models = [], []
    for s in range(k):
        finals = [x for x in graph_outputs if stage_of_tensor[x] == s]
        outputs = list(dict.fromkeys([*sends[s], *finals]))
        model = _stage_model(source, s, stage_nodes[s], list(receives[s]), outputs)
        if model.ByteSize() <= _INLINE_LIMIT:
            _check(model, s)
        models.append(model)
        device = instance.cluster.devices[placement.devices[s]].id
        specs.append(
            StageSpec(
                index=s,
                device=device,
                model_file=f"stage_{s}.onnx",
                ops=tuple(
                    instance.graph.ops[v].id
                    for v in range(len(instance.graph.ops))
                    if placement.stage_of[v] == s
                ),
                receives=receives[s],
                sends={x: tuple(t) for x, t in sends[s].items()},
                final_outputs=tuple(finals),
            )
        )
    pipeline = Pipeline(
        model=str(Path(model_path).resolve()),
        dims=dict(dims or {}),
        graph_inputs=tuple(_spec(source.value_info(x)) for x in source.graph_inputs),
        graph_outputs=tuple(graph_outputs),
        stages=tuple(specs),
    )
    return pipeline, models


def _save_model(model: onnx.ModelProto, path: Path) -> None:
    """Write atomically; a stage too large for one protobuf keeps its weights in a side file."""
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(handle)
    try:
        if model.ByteSize() > _INLINE_LIMIT:
            onnx.save_model(
                model,
                temporary,
                save_as_external_data=True,
                location=f"{path.stem}.data",
                size_threshold=1024,
            )
        else:
            onnx.save_model(model, temporary)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def export_stages(
    model_path: str | Path,
    instance: Instance,
    placement: Placement,
    directory: str | Path,
    *,
    dims: Mapping[str, int] | None = None,
    force: bool = False,
) -> Pipeline:
    """Build every stage (refusing bad placements) and only then write them and ``pipeline.json``."""
    target = Path(directory)
    if target.exists() and not target.is_dir():
        raise InputError(f"{target}: exists and is not a directory")
    if (target / PIPELINE_FILE).exists() and not force:
        raise InputError(f"{target}: already holds an exported pipeline (use --force to overwrite)")
    pipeline, models = build_stages(model_path, instance, placement, dims=dims)
    target.mkdir(parents=True, exist_ok=True)
    for stage, model in zip(pipeline.stages, models, strict=True):
        _save_model(model, target / stage.model_file)
        if model.ByteSize() > _INLINE_LIMIT:
            _check(target / stage.model_file, stage.index)
    write_atomic(target / PIPELINE_FILE, dumps(pipeline.to_json()), overwrite=True)
    current = {stage.model_file for stage in pipeline.stages} | {
        f"{Path(stage.model_file).stem}.data" for stage in pipeline.stages
    }
    for stale in [*target.glob("stage_*.onnx"), *target.glob("stage_*.data")]:
        if stale.name not in current:  # left by an earlier export with more stages (--force)
            stale.unlink()
    return pipeline
