"""The importer on small handmade models: weights, folding, control flow, op costs, bad input."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from partition.cli import main
from partition.errors import ModelError
from partition.flops import NodeShapes, op_cost
from partition.graph import OpClass
from partition.onnx_import import import_onnx

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, initializers=(), opset=17, extra_opsets=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "handmade", inputs, outputs, list(initializers))
    opsets = [helper.make_opsetid("", opset), *extra_opsets]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def _weight(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.zeros(shape, dtype=np.float32), name)


def _mlp(batch: str | int = 4) -> onnx.ModelProto:
    """x (batch, 64) → MatMul W1 → Relu → MatMul W2 (through an Identity: a weight all the same)."""
    return _model(
        [
            helper.make_node("MatMul", ["x", "W1"], ["h"], name="/mlp/fc1/MatMul"),
            helper.make_node("Relu", ["h"], ["r"], name="/mlp/act/Relu"),
            helper.make_node("Identity", ["W2"], ["W2_alias"]),
            helper.make_node("MatMul", ["r", "W2_alias"], ["y"], name="/mlp/fc2/MatMul"),
        ],
        [helper.make_tensor_value_info("x", F, [batch, 64])],
        [helper.make_tensor_value_info("y", F, [batch, 32])],
        [_weight("W1", 64, 128), _weight("W2", 128, 32)],
    )


def test_weights_in_absent_external_data_import_from_dims(tmp_path: Path) -> None:
    path = tmp_path / "mlp.onnx"
    onnx.save_model(_mlp(), str(path), save_as_external_data=True, location="mlp.weights", size_threshold=0)
    (tmp_path / "mlp.weights").unlink()
    graph = import_onnx(path)
    assert dict(graph.weights) == {"W1": 64 * 128 * 4, "W2": 128 * 32 * 4}
    assert [op.id for op in graph.ops] == ["/mlp/fc1/MatMul", "/mlp/act/Relu", "/mlp/fc2/MatMul"]
    assert graph.ops[0].flops == 2 * 4 * 64 * 128
    assert graph.ops[2].weights == ("W2",)  # Identity of a weight is that weight, not a tensor to send
    assert {t.name for t in graph.tensors} == {"x", "h", "r"}
    assert graph.ops[0].module == "/mlp/fc1"


def test_an_exporter_default_graph_name_gives_way_to_the_file_name(tmp_path: Path) -> None:
    model = _mlp()
    onnx.save_model(model, str(tmp_path / "mlp.onnx"))
    assert import_onnx(tmp_path / "mlp.onnx").name == "handmade"  # a name its maker chose stays
    assert import_onnx(model).name == "handmade"
    model.graph.name = "main_graph"  # what torch.onnx.export names every model
    onnx.save_model(model, str(tmp_path / "encoder.onnx"))
    assert import_onnx(tmp_path / "encoder.onnx").name == "encoder"
    assert import_onnx(model).name == "main_graph"  # no file to name it after


def test_shape_values_in_absent_external_data_are_one_clear_line(tmp_path: Path) -> None:
    model = _model(
        [
            helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
            helper.make_node("Relu", ["r"], ["y"], name="relu"),
        ],
        [helper.make_tensor_value_info("x", F, [4, 64])],
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(np.array([16, 16], dtype=np.int64), "shape")],
    )
    path = tmp_path / "reshape.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="gone.bin", size_threshold=0)
    assert import_onnx(path).ops[0].outputs == ("r",)  # present: small integers are read
    (tmp_path / "gone.bin").unlink()
    with pytest.raises(ModelError, match=r"'r'.*absent external data \(gone.bin\)"):
        import_onnx(path)


def test_symbolic_batch_needs_dim_then_imports() -> None:
    with pytest.raises(ModelError, match=r"input 'x' dim 0 \('batch'\) has no value; pass --dim batch=N"):
        import_onnx(_mlp("batch"))
    graph = import_onnx(_mlp("batch"), dims={"batch": 8})
    assert graph.ops[0].flops == 2 * 8 * 64 * 128
    assert import_onnx(_mlp(), dims={"x:0": 8}).ops[0].flops == 2 * 4 * 64 * 128  # fixed dims stay


def test_a_dim_that_pins_nothing_is_reported(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="partition"):
        import_onnx(_mlp("batch"), dims={"batch": 2, "seq": 16})
    assert [r.getMessage() for r in caplog.records] == ["handmade: --dim seq matches no symbolic input dim"]


def test_input_without_shape_is_one_clear_line() -> None:
    model = _mlp()
    model.graph.input[0].type.tensor_type.ClearField("shape")
    with pytest.raises(ModelError, match="input 'x' declares no shape"):
        import_onnx(model)


def test_unsupported_opset_is_one_clear_line() -> None:
    with pytest.raises(ModelError, match=r"unsupported opset 99 \(supported: 7–"):
        import_onnx(_model([helper.make_node("Relu", ["x"], ["y"])], *_io([4]), opset=99))


def _io(shape):
    return [helper.make_tensor_value_info("x", F, shape)], [helper.make_tensor_value_info("y", F, None)]


@pytest.mark.parametrize("keep", [0.5, 0.9])
def test_truncated_file_is_one_clear_line(tmp_path: Path, keep: float, capsys) -> None:
    data = _mlp().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: int(len(data) * keep)])
    assert main(["inspect", str(path)]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and "Traceback" not in err


def test_tied_weight_is_one_parameter_used_by_two_ops() -> None:
    """GPT-2 style: the embedding table feeds a Gather and, transposed, the output MatMul."""
    model = _model(
        [
            helper.make_node("Gather", ["wte", "ids"], ["h"], name="embed"),
            helper.make_node("Transpose", ["wte"], ["wte_t"], perm=[1, 0]),
            helper.make_node("MatMul", ["h", "wte_t"], ["y"], name="lm_head"),
        ],
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 16])],
        [helper.make_tensor_value_info("y", F, [1, 16, 1000])],
        [_weight("wte", 1000, 64)],
    )
    graph = import_onnx(model)
    assert dict(graph.weights) == {"wte": 1000 * 64 * 4}
    assert [op.weights for op in graph.ops] == [("wte",), ("wte",)]
    assert list(graph.param_bytes) == [256000.0, 256000.0]  # stored by each stage that uses it


def test_shape_subgraph_folds_away() -> None:
    """Shape → Gather → Concat → Reshape: no ops, no weights, no cut tensors from the shape path."""
    model = _model(
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
            helper.make_node("Unsqueeze", ["b", "zero_1d"], ["b1"]),
            helper.make_node("Concat", ["b1", "minus1"], ["new_shape"], axis=0),
            helper.make_node("Reshape", ["x", "new_shape"], ["flat"], name="flatten"),
            helper.make_node("Relu", ["flat"], ["y"], name="relu"),
        ],
        [helper.make_tensor_value_info("x", F, [2, 3, 4])],
        [helper.make_tensor_value_info("y", F, None)],
        [
            numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
            numpy_helper.from_array(np.array([0], dtype=np.int64), "zero_1d"),
            numpy_helper.from_array(np.array([-1], dtype=np.int64), "minus1"),
        ],
    )
    graph = import_onnx(model)
    assert [op.id for op in graph.ops] == ["flatten", "relu"]
    assert graph.ops[0].inputs == ("x",)
    assert graph.ops[1].bytes_written == 2 * 12 * 4


def test_empty_and_duplicate_names_get_unique_stable_ids() -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="act"),
        helper.make_node("Relu", ["a"], ["b"], name="act"),
        helper.make_node("Relu", ["b"], ["c"]),
        helper.make_node("Relu", ["c"], ["y"], name="act"),
    ]
    model = _model(nodes, *_io([4]))
    ids = [op.id for op in import_onnx(model).ops]
    assert ids == ["act", "act#2", "Relu_2", "act#3"]
    assert ids == [op.id for op in import_onnx(model).ops]


def test_unknown_op_types_warn_once_listing_them(caplog) -> None:
    model = _model(
        [
            helper.make_node("Mystery", ["x"], ["a"], name="m1", domain="example"),
            helper.make_node("Mystery", ["a"], ["b"], name="m2", domain="example"),
            helper.make_node("Relu", ["b"], ["y"], name="relu"),
        ],
        [helper.make_tensor_value_info("x", F, [4])],
        [helper.make_tensor_value_info("y", F, [4])],
        extra_opsets=[helper.make_opsetid("example", 1)],
    )
    for node in model.graph.node[:2]:  # declare their outputs so their bytes are known
        model.graph.value_info.append(helper.make_tensor_value_info(node.output[0], F, [4]))
    with caplog.at_level(logging.WARNING, logger="partition"):
        graph = import_onnx(model)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "example.Mystery (2)" in warnings[0]
    assert graph.ops[0].flops == 0 and graph.ops[0].bytes_read == 16


def test_contrib_op_shapes_come_from_symbolic_inference() -> None:
    """onnx has no schema for com.microsoft ops; onnxruntime's symbolic inference does."""
    model = _model(
        [
            helper.make_node("FastGelu", ["x"], ["g"], name="gelu", domain="com.microsoft"),
            helper.make_node("MatMul", ["g", "W"], ["y"], name="proj"),
        ],
        [helper.make_tensor_value_info("x", F, [2, 8, 64])],
        [helper.make_tensor_value_info("y", F, None)],
        [_weight("W", 64, 16)],
        extra_opsets=[helper.make_opsetid("com.microsoft", 1)],
    )
    graph = import_onnx(model)
    assert graph.ops[0].op_type == "com.microsoft.FastGelu"
    assert graph.ops[0].flops == 4 * 2 * 8 * 64
    assert graph.ops[1].flops == 2 * 2 * 8 * 64 * 16


def test_if_is_one_op_costing_its_dearer_branch_and_reading_outer_tensors() -> None:
    def branch(name: str, weight: str, cols: int) -> onnx.GraphProto:
        return helper.make_graph(
            [helper.make_node("MatMul", ["x", weight], [f"{name}_out"], name=f"{name}_mm")],
            name,
            [],
            [helper.make_tensor_value_info(f"{name}_out", F, [4, cols])],
        )

    model = _model(
        [
            helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
            helper.make_node("Greater", ["s", "zero"], ["cond"], name="test"),
            helper.make_node(
                "If",
                ["cond"],
                ["y"],
                name="branch",
                then_branch=branch("big", "Wbig", 32),
                else_branch=branch("small", "Wsmall", 32),
            ),
        ],
        [helper.make_tensor_value_info("x", F, [4, 64])],
        [helper.make_tensor_value_info("y", F, [4, 32])],
        [
            _weight("Wbig", 64, 32),
            _weight("Wsmall", 64, 32),
            numpy_helper.from_array(np.array(0, dtype=np.float32), "zero"),
        ],
    )
    graph = import_onnx(model)
    op = graph.ops[graph.index["branch"]]
    assert op.inputs == ("cond", "x")
    assert set(op.weights) == {"Wbig", "Wsmall"}
    assert op.flops == 2 * 4 * 64 * 32


def test_loop_costs_body_times_trip_count() -> None:
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("MatMul", ["h_in", "W"], ["h_out"], name="step"),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h_in", F, [4, 16]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h_out", F, [4, 16]),
        ],
    )
    model = _model(
        [helper.make_node("Loop", ["trips", "", "x"], ["y"], name="loop", body=body)],
        [helper.make_tensor_value_info("x", F, [4, 16])],
        [helper.make_tensor_value_info("y", F, [4, 16])],
        [_weight("W", 16, 16), numpy_helper.from_array(np.array(5, dtype=np.int64), "trips")],
    )
    (op,) = import_onnx(model).ops
    assert op.flops == 5 * 2 * 4 * 16 * 16 and op.weights == ("W", "trips")


@pytest.mark.parametrize(
    ("equation", "shapes", "out", "flops"),
    [
        ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], (2, 3, 5), 2 * 2 * 3 * 4 * 5),
        ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)], (2, 3, 5), 2 * 2 * 3 * 4 * 5),
        ("ij->ji", [(3, 4)], (4, 3), 12),
        ("ij,ij", [(3, 4), (3, 4)], (), 2 * 12),
    ],
)
def test_einsum_flops(equation: str, shapes, out, flops: int) -> None:
    names = [f"in{i}" for i in range(len(shapes))]
    model = _model(
        [helper.make_node("Einsum", names, ["y"], name="e", equation=equation)],
        [helper.make_tensor_value_info(n, F, list(s)) for n, s in zip(names, shapes, strict=True)],
        [helper.make_tensor_value_info("y", F, list(out))],
    )
    assert import_onnx(model).ops[0].flops == flops


def test_resize_and_pad_are_costed() -> None:
    model = _model(
        [
            helper.make_node("Resize", ["x", "", "scales"], ["r"], name="up", mode="linear"),
            helper.make_node("Pad", ["r", "pads"], ["y"], name="pad"),
        ],
        [helper.make_tensor_value_info("x", F, [1, 2, 8, 8])],
        [helper.make_tensor_value_info("y", F, None)],
        [
            numpy_helper.from_array(np.array([1, 1, 2, 2], dtype=np.float32), "scales"),
            numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], dtype=np.int64), "pads"),
        ],
    )
    up, pad = import_onnx(model).ops
    assert up.flops == 2 * (2 * 16 * 16) * 4  # bilinear: 4 neighbours per output
    assert pad.flops == 0 and pad.bytes_written == 2 * 18 * 18 * 4


def test_attention_ops_count_scores_and_weighted_sum() -> None:
    q = helper.make_tensor_value_info("q", F, [1, 4, 16, 8])  # (batch, heads, seq, head dim)
    kv = [helper.make_tensor_value_info(n, F, [1, 4, 32, 8]) for n in ("k", "v")]
    model = _model(
        [helper.make_node("Attention", ["q", "k", "v"], ["y"], name="attn")],
        [q, *kv],
        [helper.make_tensor_value_info("y", F, None)],
        opset=23,
    )
    (op,) = import_onnx(model).ops
    scores = 1 * 4 * 16 * 32
    assert op.flops == 4 * scores * 8 + 5 * scores and op.bytes_written == 16 * 32 * 4
    packed = op_cost(
        "com.microsoft.Attention",
        NodeShapes([(2, 16, 64), (64, 192), (192,)], [(2, 16, 64)], {"num_heads": 4}),
    )
    assert packed == (
        OpClass.MATMUL,
        2 * 2 * 16 * 64 * 192 + 4 * (2 * 4 * 16 * 16) * 16 + 5 * 2 * 4 * 16 * 16,
    )
