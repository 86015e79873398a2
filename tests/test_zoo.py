"""Every model of the committed zoo (``models/``) and every ``light_*.onnx`` model imports fully.

The zoo files are graph-only (weights stripped to dims, their data file absent), so these tests
need neither torch nor the weights. Checks, per model: no unknown dim; parameter bytes within 1%
of what torch counted at export and of the published parameter count; matmul/conv FLOPs within
5% of torch's FLOP counter (``torch_matmul_gflops`` in the manifest) and, for the decoders, of
2·params·tokens plus attention scores.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
from conftest import LIGHT

from partition.cli import main
from partition.cli.inspect_cmd import layer_of, to_dot
from partition.graph import OpClass, OpGraph
from partition.onnx_import import import_onnx

MODELS = Path(__file__).resolve().parents[1] / "models"
MANIFEST = json.loads((MODELS / "manifest.json").read_text())


@cache
def _graph(name: str) -> OpGraph:
    return import_onnx(MODELS / MANIFEST[name]["file"], dims=MANIFEST[name].get("dims"))


def _matmul_flops(graph: OpGraph) -> float:
    return sum(op.flops for op in graph.ops if op.op_class in (OpClass.MATMUL, OpClass.CONV))


def test_zoo_is_complete_and_small() -> None:
    expected = {
        "gpt2",
        "gpt2_dynamic",
        "bert_base",
        "vit_b16",
        "resnet50",
        "t5_small",
        "clip_b32",
        "llama_7b",
    }
    expected |= {"mixtral_moe", "unet"}
    assert expected <= set(MANIFEST)
    for entry in MANIFEST.values():
        assert (MODELS / entry["file"]).stat().st_size <= 2.5e6
        assert not (MODELS / entry["file"]).with_suffix(".weights").exists()


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_zoo_model_parameters_and_flops(name: str) -> None:
    entry = MANIFEST[name]
    graph = _graph(name)  # raises on any unknown dim
    assert graph.total_weight_bytes == pytest.approx(entry["parameter_bytes"], rel=0.01)
    if entry["reference_parameters"]:
        assert entry["parameters"] == pytest.approx(entry["reference_parameters"], rel=0.01)
    assert _matmul_flops(graph) / 1e9 == pytest.approx(entry["torch_matmul_gflops"], rel=0.05)


def _decoder_flops(
    entry: dict, seq: int, embedding_params: float, active_params: float, batch: int = 1
) -> float:
    """2·(matmul parameters)·tokens + 4·layers·batch·seq²·hidden (scores and weighted sum)."""
    config = entry["config"]
    layers = config.get("num_hidden_layers", config.get("n_layer", 12))
    hidden = config.get("hidden_size", config.get("n_embd", 768))
    matmul_params = active_params - embedding_params
    return 2.0 * matmul_params * batch * seq + 4.0 * layers * batch * seq**2 * hidden


def test_gpt2_flops_match_two_params_per_token() -> None:
    entry = MANIFEST["gpt2"]
    tokens = entry["inputs"]["input_ids"][1]
    # the position table is looked up, not multiplied; the token table is also the LM head
    expected = _decoder_flops(entry, tokens, 1024 * 768, entry["parameters"])
    assert _matmul_flops(_graph("gpt2")) == pytest.approx(expected, rel=0.05)


def test_symbolic_dims_need_pinning_then_resolve_everywhere(capsys) -> None:
    path = str(MODELS / "gpt2_dynamic.onnx")
    assert main(["inspect", path]) != 0
    assert "has no value; pass --dim batch=N" in capsys.readouterr().err
    pinned = import_onnx(path, dims={"batch": 2, "seq": 64})
    fixed = _graph("gpt2")
    assert len(pinned.ops) <= len(fixed.ops) * 1.05  # the shape arithmetic folded away
    assert pinned.total_weight_bytes == pytest.approx(fixed.total_weight_bytes, rel=0.01)
    entry = MANIFEST["gpt2"]
    expected = _decoder_flops(entry, 64, 1024 * 768, entry["parameters"], batch=2)
    assert _matmul_flops(pinned) == pytest.approx(expected, rel=0.05)


def test_llama_7b_flops_match_two_params_per_token() -> None:
    entry = MANIFEST["llama_7b"]
    tokens = entry["inputs"]["input_ids"][1]
    config = entry["config"]
    assert config.get("num_hidden_layers", 32) == 32 and config.get("hidden_size", 4096) == 4096
    expected = _decoder_flops(entry, tokens, 32000 * 4096, entry["parameters"])
    assert entry["parameters"] == pytest.approx(6.738e9, rel=0.01)
    assert _matmul_flops(_graph("llama_7b")) == pytest.approx(expected, rel=0.05)


def test_mixtral_flops_count_only_routed_experts() -> None:
    entry = MANIFEST["mixtral_moe"]
    config = entry["config"]
    tokens = entry["inputs"]["input_ids"][1]
    hidden, inter, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    experts, top_k = config["num_local_experts"], config["num_experts_per_tok"]
    idle = layers * (experts - top_k) * 3 * hidden * inter  # parameters of experts a token skips
    capacity = top_k * tokens // experts
    routing = layers * 2 * (2.0 * tokens * experts * capacity * hidden)  # dispatch + combine einsums
    vocab = config.get("vocab_size", 32000)
    expected = _decoder_flops(entry, tokens, vocab * hidden, entry["parameters"] - idle) + routing
    assert _matmul_flops(_graph("mixtral_moe")) == pytest.approx(expected, rel=0.05)
    assert any(op.op_type == "Einsum" for op in _graph("mixtral_moe").ops)


def test_onnxruntime_fused_bert_costs_contrib_ops_like_the_plain_graph() -> None:
    fused, plain = _graph("bert_ort_fused"), _graph("bert_base")
    types = {op.op_type for op in fused.ops}
    assert {"com.microsoft.Attention", "com.microsoft.SkipLayerNormalization"} <= types
    assert all(op.op_class is not OpClass.OTHER for op in fused.ops)
    assert _matmul_flops(fused) == pytest.approx(_matmul_flops(plain), rel=0.01)
    layers = [layer_of(op.module) for op in fused.ops if op.op_type == "com.microsoft.Attention"]
    assert layers == [f"/model/encoder/layer.{i}" for i in range(12)]


def test_module_paths_group_ops_by_layer() -> None:
    graph = _graph("gpt2")
    layers = {layer_of(op.module) for op in graph.ops}
    assert {f"/model/transformer/h.{i}" for i in range(12)} <= layers
    assert sum(1 for op in graph.ops if not op.module) <= 0.05 * len(graph.ops)


def test_tied_embedding_is_one_weight_used_twice() -> None:
    graph = _graph("gpt2")
    vocab_table = 50257 * 768 * 4
    tables = [w for w, size in graph.weights.items() if size == vocab_table]
    assert len(tables) == 1  # the embedding lookup and the LM head share one stored table
    users = sorted(op.op_type for op in graph.ops if tables[0] in op.weights)
    assert users == ["Gather", "MatMul"]


def test_inspect_checks_the_manifest_and_writes_dot(tmp_path: Path, capsys) -> None:
    dot = tmp_path / "gpt2.dot"
    assert main(["inspect", str(MODELS / "gpt2.onnx"), "--json", "--dot", str(dot)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert abs(info["manifest"]["param_bytes_error"]) < 0.01
    assert abs(info["manifest"]["matmul_gflops_error"]) < 0.05
    assert [row["layer"] for row in info["layers"]].count("/model/transformer/h.11") == 1
    text = dot.read_text()
    graph = _graph("gpt2")
    assert text.startswith("digraph") and text == to_dot(graph)
    assert text.count(" [label=") - text.count("->") == len(graph.ops)
    assert main(["inspect", str(MODELS / "gpt2.onnx"), "--dot", str(dot)]) != 0  # no silent overwrite
    assert "--force" in capsys.readouterr().err


def test_the_layer_table_shortens_long_paths_at_a_module(capsys) -> None:
    assert main(["inspect", str(MODELS / "vit_b16.onnx")]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("layer "))
    rows = [line.split()[0] for line in lines[header + 1 :]]
    assert "…/vit/embeddings/patch_embeddings/projection" in rows  # its start, /model, cut off
    assert all(row.startswith(("/", "…/")) for row in rows)


@pytest.mark.parametrize("path", sorted(LIGHT.glob("light_*.onnx")), ids=lambda p: p.stem)
def test_light_models_import_completely(path: Path) -> None:
    graph = import_onnx(path)
    assert graph.total_weight_bytes > 1e6 and _matmul_flops(graph) > 1e8
    assert all(op.op_class is not OpClass.OTHER for op in graph.ops)
