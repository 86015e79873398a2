"""The data of the global stage-assignment model, shared by the CP-SAT and MILP solvers.

Both solvers decide the same things — the stage of every op and a *device class* per stage —
and differ only in how they state the constraints. This module computes what they share:

- **Device classes**: devices of one type on one host are interchangeable (same speed, memory
  and links), so a model picks a class per stage, at most ``count(class)`` stages per class,
  and concrete devices are handed out afterwards. This removes all symmetry among identical
  devices without losing any placement.
- **Link kinds**: two distinct devices talk over their host's intra link when they share a host,
  else over the inter-host link; so the link between two stages is fixed by their hosts.
- **Cut tensors**: each produced tensor with consumers, as (producer, distinct consumers,
  bytes), and its transfer time on every link kind.
- **Weights** with the ops that use them (a weight counts once per stage that uses it), each
  op's working set, colocation groups as op indices, and a warm start from the order DP.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..cluster import Cluster
from ..devices import LinkType
from ..instance import CommMode, Instance
from ..placement import Placement, Status
from .base import Outcome

# The evaluator accepts memory up to capacity × (1 + 1e-9); models use the same slack.
MEMORY_TOLERANCE = 1e-9


@dataclass(frozen=True)
class DeviceClass:
    """Interchangeable devices: one type (column of the cost table) on one host."""

    type_column: int
    host: int
    devices: tuple[int, ...]
    memory: float


@dataclass(frozen=True)
class CutTensor:
    """A tensor that may cross stages: its producer, distinct consumers (op indices), bytes."""

    producer: int
    consumers: tuple[int, ...]
    bytes: float


@dataclass(frozen=True)
class LinkKind:
    """How two stages talk: ``host`` ≥ 0 for that host's intra link, -1 for the inter-host link."""

    host: int
    link: LinkType


@dataclass(frozen=True, eq=False)
class StageModelData:
    """Everything a global model of ``instance`` needs, in index form."""

    instance: Instance
    classes: tuple[DeviceClass, ...]
    tensors: tuple[CutTensor, ...]
    weight_users: tuple[tuple[float, tuple[int, ...]], ...]
    colocate: tuple[tuple[int, ...], ...]

    @property
    def num_ops(self) -> int:
        return len(self.instance.graph.ops)

    @property
    def num_stages(self) -> int:
        return self.instance.options.stages

    @property
    def once(self) -> bool:
        return self.instance.options.comm_mode is CommMode.ONCE

    @property
    def times(self) -> np.ndarray:
        """``times[v, τ]`` in seconds (``inf`` where type ``τ`` cannot run ``v``)."""
        return self.instance.costs.times

    @property
    def working(self) -> np.ndarray:
        return self.instance.graph.working_set

    @cached_property
    def link_kinds(self) -> tuple[LinkKind, ...]:
        """Every link two stages can use: each host's intra link, then the inter-host link."""
        cluster = self.instance.cluster
        used_hosts = sorted({c.host for c in self.classes})
        kinds = [LinkKind(h, cluster.hosts[h].intra_link) for h in used_hosts]
        if len(used_hosts) > 1:
            kinds.append(LinkKind(-1, cluster.inter_host_link))
        return tuple(kinds)

    @cached_property
    def transfer(self) -> np.ndarray:
        """``transfer[i, ℓ]``: seconds to send cut tensor ``i`` over link kind ``ℓ``."""
        sizes = np.array([t.bytes for t in self.tensors], dtype=float)
        return np.array(
            [[kind.link.latency + size / kind.link.bandwidth for kind in self.link_kinds] for size in sizes]
        ).reshape(len(sizes), len(self.link_kinds))

    @cached_property
    def memory_can_bind(self) -> bool:
        """False when even one stage holding everything fits the smallest device: skip memory."""
        everything = (
            sum(w for w, _ in self.weight_users)
            + 2 * sum(t.bytes for t in self.tensors)
            + float(self.working.max(initial=0.0))
        )
        return everything > min(c.memory for c in self.classes)

    def decode(self, stage_of: list[int], class_of_stage: list[int]) -> Placement:
        """A placement from a model's stage per op and class per used stage."""
        taken: dict[int, int] = {}
        devices = []
        for c in class_of_stage:
            devices.append(self.classes[c].devices[taken.get(c, 0)])
            taken[c] = taken.get(c, 0) + 1
        return Placement(tuple(stage_of), tuple(devices))

    def class_of_device(self, device: int) -> int:
        return next(c for c, cls in enumerate(self.classes) if device in cls.devices)


def device_classes(cluster: Cluster) -> tuple[DeviceClass, ...]:
    """The cluster's (type, host) classes with their type column, host and memory."""
    return tuple(
        DeviceClass(
            cluster.type_index[members[0]],
            cluster.devices[members[0]].host,
            members,
            cluster.memory(members[0]),
        )
        for members in cluster.classes
    )


def stage_model_data(instance: Instance) -> StageModelData:
    graph, cluster = instance.graph, instance.cluster
    classes = device_classes(cluster)
    tensors = []
    for tensor in graph.tensors:
        if tensor.producer is None or not tensor.consumers:
            continue
        producer = graph.index[tensor.producer]
        consumers = tuple(sorted({graph.index[c] for c in tensor.consumers} - {producer}))
        if consumers:
            tensors.append(CutTensor(producer, consumers, float(tensor.bytes)))
    users: dict[str, set[int]] = {}
    for v, op in enumerate(graph.ops):
        for w in op.weights:
            users.setdefault(w, set()).add(v)
    weight_users = tuple(
        (float(graph.weights[w]), tuple(sorted(vs))) for w, vs in users.items() if graph.weights[w] > 0
    )
    colocate = tuple(
        tuple(graph.index[op_id] for op_id in group) for group in instance.options.colocate if len(group) > 1
    )
    return StageModelData(instance, classes, tuple(tensors), weight_users, colocate)


def out_of_time(solver: str, start: Placement | None, lower_bound: float, when: str) -> Outcome:
    """The warm start when the time limit ran out before the solver could improve on it."""
    note = f"{solver}: time limit reached {when}"
    if start is None:
        return Outcome(None, Status.NO_SOLUTION, lower_bound, (note,))
    return Outcome(start, Status.FEASIBLE, lower_bound, (f"{note}; returning the warm start",))


class OutOfTime(Exception):
    """The time limit ran out while a model was being built (seconds on large graphs)."""


def check_deadline(deadline: float) -> None:
    """Raise :class:`OutOfTime` past ``deadline`` (``perf_counter`` time)."""
    if time.perf_counter() > deadline:
        raise OutOfTime


def infeasibility_note(solver: str, memory_is_the_cause: bool, data: StageModelData) -> str:
    """The reason given when a global model is proven infeasible."""
    options = data.instance.options
    stages = f"{'exactly' if options.exact_stages else 'at most'} {options.stages} stages"
    if memory_is_the_cause:
        return (
            f"{solver}: proven infeasible: no placement on {stages} fits the devices' memory"
            " (weights, transfer buffers and working sets), though one exists without memory limits"
        )
    return (
        f"{solver}: proven infeasible: no placement on {stages} satisfies the precedence,"
        " device-type and colocation constraints"
    )
