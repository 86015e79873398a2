"""Exported stages run as a multi-process pipeline and reproduce the whole model's outputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from conftest import LIGHT
from onnx_builders import branchy_model, transformer_model

import partition
from partition.cli import main
from partition.errors import InputError
from partition.export import export_stages, load_pipeline
from partition.placement import Placement
from partition.run import run_pipeline

THREE = "homo-4a100"  # four devices on one host: room for 2 or 3 stages


def _hand_placement(instance: partition.Instance, stages: list[list[str]]) -> Placement:
    stage_of = {op: s for s, ops in enumerate(stages) for op in ops}
    return Placement(tuple(stage_of[op.id] for op in instance.graph.ops), tuple(range(len(stages))))


def _chain(directory: Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the stages one after another in this process (no pipeline), by tensor name."""
    pipeline = load_pipeline(directory)
    values = dict(inputs)
    for stage in pipeline.stages:
        session = ort.InferenceSession(str(directory / stage.model_file), providers=["CPUExecutionProvider"])
        outputs = session.run(list(stage.outputs), {x: values[x] for x in stage.inputs})
        values.update(zip(stage.outputs, outputs, strict=True))
    return values


@pytest.fixture
def branchy(tmp_path: Path) -> tuple[Path, partition.Instance]:
    path = tmp_path / "branchy.onnx"
    onnx.save(branchy_model(), path)
    return path, partition.make_instance(path, THREE, 3)


def test_skip_connection_crosses_a_stage_and_constants_are_duplicated(branchy, tmp_path: Path) -> None:
    path, instance = branchy
    placement = _hand_placement(instance, [["sig", "mm1"], ["relu", "reshape"], ["mm2", "add"]])
    pipeline = export_stages(path, instance, placement, tmp_path / "stages")
    first, middle, last = pipeline.stages
    assert dict(first.sends) == {"a": (1, 2)}  # the skip goes straight to stage 2
    assert dict(middle.receives) == {"a": 0} and dict(middle.sends) == {"c": (2,)}
    assert dict(last.receives) == {"c": 1, "a": 0}
    for stage in pipeline.stages:
        model = onnx.load(tmp_path / "stages" / stage.model_file)
        onnx.checker.check_model(model)
        assert "w" not in stage.receives and "sshape" not in stage.receives
        assert [i.name for i in model.graph.input] == list(stage.inputs)
        assert [o.name for o in model.graph.output] == list(stage.outputs)
    fills = [
        sum(n.op_type == "ConstantOfShape" for n in onnx.load(tmp_path / "stages" / s.model_file).graph.node)
        for s in pipeline.stages
    ]
    assert fills == [1, 0, 1]  # the shared weight is rebuilt where it is used, never sent
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    whole = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(["y"], {"x": x})[0]
    np.testing.assert_allclose(_chain(tmp_path / "stages", {"x": x})["y"], whole, rtol=1e-6)
    report = run_pipeline(tmp_path / "stages", 3)
    assert report.outputs_match and report.max_abs_diff["y"] <= 1e-6
    assert report.throughput_per_s > 0 and report.latency_s > 0
    assert [t.stage for t in report.stages] == [0, 1, 2]


def test_bad_placements_are_refused_before_anything_is_written(branchy, tmp_path: Path) -> None:
    path, instance = branchy
    backwards = _hand_placement(instance, [["relu", "reshape", "mm2", "add"], ["sig", "mm1"]])
    target = tmp_path / "stages"
    with pytest.raises(InputError, match="back to stage 0"):
        export_stages(path, instance, backwards, target)
    assert not target.exists()


def _solve_to_file(model: Path, stages: int, output: Path) -> None:
    assert (
        main(["solve", str(model), "--cluster", THREE, "--stages", str(stages), "-o", str(output), "-q"]) == 0
    )


def test_cli_refuses_a_placement_with_a_missing_op(tmp_path: Path, capsys) -> None:
    model = LIGHT / "light_squeezenet.onnx"
    placement = tmp_path / "p.json"
    _solve_to_file(model, 2, placement)
    document = json.loads(placement.read_text())
    dropped = document["stages"][1]["ops"].pop()
    placement.write_text(json.dumps(document))
    capsys.readouterr()
    assert main(["export", str(model), str(placement), "-o", str(tmp_path / "stages")]) == 2
    assert f"op {dropped!r} is not placed" in capsys.readouterr().err
    assert not (tmp_path / "stages").exists()


@pytest.mark.parametrize(
    ("name", "stages", "microbatches"), [("light_squeezenet", 3, 3), ("light_resnet50", 2, 2)]
)
def test_light_models_run_as_a_pipeline(tmp_path: Path, name: str, stages: int, microbatches: int) -> None:
    model = LIGHT / f"{name}.onnx"
    placement = tmp_path / "p.json"
    _solve_to_file(model, stages, placement)
    assert main(["export", str(model), str(placement), "-o", str(tmp_path / "stages"), "-q"]) == 0
    assert sorted(p.name for p in (tmp_path / "stages").iterdir()) == [
        "pipeline.json",
        *(f"stage_{s}.onnx" for s in range(stages)),
    ]
    report = tmp_path / "run.json"
    code = main(["run", str(tmp_path / "stages"), "-m", str(microbatches), "-o", str(report), "-q"])
    document = json.loads(report.read_text())
    assert code == 0 and document["outputs"]["match"]
    assert len(document["stages"]) == stages and document["throughput_per_s"] > 0
    export = ["export", str(model), str(placement), "-o", str(tmp_path / "stages"), "-q"]
    assert main(export) == 2  # the directory holds a pipeline: refused without --force
    _solve_to_file(model, 1, tmp_path / "one.json")
    export[2] = str(tmp_path / "one.json")
    assert main([*export, "--force"]) == 0  # one stage now: the stale stage files go
    assert sorted(p.name for p in (tmp_path / "stages").iterdir()) == ["pipeline.json", "stage_0.onnx"]


def test_transformer_pipeline_and_prediction(tmp_path: Path) -> None:
    model = tmp_path / "transformer.onnx"
    onnx.save(transformer_model(), model)
    placement = tmp_path / "p.json"
    _solve_to_file(model, 2, placement)
    assert main(["export", str(model), str(placement), "-o", str(tmp_path / "stages"), "-q"]) == 0
    pipeline = load_pipeline(tmp_path / "stages")
    assert all("embedding" not in stage.receives for stage in pipeline.stages)  # a weight, never sent
    report = tmp_path / "run.json"
    arguments = ["run", str(tmp_path / "stages"), "-m", "3", "--repeats", "2", "-o", str(report), "-q"]
    assert main([*arguments, "--compare", str(placement)]) == 0
    comparison = json.loads(report.read_text())["comparison"]
    assert comparison["throughput"]["predicted_per_s"] > 0
    assert len(comparison["stages"]) == 2
    assert all(np.isfinite(row["relative_error"]) for row in comparison["stages"])


def test_compare_refuses_a_placement_of_other_stages(tmp_path: Path, capsys) -> None:
    model = LIGHT / "light_squeezenet.onnx"
    _solve_to_file(model, 2, tmp_path / "two.json")
    _solve_to_file(model, 3, tmp_path / "three.json")
    assert main(["export", str(model), str(tmp_path / "two.json"), "-o", str(tmp_path / "stages"), "-q"]) == 0
    capsys.readouterr()
    assert main(["run", str(tmp_path / "stages"), "--compare", str(tmp_path / "three.json")]) == 2
    assert "not the ones exported" in capsys.readouterr().err


def test_weights_without_their_data_file_are_materialised(tmp_path: Path) -> None:
    model = tmp_path / "shapes_only.onnx"
    onnx.save(
        transformer_model(layers=1),
        model,
        save_as_external_data=True,
        location="weights.bin",
        size_threshold=0,
    )
    (tmp_path / "weights.bin").unlink()  # the file now carries only the weights' shapes
    instance = partition.make_instance(model, THREE, 2)
    result = partition.solve(instance)
    pipeline = export_stages(model, instance, result.placement, tmp_path / "stages")
    for stage in pipeline.stages:
        stage_model = onnx.load(tmp_path / "stages" / stage.model_file)  # self-contained: no data file
        assert all(not onnx.external_data_helper.uses_external_data(t) for t in stage_model.graph.initializer)
    report = run_pipeline(tmp_path / "stages", 2)
    assert report.outputs_match and max(report.max_abs_diff.values()) <= 1e-5


def test_absent_constants_are_filled_so_the_model_stays_finite() -> None:
    # Exporters may put scalar constants (a Pow exponent) and boolean masks in external data;
    # random values there turn GPT-2's outputs into NaN, so they get neutral values instead.
    from onnx import TensorProto, helper

    from partition.fill import _random_weight

    scalar = helper.make_tensor("exponent", TensorProto.FLOAT, [], [0.0])
    mask = helper.make_tensor("mask", TensorProto.BOOL, [2, 2], [False] * 4)
    weight = helper.make_tensor("w", TensorProto.FLOAT, [3, 4], [0.0] * 12)
    assert _random_weight(scalar).item() == 1.0
    assert _random_weight(mask).all()
    assert _random_weight(weight).std() > 0


def _shape_ops_model() -> onnx.ModelProto:
    """Resize → Slice → Reshape → Unsqueeze → Tile → Expand → Relu: every second input is a
    shape-like constant, so the output depends on nothing but those constants and ``x``."""
    from onnx import TensorProto, helper

    constants = {
        "scales": np.array([1, 1, 2, 2], dtype=np.float32),
        "starts": np.array([0], dtype=np.int64),
        "ends": np.array([6], dtype=np.int64),
        "axes": np.array([3], dtype=np.int64),
        "shape": np.array([1, 2, 48], dtype=np.int64),
        "unsqueeze_axes": np.array([1], dtype=np.int64),
        "repeats": np.array([1, 2, 1, 1], dtype=np.int64),
        "expand_shape": np.array([3, 2, 2, 48], dtype=np.int64),
    }
    nodes = [
        helper.make_node("Resize", ["x", "", "scales"], ["up"], name="resize", mode="linear"),
        helper.make_node("Slice", ["up", "starts", "ends", "axes"], ["cut"], name="slice"),
        helper.make_node("Reshape", ["cut", "shape"], ["flat"], name="reshape"),
        helper.make_node("Unsqueeze", ["flat", "unsqueeze_axes"], ["lifted"], name="unsqueeze"),
        helper.make_node("Tile", ["lifted", "repeats"], ["tiled"], name="tile"),
        helper.make_node("Expand", ["tiled", "expand_shape"], ["wide"], name="expand"),
        helper.make_node("Relu", ["wide"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "shape_ops",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(value, name) for name, value in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return onnx.shape_inference.infer_shapes(model)  # value_info, as exporters write it


def _shapes_only(model: onnx.ModelProto, path: Path) -> None:
    """Save a copy with every initializer in a data file, then delete the file: dims remain."""
    onnx.save(
        onnx.ModelProto.FromString(model.SerializeToString()),
        path,
        save_as_external_data=True,
        location=f"{path.stem}.bin",
        size_threshold=0,
    )
    (path.parent / f"{path.stem}.bin").unlink()


def _more_shape_ops_model() -> onnx.ModelProto:
    """Pad, ReduceSum, Squeeze, Split, TopK, Range and ConstantOfShape with shape-like constants
    in the form the fill rebuilds them (growth at the end, first elements kept)."""
    from onnx import TensorProto, helper

    constants = {
        "pads": np.array([0, 0, 0, 0, 1, 2], dtype=np.int64),
        "reduce_axes": np.array([1], dtype=np.int64),
        "squeeze_axes": np.array([1], dtype=np.int64),
        "split": np.array([2, 4], dtype=np.int64),
        "k": np.array([3], dtype=np.int64),
        "start": np.array(0.0, dtype=np.float32),
        "limit": np.array(5.0, dtype=np.float32),
        "delta": np.array(1.0, dtype=np.float32),
        "fill_shape": np.array([2, 3], dtype=np.int64),
    }
    nodes = [
        helper.make_node("Pad", ["x", "pads"], ["padded"], name="pad"),
        helper.make_node("ReduceSum", ["padded", "reduce_axes"], ["summed"], name="sum", keepdims=1),
        helper.make_node("Squeeze", ["summed", "squeeze_axes"], ["flat"], name="squeeze"),
        helper.make_node("Split", ["flat", "split"], ["left", "right"], name="split", axis=1),
        helper.make_node("TopK", ["right", "k"], ["top", "where"], name="topk"),
        helper.make_node("Range", ["start", "limit", "delta"], ["steps"], name="range"),
        helper.make_node("ConstantOfShape", ["fill_shape"], ["ones"], name="fill"),
        helper.make_node("Add", ["left", "left"], ["double"], name="double"),
        helper.make_node("Mul", ["top", "top"], ["square"], name="square"),
        helper.make_node("Add", ["x", "x"], ["x2"], name="x2"),
        helper.make_node("ReduceMax", ["x2"], ["peak"], name="peak", keepdims=0),
        helper.make_node("Mul", ["steps", "peak"], ["ramp"], name="ramp"),
        helper.make_node("Mul", ["ones", "peak"], ["level"], name="level"),
    ]
    graph = helper.make_graph(
        nodes,
        "more_shape_ops",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [
            helper.make_tensor_value_info(y, TensorProto.FLOAT, None)
            for y in ("double", "square", "ramp", "level")
        ],
        [onnx.numpy_helper.from_array(value, name) for name, value in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return onnx.shape_inference.infer_shapes(model, data_prop=True)


@pytest.mark.parametrize("build", [_shape_ops_model, _more_shape_ops_model])
def test_absent_shape_inputs_are_rebuilt_exactly(tmp_path: Path, build) -> None:
    from partition.fill import load_runnable_model

    original = build()
    path = tmp_path / "shapes_only.onnx"
    _shapes_only(original, path)
    x = (
        np.random.default_rng(0)
        .standard_normal([d.dim_value for d in original.graph.input[0].type.tensor_type.shape.dim])
        .astype(np.float32)
    )
    names = [y.name for y in original.graph.output]
    expected = ort.InferenceSession(original.SerializeToString(), providers=["CPUExecutionProvider"])
    filled = ort.InferenceSession(
        load_runnable_model(path).SerializeToString(), providers=["CPUExecutionProvider"]
    )
    for got, want in zip(filled.run(names, {"x": x}), expected.run(names, {"x": x}), strict=True):
        np.testing.assert_array_equal(got, want)  # exact: the same function as with the data file


def test_resize_with_absent_scales_runs_as_a_pipeline(tmp_path: Path) -> None:
    path = tmp_path / "shape_ops.onnx"
    _shapes_only(_shape_ops_model(), path)
    instance = partition.make_instance(path, THREE, 2)
    placement = _hand_placement(
        instance, [["resize", "slice", "reshape"], ["unsqueeze", "tile", "expand", "relu"]]
    )
    export_stages(path, instance, placement, tmp_path / "stages")
    report = run_pipeline(tmp_path / "stages", 2)
    assert report.outputs_match and report.max_abs_diff["y"] == 0.0


def test_absent_shape_input_without_static_shapes_is_one_clear_error(tmp_path: Path) -> None:
    from partition.errors import ModelError
    from partition.fill import load_runnable_model

    model = _shape_ops_model()
    model.graph.ClearField("value_info")  # nothing says what the Resize produces
    path = tmp_path / "unknown.onnx"
    _shapes_only(model, path)
    with pytest.raises(ModelError, match="'scales' has no data file and is the shape input of node 'resize'"):
        load_runnable_model(path)


def test_a_node_onnxruntime_fuses_is_charged_to_its_op(tmp_path: Path) -> None:
    # onnxruntime runs MatMul + Add as one Gemm named "<matmul>/MatMulAddFusion"; its time
    # once matched no op and was dropped, predicting BERT-base 2.6x too fast
    from onnx import TensorProto, helper

    from partition.onnx_import import import_onnx
    from partition.reality import measure_op_times

    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="/block/mm"),  # exporters' path names
            helper.make_node("Add", ["h", "b"], ["y"], name="/block/add"),
        ],
        "fused",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 256])],
        [
            onnx.numpy_helper.from_array(rng.standard_normal((256, 256)).astype(np.float32), "w"),
            onnx.numpy_helper.from_array(rng.standard_normal(256).astype(np.float32), "b"),
        ],
    )
    path = tmp_path / "fused.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    ops = import_onnx(path)
    times = dict(zip([op.id for op in ops.ops], measure_op_times(path, ops, repeats=3), strict=True))
    assert times["/block/mm"] > 0.0 and times["/block/add"] == 0.0  # the Add runs inside the MatMul's Gemm


def test_profile_fills_absent_shape_inputs_the_same_way(tmp_path: Path) -> None:
    # `partition profile` once zero-filled absent weights: a Resize with zero scales cannot run
    from partition.profiler import profile_model

    path = tmp_path / "shape_ops.onnx"
    _shapes_only(_shape_ops_model(), path)
    profile = profile_model(path, runs=1, warmup=0)
    assert not profile.missing and profile.op_sum > 0
