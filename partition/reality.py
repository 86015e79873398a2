"""Predicted against measured: the evaluator's figures for this CPU next to a pipeline run.

The prediction uses the formulation as it stands, fed with figures measured on this machine:

- **Op times** (:func:`measure_op_times`): the whole model runs in the same one-thread session
  the stage processes use (:func:`partition.run.make_session`) with onnxruntime profiling on.
  Profiled kernel times are wall times, and on a machine shared with other work a long kernel
  is preempted on every run, so each run's kernel times are scaled by the run's share of CPU
  (its thread CPU time over its wall time, preemption assumed uniform within a run). An op's
  time is the median over ``repeats`` runs of its scaled kernel time, plus an equal share of
  the time outside kernels (median thread CPU time of an unprofiled run minus the sum of the
  op times, spread over the ops that ran). Ops onnxruntime folds or fuses away cost 0; their
  work is charged to the node that absorbed them, and a node it builds by fusion (named
  ``<op id>/<Fusion>``) to the op it is named after. Every kernel's time is thus charged
  somewhere: a profile name that matched no op used to drop its time silently (BERT's and
  ViT's fused MatMul+Add Gemms, most of their work, predicted 2.6× too fast).
- **Link** (:func:`calibrate_link`): arrays of 4 KB to 16 MB bounce between two processes
  pinned to two cores through the transport a run uses (:mod:`partition.transport`); the
  sender's fastest ``send`` (copy into shared memory, queue the address) is fitted as
  ``latency + bytes / bandwidth`` by least squares. That is what a stage pays to send; the
  formulation charges it to the receiver as well, whose real cost (mapping a view) is nil, so
  communication is over-predicted by one copy per tensor — small against compute here.
- **Cluster**: one host of ``k`` devices of type ``this-cpu`` (one core each) joined by that
  link; stage ``s`` of the pipeline runs on device ``s``.

The independent evaluator then computes each stage's time; the measured stage time is the
run's compute + send (see :mod:`partition.run`).
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import queue
import statistics
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .cluster import Cluster, parse_cluster
from .costs import CostTable, Provenance
from .devices import LinkType
from .errors import InputError
from .evaluator import evaluate
from .export import Pipeline, input_specs, op_nodes
from .fill import load_runnable_model
from .graph import OpGraph
from .instance import Instance, Options, build_instance
from .onnx_import import _topological_nodes, import_onnx
from .placement import Evaluation, Placement
from .run import PipelineError, RunReport, make_session, random_inputs
from .transport import SLOTS, Inbox, Outbox

DEVICE_TYPE = "this-cpu"
_LINK_SIZES = (4_096, 65_536, 1_048_576, 4_194_304, 16_777_216)
_KERNEL_SUFFIX = "_kernel_time"
_ECHO_TIMEOUT_S = 60.0


def _own_time(times: list[float], share: list[float]) -> float:
    """Median kernel time scaled by each run's CPU share; run 0 only warms up."""
    scaled = [t * f for t, f in zip(times[1:], share[1:], strict=False)]
    return statistics.median(scaled) if scaled else times[0]


def measure_op_times(
    model_path: str | Path,
    graph: OpGraph,
    *,
    dims: dict[str, int] | None = None,
    repeats: int = 10,
    seed: int = 0,
) -> np.ndarray:
    """Seconds of every op of ``graph`` on this CPU, one thread (see the module docstring)."""
    model = load_runnable_model(model_path, dims)
    nodes = _topological_nodes(model.graph, str(model_path))
    for node, op in zip(op_nodes(nodes, graph, str(model_path)), graph.ops, strict=True):
        node.name = op.id  # unique, and what the profile reports back
    inputs = random_inputs(input_specs(model_path, dims), np.random.default_rng(seed))
    share = []  # per run: thread CPU time over wall time, the fraction not preempted
    with tempfile.TemporaryDirectory() as folder:
        session = make_session(model, profile_prefix=os.path.join(folder, "profile"))
        for _ in range(repeats + 1):
            wall, cpu = time.perf_counter(), time.thread_time()  # one-thread sessions run here
            session.run(None, inputs)
            share.append(min(1.0, (time.thread_time() - cpu) / (time.perf_counter() - wall)))
        events = json.loads(Path(session.end_profiling()).read_text())
    kernel: dict[str, list[float]] = defaultdict(list)  # the i-th time of a node is from run i
    for event in events:
        if event.get("cat") == "Node" and event.get("name", "").endswith(_KERNEL_SUFFIX):
            kernel[event["name"][: -len(_KERNEL_SUFFIX)]].append(event["dur"] * 1e-6)
    own = _charge({name: _own_time(times, share) for name, times in kernel.items()}, graph)
    plain = make_session(model)
    plain.run(None, inputs)
    runs = []
    for _ in range(repeats):
        started = time.thread_time()
        plain.run(None, inputs)
        runs.append(time.thread_time() - started)
    overhead = max(0.0, statistics.median(runs) - sum(own.values())) / max(1, len(own))
    return np.array([own[op.id] + overhead if op.id in own else 0.0 for op in graph.ops])


def _charge(kernels: dict[str, float], graph: OpGraph) -> dict[str, float]:
    """Kernel seconds per op id: a node onnxruntime built by fusing ops is charged to the op
    it is named after (``<op id>/MatMulAddFusion``: a MatMul and the Add it absorbed run as
    one Gemm). Time of nodes it inserted (the Gemm's 2-D reshapes) is left uncharged, so it
    joins the time outside kernels that is spread over the ops."""
    own: dict[str, float] = defaultdict(float)
    for name, seconds in kernels.items():
        owner = name if name in graph.index else name.rsplit("/", 1)[0]  # op ids may hold "/"
        if owner in graph.index:
            own[owner] += seconds
    return own


def _echo(queues: list, free: dict, core: int) -> None:
    os.sched_setaffinity(0, {core})
    inbox, outbox = Inbox(queues[1], free), Outbox((1, 0), queues[0], free[(1, 0)])
    try:
        while (message := inbox.receive()) is not None:
            channel, microbatch, arrays = message
            outbox.send(microbatch, arrays)
            del arrays
            inbox.release(channel)
    finally:
        inbox.close()
        outbox.close()


def calibrate_link(*, repeats: int = 5) -> LinkType:
    """Latency and bandwidth of the run's inter-process transport (see the module docstring)."""
    cores = sorted(os.sched_getaffinity(0))
    context = multiprocessing.get_context("spawn")
    queues = [context.Queue(), context.Queue()]
    free = {(0, 1): context.Semaphore(SLOTS), (1, 0): context.Semaphore(SLOTS)}
    echo = context.Process(target=_echo, args=(queues, free, cores[-1]), daemon=True)
    echo.start()
    own = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cores[0]})
    outbox, inbox = Outbox((0, 1), queues[1], free[(0, 1)]), Inbox(queues[0], free)
    try:
        sizes, times = [], []
        for size in _LINK_SIZES:
            payload = {"x": np.ones(size // 4, dtype=np.float32)}
            sends = []
            for _ in range(repeats + 1):  # the first trip maps the blocks
                started = time.perf_counter()
                outbox.send(0, payload)
                sends.append(time.perf_counter() - started)
                try:
                    message = inbox.receive(timeout=_ECHO_TIMEOUT_S)
                except queue.Empty:
                    raise PipelineError("link calibration: the echo process does not answer") from None
                inbox.release(message[0])
                del message
            sizes.append(float(size))
            times.append(min(sends[1:]))
        queues[1].put(None)
        echo.join(timeout=10)
    finally:
        os.sched_setaffinity(0, own)
        if echo.is_alive():
            echo.terminate()
        inbox.close()
        outbox.close()
    slope, intercept = np.polyfit(np.array(sizes), np.array(times), 1)
    bandwidth = 1.0 / slope if slope > 0 else math.inf
    return LinkType("ipc-measured", float(bandwidth), float(max(intercept, 0.0)))


def local_cluster(stages: int, link: LinkType) -> Cluster:
    """One host with one ``this-cpu`` device per stage, joined by ``link``.

    The device type's peak figures are placeholders the cluster schema requires: this
    cluster's costs are measured (:func:`measured_instance`), never modelled."""
    memory = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    return parse_cluster(
        {
            "name": "this-machine",
            "device_types": {
                DEVICE_TYPE: {"peak_flops": {"fp32": 1e11}, "memory_bandwidth": 1e10, "memory": memory}
            },
            "link_types": {link.name: {"bandwidth": link.bandwidth, "latency": link.latency}},
            "hosts": [{"name": "localhost", "devices": {DEVICE_TYPE: stages}, "intra_link": link.name}],
            "inter_host_link": link.name,
        },
        where="this machine",
    )


def measured_instance(
    model_path: str | Path, stages: int, *, dims: dict[str, int] | None = None, repeats: int = 10
) -> Instance:
    """An instance of the model on this machine's cores with measured op times and link."""
    graph = import_onnx(model_path, dims=dims)
    times = measure_op_times(model_path, graph, dims=dims, repeats=repeats)
    cluster = local_cluster(stages, calibrate_link())
    costs = CostTable((DEVICE_TYPE,), times.reshape(-1, 1), (Provenance.MEASURED,))
    return build_instance(
        graph,
        cluster,
        Options(stages=stages),
        costs=costs,
        source={"model": str(model_path), "costs": "measured on this CPU, one thread (partition.reality)"},
    )


def predict(pipeline: Pipeline, *, repeats: int = 10) -> tuple[Instance, Evaluation]:
    """The evaluator's figures for the exported stages, each on one core of this machine."""
    instance = measured_instance(
        pipeline.model, len(pipeline.stages), dims=dict(pipeline.dims), repeats=repeats
    )
    stage_of = {op: stage.index for stage in pipeline.stages for op in stage.ops}
    missing = [op.id for op in instance.graph.ops if op.id not in stage_of]
    if missing:
        raise InputError(f"pipeline: op {missing[0]!r} of {pipeline.model} is in no stage; re-export it")
    placement = Placement(
        tuple(stage_of[op.id] for op in instance.graph.ops), tuple(range(len(pipeline.stages)))
    )
    return instance, evaluate(instance, placement)


@dataclass(frozen=True)
class Comparison:
    """Predicted and measured seconds per stage, and throughput, with relative errors.

    ``*_cpu`` figures replace each stage's compute and send wall times with thread CPU times:
    what the stage would take were it never preempted. On a machine shared with other work the
    wall figures carry the contention and the CPU figures show what the cost model predicts.
    """

    predicted_stage_s: tuple[float, ...]
    measured_stage_s: tuple[float, ...]
    measured_stage_cpu_s: tuple[float, ...]
    predicted_throughput: float
    measured_throughput: float
    link: tuple[float, float]  # bandwidth bytes/s, latency s

    @property
    def measured_cpu_throughput(self) -> float:
        """1 / the slowest stage's CPU-time figure: the throughput without preemption."""
        return 1.0 / max(self.measured_stage_cpu_s)

    @staticmethod
    def relative_error(predicted: float, measured: float) -> float:
        """How far the prediction is from the measurement, as a fraction of the measurement."""
        return (predicted - measured) / measured if measured > 0 else math.inf

    def to_json(self) -> dict[str, Any]:
        error = self.relative_error
        rows = zip(self.predicted_stage_s, self.measured_stage_s, self.measured_stage_cpu_s, strict=True)
        return {
            "costs": "measured on this CPU, one thread per stage (partition.reality)",
            "link": {"bandwidth": self.link[0], "latency": self.link[1]},
            "stages": [
                {
                    "stage": s,
                    "predicted_s": p,
                    "measured_s": m,
                    "relative_error": error(p, m),
                    "measured_cpu_s": c,
                    "relative_error_cpu": error(p, c),
                }
                for s, (p, m, c) in enumerate(rows)
            ],
            "throughput": {
                "predicted_per_s": self.predicted_throughput,
                "measured_per_s": self.measured_throughput,
                "relative_error": error(self.predicted_throughput, self.measured_throughput),
                "measured_cpu_per_s": self.measured_cpu_throughput,
                "relative_error_cpu": error(self.predicted_throughput, self.measured_cpu_throughput),
            },
        }

    def table(self) -> str:
        error = self.relative_error
        lines = [f"{'':14}{'predicted':>10}{'measured':>10}{'error':>8}{'cpu-only':>10}{'error':>8}"]
        rows = zip(self.predicted_stage_s, self.measured_stage_s, self.measured_stage_cpu_s, strict=True)
        for s, (p, m, c) in enumerate(rows):
            lines.append(
                f"{f'stage {s} ms':14}{p * 1e3:10.4g}{m * 1e3:10.4g}{error(p, m):+8.1%}"
                f"{c * 1e3:10.4g}{error(p, c):+8.1%}"
            )
        p, m, c = self.predicted_throughput, self.measured_throughput, self.measured_cpu_throughput
        lines.append(f"{'throughput/s':14}{p:10.4g}{m:10.4g}{error(p, m):+8.1%}{c:10.4g}{error(p, c):+8.1%}")
        return "\n".join(lines)


def compare(pipeline: Pipeline, report: RunReport, *, repeats: int = 10) -> Comparison:
    """Measure op times and the link now, predict the pipeline, and set it beside ``report``."""
    instance, evaluation = predict(pipeline, repeats=repeats)
    link = instance.cluster.link(0, 0)
    return Comparison(
        predicted_stage_s=tuple(s.time for s in evaluation.stages),
        measured_stage_s=tuple(t.busy_s for t in report.stages),
        measured_stage_cpu_s=tuple(t.busy_cpu_s for t in report.stages),
        predicted_throughput=1.0 / evaluation.bottleneck,
        measured_throughput=report.throughput_per_s,
        link=(link.bandwidth, link.latency),
    )
