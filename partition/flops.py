"""FLOP counts and cost classes of ONNX op types, from input/output shapes and attributes.

Conventions: a multiply-add is 2 FLOPs; element-wise ops cost a per-element factor (1 for
arithmetic, more for transcendental activations); data-movement ops cost 0 FLOPs and are
bandwidth-bound. Op types not listed here are *unknown*: the importer costs them by bytes
alone and warns once, listing them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .graph import OpClass

Shape = tuple[int, ...]


@dataclass(frozen=True)
class NodeShapes:
    inputs: Sequence[Shape | None]  # None for an absent optional input
    outputs: Sequence[Shape]
    attributes: Mapping[str, Any]


def _numel(shape: Shape | None) -> int:
    return math.prod(shape) if shape is not None else 0


def _out(node: NodeShapes) -> int:
    return sum(_numel(s) for s in node.outputs)


def _in0(node: NodeShapes) -> int:
    return _numel(node.inputs[0]) if node.inputs else 0


def _matmul(node: NodeShapes) -> float:
    a = node.inputs[0]
    k = a[-1] if a else 1
    return 2.0 * _numel(node.outputs[0]) * k


def _gemm(node: NodeShapes) -> float:
    a = node.inputs[0]
    k = a[0] if node.attributes.get("transA", 0) else a[-1]
    bias = _numel(node.outputs[0]) if len(node.inputs) > 2 and node.inputs[2] is not None else 0
    return 2.0 * _numel(node.outputs[0]) * k + bias


def _conv(node: NodeShapes) -> float:
    weight = node.inputs[1]  # (C_out, C_in / group, k1, k2, ...)
    per_output = math.prod(weight[1:])
    bias = _numel(node.outputs[0]) if len(node.inputs) > 2 and node.inputs[2] is not None else 0
    return 2.0 * _numel(node.outputs[0]) * per_output + bias


def _conv_transpose(node: NodeShapes) -> float:
    weight = node.inputs[1]  # (C_in, C_out / group, k1, k2, ...)
    per_input = math.prod(weight[1:])
    return 2.0 * _in0(node) * per_input


def _pool(node: NodeShapes) -> float:
    kernel = node.attributes.get("kernel_shape", [1])
    return float(_numel(node.outputs[0]) * math.prod(kernel))


def _per_output(factor: float) -> Callable[[NodeShapes], float]:
    return lambda node: factor * _out(node)


def _per_input(factor: float) -> Callable[[NodeShapes], float]:
    return lambda node: factor * _in0(node)


def _zero(node: NodeShapes) -> float:
    return 0.0


def _lrn(node: NodeShapes) -> float:
    return float(_in0(node) * (2 * node.attributes.get("size", 5) + 3))


_ELEMENTWISE_1 = (
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Relu",
    "LeakyRelu",
    "PRelu",
    "Max",
    "Min",
    "Sum",
    "Mean",
    "Abs",
    "Neg",
    "Sqrt",
    "Reciprocal",
    "Clip",
    "Floor",
    "Ceil",
    "Round",
    "Sign",
    "Equal",
    "Greater",
    "Less",
    "GreaterOrEqual",
    "LessOrEqual",
    "And",
    "Or",
    "Not",
    "Xor",
    "Where",
    "Pow",
    "Mod",
    "BitShift",
    "IsNaN",
    "IsInf",
    "ThresholdedRelu",
)
_ELEMENTWISE_4 = (
    "Exp",
    "Log",
    "Sigmoid",
    "Tanh",
    "Erf",
    "Sin",
    "Cos",
    "Tan",
    "HardSigmoid",
    "HardSwish",
    "Softplus",
    "Softsign",
    "Elu",
    "Selu",
    "Celu",
    "Mish",
    "Gelu",
    "FastGelu",
    "QuickGelu",
    "BiasGelu",
    "Swish",
    "Silu",
)
_REDUCTIONS = (
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
    "ArgMax",
    "ArgMin",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "CumSum",
    "TopK",
)
_DATA_MOVEMENT = (
    "Reshape",
    "Flatten",
    "Squeeze",
    "Unsqueeze",
    "Transpose",
    "Concat",
    "Split",
    "Slice",
    "Gather",
    "GatherElements",
    "GatherND",
    "Scatter",
    "ScatterElements",
    "ScatterND",
    "Expand",
    "Tile",
    "Pad",
    "Identity",
    "Cast",
    "CastLike",
    "Dropout",
    "DepthToSpace",
    "SpaceToDepth",
    "Resize",
    "Upsample",
    "Shape",
    "Size",
    "ConstantOfShape",
    "Range",
    "NonZero",
    "OneHot",
    "Trilu",
    "EyeLike",
    "Compress",
    "ReverseSequence",
)

COSTS: dict[str, tuple[OpClass, Callable[[NodeShapes], float]]] = {
    "MatMul": (OpClass.MATMUL, _matmul),
    "MatMulInteger": (OpClass.MATMUL, _matmul),
    "Gemm": (OpClass.MATMUL, _gemm),
    "Conv": (OpClass.CONV, _conv),
    "ConvTranspose": (OpClass.CONV, _conv_transpose),
    "MaxPool": (OpClass.REDUCTION, _pool),
    "AveragePool": (OpClass.REDUCTION, _pool),
    "LpPool": (OpClass.REDUCTION, _pool),
    "LRN": (OpClass.ELEMENTWISE, _lrn),
    "Softmax": (OpClass.REDUCTION, _per_input(5)),
    "LogSoftmax": (OpClass.REDUCTION, _per_input(5)),
    "BatchNormalization": (OpClass.ELEMENTWISE, _per_input(2)),
    "InstanceNormalization": (OpClass.REDUCTION, _per_input(5)),
    "LayerNormalization": (OpClass.REDUCTION, _per_input(5)),
    "GroupNormalization": (OpClass.REDUCTION, _per_input(5)),
    "SimplifiedLayerNormalization": (OpClass.REDUCTION, _per_input(4)),
    "RMSNormalization": (OpClass.REDUCTION, _per_input(4)),
    **{t: (OpClass.ELEMENTWISE, _per_output(1)) for t in _ELEMENTWISE_1},
    **{t: (OpClass.ELEMENTWISE, _per_output(4)) for t in _ELEMENTWISE_4},
    **{t: (OpClass.REDUCTION, _per_input(1)) for t in _REDUCTIONS},
    **{t: (OpClass.DATA_MOVEMENT, _zero) for t in _DATA_MOVEMENT},
}


def op_cost(op_type: str, node: NodeShapes) -> tuple[OpClass, float] | None:
    """(class, FLOPs) of a node, or ``None`` for an op type this counter does not know."""
    entry = COSTS.get(op_type)
    if entry is None:
        return None
    op_class, count = entry
    return op_class, float(count(node))
