"""Imported layer times mapped onto the ops of an ONNX model with the same transformer blocks."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx_builders import transformer_model
from test_importers import PLANNER, SAILOR, _cluster

from partition.api import load_graph
from partition.cli import main
from partition.costs import RooflineModel
from partition.errors import InputError
from partition.importers import read_costs
from partition.importers.onto_onnx import map_onto_onnx, onnx_segments
from partition.instance import load_instance


def _named_transformer(path: Path, layers: int) -> Path:
    """The test transformer with exporter-style module paths: ``/model/layers.7/q`` etc."""
    model = transformer_model(layers=layers, width=16, sequence=4, vocabulary=32)
    for node in model.graph.node:
        if node.name.startswith("l") and "_" in node.name:
            block, op = node.name[1:].split("_", 1)
            node.name = f"/model/layers.{block}/{op}"
        else:
            node.name = f"/model/{'embed' if node.name == 'embed' else 'head'}/{node.name}"
    onnx.save(model, path)
    return path


def test_opt350_block_times_are_split_over_the_block_ops(tmp_path: Path) -> None:
    model = _named_transformer(tmp_path / "t24.onnx", 24)
    graph = load_graph(model)
    segment, blocks = onnx_segments(graph)
    assert blocks == 24 and set(np.unique(segment)) == set(range(26))
    imported = read_costs("sailor", SAILOR, model="OPT-350", microbatch=1, tp=1)
    mapped = map_onto_onnx(imported, graph, model)
    document = json.loads(SAILOR.read_text())["OPT-350"]
    for type_name, gpu in (("A100-40GB", "A100-40"), ("V100-16GB", "V100-16")):
        times = mapped.times[type_name]
        for s in range(26):  # layer s of the file is segment s: embedding, 24 blocks, head
            assert times[segment == s].sum() == pytest.approx(document[gpu]["1"]["1"][str(s)][0], rel=1e-12)
    # within a block, shares follow the roofline: 4× the FLOPs of q in the MLP's up projection
    device = imported.catalog().device_types["A100-40GB"]
    up, q = graph.index["/model/layers.3/up"], graph.index["/model/layers.3/q"]
    ratio = RooflineModel().op_time(graph.ops[up], device) / RooflineModel().op_time(graph.ops[q], device)
    assert mapped.times["A100-40GB"][up] / mapped.times["A100-40GB"][q] == pytest.approx(ratio)


def test_cli_import_onto_onnx_then_solve(tmp_path: Path) -> None:
    model = _named_transformer(tmp_path / "t32.onnx", 32)
    cluster = _cluster(tmp_path, {"GH200-96GB": 2})
    out = tmp_path / "inst.json"
    argv = ["import", "sailor", str(SAILOR), "--model", "LLAMA-3-8", "--onnx", str(model), "--cluster"]
    assert main([*argv, str(cluster), "-k", "2", "-o", str(out), "-q"]) == 0
    instance = load_instance(out)
    assert len(instance.graph.ops) == len(load_graph(model).ops)
    assert {p.value for p in instance.costs.provenance.ravel()} == {"imported"}
    layers = json.loads(SAILOR.read_text())["LLAMA-3-8"]["GH-96"]["1"]["1"]
    # LLaMA's final norm and output projection are two layers of the file, both mapped to the head
    assert instance.costs.times.sum() == pytest.approx(sum(layer[0] for layer in layers.values()), rel=1e-9)
    assert instance.source["blocks"] == 32 and instance.source["model"] == "LLAMA-3-8"
    placement = tmp_path / "placement.json"
    assert main(["solve", str(out), "--solver", "order-dp", "-o", str(placement), "-q"]) == 0


def test_mismatched_layer_counts_are_refused_in_one_line(tmp_path: Path, capsys) -> None:
    model = _named_transformer(tmp_path / "t12.onnx", 12)
    cluster = _cluster(tmp_path, {"A100-40GB": 2})
    argv = [
        "import",
        "sailor",
        str(SAILOR),
        "--model",
        "OPT-350",
        "--onnx",
        str(model),
        "--cluster",
        str(cluster),
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "the profile has 24 transformer blocks, the ONNX model has 12" in err and "\n" not in err
    flat = tmp_path / "flat.onnx"
    plain = transformer_model(layers=2, width=16, sequence=4, vocabulary=32)  # names without module paths
    onnx.save(plain, flat)
    with pytest.raises(InputError, match="no numbered blocks"):
        map_onto_onnx(read_costs("sailor", SAILOR, model="OPT-350"), load_graph(flat), flat)


def test_sailor_layer_kinds_follow_the_repeated_block_size() -> None:
    info = json.loads((PLANNER / "llm_info.json").read_text())
    imported = read_costs("sailor", SAILOR, model="LLAMA-3-8", microbatch=1, tp=1)
    kinds = [op.op_type for op in imported.graph.ops]
    assert len(kinds) == len(info["LLAMA-3-8"]["1"]) == 35
    assert kinds == ["embedding", *["transformer"] * 32, "head", "head"]


def test_profiles_without_transformer_blocks_are_refused(tmp_path: Path) -> None:
    from test_importers import PIPEDREAM_FILES

    model = _named_transformer(tmp_path / "t2.onnx", 2)
    imported = read_costs("pipedream", PIPEDREAM_FILES[0], device_type="A100-80GB")
    with pytest.raises(InputError, match="no transformer blocks to map; import it without --onnx"):
        map_onto_onnx(imported, load_graph(model), model)
