"""Measure per-op times of an ONNX model on this machine's CPU with onnxruntime.

Graph optimisations are off so every profiled kernel is one ONNX node and its name maps back
to an op id (unnamed nodes are named ``OpType_index`` in the profiled copy, as the importer
names them). Constant subgraphs (``ConstantOfShape`` weights of the light zoo models, weights
whose data is absent, filled by :mod:`partition.fill`) are evaluated once and replaced by random
initializers of the same shape and dtype — except those read as shape-like inputs, which keep
their values — so the profiled runs time the model's real ops, not weight materialisation. Inputs
are random with the declared shapes and dtypes. The first ``warmup`` runs are dropped; each op
gets the median, 10th and 90th percentile of its per-run kernel time, and the whole model the
same statistics of onnxruntime's ``model_run`` span in the same session, so the two can be
compared. With one thread onnxruntime runs every kernel on the calling thread, so that thread's
CPU time per run is recorded too (``notes.whole_model_cpu_s``, median): on a shared machine wall
time includes waiting for a core and CPU time does not, so their ratio shows how loaded the
measurement was. Kernels of nodes the importer folds away (e.g. ``Shape`` of a static tensor) are
reported as unmapped time.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper, shape_inference

from .devices import DeviceType
from .errors import ModelError
from .fill import load_runnable_model, shape_slots
from .graph import OpGraph
from .measured import MeasuredTable, OpTiming, graph_fingerprint
from .onnx_import import import_onnx

_NONDETERMINISTIC = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial"}
_FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE}
_US = 1e-6
_ORT_ERRORS_ONLY = 3
_IR_INITIALIZERS_NOT_INPUTS = 4  # from IR 4 on, an initializer need not be a graph input


@dataclass(frozen=True)
class Profile:
    """A measured table plus what the per-op sum leaves out of the whole-model time."""

    table: MeasuredTable
    op_sum: float  # sum of per-op medians over the model's ops (seconds)
    op_mean_sum: float  # sum of per-op means: comparable with the whole run's mean
    unmapped: float  # median per-run kernel time of nodes that are not ops of the graph
    missing: tuple[str, ...]  # ops of the graph that never showed up in the profile


def _cpu_model_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "unknown"


def _cpu_flags_and_mhz() -> tuple[set[str], float]:
    flags: set[str] = set()
    mhz = 2000.0
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
            elif line.startswith("cpu MHz"):
                mhz = float(line.split(":", 1)[1])
    except (OSError, ValueError):
        pass
    return flags, mhz


def _memory_bandwidth() -> float:
    """Bytes/s of a large copy (read + write), best of five: a quick stream-like estimate."""
    source = np.ones(8 * 2**20, dtype=np.float64)
    target = np.empty_like(source)
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        np.copyto(target, source)
        best = min(best, time.perf_counter() - started)
    return 2 * source.nbytes / best


def _memory_total() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return float(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 8e9


def cpu_device_type(threads: int, name: str | None = None) -> DeviceType:
    """This CPU as a device type: nominal vector peak for ``threads`` cores, measured bandwidth.

    The peak (cores × clock × FLOPs per cycle of the widest FMA the flags show) is nominal;
    calibration fits the fraction the kernels reach.
    """
    flags, mhz = _cpu_flags_and_mhz()
    per_cycle = 64 if "avx512f" in flags else 32 if {"avx2", "fma"} <= flags else 16 if "avx" in flags else 8
    peak = threads * mhz * 1e6 * per_cycle
    slug = re.sub(r"[^A-Za-z0-9.+_-]+", "-", _cpu_model_name()).strip("-")
    return DeviceType(
        name=name or f"cpu-{slug}",
        peak_flops={"fp32": peak},
        memory_bandwidth=_memory_bandwidth(),
        memory=_memory_total(),
    )


def _name_nodes(graph: onnx.GraphProto) -> None:
    """Give every node the id the importer gives its op: its name, ``#k`` for repeats."""
    used: Counter[str] = Counter()
    for index, node in enumerate(graph.node):
        base = node.name or f"{node.op_type}_{index}"
        used[base] += 1
        node.name = base if used[base] == 1 else f"{base}#{used[base]}"


def _fold_constants(model: onnx.ModelProto, rng: np.random.Generator, where: str) -> onnx.ModelProto:
    """A copy whose constant subgraphs are random initializers (see the module docstring)."""
    graph = model.graph
    constants = {init.name for init in graph.initializer}
    constant_nodes, live_nodes = [], []
    for node in graph.node:
        inputs = [x for x in node.input if x]
        if node.op_type == "Constant" or (
            inputs and node.op_type not in _NONDETERMINISTIC and all(x in constants for x in inputs)
        ):
            constants.update(x for x in node.output if x)
            constant_nodes.append(node)
        else:
            live_nodes.append(node)
    used = {x for node in live_nodes for x in node.input} | {v.name for v in graph.output}
    produced = {x for node in constant_nodes for x in node.output}
    boundary = [x for x in dict.fromkeys(x for n in constant_nodes for x in n.output) if x in used]
    values: dict[str, np.ndarray] = {}
    needed = {x for node in constant_nodes for x in node.input}
    if boundary:
        inferred = shape_inference.infer_shapes(model)
        types = {v.name: v.type.tensor_type.elem_type for v in inferred.graph.value_info}
        untyped = next((x for x in boundary if not types.get(x)), None)
        if untyped is not None:
            raise ModelError(f"{where}: cannot infer the type of constant {untyped!r} to materialise it")
        folding = helper.make_model(
            helper.make_graph(
                constant_nodes,
                "constants",
                [],
                [helper.make_tensor_value_info(x, types[x], None) for x in boundary],
                [init for init in graph.initializer if init.name in needed],
            ),
            opset_imports=model.opset_import,
        )
        folding.ir_version = max(model.ir_version, _IR_INITIALIZERS_NOT_INPUTS)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.log_severity_level = _ORT_ERRORS_ONLY
        session = ort.InferenceSession(
            folding.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        values = dict(zip(boundary, session.run(None, {}), strict=True))
    initializers = [init for init in graph.initializer if init.name in used]
    shape_like = shape_slots(graph)  # Resize scales and the like decide shapes: keep their values
    for name, value in values.items():
        if name not in shape_like and helper.np_dtype_to_tensor_dtype(value.dtype) in _FLOAT_TYPES:
            value = (rng.standard_normal(value.shape) * 0.05).astype(value.dtype)
        initializers.append(numpy_helper.from_array(np.asarray(value), name))
    constant_inputs = {init.name for init in graph.initializer} | produced  # old IRs list weights as inputs
    runnable = helper.make_model(
        helper.make_graph(
            live_nodes,
            graph.name or "model",
            [v for v in graph.input if v.name not in constant_inputs],
            list(graph.output),
            initializers,
        ),
        opset_imports=model.opset_import,
    )
    runnable.ir_version = max(model.ir_version, _IR_INITIALIZERS_NOT_INPUTS)
    return runnable


def _random_inputs(
    session: ort.InferenceSession, dims: dict[str, int], rng: np.random.Generator, where: str
) -> dict[str, np.ndarray]:
    feeds = {}
    for value in session.get_inputs():
        shape = []
        for axis, dim in enumerate(value.shape):
            if isinstance(dim, int) and dim > 0:
                shape.append(dim)
            elif isinstance(dim, str) and dim in dims:
                shape.append(dims[dim])
            elif f"{value.name}:{axis}" in dims:
                shape.append(dims[f"{value.name}:{axis}"])
            else:
                raise ModelError(
                    f"{where}: input {value.name!r} dim {axis} ({dim!r}) has no value; pass --dim"
                )
        element = value.type.removeprefix("tensor(").removesuffix(")")
        dtype = {"float": np.float32, "float16": np.float16, "double": np.float64, "bool": np.bool_}.get(
            element, np.dtype(element) if element.startswith(("int", "uint")) else None
        )
        if dtype is None:
            raise ModelError(
                f"{where}: input {value.name!r} has type {value.type}, which cannot be generated"
            )
        if np.issubdtype(dtype, np.floating):
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
        else:
            feeds[value.name] = np.zeros(shape, dtype=dtype)  # ids, indices, masks: 0 is always valid
    return feeds


def _timing(samples: list[float]) -> OpTiming:
    values = np.asarray(samples, dtype=float)
    low, median, high = np.percentile(values, [10, 50, 90])
    return OpTiming(float(median), float(low), float(high), len(values), float(values.mean()))


def _per_run_kernels(events: list[dict], warmup: int) -> tuple[list[float], list[dict[str, float]]]:
    """Whole-run seconds and per-node kernel seconds of every run after the warm-up."""
    runs = sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
                  key=lambda e: e["ts"])[warmup:]  # fmt: skip
    starts = np.array([r["ts"] for r in runs])
    kernels: list[dict[str, float]] = [{} for _ in runs]
    for event in events:
        name = event.get("name", "")
        if event.get("cat") != "Node" or not name.endswith("_kernel_time"):
            continue
        run = int(np.searchsorted(starts, event["ts"], side="right")) - 1
        if run < 0 or event["ts"] > runs[run]["ts"] + runs[run]["dur"]:
            continue  # a warm-up run
        node = name.removesuffix("_kernel_time")
        kernels[run][node] = kernels[run].get(node, 0.0) + event["dur"] * _US
    return [r["dur"] * _US for r in runs], kernels


def profile_model(
    path: str | Path,
    *,
    runs: int = 20,
    warmup: int = 3,
    threads: int = 1,
    dims: dict[str, int] | None = None,
    seed: int = 0,
    device_type: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> Profile:
    """Profile ``path`` on this CPU; see the module docstring for the method."""
    if runs < 1 or warmup < 0 or threads < 1:
        raise ModelError("--runs and --threads must be ≥ 1 and --warmup ≥ 0")
    dims = dict(dims or {})
    graph: OpGraph = import_onnx(path, dims=dims)
    where = str(path)
    model = load_runnable_model(path, dims)  # absent weight files: filled as partition.fill says
    _name_nodes(model.graph)
    rng = np.random.default_rng(seed)
    runnable = _fold_constants(model, rng, where)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.enable_profiling = True
    options.log_severity_level = _ORT_ERRORS_ONLY
    with tempfile.TemporaryDirectory(prefix="partition-profile-") as folder:
        options.profile_file_prefix = os.path.join(folder, "ort")
        try:
            session = ort.InferenceSession(
                runnable.SerializeToString(), options, providers=["CPUExecutionProvider"]
            )
        except Exception as error:  # onnxruntime raises its own exception types
            raise ModelError(
                f"{where}: onnxruntime cannot load the model ({str(error).splitlines()[0]})"
            ) from None
        feeds = _random_inputs(session, dims, rng, where)
        cpu = []
        for run in range(warmup + runs):
            if progress and run % max(1, (warmup + runs) // 4) == 0:
                progress(f"profile: run {run + 1}/{warmup + runs}")
            started = time.thread_time()
            session.run(None, feeds)
            cpu.append(time.thread_time() - started)
        events = json.loads(Path(session.end_profiling()).read_text())
    whole, kernels = _per_run_kernels(events, warmup)
    samples: dict[str, list[float]] = {}
    for run in kernels:
        for node, seconds in run.items():
            samples.setdefault(node, []).append(seconds)
    ops = {op.id: _timing(samples[op.id]) for op in graph.ops if op.id in samples}
    unmapped = [sum(s for n, s in run.items() if n not in graph.index) for run in kernels]
    device = cpu_device_type(threads, device_type)
    table = MeasuredTable(
        device=device,
        model=graph.name,
        num_ops=len(graph.ops),
        fingerprint=graph_fingerprint(graph),
        ops=ops,
        whole_model=_timing(whole),
        settings={
            "tool": "onnxruntime",
            "onnxruntime": ort.__version__,
            "graph_optimization": "disabled",
            "threads": threads,
            "runs": runs,
            "warmup": warmup,
            "seed": seed,
            "cpu": _cpu_model_name(),
        },
        notes={
            "model_file": str(path),
            "unmapped_kernel_s": float(np.median(unmapped)),
            **({"whole_model_cpu_s": float(np.median(cpu[warmup:]))} if threads == 1 else {}),
        },
    )
    return Profile(
        table=table,
        op_sum=float(sum(t.median for t in ops.values())),
        op_mean_sum=float(sum(t.mean or 0.0 for t in ops.values())),
        unmapped=float(np.median(unmapped)),
        missing=tuple(op.id for op in graph.ops if op.id not in ops),
    )
