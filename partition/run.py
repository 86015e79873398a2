"""Run an exported pipeline with onnxruntime, one process per stage, and check it against the model.

Transport: every stage process has one inbound ``multiprocessing.Queue``. A stage that finishes
a micro-batch puts one message per destination stage holding every tensor that stage needs
from it (skip connections go straight to the stage that reads them, not hop by hop), through
reused shared memory (:mod:`partition.transport`). The driver (this process) feeds the graph
inputs and collects the graph outputs the same way.

Timeline of a run of ``M`` micro-batches (``M + 2`` are computed): micro-batch 0 warms every
session up; micro-batch 1 goes through the empty pipeline alone, which gives the latency; then
micro-batches 2..M+1 are injected at once and the steady-state throughput is ``(M - 1)`` over
the time between the first and the last of them completing. A stage's measured time is the
mean (a throughput is a mean rate, and on a busy machine the occasional preempted micro-batch
counts), over the steady-state micro-batches, of the wall time it spends computing
(``session.run``) and sending (copying its outputs into shared memory and queueing them).
Receiving costs nothing measurable: the inputs are views of the sender's shared memory. Time
blocked waiting for an input, or for a slot the next stage has not freed yet, is idle.
The thread CPU times of computing and sending are recorded too: on a machine shared with other
work, wall time above them is time the stage was preempted.

Each stage process is pinned to one core (round robin over the cores this process may use)
and its session uses one intra-op and one inter-op thread. Sessions use onnxruntime's basic
graph optimisations: constant folding removes the constant subgraphs every stage duplicates
from the per-run work. The few fusions of that level keep the fused node named after an op
(``<op id>/MatMulAddFusion``), so profiles still map to op ids (:mod:`partition.reality`).

Outputs are checked element-wise against the whole model run on the same random inputs:
``|pipeline - whole| <= ATOL + RTOL * |whole|``.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import queue
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from .errors import InputError, PartitionError
from .export import GRAPH_INPUT, Pipeline, StageSpec, TensorSpec, load_pipeline
from .fill import load_runnable_model
from .transport import SLOTS, Channel, Inbox, Outbox

RTOL, ATOL = 1e-4, 1e-5
RUN_SCHEMA = "partition.run"
RUN_VERSION = 1
_IDLE_TIMEOUT_S = 600.0  # no message from any stage for this long: give up


class PipelineError(PartitionError):
    """A stage failed or hung while running, or the pipeline cannot be run as asked."""


def make_session(
    model: str | Path | onnx.ModelProto, *, profile_prefix: str | None = None
) -> ort.InferenceSession:
    """A one-thread CPU session with basic optimisations (see the module docstring)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.log_severity_level = 3
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


@dataclass(frozen=True)
class StageTiming:
    """Mean steady-state seconds per micro-batch of one stage process."""

    stage: int
    device: str
    core: int | None
    compute_s: float
    compute_cpu_s: float
    send_s: float
    send_cpu_s: float

    @property
    def busy_s(self) -> float:
        return self.compute_s + self.send_s

    @property
    def busy_cpu_s(self) -> float:
        """Busy time with compute and send as thread CPU time: the stage never preempted."""
        return self.compute_cpu_s + self.send_cpu_s


@dataclass(frozen=True)
class RunReport:
    """Measured figures of one run and the output check against the whole model."""

    microbatches: int
    stages: tuple[StageTiming, ...]
    throughput_per_s: float
    latency_s: float
    max_abs_diff: Mapping[str, float]
    mismatched: tuple[str, ...]
    load_average: float  # 1-minute load when the run ended: above the core count, wall times inflate

    @property
    def outputs_match(self) -> bool:
        return not self.mismatched

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": RUN_SCHEMA,
            "version": RUN_VERSION,
            "microbatches": self.microbatches,
            "threads_per_stage": 1,
            "load_average": self.load_average,
            "cores": len(os.sched_getaffinity(0)),
            "throughput_per_s": self.throughput_per_s,
            "latency_s": self.latency_s,
            "stages": [
                {
                    "stage": t.stage,
                    "device": t.device,
                    "core": t.core,
                    "compute_s": t.compute_s,
                    "compute_cpu_s": t.compute_cpu_s,
                    "send_s": t.send_s,
                    "send_cpu_s": t.send_cpu_s,
                    "time_s": t.busy_s,
                }
                for t in self.stages
            ],
            "outputs": {
                "tolerance": {"rtol": RTOL, "atol": ATOL},
                "max_abs_diff": dict(self.max_abs_diff),
                "match": self.outputs_match,
            },
        }


def random_inputs(specs: tuple[TensorSpec, ...], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Inputs of the right shapes and dtypes: normal floats, small non-negative integers."""
    values = {}
    for spec in specs:
        if any(d is None for d in spec.shape):
            raise InputError(f"graph input {spec.name!r} has a symbolic dim; export with --dim to pin it")
        dtype = np.dtype(spec.dtype)
        shape = tuple(int(d) for d in spec.shape)
        if np.issubdtype(dtype, np.floating):
            values[spec.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            values[spec.name] = rng.random(shape) < 0.5
        else:  # token ids, positions, indices: 0 and 1 are valid for any table of two or more rows
            values[spec.name] = rng.integers(0, 2, size=shape).astype(dtype)
    return values


def _incoming(pipeline: Pipeline) -> list[Channel]:
    """Every channel of a run: driver → stages fed graph inputs (or nothing), stage → stage,
    stage → driver for the graph outputs."""
    channels = [(stage.index, GRAPH_INPUT) for stage in pipeline.stages if stage.final_outputs]
    for stage in pipeline.stages:
        if any(source == GRAPH_INPUT for source in stage.receives.values()) or not stage.inputs:
            channels.append((GRAPH_INPUT, stage.index))
        channels.extend(
            (source, stage.index) for source in dict.fromkeys(stage.receives.values()) if source >= 0
        )
    return channels


def _stage_process(
    directory: str, stage: StageSpec, core: int | None, queues: list, free: dict, results: Any
) -> None:
    """Body of one stage process: gather a micro-batch's inputs, run, forward the outputs."""
    targets = sorted({t for destinations in stage.sends.values() for t in destinations})
    outboxes = {t: Outbox((stage.index, t), queues[t], free[(stage.index, t)]) for t in targets}
    if stage.final_outputs:
        outboxes[GRAPH_INPUT] = Outbox(
            (stage.index, GRAPH_INPUT), results, free[(stage.index, GRAPH_INPUT)], tag="output"
        )
    inbox = Inbox(queues[stage.index], free)
    pending: dict[int, dict[str, np.ndarray]] = {}
    try:
        if core is not None:
            os.sched_setaffinity(0, {core})
        session = make_session(Path(directory) / stage.model_file)
        names = list(stage.outputs)
        results.put(("ready", stage.index, None, 0.0))
        channels: dict[int, list[Channel]] = {}
        timings = []
        while (message := inbox.receive()) is not None:
            channel, microbatch, arrays = message
            feeds = pending.setdefault(microbatch, {})
            feeds.update(arrays)
            channels.setdefault(microbatch, []).append(channel)
            if len(feeds) < len(stage.inputs):
                continue
            del pending[microbatch]
            started, cpu = time.monotonic(), time.thread_time()
            values = dict(zip(names, session.run(names, feeds), strict=True))
            computed, sending = time.monotonic(), time.thread_time()
            cpu = sending - cpu
            blocked = sum(
                outbox.send(microbatch, {x: values[x] for x in _bound_for(stage, target)})
                for target, outbox in outboxes.items()
            )
            finished, send_cpu = time.monotonic(), time.thread_time() - sending
            del feeds, values
            for channel in channels.pop(microbatch):
                inbox.release(channel)
            timings.append((microbatch, computed - started, cpu, finished - computed - blocked, send_cpu))
        results.put(("timings", stage.index, timings, 0.0))
    except Exception as error:  # reported to the driver as one line; the process then ends
        results.put(("error", stage.index, f"{type(error).__name__}: {str(error).splitlines()[0]}", 0.0))
    finally:
        pending.clear()
        inbox.close()
        for outbox in outboxes.values():
            outbox.close()


def _bound_for(stage: StageSpec, target: int) -> list[str]:
    """The outputs of ``stage`` that go to stage ``target`` (the graph outputs to the driver)."""
    if target == GRAPH_INPUT:
        return list(stage.final_outputs)
    return [x for x, targets in stage.sends.items() if target in targets]


class _Driver:
    """Feeds graph inputs, gathers outputs and watches the stage processes."""

    def __init__(
        self, pipeline: Pipeline, outboxes: dict[int, Outbox], results: Any, free: dict, processes: list
    ) -> None:
        self.pipeline, self.outboxes, self.results, self.processes = pipeline, outboxes, results, processes
        self.inbox = Inbox(results, free)  # opens the graph outputs' shared-memory messages
        self.ready: set[int] = set()
        self.outputs: dict[int, dict[str, np.ndarray]] = {}
        self.latest: dict[int, float] = {}
        self.done: dict[int, float] = {}
        self.injected: dict[int, float] = {}
        self.timings: dict[int, list] = {}

    def inject(self, microbatch: int, inputs: Mapping[str, np.ndarray]) -> None:
        self.injected[microbatch] = time.monotonic()
        for s, outbox in self.outboxes.items():
            wanted = self.pipeline.stages[s].receives
            outbox.send(microbatch, {x: inputs[x] for x, source in wanted.items() if source == GRAPH_INPUT})

    def _next(self) -> tuple:
        deadline = time.monotonic() + _IDLE_TIMEOUT_S
        while True:
            try:
                return self.results.get(timeout=0.5)
            except queue.Empty:
                for s, process in enumerate(self.processes):
                    if process.exitcode is not None and s not in self.timings:
                        raise PipelineError(
                            f"stage {s} process ended unexpectedly (exit code {process.exitcode})"
                        ) from None
                if time.monotonic() > deadline:
                    raise PipelineError(
                        f"no progress for {_IDLE_TIMEOUT_S:.0f} s; the pipeline hangs"
                    ) from None

    def pump(self, until: Callable[[], bool]) -> None:
        while not until():
            kind, key, payload, stamp = self._next()
            if kind == "error":
                raise PipelineError(f"stage {key} failed: {payload}")
            if kind == "ready":
                self.ready.add(key)
            elif kind == "output":  # graph outputs may come from several stages
                channel, _, arrays = self.inbox.open(payload)
                self.outputs.setdefault(key, {}).update({x: np.array(a) for x, a in arrays.items()})
                del arrays
                self.inbox.release(channel)
                self.latest[key] = max(stamp, self.latest.get(key, stamp))
                if len(self.outputs[key]) == len(self.pipeline.graph_outputs):
                    self.done[key] = self.latest[key]
            elif kind == "timings":
                self.timings[key] = payload


def _steady(timings: list, first: int) -> tuple[float, ...]:
    """Means of (compute, compute CPU, send, send CPU) from micro-batch ``first`` on."""
    rows = [row[1:] for row in timings if row[0] >= first]
    if not rows:
        return (math.nan,) * 4
    return tuple(float(statistics.fmean(column)) for column in zip(*rows, strict=True))


def run_pipeline(
    directory: str | Path,
    microbatches: int,
    *,
    seed: int = 0,
    pin: bool = True,
    progress: Callable[[str], None] | None = None,
) -> RunReport:
    """Run the exported pipeline in ``directory`` on ``microbatches`` steady-state micro-batches."""
    if microbatches < 2:
        raise InputError("--microbatches must be at least 2 to measure a steady-state throughput")
    pipeline = load_pipeline(directory)
    say = progress or (lambda _: None)
    context = multiprocessing.get_context("spawn")  # never fork a process that may hold ORT threads
    queues = [context.Queue() for _ in pipeline.stages]
    results = context.Queue()
    channels = _incoming(pipeline)
    # the driver's channels hold every micro-batch, so feeding never waits on a stage
    free = {c: context.Semaphore(microbatches + 2 if c[0] == GRAPH_INPUT else SLOTS) for c in channels}
    cores = sorted(os.sched_getaffinity(0))
    placed = [cores[s % len(cores)] if pin else None for s in range(len(pipeline.stages))]
    if pin and len(pipeline.stages) > len(cores):
        say(f"{len(pipeline.stages)} stages share {len(cores)} cores; measured times include contention")
    processes = [
        context.Process(
            target=_stage_process,
            args=(str(directory), stage, placed[stage.index], queues, free, results),
            daemon=True,
        )
        for stage in pipeline.stages
    ]
    rng = np.random.default_rng(seed)
    batches = [random_inputs(pipeline.graph_inputs, rng) for _ in range(microbatches + 2)]
    outboxes = {
        t: Outbox((GRAPH_INPUT, t), queues[t], free[(GRAPH_INPUT, t)], slots=microbatches + 2)
        for source, t in channels
        if source == GRAPH_INPUT
    }
    driver = _Driver(pipeline, outboxes, results, free, processes)
    say(f"starting {len(processes)} stage processes")
    for process in processes:
        process.start()
    try:
        driver.pump(lambda: len(driver.ready) == len(processes))
        for probe in (0, 1):  # warm-up, then latency through the empty pipeline
            driver.inject(probe, batches[probe])
            driver.pump(lambda probe=probe: probe in driver.done)
        say(f"running {microbatches} micro-batches")
        for microbatch in range(2, microbatches + 2):
            driver.inject(microbatch, batches[microbatch])
        driver.pump(lambda: all(m in driver.done for m in range(2, microbatches + 2)))
        for inbox in queues:
            inbox.put(None)
        driver.pump(lambda: len(driver.timings) == len(processes))
        for process in processes:
            process.join(timeout=10)
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
                process.join()
        for outbox in outboxes.values():
            outbox.close()
        driver.inbox.close()
    stamps = [driver.done[m] for m in range(2, microbatches + 2)]
    stages = tuple(
        StageTiming(s.index, s.device, placed[s.index], *_steady(driver.timings[s.index], 2))
        for s in pipeline.stages
    )
    say("checking the outputs against the whole model")
    whole = make_session(load_runnable_model(pipeline.model, pipeline.dims))
    names = list(pipeline.graph_outputs)
    worst = dict.fromkeys(names, 0.0)
    mismatched: set[str] = set()
    for microbatch, inputs in enumerate(batches):
        for name, expected in zip(names, whole.run(names, inputs), strict=True):
            got = driver.outputs[microbatch][name]
            if got.shape != expected.shape:
                mismatched.add(name)
                continue
            got64, expected64 = got.astype(np.float64), expected.astype(np.float64)
            # NaN or ±inf where the whole model has the same value is agreement (random weights
            # can overflow); only finite pairs have a difference
            same = (got64 == expected64) | (np.isnan(got64) & np.isnan(expected64))
            difference = np.where(same, 0.0, np.abs(got64 - expected64))
            worst[name] = max(worst[name], float(np.nan_to_num(difference, nan=np.inf).max(initial=0.0)))
            if not np.all(same | (difference <= ATOL + RTOL * np.abs(expected64))):
                mismatched.add(name)
    return RunReport(
        microbatches=microbatches,
        stages=stages,
        throughput_per_s=(microbatches - 1) / (max(stamps) - min(stamps)),
        latency_s=driver.done[1] - driver.injected[1],
        max_abs_diff=worst,
        mismatched=tuple(sorted(mismatched)),
        load_average=os.getloadavg()[0],
    )
