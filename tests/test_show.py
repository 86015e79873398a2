"""``partition show`` renders real pictures and traces; ``partition compare`` refuses mismatches."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from conftest import random_dag_instance

import partition
from partition.cli import main
from partition.jsonio import dumps, write_atomic
from partition.placement_view import view_of
from partition.schedule import COMPUTE, simulate

HOSTS = [{"devices": {"H100-SXM": 2, "A100-80GB": 2}, "intra_link": "nvlink4"}]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def solved(tmp_path: Path) -> tuple[partition.Instance, Path, Path]:
    instance = random_dag_instance(1, 12, hosts=HOSTS, stages=3, edge_probability=0.15)
    result = partition.solve(instance, "order-dp")
    assert result.placement.num_stages == 3  # a picture worth drawing: 3 stages, 2 device types
    instance_path, placement_path = tmp_path / "inst.json.gz", tmp_path / "placement.json"
    write_atomic(instance_path, dumps(instance.to_json()))
    write_atomic(placement_path, dumps(partition.result_json(instance, result)))
    return instance, instance_path, placement_path


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_show_writes_png_dot_and_trace(solved, tmp_path: Path) -> None:
    instance, instance_path, placement_path = solved
    png, dot, trace = tmp_path / "fig.png", tmp_path / "g.dot", tmp_path / "t.json"
    args = ["show", str(placement_path), "--instance", str(instance_path), "-o", str(png)]
    assert main([*args, "--dot", str(dot), "--trace", str(trace), "--micro-batches", "3", "-q"]) == 0
    data = png.read_bytes()
    width, height = _png_size(data)
    assert 800 <= width <= 2000 and 500 <= height <= 1500 and len(data) > 20_000
    document = json.loads(placement_path.read_text())
    stages = len(document["stages"])
    graph = dot.read_text()
    assert graph.startswith("digraph") and graph.count("subgraph cluster_") == stages
    assert all(f'"{op.id}" [label=' in graph for op in instance.graph.ops)
    events = json.loads(trace.read_text())["traceEvents"]
    computes = [e for e in events if e["ph"] == "X" and e["cat"] == COMPUTE]
    assert len(computes) == stages * 3 and all(e["dur"] > 0 for e in computes)


def test_show_from_the_file_alone_and_bad_requests(solved, tmp_path: Path, capsys) -> None:
    _, _, placement_path = solved
    assert main(["show", str(placement_path), "-q"]) == 0
    _png_size(placement_path.with_suffix(".png").read_bytes())
    assert main(["show", str(placement_path), "-q"]) == 2
    assert "file exists" in capsys.readouterr().err
    assert main(["show", str(placement_path), "--dot", str(tmp_path / "g.dot"), "--force"]) == 2
    assert "--dot needs --instance" in capsys.readouterr().err


def test_simulated_pipeline_reaches_one_micro_batch_per_bottleneck(solved) -> None:
    _, _, placement_path = solved
    view = view_of(json.loads(placement_path.read_text()), "p")
    last = len(view.stages) - 1
    ends = [max(s.end for s in simulate(view, 8) if s.stage == last and s.micro_batch == m) for m in range(8)]
    assert ends[-1] - ends[-2] == pytest.approx(view.bottleneck_s, rel=1e-9)
    assert ends[0] == pytest.approx(view.latency_s, rel=1e-9)  # the first micro-batch never waits


def test_compare_side_by_side_and_refuses_other_instances(solved, tmp_path: Path, capsys) -> None:
    instance, instance_path, placement_path = solved
    one_stage = partition.Placement((0,) * len(instance.graph.ops), (0,))
    evaluation = partition.evaluate(instance, one_stage)
    assert evaluation.valid
    result = partition.Result(
        instance.name, partition.Status.FEASIBLE, "by-hand", {}, 0.0, 0.0, one_stage, evaluation
    )
    other = tmp_path / "one-stage.json"
    write_atomic(other, dumps(partition.result_json(instance, result)))
    assert main(["compare", str(placement_path), str(other), "--instance", str(instance_path)]) == 0
    out = capsys.readouterr().out
    best = json.loads(placement_path.read_text())["bottleneck_s"]
    assert f"{evaluation.bottleneck / best:.4f}× A's (worse)" in out
    first = partition.placement_from_json(instance, json.loads(placement_path.read_text()))
    moved = sum(s != 0 for s in first.stage_of)  # B has every op in stage 0
    assert moved > 0 and f"{moved} of {len(instance.graph.ops)} ops are in a different stage" in out
    assert "by-hand" in out

    different = instance.with_options(stages=2)
    elsewhere = tmp_path / "k2.json"
    write_atomic(elsewhere, dumps(partition.result_json(different, partition.solve(different, "order-dp"))))
    assert main(["compare", str(placement_path), str(elsewhere)]) == 2
    assert "different instances (stages: 3 vs 2)" in capsys.readouterr().err
