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


def _einsum_extents(equation: str, inputs: Sequence[Shape | None]) -> dict[str, int]:
    """Extent of every index letter; letters after ``...`` align with the trailing dims."""
    extent: dict[str, int] = {}
    for term, shape in zip(equation.split("->")[0].split(","), inputs, strict=False):
        if shape is None:
            continue
        head, ellipsis, tail = term.partition("...")
        pairs = list(zip(head, shape, strict=False))
        if ellipsis and tail:
            pairs += list(zip(tail, shape[len(shape) - len(tail) :], strict=False))
        extent.update(pairs)
    return extent


def _einsum(node: NodeShapes) -> float:
    """A multiply-add for every output element and every combination of summed indices."""
    raw = node.attributes.get("equation", "")
    equation = (raw.decode() if isinstance(raw, bytes) else str(raw)).replace(" ", "")
    extent = _einsum_extents(equation, node.inputs)
    if "->" in equation:
        kept = set(equation.split("->")[1])
    else:  # implicit output: the letters that appear once
        letters = [c for c in equation if c.isalpha()]
        kept = {c for c in letters if letters.count(c) == 1}
    summed = math.prod(extent[c] for c in set(extent) - kept)
    return (2.0 if len(node.inputs) > 1 else 1.0) * _out(node) * summed


def _attention(node: NodeShapes) -> float:
    """ONNX ``Attention`` (opset 23) and com.microsoft ``MultiHeadAttention``/``GroupQueryAttention``.

    Q·Kᵀ and P·V are 2·B·H·Sq·Skv·D each, plus softmax at 5 per score; Q is (B, Sq, H·D) or
    (B, H, Sq, D), K likewise with Skv rows.
    """
    q, k = node.inputs[0], node.inputs[1] if len(node.inputs) > 1 else None
    if q is None or k is None:
        return 0.0
    if len(q) == 4:
        batch, heads, sq, d = q
        skv = k[2]
    else:
        batch, sq, hidden = q
        heads = int(node.attributes.get("num_heads", node.attributes.get("q_num_heads", 1)) or 1)
        d = hidden // heads
        skv = k[1] if len(k) == 3 else k[2]
    scores = batch * heads * sq * skv
    return 4.0 * scores * d + 5.0 * scores


def _packed_attention(node: NodeShapes) -> float:
    """com.microsoft ``Attention``: a fused QKV projection (B,S,C)·(C,3C) then attention."""
    x, w = node.inputs[0], node.inputs[1]
    batch, seq, hidden = x
    projection = 2.0 * batch * seq * hidden * w[-1]
    heads = int(node.attributes.get("num_heads", 1))
    d = (w[-1] // 3) // heads
    scores = batch * heads * seq * seq
    return projection + 4.0 * scores * d + 5.0 * scores


def _resize(node: NodeShapes) -> float:
    """Nearest: a copy; linear/cubic: a weighted sum of 2 or 4 neighbours per resized axis."""
    raw = node.attributes.get("mode", b"nearest")
    mode = raw.decode() if isinstance(raw, bytes) else str(raw)
    source, target = node.inputs[0], node.outputs[0]
    resized = sum(1 for a, b in zip(source or (), target, strict=False) if a != b) if source else 2
    neighbours = {"linear": 2, "cubic": 4}.get(mode, 0)
    return 2.0 * _numel(target) * neighbours**resized if neighbours else 0.0


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
    "BitwiseAnd",
    "BitwiseOr",
    "BitwiseXor",
    "BitwiseNot",
    "Shrink",
    "BiasAdd",
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
    "CenterCropPad",
    "Col2Im",
    "SequenceAt",
    "SequenceConstruct",
    "SplitToSequence",
    "ConcatFromSequence",
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
    "Einsum": (OpClass.MATMUL, _einsum),
    "FusedMatMul": (OpClass.MATMUL, _matmul),
    "MatMulNBits": (OpClass.MATMUL, _matmul),
    "Attention": (OpClass.MATMUL, _attention),
    "MultiHeadAttention": (OpClass.MATMUL, _attention),
    "GroupQueryAttention": (OpClass.MATMUL, _attention),
    "com.microsoft.Attention": (OpClass.MATMUL, _packed_attention),
    "Resize": (OpClass.ELEMENTWISE, _resize),
    "Upsample": (OpClass.ELEMENTWISE, _resize),
    "RotaryEmbedding": (OpClass.ELEMENTWISE, _per_output(3)),
    "SkipLayerNormalization": (OpClass.REDUCTION, _per_input(6)),
    "SkipSimplifiedLayerNormalization": (OpClass.REDUCTION, _per_input(5)),
    "EmbedLayerNormalization": (OpClass.REDUCTION, _per_output(6)),
    "LpNormalization": (OpClass.REDUCTION, _per_input(3)),
    "MeanVarianceNormalization": (OpClass.REDUCTION, _per_input(5)),
    "Hardmax": (OpClass.REDUCTION, _per_input(1)),
    "QuantizeLinear": (OpClass.ELEMENTWISE, _per_output(2)),
    "DequantizeLinear": (OpClass.ELEMENTWISE, _per_output(2)),
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
    """(class, FLOPs) of a node, or ``None`` for an op type this counter does not know.

    ``op_type`` may carry its domain (``com.microsoft.Attention``): a domain-specific entry wins,
    else the bare name is looked up (contrib ops mostly have names no standard op uses).
    """
    entry = COSTS.get(op_type) or COSTS.get(op_type.rsplit(".", 1)[-1])
    if entry is None:
        return None
    op_class, count = entry
    return op_class, float(count(node))
