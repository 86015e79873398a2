"""Small ONNX models built with onnx.helper for the export/run tests and the reality-check bench."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def branchy_model() -> onnx.ModelProto:
    """A skip connection that crosses a stage, a shared ConstantOfShape weight, a folded Shape.

    Ops (in order): ``sig`` = Sigmoid(x), ``mm1`` = MatMul(x, w), ``relu`` = Relu(a),
    ``reshape`` = Reshape(b, Shape(s)), ``mm2`` = MatMul(c, w), ``add`` = Add(d, a). With
    stages {sig, mm1} {relu, reshape} {mm2, add}: ``a`` goes from stage 0 straight to stage 2,
    ``w`` (ConstantOfShape) is rebuilt in stages 0 and 2, and ``Shape(s)`` must become a
    constant in stage 1, which never sees ``s``.
    """
    nodes = [
        helper.make_node(
            "Constant",
            [],
            ["wshape"],
            name="wshape",
            value=numpy_helper.from_array(np.array([8, 8], np.int64)),
        ),
        helper.make_node(
            "ConstantOfShape",
            ["wshape"],
            ["w"],
            name="wfill",
            value=numpy_helper.from_array(np.array([0.1], np.float32)),
        ),
        helper.make_node("Sigmoid", ["x"], ["s"], name="sig"),
        helper.make_node("MatMul", ["x", "w"], ["a"], name="mm1"),
        helper.make_node("Relu", ["a"], ["b"], name="relu"),
        helper.make_node("Shape", ["s"], ["sshape"], name="shape"),
        helper.make_node("Reshape", ["b", "sshape"], ["c"], name="reshape"),
        helper.make_node("MatMul", ["c", "w"], ["d"], name="mm2"),
        helper.make_node("Add", ["d", "a"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "branchy",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def transformer_model(
    *, layers: int = 2, width: int = 32, sequence: int = 8, vocabulary: int = 64, seed: int = 0
) -> onnx.ModelProto:
    """A decoder-like stack: embedding, per layer single-head attention and an MLP, each with a
    residual connection and LayerNormalization, then logits against the embedding table."""
    rng = np.random.default_rng(seed)
    initializers: list[onnx.TensorProto] = []

    def weight(name: str, *shape: int) -> str:
        initializers.append(
            numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)
        )
        return name

    def const(name: str, value: np.ndarray) -> str:
        initializers.append(numpy_helper.from_array(value, name))
        return name

    nodes = [
        helper.make_node("Gather", [weight("embedding", vocabulary, width), "tokens"], ["h0"], name="embed")
    ]
    scale = const("scale", np.array(1.0 / np.sqrt(width), np.float32))
    gamma, beta = const("gamma", np.ones(width, np.float32)), const("beta", np.zeros(width, np.float32))
    h = "h0"
    for i in range(layers):
        p = f"l{i}_"
        nodes += [
            helper.make_node("LayerNormalization", [h, gamma, beta], [p + "n1"], name=p + "ln1", axis=-1),
            helper.make_node("MatMul", [p + "n1", weight(p + "wq", width, width)], [p + "q"], name=p + "q"),
            helper.make_node("MatMul", [p + "n1", weight(p + "wk", width, width)], [p + "k"], name=p + "k"),
            helper.make_node("MatMul", [p + "n1", weight(p + "wv", width, width)], [p + "v"], name=p + "v"),
            helper.make_node("Transpose", [p + "k"], [p + "kt"], name=p + "kt", perm=[0, 2, 1]),
            helper.make_node("MatMul", [p + "q", p + "kt"], [p + "qk"], name=p + "qk"),
            helper.make_node("Mul", [p + "qk", scale], [p + "scores"], name=p + "scale"),
            helper.make_node("Softmax", [p + "scores"], [p + "attn"], name=p + "softmax", axis=-1),
            helper.make_node("MatMul", [p + "attn", p + "v"], [p + "ctx"], name=p + "ctx"),
            helper.make_node("MatMul", [p + "ctx", weight(p + "wo", width, width)], [p + "o"], name=p + "o"),
            helper.make_node("Add", [h, p + "o"], [p + "r1"], name=p + "res1"),
            helper.make_node(
                "LayerNormalization", [p + "r1", gamma, beta], [p + "n2"], name=p + "ln2", axis=-1
            ),
            helper.make_node(
                "MatMul", [p + "n2", weight(p + "w1", width, 4 * width)], [p + "u"], name=p + "up"
            ),
            helper.make_node("Relu", [p + "u"], [p + "g"], name=p + "act"),
            helper.make_node(
                "MatMul", [p + "g", weight(p + "w2", 4 * width, width)], [p + "m"], name=p + "down"
            ),
            helper.make_node("Add", [p + "r1", p + "m"], [p + "out"], name=p + "res2"),
        ]
        h = p + "out"
    nodes += [
        helper.make_node("Transpose", ["embedding"], ["unembedding"], name="unembed_t", perm=[1, 0]),
        helper.make_node("MatMul", [h, "unembedding"], ["logits"], name="logits"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_transformer",
        [helper.make_tensor_value_info("tokens", TensorProto.INT64, [1, sequence])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, sequence, vocabulary])],
        initializer=initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
