"""Stand-in values for weights whose external data file is absent (a model shipped with shapes only).

A zoo export carries only each weight's dims; running it needs values. Learnt weights get
deterministic random values (seeded by the tensor name, so the whole model and every exported
stage computing from the same file see the same numbers). A tensor an exporter happened to put
in external data that a node reads as a *shape-like* input — Resize scales or sizes, a Reshape
or Expand shape, Slice bounds, Pad pads, Tile repeats, a TopK k, Range bounds, Squeeze or
Unsqueeze axes, Split sizes, ... — cannot be random: it decides the shapes every later op
computes on. Such a tensor is rebuilt from the shapes shape inference gives the node's input
and output (kept from the file's ``value_info`` where inference alone cannot know them), so
the filled model computes exactly the shapes the graph declares; if those shapes are not
static, loading fails with one clear line instead of running a different model.
"""

from __future__ import annotations

import logging
import math
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import external_data_helper, helper, numpy_helper, shape_inference

from .errors import ModelError
from .onnx_import import _pin_dims, load_model

log = logging.getLogger("partition")

Shape = tuple[int, ...]


def _declare_domains(model: onnx.ModelProto) -> None:
    """Import every operator domain a node uses: onnxruntime's optimiser writes ``com.microsoft``
    nodes without declaring the domain, which the importer tolerates and onnxruntime does not."""
    declared = {opset.domain for opset in model.opset_import}
    for domain in dict.fromkeys(node.domain for node in model.graph.node):
        if domain not in declared:
            model.opset_import.append(helper.make_opsetid(domain, 1))


def inferred_types(path: str | Path, dims: Mapping[str, int]) -> dict[str, onnx.ValueInfoProto]:
    """The type of every tensor shape inference resolves, input dims pinned as on import."""
    where = str(path)
    typed, _ = load_model(path)
    typed = onnx.ModelProto.FromString(typed.SerializeToString())
    _declare_domains(typed)
    _pin_dims(typed, dict(dims), where)
    try:
        typed = shape_inference.infer_shapes(typed, data_prop=True)
    except Exception as error:
        raise ModelError(f"{where}: shape inference failed ({str(error).splitlines()[0]})") from None
    inferred = typed.graph
    return {
        v.name: v
        for v in [*inferred.value_info, *inferred.input, *inferred.output]
        if v.type.HasField("tensor_type")
    }


def _random_weight(tensor: onnx.TensorProto) -> np.ndarray:
    """Deterministic stand-in values for a learnt weight whose data file is absent."""
    dtype = helper.tensor_dtype_to_np_dtype(tensor.data_type)
    rng = np.random.default_rng(zlib.crc32(tensor.name.encode()))
    shape = tuple(tensor.dims)
    if np.issubdtype(dtype, np.floating) and math.prod(shape) == 1:
        # a scalar is an exporter's constant (a Pow exponent, a GELU coefficient), not a learnt
        # weight: 1 keeps every such op finite, where a random value can make Pow return NaN
        return np.ones(shape, dtype=dtype)
    if np.issubdtype(dtype, np.floating):
        return (rng.standard_normal(shape) * 0.02).astype(dtype)
    if dtype == np.bool_:  # masks (e.g. a causal-attention buffer): all-false would mask every
        return np.ones(shape, dtype=dtype)  # position and turn softmax rows into NaN
    return np.zeros(shape, dtype=dtype)  # integer weights index things: zero is always valid


# --- shape-like inputs: the value each must hold for the node to produce its declared shapes ---


@dataclass(frozen=True)
class _Slot:
    """What a shape-like input must hold: the node, its tensors' static shapes, the value's size."""

    node: onnx.NodeProto
    inputs: list[Shape]
    outputs: list[Shape]
    length: int

    @property
    def attributes(self) -> dict[str, Any]:
        return {a.name: helper.get_attribute_value(a) for a in self.node.attribute}

    @property
    def data(self) -> Shape:
        return self.inputs[0]

    @property
    def result(self) -> Shape:
        return self.outputs[0]

    def axis(self, rank: int, default: int = 0) -> int:
        axis = int(self.attributes.get("axis", default))
        return axis + rank if axis < 0 else axis


def _ratio(slot: _Slot) -> list[float]:
    """Scales ``out / in``, nudged up where float32 rounding would make ``floor(in * scale)`` short."""
    scales = []
    for out, size in zip(slot.result, slot.data, strict=True):
        scale = np.float32(out / max(1, size))
        while np.floor(np.float32(size) * scale) < out:
            scale = np.nextafter(scale, np.float32(np.inf))
        scales.append(float(scale))
    return scales


def _removed_axes(longer: Shape, shorter: Shape, length: int) -> list[int]:
    """Axes of ``longer`` that, dropped, leave ``shorter``: match greedily, the rest are size 1."""
    axes, j = [], 0
    for i, size in enumerate(longer):
        if j < len(shorter) and shorter[j] == size:
            j += 1
        else:
            axes.append(i)
    if j < len(shorter) or len(axes) != length:
        raise ValueError("no such axes")
    return axes


def _reduced_axes(slot: _Slot) -> list[int]:
    if slot.attributes.get("keepdims", 1):
        changed = [i for i, (a, b) in enumerate(zip(slot.data, slot.result, strict=True)) if a != b]
        ones = [i for i, (a, b) in enumerate(zip(slot.data, slot.result, strict=True)) if a == b == 1]
        return sorted((changed + ones)[: slot.length])
    return _removed_axes(slot.data, slot.result, slot.length)


def _slice(position: int) -> Callable[[_Slot], list[int]]:
    """Slice bounds keeping the first ``result`` elements of every axis that shrinks."""

    def bound(slot: _Slot) -> list[int]:
        changed = [i for i, (a, b) in enumerate(zip(slot.data, slot.result, strict=True)) if a != b]
        axes = (changed + [i for i in range(len(slot.data)) if i not in changed])[: slot.length]
        values = {1: [0] * len(axes), 2: [slot.result[i] for i in axes], 3: axes, 4: [1] * len(axes)}
        return values[position]

    return bound


def _pads(slot: _Slot) -> list[int]:
    grown = [out - size for out, size in zip(slot.result, slot.data, strict=True)]
    return [0] * len(grown) + grown  # all growth at the end: only the result's shape matters


def _range(position: int) -> Callable[[_Slot], list[int]]:
    return lambda slot: [(0, slot.result[0], 1)[position]]


_REDUCE = (
    "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
)  # fmt: skip

_DERIVE: dict[tuple[str, int], Callable[[_Slot], list[float] | list[int]]] = {
    ("Resize", 1): lambda slot: [0.0] * len(slot.data) + [1.0] * len(slot.data),  # roi: the whole
    ("Resize", 2): _ratio,
    ("Resize", 3): lambda slot: list(slot.result),
    ("Upsample", 1): _ratio,
    ("Reshape", 1): lambda slot: list(slot.result),
    ("Expand", 1): lambda slot: list(slot.result),
    ("ConstantOfShape", 0): lambda slot: list(slot.result),
    ("Tile", 1): lambda slot: [out // max(1, size) for out, size in zip(slot.result, slot.data, strict=True)],
    ("Slice", 1): _slice(1),
    ("Slice", 2): _slice(2),
    ("Slice", 3): _slice(3),
    ("Slice", 4): _slice(4),
    ("Pad", 1): _pads,
    ("TopK", 1): lambda slot: [slot.result[slot.axis(len(slot.result), -1)]],
    ("Range", 0): _range(0),
    ("Range", 1): _range(1),
    ("Range", 2): _range(2),
    ("Squeeze", 1): lambda slot: _removed_axes(slot.data, slot.result, slot.length),
    ("Unsqueeze", 1): lambda slot: _removed_axes(slot.result, slot.data, slot.length),
    ("Split", 1): lambda slot: [out[slot.axis(len(slot.data))] for out in slot.outputs],
    ("OneHot", 1): lambda slot: [slot.result[slot.axis(len(slot.result), -1)]],
    **{(reduce, 1): _reduced_axes for reduce in _REDUCE},
}


def shape_slots(graph: onnx.GraphProto) -> dict[str, tuple[onnx.NodeProto, int]]:
    """Tensors read as a shape-like input, each with the first node and input position reading it."""
    slots: dict[str, tuple[onnx.NodeProto, int]] = {}
    for node in graph.node:
        for position, name in enumerate(node.input):
            if name and (node.op_type, position) in _DERIVE:
                slots.setdefault(name, (node, position))
    return slots


def _static_shapes(
    model: onnx.ModelProto, types: Mapping[str, onnx.ValueInfoProto]
) -> Callable[[str], Shape | None]:
    """A tensor's static shape: an initializer's dims, else the inferred type's, else None."""
    dims = {t.name: tuple(t.dims) for t in model.graph.initializer}

    def shape(name: str) -> Shape | None:
        if name in dims:
            return dims[name]
        value = types.get(name)
        if value is None or not value.type.tensor_type.HasField("shape"):
            return None
        found = value.type.tensor_type.shape.dim
        return tuple(d.dim_value for d in found) if all(d.HasField("dim_value") for d in found) else None

    return shape


def _shape_value(
    tensor: onnx.TensorProto, node: onnx.NodeProto, position: int, shape: Callable[[str], Shape | None]
) -> np.ndarray:
    """The value ``tensor`` must hold as input ``position`` of ``node`` (see the module docstring)."""
    label = f"{node.name or node.op_type!r} ({node.op_type})"
    shapes = [shape(x) for x in node.input[:1]]
    outputs = [shape(x) for x in node.output if x]
    if None in shapes or None in outputs:
        raise ModelError(
            f"weight {tensor.name!r} has no data file and is the shape input of node {label}, whose"
            " tensors have no static shape to rebuild it from; supply the weights' data file"
        )
    length = math.prod(tensor.dims)
    try:
        value = _DERIVE[node.op_type, position](_Slot(node, shapes, outputs, length))  # type: ignore[arg-type]
    except (ValueError, IndexError):  # shapes no value of this length can produce
        value = []
    if len(value) != length:
        raise ModelError(
            f"weight {tensor.name!r} has no data file and the shapes around node {label}, whose"
            f" shape input it is, do not determine its {length} values; supply the weights' data file"
        )
    dtype = helper.tensor_dtype_to_np_dtype(tensor.data_type)
    return np.array(value, dtype=dtype).reshape(tuple(tensor.dims))


def load_runnable_model(path: str | Path, dims: Mapping[str, int] | None = None) -> onnx.ModelProto:
    """The model with every weight's data present: loaded from its file, or filled if absent.

    ``dims`` pins symbolic input dims as on import; only needed when an absent weight is
    shape-like and the shapes it is rebuilt from depend on them."""
    model, _ = load_model(path)
    _declare_domains(model)
    base = Path(path).parent
    absent = []
    for tensor in model.graph.initializer:
        if not external_data_helper.uses_external_data(tensor):
            continue
        info = external_data_helper.ExternalDataInfo(tensor)
        if (base / info.location).is_file():
            external_data_helper.load_external_data_for_tensor(tensor, str(base))
        else:
            absent.append(tensor)
    slots = shape_slots(model.graph)
    types = inferred_types(path, dims or {}) if any(t.name in slots for t in absent) else {}
    shape = _static_shapes(model, types)
    for tensor in absent:
        slot = slots.get(tensor.name)
        value = _random_weight(tensor) if slot is None else _shape_value(tensor, *slot, shape)
        tensor.CopyFrom(numpy_helper.from_array(value, tensor.name))
    if absent:
        log.warning("%s: %d weights have no data file; filling them (partition.fill)", path, len(absent))
    return model
