"""Calibration recovers a known roofline model and reports errors before and after."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import LIGHT

import partition
from partition.calibrate import errors, fit, load_calibrated
from partition.cli import main
from partition.costs import Provenance, RooflineModel
from partition.devices import DeviceType
from partition.graph import OpClass
from partition.measured import MeasuredTable, OpTiming, graph_fingerprint, load_cost_table

DEVICE = DeviceType("cpu-test", {"fp32": 1e11}, 1e10, 16e9)
TRUE = RooflineModel(
    efficiency={
        OpClass.MATMUL: (0.4, 0.5),
        OpClass.CONV: (0.25, 0.6),
        OpClass.ELEMENTWISE: (0.5, 0.3),
        OpClass.REDUCTION: (0.5, 0.2),
        OpClass.DATA_MOVEMENT: (1.0, 0.4),
        OpClass.OTHER: (0.3, 0.5),
    },
    launch_overhead=2e-5,
)


def _synthetic_table(model: str, noise: float, seed: int) -> tuple[partition.OpGraph, MeasuredTable]:
    graph = partition.load_graph(str(LIGHT / f"{model}.onnx"))
    rng = np.random.default_rng(seed)
    ops = {}
    for op in graph.ops:
        t = TRUE.op_time(op, DEVICE) * float(np.exp(rng.normal(0, noise)))
        ops[op.id] = OpTiming(t, t, t, 1)
    table = MeasuredTable(DEVICE, graph.name, len(graph.ops), graph_fingerprint(graph), ops)
    return graph, table


def test_fit_recovers_a_known_model_from_exact_times() -> None:
    pairs = [_synthetic_table(m, 0.0, 0) for m in ("light_squeezenet", "light_inception_v1")]
    fitted = fit(pairs, DEVICE)
    for graph, table in pairs:
        before = errors(graph, table, RooflineModel(), DEVICE)
        after = errors(graph, table, fitted, DEVICE)
        assert before.median > 0.3
        assert after.median < 0.02 and after.p90 < 0.05 and abs(after.whole_model) < 0.02
    assert fitted.launch_overhead == pytest.approx(TRUE.launch_overhead, rel=0.05)


def test_fit_with_noise_beats_the_defaults_on_a_held_out_model() -> None:
    train = [_synthetic_table("light_squeezenet", 0.3, 1)]
    graph, table = _synthetic_table("light_inception_v1", 0.3, 2)
    fitted = fit(train, DEVICE)
    held_out, default = errors(graph, table, fitted, DEVICE), errors(graph, table, RooflineModel(), DEVICE)
    assert held_out.median < 0.5 * default.median
    assert abs(held_out.whole_model) < 0.5 * abs(default.whole_model)


def test_cli_calibrate_reports_before_and_after(tmp_path: Path, capsys) -> None:
    model = str(LIGHT / "light_squeezenet.onnx")
    costs = tmp_path / "costs.json"
    assert main(["profile", model, "--runs", "2", "--warmup", "1", "-o", str(costs), "-q"]) == 0
    capsys.readouterr()
    out = tmp_path / "roofline.json"
    assert main(["calibrate", str(costs), model, "-o", str(out)]) == 0
    report = capsys.readouterr().out
    assert "before" in report and "after" in report and "launch overhead" in report
    document = json.loads(out.read_text())
    reported = document["errors"]["light_squeezenet"]
    assert set(reported) == {"before", "after"} and all(
        np.isfinite(reported["after"][k]) for k in ("median", "p90")
    )
    assert document["schema"] == "partition.roofline" and document["device_type"].startswith("cpu-")
    calibrated = load_calibrated(out)
    graph = partition.load_graph(model)
    after = errors(graph, load_cost_table(costs), calibrated.model, calibrated.device)
    assert after.median == pytest.approx(reported["after"]["median"]) and after.p90 == pytest.approx(
        reported["after"]["p90"]
    )
    cluster = tmp_path / "cluster.json"
    hosts = [{"name": "h0", "devices": {calibrated.device.name: 1, "L4": 1}, "intra_link": "pcie4"}]
    cluster.write_text(json.dumps({"name": "cpu-l4", "hosts": hosts}))
    instance_path = tmp_path / "inst.json"
    argv = [
        "instance",
        model,
        "--cluster",
        str(cluster),
        "-k",
        "2",
        "--roofline",
        str(out),
        "-o",
        str(instance_path),
    ]
    assert main(argv) == 0
    instance = partition.load_instance(instance_path)
    expected = [calibrated.model.op_time(op, calibrated.device) for op in instance.graph.ops]
    assert np.allclose(instance.costs.column(calibrated.device.name), expected)
    assert instance.costs.column_provenance(calibrated.device.name) is Provenance.ROOFLINE
    mixed = tmp_path / "mixed.json"
    assert main([*argv[:-2], "--costs", str(costs), "-o", str(mixed)]) == 0  # measured wins over modelled
    assert (
        partition.load_instance(mixed).costs.column_provenance(calibrated.device.name) is Provenance.MEASURED
    )
    assert main(["calibrate", str(costs)]) == 2
    assert "pairs" in capsys.readouterr().err
    assert main(["calibrate", str(costs), str(LIGHT / "light_bvlc_alexnet.onnx")]) == 2
    assert "measured on another model" in capsys.readouterr().err


def test_dispatch_overhead_is_the_run_time_between_kernels() -> None:
    """Whole runs 10 µs per op longer than their kernels (means): the fit adds 10 µs per op."""
    pairs = []
    for m, seed in (("light_squeezenet", 3), ("light_inception_v1", 4)):
        graph, table = _synthetic_table(m, 0.0, seed)
        ops = {k: OpTiming(t.median, t.low, t.high, 1, t.median) for k, t in table.ops.items()}
        run = sum(t.median for t in ops.values()) + 10e-6 * len(ops)
        pairs.append(
            (
                graph,
                MeasuredTable(
                    DEVICE,
                    graph.name,
                    len(graph.ops),
                    table.fingerprint,
                    ops,
                    OpTiming(run, run, run, 1, run),
                ),
            )
        )
    fitted = fit(pairs, DEVICE)
    assert fitted.dispatch_overhead == pytest.approx(10e-6, rel=1e-6)
    for graph, table in pairs:
        after = errors(graph, table, fitted, DEVICE)
        assert after.median < 0.02  # per-op errors compare kernel times, without dispatch
        assert abs(after.whole_run) < 1e-4
        run = table.whole_model.median  # the true kernels alone fall short by the dispatch time
        assert errors(graph, table, TRUE, DEVICE).whole_run == pytest.approx(-10e-6 * len(graph.ops) / run)
        op = graph.ops[0]
        assert fitted.op_time(op, DEVICE) == pytest.approx(fitted.kernel_time(op, DEVICE) + 10e-6)
