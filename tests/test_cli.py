"""The CLI end to end on real models, and one clear line for every kind of bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from importlib import resources
from pathlib import Path

import pytest
from conftest import LIGHT

import partition
from partition.cli import main

MODELS = ["light_inception_v2", "light_resnet50", "light_squeezenet", "light_vgg19"]
CLUSTERS = ["homo-4a100", "hetero-2h100-4a100-2l4"]


@pytest.mark.parametrize("cluster", CLUSTERS)
@pytest.mark.parametrize("model", MODELS)
def test_solve_then_evaluate_real_models(tmp_path: Path, model: str, cluster: str, capsys) -> None:
    output = tmp_path / "placement.json"
    source = str(LIGHT / f"{model}.onnx")
    args = [
        "solve",
        source,
        "--cluster",
        cluster,
        "--stages",
        "4",
        "--time-limit",
        "5",
        "-o",
        str(output),
        "-q",
    ]
    assert main(args) == 0
    document = json.loads(output.read_text())
    assert document["schema"] == "partition.placement" and document["version"] == 1
    assert document["status"] in ("optimal", "feasible")
    assert 1 <= len(document["stages"]) <= 4
    assert document["lower_bound_s"] <= document["bottleneck_s"]
    assert sum(s["num_ops"] for s in document["stages"]) == document["instance"]["num_ops"]
    capsys.readouterr()
    assert main(["evaluate", source, "--cluster", cluster, str(output), "-q"]) == 0
    assert "valid:" in capsys.readouterr().out


def test_instance_file_round_trip(tmp_path: Path, capsys) -> None:
    source = str(LIGHT / "light_squeezenet.onnx")
    instance_path = tmp_path / "inst.json"
    assert (
        main(
            [
                "instance",
                source,
                "--cluster",
                "hetero-2h100-4a100-2l4",
                "--stages",
                "3",
                "-o",
                str(instance_path),
            ]
        )
        == 0
    )
    from_file = partition.solve(partition.load_instance(instance_path))
    direct = partition.solve(partition.make_instance(source, "hetero-2h100-4a100-2l4", 3))
    assert from_file.bottleneck == pytest.approx(direct.bottleneck, rel=1e-9)
    assert main(["solve", str(instance_path), "-o", str(tmp_path / "p.json"), "-q"]) == 0


def test_inspect_reports_counts(capsys) -> None:
    assert main(["inspect", str(LIGHT / "light_resnet50.onnx"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["op_types"]["Conv"] == 53
    # ResNet-50: 25.6 M parameters (fp32) and about 4.1 G multiply-adds at 224×224
    assert info["param_bytes"] / 4 == pytest.approx(25.6e6, rel=0.01)
    assert info["gflops"] / 2 == pytest.approx(4.1, rel=0.05)


def test_inspect_reads_an_instance_file(tmp_path: Path, capsys) -> None:
    """An instance is inspected like its model, plus its cluster and what the whole model costs
    on one device of each type; ``--dim`` cannot reshape it."""
    source = str(LIGHT / "light_squeezenet.onnx")
    instance_path = tmp_path / "inst.json"
    args = ["instance", source, "--cluster", "hetero-2h100-4a100-2l4", "-k", "3", "-o", str(instance_path)]
    assert main(args) == 0
    assert main(["inspect", source, "--json"]) == 0
    from_model = json.loads(capsys.readouterr().out)
    assert main(["inspect", str(instance_path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["op_types"] == from_model["op_types"]
    assert info["gflops"] == pytest.approx(from_model["gflops"])
    instance = partition.load_instance(instance_path)
    described = info["instance"]
    assert described["stages"] == 3 and described["cluster"] == "hetero-2h100-4a100-2l4"
    assert sum(sum(h["devices"].values()) for h in described["hosts"]) == len(instance.cluster.devices)
    for column, name in enumerate(instance.cluster.type_names):
        whole = float(instance.costs.times[:, column].sum()) * 1e3
        assert described["whole_model_ms"][name] == pytest.approx(whole)
    assert main(["inspect", str(instance_path)]) == 0
    assert "ms on H100" in capsys.readouterr().out
    assert main(["inspect", str(instance_path), "--dim", "batch=2"]) == 2
    assert "--dim applies to ONNX models" in capsys.readouterr().err


def test_model_and_cluster_may_come_from_pipes(tmp_path: Path, capsys) -> None:
    """A FIFO (what ``--cluster <(zcat c.json.gz)`` passes) is read as a stream, not refused
    as a missing file."""
    model, cluster = tmp_path / "model.fifo", tmp_path / "cluster.fifo"
    feeds = {
        model: (LIGHT / "light_squeezenet.onnx").read_bytes(),
        cluster: resources.files("partition").joinpath("data/clusters/homo-4a100.json").read_bytes(),
    }
    writers = []
    for path, data in feeds.items():
        os.mkfifo(path)
        writers.append(threading.Thread(target=path.write_bytes, args=(data,), daemon=True))
    for writer in writers:
        writer.start()
    output = tmp_path / "placement.json"
    args = [
        "solve",
        str(model),
        "--cluster",
        str(cluster),
        "-k",
        "2",
        "--time-limit",
        "5",
        "-q",
        "-o",
        str(output),
    ]
    assert main(args) == 0
    assert json.loads(output.read_text())["instance"]["cluster"] == "homo-4a100"


def test_output_is_not_overwritten_silently(tmp_path: Path, capsys) -> None:
    output = tmp_path / "p.json"
    output.write_text("keep me")
    args = [
        "solve",
        str(LIGHT / "light_squeezenet.onnx"),
        "--cluster",
        "homo-4a100",
        "-k",
        "2",
        "-o",
        str(output),
        "-q",
    ]
    assert main(args) == 2
    assert "file exists" in capsys.readouterr().err
    assert output.read_text() == "keep me"
    assert main([*args, "--force"]) == 0


def _bad_cluster(tmp_path: Path, device_type: str = "Z100", memory: float | None = None) -> str:
    document = {"hosts": [{"devices": {device_type: 2}, "intra_link": "pcie4"}]}
    if memory is not None:
        document["device_types"] = {
            device_type: {"peak_flops": {"fp32": 1e12}, "memory_bandwidth": 1e11, "memory": memory}
        }
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(document))
    return str(path)


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing file", "model file not found"),
        ("truncated onnx", "not a readable ONNX model"),
        ("unknown device type", "unknown device type 'Z100'"),
        ("too many stages", "5 stages requested but cluster"),
        ("memory too small", "more than the largest device"),
        ("unknown solver", "unknown solver 'magic' (valid: auto"),
    ],
)
def test_bad_input_is_one_clear_line(tmp_path: Path, case: str, message: str) -> None:
    model = str(LIGHT / "light_resnet50.onnx")
    cluster, extra = "homo-4a100", ["--stages", "2"]
    if case == "missing file":
        model = str(tmp_path / "absent.onnx")
    elif case == "truncated onnx":
        data = (LIGHT / "light_resnet50.onnx").read_bytes()
        model = str(tmp_path / "truncated.onnx")
        Path(model).write_bytes(data[: len(data) // 3])
    elif case == "unknown device type":
        cluster = _bad_cluster(tmp_path)
    elif case == "too many stages":
        extra = ["--stages", "5"]
    elif case == "memory too small":
        cluster = _bad_cluster(tmp_path, "tiny", memory=1e6)
    elif case == "unknown solver":
        extra = ["--stages", "2", "--solver", "magic"]
    run = subprocess.run(
        [sys.executable, "-m", "partition", "solve", model, "--cluster", cluster, *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) >= 1 and "Traceback" not in run.stderr
    assert message in lines[-1], run.stderr


_LIGHT_INSTANCE = str(Path(__file__).parent.parent / "instances/v1/light-resnet50.homo-4a100.k4.json.gz")


def _imported_by(argv: list[str], modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` a fresh interpreter has imported after running the CLI on ``argv``."""
    script = (
        "import json, sys\n"
        "from partition.cli import main\n"
        f"assert main({argv!r}) == 0\n"
        f"print(json.dumps(sorted(m for m in {modules!r} if m in sys.modules)))\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_verbs_that_never_read_onnx_start_without_importing_it(tmp_path: Path) -> None:
    """onnx (with ml_dtypes) and onnxruntime take most of a second to import: the CLI's start,
    and so `--help` and `solve` on an instance file, do without them (`--help`: 1.5 s → 1.0 s)."""
    argv = ["solve", _LIGHT_INSTANCE, "-q", "-o", str(tmp_path / "p.json")]
    assert _imported_by(argv, ("onnx", "onnxruntime", "matplotlib")) == []


def test_verbs_that_solve_nothing_start_without_the_solvers_libraries() -> None:
    """CP-SAT's ortools (which imports pandas) and CBC's pulp take about 0.3 s to import: the
    solvers' modules load when a solver runs, so `--help` and `inspect` do without them
    (`--help`: 0.65 s → 0.37 s)."""
    assert _imported_by(["inspect", _LIGHT_INSTANCE], ("ortools.sat.python.cp_model", "pulp", "pandas")) == []


def test_the_gap_limit_help_names_the_solvers_that_stop_early() -> None:
    from partition.cli._common import GAP_LIMITED_SOLVERS

    flagged = {name for name in partition.solver_names() if partition.get_solver(name).capabilities.gap_limit}
    assert set(GAP_LIMITED_SOLVERS) == flagged


@pytest.mark.parametrize(("cores", "threads"), [(1, 1), (2, 2), (32, 8)])
def test_solve_uses_the_usable_cores_unless_told(
    monkeypatch, tmp_path: Path, cores: int, threads: int, capsys
) -> None:
    # the zoo's targets are set on two cores, where auto polishes its starts at once
    monkeypatch.setattr(partition.api, "usable_cores", lambda: cores)
    source = str(LIGHT / "light_squeezenet.onnx")
    common = ["solve", source, "--cluster", "homo-4a100", "--stages", "2", "--solver", "uniform", "-q"]
    assert main([*common, "-o", str(tmp_path / "default.json")]) == 0
    assert main([*common, "--threads", "1", "-o", str(tmp_path / "one.json")]) == 0
    told = json.loads((tmp_path / "one.json").read_text())["solver"]["settings"]["threads"]
    assert json.loads((tmp_path / "default.json").read_text())["solver"]["settings"]["threads"] == threads
    assert told == 1
