"""Exact placement scores as array arithmetic, for searches that score thousands of candidates.

The anytime search and the large-neighbourhood polish both need the evaluator's figures for many
placements of graphs with up to ~100k ops; the independent evaluator walks ops one at a time
(about a second at that size), so this module repeats its arithmetic with numpy. Searches use it
to choose; the independent evaluator still checks what they return.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..instance import CommMode, Instance

_TOLERANCE = 1e-9  # the evaluator's memory slack


@dataclass(frozen=True, eq=False)
class TensorArrays:
    """Produced tensors as arrays: producer op, bytes, and one (tensor, consumer op) row per use."""

    producer: np.ndarray
    bytes: np.ndarray
    pair_tensor: np.ndarray
    pair_consumer: np.ndarray

    @staticmethod
    def of(instance: Instance) -> TensorArrays:
        graph = instance.graph
        produced = [t for t in graph.tensors if t.producer is not None]
        index = graph.index
        return TensorArrays(
            np.array([index[t.producer] for t in produced], dtype=np.int64),
            np.array([t.bytes for t in produced], dtype=float),
            np.array([i for i, t in enumerate(produced) for _ in t.consumers], dtype=np.int64),
            np.array([index[c] for t in produced for c in t.consumers], dtype=np.int64),
        )


@dataclass(frozen=True)
class Crossings:
    """Each distinct (tensor, receiving stage) a placement transfers: its sending stage and cost."""

    tensor: np.ndarray
    source: np.ndarray
    target: np.ndarray
    cost: np.ndarray


class Scorer:
    """The evaluator's stage times and validity, vectorised over ops and tensors."""

    def __init__(self, instance: Instance, tensors: TensorArrays) -> None:
        graph, cluster = instance.graph, instance.cluster
        self.times = instance.costs.times
        self.type_of_device = np.asarray(cluster.type_index)
        devices = range(len(cluster.devices))
        self.latency = np.array([[cluster.link(a, b).latency for b in devices] for a in devices])
        self.bandwidth = np.array([[cluster.link(a, b).bandwidth for b in devices] for a in devices])
        self.capacity = np.array([cluster.memory(d) for d in devices])
        self.producer, self.bytes = tensors.producer, tensors.bytes
        self.pair_tensor, self.pair_consumer = tensors.pair_tensor, tensors.pair_consumer
        names = {w: i for i, w in enumerate(graph.weights)}
        self.weight_sizes = np.array([graph.weights[w] for w in graph.weights], dtype=float)
        self.use_weight = np.array([names[w] for op in graph.ops for w in op.weights], dtype=np.int64)
        self.use_op = np.array([v for v, op in enumerate(graph.ops) for _ in op.weights], dtype=np.int64)
        self.working = graph.working_set
        self.once = instance.options.comm_mode is CommMode.ONCE
        self.overlap = instance.options.overlap

    def crossings(self, stage_of: np.ndarray, devices: np.ndarray) -> Crossings:
        """The transfers of a placement (the evaluator charges each to both ends)."""
        s = len(devices)
        source = stage_of[self.producer[self.pair_tensor]]
        target = stage_of[self.pair_consumer]
        crossing = source != target
        keys = np.unique(self.pair_tensor[crossing] * s + target[crossing])
        tensor, target = keys // s, keys % s
        source = stage_of[self.producer[tensor]]
        a, b = devices[source], devices[target]
        return Crossings(
            tensor, source, target, self.latency[a, b] + self.bytes[tensor] / self.bandwidth[a, b]
        )

    def stage_times(self, stage_of: np.ndarray, devices: np.ndarray) -> tuple[np.ndarray, bool]:
        """(time of every stage, valid) of a placement."""
        s = len(devices)
        column = self.type_of_device[devices]
        compute = np.bincount(stage_of, self.times[np.arange(len(stage_of)), column[stage_of]], minlength=s)
        moved = self.crossings(stage_of, devices)
        recv = np.bincount(moved.target, moved.cost, minlength=s)
        sent = np.unique(moved.tensor)
        if self.once:
            worst = np.zeros(len(self.bytes))
            np.maximum.at(worst, moved.tensor, moved.cost)
            send = np.bincount(stage_of[self.producer[sent]], worst[sent], minlength=s)
        else:
            send = np.bincount(moved.source, moved.cost, minlength=s)
        buffered = np.bincount(moved.target, self.bytes[moved.tensor], minlength=s) + np.bincount(
            stage_of[self.producer[sent]], self.bytes[sent], minlength=s
        )
        used = np.unique(self.use_weight * s + stage_of[self.use_op])
        params = np.bincount(used % s, self.weight_sizes[used // s], minlength=s)
        working = np.zeros(s)
        np.maximum.at(working, stage_of, self.working)
        comm = send + recv
        times = np.maximum(compute, comm) if self.overlap else compute + comm
        fits = params + buffered + working <= self.capacity[devices] * (1 + _TOLERANCE)
        nonempty = np.bincount(stage_of, minlength=s) > 0
        valid = bool(fits.all() and nonempty.all() and np.isfinite(compute).all())
        return times, valid

    def score(self, stage_of: np.ndarray, devices: np.ndarray) -> tuple[float, float, bool]:
        """(bottleneck, sum of stage times, valid) of a placement."""
        times, valid = self.stage_times(stage_of, devices)
        return float(times.max()), float(times.sum()), valid
