"""The bad-input corpus: every case exits 2 with one specific line, never a traceback.

Each case builds its input in a temporary directory and names the substring the one-line
message must contain; the library raises a :class:`partition.PartitionError` subclass.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from conftest import LIGHT
from onnx import TensorProto, helper

from partition.cli import main

MODEL = str(LIGHT / "light_squeezenet.onnx")


def _tiny_model(**changes) -> onnx.ModelProto:
    """x[1,8] → MatMul(W) → Relu → y, editable per case."""
    nodes = changes.get("nodes") or [
        helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
        helper.make_node("Relu", ["h"], ["y"], name="act"),
    ]
    inputs = changes.get("inputs") or [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, changes.get("shape", [1, 8]))
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[helper.make_tensor("W", TensorProto.FLOAT, [8, 8], [0.1] * 64)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", changes.get("opset", 17))])


def _save(tmp: Path, model: onnx.ModelProto, name: str = "model.onnx") -> str:
    path = tmp / name
    path.write_bytes(model.SerializeToString())
    return str(path)


def _write(tmp: Path, name: str, content: str | bytes) -> str:
    path = tmp / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return str(path)


def _instance_doc(tmp: Path) -> dict:
    path = tmp / "base.json"
    assert (
        main(
            [
                "instance",
                _save(tmp, _tiny_model(), "base.onnx"),
                "--cluster",
                "homo-4a100",
                "--stages",
                "2",
                "-o",
                str(path),
            ]
        )
        == 0
    )
    return json.loads(path.read_text())


def _instance_case(change: Callable[[dict], None]) -> Callable[[Path], list[str]]:
    def build(tmp: Path) -> list[str]:
        document = copy.deepcopy(_instance_doc(tmp))
        change(document)
        return ["solve", _write(tmp, "bad-instance.json", json.dumps(document))]

    return build


def _cluster_case(document: object) -> Callable[[Path], list[str]]:
    def build(tmp: Path) -> list[str]:
        text = document if isinstance(document, str) else json.dumps(document)
        return ["solve", MODEL, "--cluster", _write(tmp, "c.json", text), "--stages", "1"]

    return build


def _model_case(make: Callable[[Path], str], *extra: str) -> Callable[[Path], list[str]]:
    return lambda tmp: ["solve", make(tmp), "--cluster", "homo-4a100", "--stages", "2", *extra]


def _cycle(tmp: Path) -> str:
    nodes = [
        helper.make_node("Relu", ["x", "z"], ["h"], name="a"),
        helper.make_node("Relu", ["h"], ["z"], name="b"),
        helper.make_node("Relu", ["z"], ["y"], name="c"),
    ]
    nodes[0] = helper.make_node("Add", ["x", "z"], ["h"], name="a")
    return _save(tmp, _tiny_model(nodes=nodes))


def _host(devices: dict, **more) -> dict:
    return {"hosts": [{"devices": devices, "intra_link": "pcie4", **more}]}


def _set(path: list, value) -> Callable[[dict], None]:
    def change(document: dict) -> None:
        target = document
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


def _drop(key: str) -> Callable[[dict], None]:
    return lambda document: document.pop(key)


CASES: dict[str, tuple[Callable[[Path], list[str]], str]] = {
    # models
    "missing model": (
        lambda t: ["solve", str(t / "absent.onnx"), "--cluster", "homo-4a100", "-k", "2"],
        "model file not found",
    ),
    "empty model file": (_model_case(lambda t: _write(t, "empty.onnx", b"")), "no nodes"),
    "random bytes": (
        _model_case(lambda t: _write(t, "noise.onnx", bytes(range(256)) * 7)),
        "not a readable ONNX",
    ),
    "truncated model": (
        _model_case(lambda t: _write(t, "cut.onnx", Path(MODEL).read_bytes()[:5000])),
        "not a readable ONNX",
    ),
    "directory as model": (_model_case(lambda t: str(t)), "is a directory, not a model file"),
    "cycle": (_model_case(_cycle), "cycle"),
    "missing input": (
        _model_case(
            lambda t: _save(
                t, _tiny_model(nodes=[helper.make_node("Add", ["x", "ghost"], ["y"], name="add")])
            )
        ),
        "ghost",
    ),
    "symbolic dim without --dim": (
        _model_case(lambda t: _save(t, _tiny_model(shape=["batch", 8]))),
        "pass --dim batch=N",
    ),
    "bad --dim": (
        _model_case(lambda t: _save(t, _tiny_model(shape=["batch", 8])), "--dim", "batch=zero"),
        "expected NAME=N",
    ),
    "zero --dim": (
        _model_case(lambda t: _save(t, _tiny_model(shape=["batch", 8])), "--dim", "batch=0"),
        "expected NAME=N",
    ),
    "zero-size dim": (_model_case(lambda t: _save(t, _tiny_model(shape=[0, 8]))), "has size 0"),
    "huge dims": (
        _model_case(lambda t: _save(t, _tiny_model(shape=[10**11, 8]))),
        "more than the largest device",
    ),
    "opset too old": (_model_case(lambda t: _save(t, _tiny_model(opset=3))), "unsupported opset 3"),
    "opset too new": (_model_case(lambda t: _save(t, _tiny_model(opset=99))), "unsupported opset 99"),
    "no --cluster": (lambda t: ["solve", MODEL, "--stages", "2"], "needs --cluster"),
    "no --stages": (lambda t: ["solve", MODEL, "--cluster", "homo-4a100"], "--stages K is required"),
    "zero stages": (_model_case(lambda t: MODEL, "--stages", "0"), "whole number ≥ 1"),
    "more stages than devices": (
        lambda t: ["solve", MODEL, "--cluster", "homo-4a100", "-k", "9"],
        "9 stages requested but cluster",
    ),
    "unknown solver": (
        _model_case(lambda t: MODEL, "--solver", "magic"),
        "unknown solver 'magic' (valid: auto",
    ),
    "time limit not positive": (
        _model_case(lambda t: MODEL, "--time-limit", "-1"),
        "time limit must be positive, got -1 s",
    ),
    "no threads": (_model_case(lambda t: MODEL, "--threads", "0"), "threads must be at least 1, got 0"),
    "output directory missing": (
        _model_case(lambda t: MODEL, "-o", "/nonexistent/dir/p.json"),
        "does not exist",
    ),
    # clusters
    "unknown bundled cluster": (
        lambda t: ["solve", MODEL, "--cluster", "no-such", "-k", "1"],
        "cluster file not found",
    ),
    "directory as cluster": (
        lambda t: ["solve", MODEL, "--cluster", str(t), "--stages", "1"],
        "is a directory, not a cluster file",
    ),
    # a file that exists and refuses to be read, even by root
    "unreadable cluster": (
        lambda t: ["solve", MODEL, "--cluster", "/proc/self/mem", "--stages", "1"],
        "cannot read the cluster file (Input/output error)",
    ),
    "unreadable model": (
        lambda t: ["solve", "/proc/self/mem", "--cluster", "homo-4a100", "--stages", "1"],
        "cannot read the model file (Input/output error)",
    ),
    "cluster not json": (_cluster_case("{hosts: oops"), "not a valid JSON cluster"),
    "cluster not an object": (_cluster_case([1, 2]), "expected a JSON object"),
    "cluster without hosts": (_cluster_case({"name": "x"}), "'hosts' must be a non-empty list"),
    "cluster zero devices": (_cluster_case(_host({"A100-80GB": 0})), "no devices"),
    "unknown device type": (_cluster_case(_host({"Z100": 2})), "unknown device type 'Z100'"),
    "unknown link type": (
        _cluster_case({"hosts": [{"devices": {"L4": 1}, "intra_link": "carrier-pigeon"}]}),
        "unknown link type 'carrier-pigeon'",
    ),
    "negative device count": (_cluster_case(_host({"L4": -1})), "whole number ≥ 0"),
    "huge device count": (_cluster_case(_host({"L4": 10**12})), "more than the 65536 devices"),
    "unknown cluster field": (_cluster_case({**_host({"L4": 1}), "colour": "red"}), "unknown field 'colour'"),
    "unknown host field": (_cluster_case(_host({"L4": 1}, gpus=3)), "unknown field 'gpus'"),
    "wrong cluster version": (
        _cluster_case({**_host({"L4": 1}), "version": 7}),
        "unsupported cluster version 7",
    ),
    "device type without fp32": (
        _cluster_case(
            {
                **_host({"X": 1}),
                "device_types": {
                    "X": {"peak_flops": {"fp16": 1e12}, "memory_bandwidth": 1e11, "memory": 1e9}
                },
            }
        ),
        "at least 'fp32'",
    ),
    "negative memory": (
        _cluster_case(
            {
                **_host({"X": 1}),
                "device_types": {"X": {"peak_flops": {"fp32": 1e12}, "memory_bandwidth": 1e11, "memory": -5}},
            }
        ),
        "positive finite",
    ),
    "nan bandwidth": (
        _cluster_case(
            {
                **_host({"X": 1}),
                "device_types": {
                    "X": {"peak_flops": {"fp32": 1e12}, "memory_bandwidth": float("nan"), "memory": 1e9}
                },
            }
        ),
        "positive finite",
    ),
    "memory that fits nothing": (
        _cluster_case(
            {
                **_host({"X": 2}),
                "device_types": {
                    "X": {"peak_flops": {"fp32": 1e12}, "memory_bandwidth": 1e11, "memory": 1e3}
                },
            }
        ),
        "more than the largest device",
    ),
    # instances
    "instance not json": (lambda t: ["solve", _write(t, "i.json", "not json")], "not a valid JSON instance"),
    "instance wrong schema": (_instance_case(_set(["schema"], "something.else")), "not a partition instance"),
    "instance wrong version": (_instance_case(_set(["version"], 99)), "unsupported instance version 99"),
    "instance unknown field": (_instance_case(_set(["extra"], 1)), "unknown field 'extra'"),
    "instance missing graph": (_instance_case(_drop("graph")), "missing field 'graph'"),
    "dangling producer": (
        _instance_case(_set(["graph", "tensors", 0, "producer"], "nobody")),
        "unknown producer 'nobody'",
    ),
    "dangling consumer": (
        _instance_case(_set(["graph", "tensors", 0, "consumers"], ["nobody"])),
        "unknown consumer 'nobody'",
    ),
    "duplicate op ids": (_instance_case(_set(["graph", "ops", 1, "id"], "mm")), "duplicate op id 'mm'"),
    "ops out of order": (_instance_case(lambda d: d["graph"]["ops"].reverse()), "topological order"),
    "nan cost": (_instance_case(_set(["costs", "times", "A100-80GB", 0], "nan")), "expected a number"),
    "negative cost": (_instance_case(_set(["costs", "times", "A100-80GB", 0], -1.0)), "invalid time -1.0"),
    "short cost column": (_instance_case(_set(["costs", "times", "A100-80GB"], [1e-3])), "expected 2"),
    "op no device can run": (
        _instance_case(_set(["costs", "times", "A100-80GB", 0], "inf")),
        "cannot run on any device type",
    ),
    "negative tensor bytes": (_instance_case(_set(["graph", "tensors", 0, "bytes"], -8)), "not a byte count"),
    "unknown weight": (_instance_case(_set(["graph", "ops", 0, "weights"], ["W2"])), "unknown weight 'W2'"),
    "instance zero stages": (_instance_case(_set(["options", "stages"], 0)), "whole number ≥ 1"),
    "instance comm mode": (_instance_case(_set(["options", "comm_mode"], "telepathy")), "malformed instance"),
    "empty colocation group": (
        _instance_case(_set(["options", "colocate"], [[]])),
        "non-empty list of op ids",
    ),
    "colocation not a list": (
        _instance_case(_set(["options", "colocate"], {"": None})),
        "expected a list of lists",
    ),
    "cluster flag with instance": (
        lambda t: [*_instance_case(lambda d: None)(t), "--cluster", "homo-4a100"],
        "an instance file holds its own cluster",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input(case: str, tmp_path: Path, capsys) -> None:
    build, expected = CASES[case]
    args = build(tmp_path)
    capsys.readouterr()
    assert main(args) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert error and error[-1].startswith("partition: error: "), error
    assert expected in error[-1]
    assert not any("Traceback" in line for line in error)


def test_corpus_is_large() -> None:
    assert len(CASES) >= 40
