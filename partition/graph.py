"""The operator graph: ops, the tensors between them, and the weights they hold.

An op graph is what every solver sees of a model. Ops are stored in a topological order (the
constructor checks it), so solvers can use array indices; tensors carry the bytes that cross a
cut; weights are parameters of the ops that use them, never communication.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property

import numpy as np

from .errors import InputError


def keyed_topological_order(successors: list, indegree: list[int], keys) -> list[int]:
    """Kahn's algorithm that always takes the ready node of smallest key: random-key decoding
    (anytime search) and quotient-graph ordering (coarsening) both need it. The result is
    shorter than the node count exactly when the graph has a cycle."""
    missing = list(indegree)
    ready = [(keys[v], v) for v in range(len(missing)) if missing[v] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, v = heapq.heappop(ready)
        order.append(v)
        for w in successors[v]:
            missing[w] -= 1
            if missing[w] == 0:
                heapq.heappush(ready, (keys[w], w))
    return order


class OpClass(Enum):
    """Cost class of an op type: selects the efficiency factors of the roofline model."""

    MATMUL = "matmul"
    CONV = "conv"
    ELEMENTWISE = "elementwise"
    REDUCTION = "reduction"
    DATA_MOVEMENT = "data_movement"
    OTHER = "other"


@dataclass(frozen=True)
class Op:
    """One operator. ``inputs``/``outputs`` name activation tensors; ``weights`` name parameters."""

    id: str
    op_type: str
    name: str = ""
    module: str = ""
    op_class: OpClass = OpClass.OTHER
    flops: float = 0.0
    bytes_read: float = 0.0
    bytes_written: float = 0.0
    dtype: str = "fp32"
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    weights: tuple[str, ...] = ()


@dataclass(frozen=True)
class Tensor:
    """An activation: one producer op (``None`` for a graph input), its consumers, its size."""

    name: str
    bytes: float
    producer: str | None
    consumers: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class OpGraph:
    """A DAG of ops in topological order, with its tensors and the byte size of each weight."""

    name: str
    ops: tuple[Op, ...]
    tensors: tuple[Tensor, ...]
    weights: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.ops:
            raise InputError(f"graph {self.name!r} has no ops")
        index = self.index
        if len(index) != len(self.ops):
            seen: set[str] = set()
            duplicate = next(op.id for op in self.ops if op.id in seen or seen.add(op.id))
            raise InputError(f"graph {self.name!r}: duplicate op id {duplicate!r}")
        for tensor in self.tensors:
            if tensor.bytes < 0 or not np.isfinite(tensor.bytes):
                raise InputError(f"tensor {tensor.name!r}: size {tensor.bytes} is not a byte count")
            if tensor.producer is not None and tensor.producer not in index:
                raise InputError(f"tensor {tensor.name!r}: unknown producer {tensor.producer!r}")
            for consumer in tensor.consumers:
                if consumer not in index:
                    raise InputError(f"tensor {tensor.name!r}: unknown consumer {consumer!r}")
                if tensor.producer is not None and index[tensor.producer] >= index[consumer]:
                    raise InputError(
                        f"graph {self.name!r}: ops are not in topological order or form a cycle"
                        f" (tensor {tensor.name!r} from {tensor.producer!r} to {consumer!r})"
                    )
        for op in self.ops:
            for weight in op.weights:
                if weight not in self.weights:
                    raise InputError(f"op {op.id!r}: unknown weight {weight!r}")
        for weight, size in self.weights.items():
            if size < 0 or not np.isfinite(size):
                raise InputError(f"weight {weight!r}: size {size} is not a byte count")

    @cached_property
    def index(self) -> dict[str, int]:
        """Position of each op id in the topological order."""
        return {op.id: position for position, op in enumerate(self.ops)}

    @cached_property
    def edges(self) -> tuple[tuple[int, int], ...]:
        """Distinct (producer, consumer) index pairs, sorted."""
        pairs = {
            (self.index[t.producer], self.index[c])
            for t in self.tensors
            if t.producer is not None
            for c in t.consumers
        }
        return tuple(sorted(pairs))

    @cached_property
    def param_bytes(self) -> np.ndarray:
        """Bytes of the weights each op uses (a weight shared by two ops counts for both)."""
        return np.array([sum(self.weights[w] for w in op.weights) for op in self.ops], dtype=float)

    @cached_property
    def working_set(self) -> np.ndarray:
        """Bytes each op reads and writes: the activation-memory term of its stage."""
        return np.array([op.bytes_read + op.bytes_written for op in self.ops], dtype=float)

    @property
    def total_weight_bytes(self) -> float:
        return float(sum(self.weights.values()))

    def longest_path(self, weights: np.ndarray | None = None) -> tuple[float, list[str]]:
        """Heaviest path through the DAG by op weight (op count when ``weights`` is None)."""
        value = np.ones(len(self.ops)) if weights is None else np.asarray(weights, dtype=float)
        best = value.copy()
        parent = [-1] * len(self.ops)
        for u, v in self.edges:  # sorted by producer, so each u is final before it is used
            if best[u] + value[v] > best[v]:
                best[v] = best[u] + value[v]
                parent[v] = u
        end = int(np.argmax(best))
        path = []
        while end >= 0:
            path.append(self.ops[end].id)
            end = parent[end]
        return float(best.max()), path[::-1]
