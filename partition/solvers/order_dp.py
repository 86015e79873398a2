"""Optimal contiguous split of one topological order over an ordered device list.

Ops are taken in a fixed topological order ``π`` and cut into at most ``k`` intervals; stage
``c`` goes to device ``m_c`` with ``m_1 < m_2 < …`` in the cluster's (host-ordered) device
list. With ``cost_m(i, j)`` the time of the interval ``π[i:j)`` on device ``m``:

    F_c(m, j) = min_{i < j} max( min_{m' < m} F_{c-1}(m', i), cost_m(i, j) ),  F_0(·, 0) = 0

and the optimum is ``min_{c ≤ k, m} F_c(m, n)``. A second pass with the same recurrence, sums
in place of maxima and intervals capped at the optimal bottleneck, breaks ties by the smallest
sum of stage times, then by fewer stages (the formulation's tie rule).

Each ``cost_m(·, ·)`` is a dense ``(n+1)²`` array built with 2-D prefix sums (Alpa-style array
kernels): compute from prefix sums of op times, communication and memory from rectangles of
``(i, j)`` pairs in which a tensor crosses the interval boundary or a weight is used.

Communication inside the DP is a *lower estimate* that depends on the interval alone: each
crossing tensor is charged once per side, over the fastest link from device ``m`` to any later
(sending) or earlier (receiving) device. It equals the formulation's cost when every cut
tensor has one destination stage and neighbouring stages use the fastest link, as in chains
on one host; then the split is optimal for the order. Otherwise the evaluator's figure
exceeds the DP's value ``V``, and the true order-optimum lies between ``V`` and the returned
placement's bottleneck — reported in the notes. Memory is exact.
"""

from __future__ import annotations

import numpy as np

from ..chain_bound import reused
from ..cluster import Cluster
from ..instance import CommMode, Instance
from ..placement import Placement, Status
from .base import Capabilities, Outcome, Scope, Settings, Solver

_RELATIVE_TOLERANCE = 1e-9
# seconds per (stage, device, interval) cell of one pass: 17 s for both passes of Llama-7B
# (1 834 ops) at k = 16 on 16 devices, measured on 2 shared cores
_SECONDS_PER_CELL = 1e-8


def _rectangles(size: int, rows_lo, rows_hi, cols_lo, cols_hi, values) -> np.ndarray:
    """Sum of ``values`` over inclusive rectangles ``[rows_lo, rows_hi] × [cols_lo, cols_hi]``."""
    diff = np.zeros((size + 1, size + 1))
    for dr, dc, sign in (
        (rows_lo, cols_lo, 1),
        (rows_hi + 1, cols_lo, -1),
        (rows_lo, cols_hi + 1, -1),
        (rows_hi + 1, cols_hi + 1, 1),
    ):
        np.add.at(diff, (dr, dc), sign * values)
    return diff.cumsum(axis=0).cumsum(axis=1)[:size, :size]


class _IntervalTables:
    """Per-interval sums over ``π[i:j)`` for ``0 ≤ i < j ≤ n``, as ``(n+1) × (n+1)`` arrays."""

    def __init__(self, instance: Instance, order: np.ndarray) -> None:
        graph = instance.graph
        n = len(order)
        size = n + 1
        position = np.empty(n, dtype=np.int64)
        position[order] = np.arange(n)
        self.n = n

        send, recv = ([], [], [], [], [], []), ([], [], [], [], [])
        for tensor in graph.tensors:
            if tensor.producer is None or not tensor.consumers:
                continue
            p = position[graph.index[tensor.producer]]
            consumers = sorted({int(position[graph.index[c]]) for c in tensor.consumers})
            # sent from [i, j) iff i <= p < j <= last consumer
            send[0].append(0), send[1].append(p), send[2].append(p + 1), send[3].append(consumers[-1])
            send[4].append(tensor.bytes)
            previous = p
            for q in consumers:  # received by [i, j) iff p < i <= q < j for its first consumer q >= i
                recv[0].append(previous + 1), recv[1].append(q), recv[2].append(q + 1), recv[3].append(n)
                recv[4].append(tensor.bytes)
                previous = q
        as_int = lambda xs: np.asarray(xs, dtype=np.int64)  # noqa: E731
        s_lo, s_hi, s_clo, s_chi = (as_int(x) for x in send[:4])
        r_lo, r_hi, r_clo, r_chi = (as_int(x) for x in recv[:4])
        self.send_bytes = _rectangles(size, s_lo, s_hi, s_clo, s_chi, np.asarray(send[4], dtype=float))
        self.send_count = _rectangles(size, s_lo, s_hi, s_clo, s_chi, np.ones(len(s_lo)))
        self.recv_bytes = _rectangles(size, r_lo, r_hi, r_clo, r_chi, np.asarray(recv[4], dtype=float))
        self.recv_count = _rectangles(size, r_lo, r_hi, r_clo, r_chi, np.ones(len(r_lo)))

        users: dict[str, list[int]] = {}
        for v, op in enumerate(graph.ops):
            for w in op.weights:
                users.setdefault(w, []).append(int(position[v]))
        w_lo, w_hi, w_clo, w_val = [], [], [], []
        for w, positions in users.items():
            previous = -1
            for u in sorted(set(positions)):  # weight counted in [i, j) iff some user lies in it
                w_lo.append(previous + 1), w_hi.append(u), w_clo.append(u + 1), w_val.append(graph.weights[w])
                previous = u
        weights = _rectangles(
            size,
            as_int(w_lo),
            as_int(w_hi),
            as_int(w_clo),
            np.full(len(w_lo), n, dtype=np.int64),
            np.asarray(w_val, dtype=float),
        )

        working = graph.working_set[order]
        largest = np.zeros((size, size))
        largest[:, 1:] = np.where(
            np.arange(size)[:, None] < np.arange(1, size)[None, :], working[None, :], 0.0
        )
        largest = np.maximum.accumulate(largest, axis=1)
        self.memory = weights + self.send_bytes + self.recv_bytes + largest

        times = instance.costs.times[order]
        finite = np.where(np.isfinite(times), times, 0.0)
        self.prefix_time = np.vstack([np.zeros(times.shape[1]), finite.cumsum(axis=0)])
        self.prefix_unsupported = np.vstack([np.zeros(times.shape[1]), (~np.isfinite(times)).cumsum(axis=0)])

        allowed_cut = np.ones(size, dtype=bool)
        for group in instance.options.colocate:
            spots = [int(position[graph.index[op_id]]) for op_id in group]
            allowed_cut[min(spots) + 1 : max(spots) + 1] = False
        self.valid = (
            np.triu(np.ones((size, size), dtype=bool), k=1) & allowed_cut[:, None] & allowed_cut[None, :]
        )


def _link_bounds(cluster: Cluster, device: int, others: range) -> tuple[float, float]:
    """Smallest latency and largest bandwidth from ``device`` to any device in ``others``: its
    host's link if one of them shares its host, the inter-host link if one does not. Not pair
    by pair: a cluster may hold tens of thousands of devices, and this runs for each."""
    if not len(others):
        return 0.0, np.inf
    host = cluster.devices[device].host
    same = cluster.host_of[others.start : others.stop] == host
    links = [cluster.hosts[host].intra_link] if same.any() else []
    links += [] if same.all() else [cluster.inter_host_link]
    return min(link.latency for link in links), max(link.bandwidth for link in links)


def _stage_costs(instance: Instance, tables: _IntervalTables, device: int) -> np.ndarray:
    cluster = instance.cluster
    column = cluster.type_index[device]
    compute = tables.prefix_time[None, :, column] - tables.prefix_time[:, None, column]
    unsupported = (
        tables.prefix_unsupported[None, :, column] - tables.prefix_unsupported[:, None, column]
    ) > 0
    send_latency, send_bandwidth = _link_bounds(cluster, device, range(device + 1, len(cluster.devices)))
    recv_latency, recv_bandwidth = _link_bounds(cluster, device, range(device))
    comm = (
        tables.send_count * send_latency
        + tables.send_bytes / send_bandwidth
        + tables.recv_count * recv_latency
        + tables.recv_bytes / recv_bandwidth
    )
    cost = np.maximum(compute, comm) if instance.options.overlap else compute + comm
    feasible = (
        tables.valid & ~unsupported & (tables.memory <= cluster.memory(device) * (1 + _RELATIVE_TOLERANCE))
    )
    return np.where(feasible, cost, np.inf)


def _run(instance: Instance, tables: _IntervalTables, combine, cap: float):
    """One pass of the recurrence; ``combine`` is ``np.maximum`` (bottleneck) or ``np.add``."""
    n, k = tables.n, instance.options.stages
    devices = len(instance.cluster.devices)
    best = np.full((k + 1, devices, n + 1), np.inf)  # best[c, m, j]: last stage c on device m
    cut = np.zeros((k + 1, devices, n + 1), dtype=np.int64)
    # before[c, :]: best over devices m' < current m, with the device that achieved it
    before = np.full((k + 1, n + 1), np.inf)
    before[0, 0] = 0.0
    before_device = np.full((k + 1, devices, n + 1), -1, dtype=np.int64)
    running_device = np.full((k + 1, n + 1), -1, dtype=np.int64)
    for m in range(devices):
        costs = _stage_costs(instance, tables, m)
        costs[costs > cap] = np.inf
        for c in range(k, 0, -1):  # descending c so before[c-1] still excludes device m
            before_device[c, m] = running_device[c - 1]
            candidates = combine(before[c - 1][:, None], costs)
            cut[c, m] = np.argmin(candidates, axis=0)
            best[c, m] = candidates[cut[c, m], np.arange(n + 1)]
        for c in range(1, k + 1):
            improved = best[c, m] < before[c]
            before[c] = np.where(improved, best[c, m], before[c])
            running_device[c] = np.where(improved, m, running_device[c])
    return best, cut, before_device


def _required_stages(instance: Instance) -> range:
    k = instance.options.stages
    return range(k, k + 1) if instance.options.exact_stages else range(1, k + 1)


def _trace(best, cut, before_device, c: int, m: int, n: int) -> tuple[list[int], list[int]]:
    """Recover (interval ends, devices) of the solution ending with stage ``c`` on device ``m``."""
    bounds, devices = [n], []
    j = n
    while c > 0:
        devices.append(m)
        i = int(cut[c, m, j])
        bounds.append(i)
        m = int(before_device[c, m, i])
        c, j = c - 1, i
    return bounds[::-1], devices[::-1]


def split_seconds(instance: Instance) -> float:
    """About how long :func:`split_order` takes on ``instance`` (its two passes fill dense
    ``(n+1)²`` tables per stage and device)."""
    n = len(instance.graph.ops)
    return 2 * _SECONDS_PER_CELL * instance.options.stages * len(instance.cluster.devices) * (n + 1) ** 2


def split_order(instance: Instance, order: np.ndarray) -> tuple[Placement | None, float]:
    """Optimal split of ``order`` (a permutation of op indices); returns (placement, DP value)."""
    tables = _IntervalTables(instance, order)
    n = tables.n
    best, _, _ = _run(instance, tables, np.maximum, np.inf)
    stages = _required_stages(instance)
    value = float(min(best[c, :, n].min() for c in stages))
    if not np.isfinite(value):
        return None, value
    cap = value * (1 + _RELATIVE_TOLERANCE) + 1e-15
    sums, cut, before_device = _run(instance, tables, np.add, cap)
    choice = min((float(sums[c, m, n]), c, m) for c in stages for m in range(sums.shape[1]))
    bounds, devices = _trace(sums, cut, before_device, choice[1], choice[2], n)
    stage_of = np.empty(n, dtype=np.int64)
    for s in range(len(devices)):
        stage_of[order[bounds[s] : bounds[s + 1]]] = s
    return Placement(tuple(int(s) for s in stage_of), tuple(devices)), value


def graph_order_split(instance: Instance) -> tuple[Placement | None, float]:
    """:func:`split_order` of the graph's own topological order, made once per solve (within
    :func:`~partition.chain_bound.reuse`): ``auto``'s choice, the bound before CP-SAT and
    CP-SAT's starts each ask for it (on CLIP over H100/A100 at k = 4, 0.2 s each)."""
    return reused(instance, "order split", lambda: split_order(instance, np.arange(len(instance.graph.ops))))


class OrderDP(Solver):
    name = "order-dp"
    capabilities = Capabilities(scope=Scope.ORDER, max_ops=4000)

    def solve(self, instance: Instance, settings: Settings) -> Outcome:
        settings.report(
            f"order-dp: {len(instance.graph.ops)} ops, {len(instance.cluster.devices)} devices,"
            f" k ≤ {instance.options.stages}"
        )
        placement, value = graph_order_split(instance)
        if placement is None:
            return Outcome(
                None,
                Status.INFEASIBLE,
                np.inf,
                (
                    "no contiguous split of the topological order fits the devices' memory"
                    " (or an op no device type can run)",
                ),
            )
        mode = "once" if instance.options.comm_mode is CommMode.ONCE else "per-destination"
        return Outcome(
            placement,
            Status.FEASIBLE,
            0.0,
            (
                f"order-dp: optimal among contiguous splits of the graph's topological order over"
                f" ordered subsequences of the device list, when communication is as the DP estimates"
                f" ({mode} mode); DP value {value:.6g} s",
            ),
        )
