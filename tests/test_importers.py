"""Importers of peer profiles: known per-layer values, and every peer cost file becomes a valid instance."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import partition
from partition.cli import main
from partition.errors import InputError
from partition.importers import import_instance, read_costs
from partition.instance import Options, load_instance

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
PEERS = SHARED / "peers"
PLANNER = PEERS / "sailor" / "sailor" / "Planner"
SAILOR = PLANNER / "simulations" / "profiles_tmp.json"

if not PEERS.is_dir():
    pytest.skip("../shared/peers is absent", allow_module_level=True)

PIPEDREAM_FILES = sorted(PEERS.glob("pipedream/profiler/**/profiles/*/graph.txt"))
PIPER_FILES = sorted(PEERS.glob("piper/inputs/*.json"))
SAILOR_GPU_FILES = sorted(PLANNER.glob("sailor_planner/profiles/*/*/profile.json"))
PIPER_BASELINE_FILES = sorted(PLANNER.glob("baselines/Piper/profiles/*/*/profile.json"))
PIPER_MS = {"gnmt", "resnet"}  # derived from PipeDream profiles, in milliseconds


def _cluster(tmp_path: Path, counts: dict[str, int]) -> Path:
    path = tmp_path / "cluster.json"
    hosts = [
        {"name": f"h{i}", "devices": {t: n}, "intra_link": "pcie4"} for i, (t, n) in enumerate(counts.items())
    ]
    path.write_text(json.dumps({"name": "peers", "hosts": hosts, "inter_host_link": "ib-hdr"}))
    return path


def _solve_valid(instance: partition.Instance) -> None:
    result = partition.solve(instance, "order-dp")
    assert result.placement is not None and result.evaluation is not None
    assert partition.evaluate(instance, result.placement).valid
    assert result.lower_bound <= result.bottleneck * (1 + 1e-9)


def _pipedream_line(path: Path, node: str) -> dict[str, str]:
    line = next(x for x in path.read_text().splitlines() if x.startswith(f"{node} -- "))
    return dict(re.findall(r"(\w+)=([^,\]]+|\[[^\]]*\])", line.rsplit(" -- ", 1)[1]))


def test_pipedream_known_values() -> None:
    path = PEERS / "pipedream/profiler/image_classification/profiles/resnet50/graph.txt"
    imported = read_costs("pipedream", path, device_type="V100-32GB")
    graph, times = imported.graph, imported.times["V100-32GB"]
    for node in ("node77", "node76", "node2"):
        fields = _pipedream_line(path, node)
        v = graph.index[node]
        assert times[v] == pytest.approx(float(fields["forward_compute_time"]) * 1e-3)
        assert graph.ops[v].bytes_written == pytest.approx(float(fields["activation_size"]))
        assert graph.param_bytes[v] == pytest.approx(float(fields["parameter_size"]))
    edges = [x.split(" -- ") for x in path.read_text().splitlines() if x.startswith("\t")]
    assert len(graph.edges) == len({(u.strip(), v.strip()) for u, v in edges})


def test_pipedream_multi_output_layer_sums_its_activations() -> None:
    path = PEERS / "pipedream/profiler/translation/profiles/gnmt/graph.txt"
    graph = read_costs("pipedream", path, device_type="V100-32GB").graph
    assert graph.ops[graph.index["node7"]].bytes_written == 6291456.0 + 131072.0 + 131072.0


def test_sailor_known_values_across_gpu_types() -> None:
    document = json.loads(SAILOR.read_text())
    info = json.loads((PLANNER / "llm_info.json").read_text())
    imported = read_costs("sailor", SAILOR, model="OPT-350", microbatch=2, tp=1)
    expected = {
        "A100-40GB": "A100-40",
        "A100-80GB": "A100-80",
        "V100-16GB": "V100-16",
        "RTX-3090": "RTX-3090",
    }
    for type_name, gpu in expected.items():
        for layer in (0, 1, 25):
            measured = document["OPT-350"][gpu]["2"]["1"][str(layer)][0]
            assert imported.times[type_name][imported.graph.index[f"layer{layer}"]] == measured
    graph = imported.graph
    assert graph.param_bytes[graph.index["layer1"]] == info["OPT-350"]["1"]["1"]["params_bytes"]
    assert graph.tensors[0].bytes == 2 * info["OPT-350"]["1"]["0"]["act_output_bytes"]
    assert imported.device_types["V100-16GB"].memory == 16e9
    a100, v100 = imported.times["A100-40GB"].sum(), imported.times["V100-16GB"].sum()
    assert v100 > 2 * a100  # real heterogeneity, not one column copied


def test_piper_known_values_match_pipedream_training_time() -> None:
    imported = read_costs(
        "piper", PEERS / "piper/inputs/resnet.json", device_type="A100-80GB", time_unit="ms"
    )
    document = json.loads((PEERS / "piper/inputs/resnet.json").read_text())
    node = next(n for n in document["nodes"] if n["name"] == "node77")
    v = imported.graph.index[f"n{node['id']}"]
    fields = _pipedream_line(
        PEERS / "pipedream/profiler/image_classification/profiles/resnet50/graph.txt", "node77"
    )
    training = float(fields["forward_compute_time"]) + float(fields["backward_compute_time"])
    assert imported.times["A100-80GB"][v] == pytest.approx(training * 1e-3)
    assert imported.graph.param_bytes[v] == node["TMPCs"]["1"][0]["parameterSize"]


@pytest.mark.parametrize("path", PIPEDREAM_FILES, ids=lambda p: p.parent.name)
def test_every_pipedream_profile_imports_and_solves(path: Path) -> None:
    _solve_valid(import_instance("pipedream", path, "homo-4a100", Options(stages=3)))


@pytest.mark.parametrize("path", PIPER_FILES + PIPER_BASELINE_FILES, ids=lambda p: "-".join(p.parts[-3:]))
def test_every_piper_input_imports_and_solves(path: Path) -> None:
    unit = "ms" if path.stem in PIPER_MS else "s"
    document = json.loads(path.read_text())
    document = document if "nodes" in document else document[min(document, key=int)]
    tp = min(int(t) for t in document["nodes"][0]["TMPCs"])
    instance = import_instance("piper", path, "homo-4a100", Options(stages=3), time_unit=unit, tp=tp)
    _solve_valid(instance)


@pytest.mark.parametrize("model", ["OPT-350", "GPT-Neo-2.7", "LLAMA-3-8", "OPT-30"])
def test_every_sailor_model_imports_on_its_gpu_types(tmp_path: Path, model: str) -> None:
    profiles = json.loads(SAILOR.read_text())[model]
    settings = {(int(mb), int(tp)) for gpu in profiles.values() for mb in gpu for tp in gpu[mb]}
    info = json.loads((PLANNER / "llm_info.json").read_text())[model]
    mb, tp = min((m, t) for m, t in settings if str(t) in info)
    imported = read_costs("sailor", SAILOR, model=model, microbatch=mb, tp=tp)
    cluster = _cluster(tmp_path, {name: 4 for name in imported.times})
    instance = import_instance(
        "sailor", SAILOR, cluster, Options(stages=4), model=model, microbatch=mb, tp=tp
    )
    assert {p.value for p in instance.costs.provenance.ravel()} == {"imported"}
    _solve_valid(instance)


@pytest.mark.parametrize("path", SAILOR_GPU_FILES, ids=lambda p: "-".join(p.parts[-3:-1]))
def test_every_sailor_per_gpu_profile_imports(tmp_path: Path, path: Path) -> None:
    table = json.loads(path.read_text())
    info = json.loads((PLANNER / "llm_info.json").read_text())[path.parent.parent.name]
    mb, tp = min((int(m), int(t)) for m in table for t in table[m] if t in info)
    if path.parts[-3:-1] == ("GPT-Neo-2.7", "GH-96"):  # Sailor ships OPT-350's 26-layer table here
        with pytest.raises(InputError, match=r"GPT-Neo-2\.7 on GH-96: 26 layers, llm_info has 34"):
            read_costs("sailor", path, microbatch=mb, tp=tp)
        return
    imported = read_costs("sailor", path, microbatch=mb, tp=tp)
    (type_name,) = imported.times
    instance = import_instance(
        "sailor", path, _cluster(tmp_path, {type_name: 8}), Options(stages=8), microbatch=mb, tp=tp
    )
    _solve_valid(instance)


def test_cli_import_then_solve_heterogeneous(tmp_path: Path, capsys) -> None:
    cluster = _cluster(tmp_path, {"A100-40GB": 2, "V100-16GB": 2, "GH200-96GB": 1})
    out = tmp_path / "inst.json"
    argv = ["import", "sailor", str(SAILOR), "--model", "OPT-350", "--cluster", str(cluster), "-k", "4"]
    assert main([*argv, "-o", str(out), "-q"]) == 0
    instance = load_instance(out)
    assert instance.costs.type_names == ("A100-40GB", "V100-16GB", "GH200-96GB")
    assert not np.allclose(instance.costs.times[:, 0], instance.costs.times[:, 1])
    assert instance.source["format"] == "sailor"
    placement = tmp_path / "placement.json"
    assert main(["solve", str(out), "--solver", "order-dp", "-o", str(placement), "-q"]) == 0
    assert json.loads(placement.read_text())["bottleneck_s"] > 0


def test_cli_import_errors_are_one_line(tmp_path: Path, capsys) -> None:
    sailor = ["import", "sailor", str(SAILOR), "--cluster", "homo-4a100"]
    assert main(sailor) == 2
    assert "several models" in capsys.readouterr().err
    assert main([*sailor, "--model", "OPT-30", "--tp", "3"]) == 2
    assert "no per-layer sizes" in capsys.readouterr().err
    assert main([*sailor, "--model", "LLAMA-3-8", "--tp", "4"]) == 2  # no A100-80 measurement of LLaMA
    assert "no times for device type 'A100-80GB'" in capsys.readouterr().err
    pipedream = str(PIPEDREAM_FILES[0])
    assert main(["import", "pipedream", pipedream, "--cluster", "hetero-2h100-4a100-2l4"]) == 2
    assert "--gpu" in capsys.readouterr().err
    bad = tmp_path / "graph.txt"
    bad.write_text(
        "node1 -- Input -- forward_compute_time=-1.0, backward_compute_time=0.0,"
        " activation_size=4.0, parameter_size=0.0\n"
    )
    with pytest.raises(InputError, match=r"node1.*invalid time -0\.001"):
        read_costs("pipedream", bad, device_type="A100-80GB")
    bad.write_text("garbage\n")
    assert main(["import", "pipedream", str(bad), "--cluster", "homo-4a100"]) == 2
    assert "not a PipeDream node or edge line" in capsys.readouterr().err
    assert main(["import", "pipedream", str(tmp_path / "absent.txt"), "--cluster", "homo-4a100"]) == 2
    assert "pipedream profile file not found" in capsys.readouterr().err
    assert main(["import", "pipedream", str(tmp_path), "--cluster", "homo-4a100"]) == 2
    assert "is a directory, not a pipedream profile file" in capsys.readouterr().err
