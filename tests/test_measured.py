"""Measured cost tables: profiling, mixing with modelled costs, provenance, rejection of bad tables."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import LIGHT
from onnx import TensorProto, helper

import partition
from partition.cli import main
from partition.costs import Provenance
from partition.errors import InputError
from partition.measured import apply_measured, load_cost_table, with_device_types
from partition.profiler import profile_model

SQUEEZENET = LIGHT / "light_squeezenet.onnx"


def _tiny_model(path: Path) -> Path:
    """x → MatMul(W) → Relu → MatMul(W2) → y, with unnamed nodes and a symbolic batch dim."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])
    weights = [
        helper.make_tensor("w1", TensorProto.FLOAT, [64, 128], np.ones(64 * 128, dtype=np.float32)),
        helper.make_tensor("w2", TensorProto.FLOAT, [128, 16], np.ones(128 * 16, dtype=np.float32)),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "w2"], ["y"]),
    ]
    model = helper.make_model(helper.make_graph(nodes, "tiny", [x], [y], weights))
    model.opset_import[0].version = 17
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def squeezenet_costs(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("costs") / "squeezenet.json"
    assert main(["profile", str(SQUEEZENET), "--runs", "3", "--warmup", "1", "-o", str(path), "-q"]) == 0
    return path


def _cluster_with(tmp_path: Path, device_type: str) -> Path:
    path = tmp_path / "cluster.json"
    hosts = [{"name": "h0", "devices": {device_type: 1, "A100-80GB": 2}, "intra_link": "pcie4"}]
    path.write_text(json.dumps({"name": "cpu-and-gpus", "hosts": hosts, "inter_host_link": "eth-100g"}))
    return path


def test_profile_tiny_model_maps_every_op(tmp_path: Path) -> None:
    model = _tiny_model(tmp_path / "tiny.onnx")
    profile = profile_model(model, runs=3, warmup=1, dims={"batch": 8})
    graph = partition.load_graph(str(model), dims={"batch": 8})
    assert set(profile.table.ops) == {op.id for op in graph.ops} == {"MatMul_0", "relu", "MatMul_2"}
    assert profile.missing == ()
    assert all(t.median > 0 and t.low <= t.median <= t.high for t in profile.table.ops.values())
    whole = profile.table.whole_model
    assert (
        whole is not None
        and whole.runs == 3
        and whole.median >= max(t.median for t in profile.table.ops.values())
    )
    assert profile.table.device_type.startswith("cpu-") and profile.table.settings["threads"] == 1
    assert 0 < profile.table.notes["whole_model_cpu_s"] < 0.1  # the thread's CPU time per run (with binding)


def test_profile_runs_exporter_quirks(tmp_path: Path) -> None:
    """Resize scales in absent external data (U-Net) and an undeclared com.microsoft domain
    (onnxruntime-fused BERT) still profile: scales from the declared shapes, domain declared."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8])
    scales = helper.make_tensor("scales", TensorProto.FLOAT, [4], [0.0] * 4)
    scales.ClearField("float_data")
    scales.data_location = TensorProto.EXTERNAL
    scales.external_data.add(key="location", value="absent.bin")
    nodes = [
        helper.make_node("Resize", ["x", "", "scales"], ["up"], name="resize", mode="nearest"),
        helper.make_node("Gelu", ["up"], ["g"], name="gelu", domain="com.microsoft"),
        helper.make_node(
            "Constant", [], ["c"], name="c", value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])
        ),
        helper.make_node("Add", ["g", "c"], ["y"], name="add"),  # a constant to fold: shape inference runs
    ]
    graph = helper.make_graph(nodes, "quirks", [x], [y], [scales])
    for name, shape in (("up", [1, 2, 8, 8]), ("g", [1, 2, 8, 8]), ("c", [1])):  # declared, as exporters do
        graph.value_info.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "quirks.onnx"
    path.write_bytes(model.SerializeToString())
    profile = profile_model(path, runs=2, warmup=1)
    assert {"resize", "gelu", "add"} <= set(profile.table.ops) and profile.missing == ()


def test_profile_squeezenet_per_op_means_add_up_to_the_run(squeezenet_costs: Path) -> None:
    table = load_cost_table(squeezenet_costs)
    graph = partition.load_graph(str(SQUEEZENET))
    assert set(table.ops) == {op.id for op in graph.ops}
    assert table.whole_model is not None and table.whole_model.mean is not None
    op_mean_sum = sum(t.mean for t in table.ops.values())
    assert 0.5 * table.whole_model.mean < op_mean_sum <= 1.01 * table.whole_model.mean


def test_solve_mixes_measured_and_modelled_columns(tmp_path: Path, squeezenet_costs: Path) -> None:
    device_type = load_cost_table(squeezenet_costs).device_type
    cluster = _cluster_with(tmp_path, device_type)
    instance_path, placement_path = tmp_path / "inst.json", tmp_path / "placement.json"
    common = [str(SQUEEZENET), "--cluster", str(cluster), "-k", "3", "--costs", str(squeezenet_costs), "-q"]
    assert main(["instance", *common, "-o", str(instance_path)]) == 0
    instance = partition.load_instance(instance_path)
    assert instance.costs.column_provenance(device_type) is Provenance.MEASURED
    assert instance.costs.column_provenance("A100-80GB") is Provenance.ROOFLINE
    measured = load_cost_table(squeezenet_costs).times(instance.graph)
    assert np.allclose(instance.costs.column(device_type), measured)
    assert main(["solve", *common, "-o", str(placement_path)]) == 0
    stages = json.loads(placement_path.read_text())["stages"]
    for stage in stages:
        expected = "measured" if stage["device_type"] == device_type else "roofline"
        assert stage["cost_provenance"] == {expected: stage["num_ops"]}


def test_partial_table_gives_per_op_provenance_that_round_trips(
    tmp_path: Path, squeezenet_costs: Path
) -> None:
    document = json.loads(squeezenet_costs.read_text())
    kept = sorted(document["ops"])[:10]
    document["ops"] = {k: document["ops"][k] for k in kept}
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps(document))
    table = load_cost_table(partial)
    cluster = partition.load_cluster(
        _cluster_with(tmp_path, table.device_type), catalog=with_device_types([table.device])
    )
    instance = apply_measured(partition.make_instance(str(SQUEEZENET), cluster, 2), table)
    column = instance.costs.provenance[:, instance.costs.type_names.index(table.device_type)]
    assert {instance.graph.ops[v].id for v, p in enumerate(column) if p is Provenance.MEASURED} == set(kept)
    document = instance.to_json()
    assert document["costs"]["provenance"][0] == "mixed"
    again = partition.parse_instance(json.loads(json.dumps(document)))
    assert (again.costs.provenance == instance.costs.provenance).all()


def test_version_1_instance_with_per_type_provenance_still_loads(tmp_path: Path) -> None:
    document = partition.make_instance(str(SQUEEZENET), "hetero-2h100-4a100-2l4", 2).to_json()
    assert "op_provenance" not in document["costs"]
    document["costs"]["provenance"] = ["imported", "roofline", "measured"]
    instance = partition.parse_instance(document)
    assert [instance.costs.column_provenance(t).value for t in instance.costs.type_names] == [
        "imported",
        "roofline",
        "measured",
    ]
    del document["costs"]["provenance"]
    assert partition.parse_instance(document).costs.column_provenance("L4") is Provenance.ROOFLINE


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda d: d["ops"][sorted(d["ops"])[0]].update(median_s=-1.0),
            r"op '\w+': time -1.0 is not a non-negative",
        ),
        (
            lambda d: d["ops"][sorted(d["ops"])[1]].update(median_s="nan"),
            r"op '\w+': time 'nan' is not a number",
        ),
        (lambda d: d["ops"].update(bogus_node={"median_s": 1e-3}), r"op 'bogus_node' is not an op of model"),
        (lambda d: d["model"].update(fingerprint="0123456789abcdef"), r"measured on another model"),
        (lambda d: d.update(version=7), r"unsupported cost-table version 7"),
    ],
)
def test_bad_cost_tables_are_rejected_naming_the_entry(
    tmp_path: Path, squeezenet_costs: Path, capsys, edit, message: str
) -> None:
    document = json.loads(squeezenet_costs.read_text())
    edit(document)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(document))
    cluster = _cluster_with(tmp_path, document["device_type"])
    assert (
        main(["solve", str(SQUEEZENET), "--cluster", str(cluster), "-k", "2", "--costs", str(bad), "-q"]) == 2
    )
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    with pytest.raises(InputError, match=message):
        table = load_cost_table(bad)
        apply_measured(partition.make_instance(str(SQUEEZENET), "homo-4a100", 2), table)


def test_table_for_another_model_is_rejected(tmp_path: Path, squeezenet_costs: Path, capsys) -> None:
    cluster = _cluster_with(tmp_path, load_cost_table(squeezenet_costs).device_type)
    other = str(LIGHT / "light_bvlc_alexnet.onnx")
    assert main(["solve", other, "--cluster", str(cluster), "-k", "2", "--costs", str(squeezenet_costs)]) == 2
    assert "measured on another model ('squeezenet_old'" in capsys.readouterr().err
