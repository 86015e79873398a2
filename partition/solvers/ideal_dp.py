"""Exact DP over the ideals (downsets) of the DAG, with heterogeneous device types.

After Tarnawski et al., "Efficient algorithms for device placement of DNN graph operators"
(NeurIPS 2020). Every placement is a chain of ideals ``∅ = I_0 ⊂ I_1 ⊂ … ⊂ I_m = V`` (stage
``s`` is ``I_s \\ I_{s-1}``), so with ``c`` the vector of how many devices of each type the
stages so far use, and ``cost_τ(I, J)`` the time of stage ``J \\ I`` on a device of type ``τ``:

    F(J, c + e_τ) = min_{I ⊂ J} max( F(I, c), cost_τ(I, J) ),   F(∅, 0) = 0,

subject to ``c_τ ≤`` (devices of type ``τ``) and ``|c| ≤ k``; the optimum is ``min F(V, c)``
over ``|c| ≤ k`` (``= k`` with exact stages). A second pass with sums in place of maxima and
every stage capped at the optimum breaks ties by the smaller sum of stage times, then by fewer
stages (the formulation's tie rule). Colocation groups, and every op on a path between two
members of a group, are contracted into single units before ideals are enumerated.

**What is exact.** Compute, op support and memory (weights used, bytes sent and received,
largest working set) depend on ``J \\ I`` and ``τ`` alone and are exact. Communication depends
on which devices the other stages use, which the state does not record; but ``c`` tells which
types the earlier stages used and which types are still free for later ones. So the DP charges
each tensor crossing into or out of the stage once per side, at the smallest latency and the
largest bandwidth of any link from a device of type ``τ`` to another device of a type already
used (receiving) or still free (sending): a *lower estimate*. It equals the formulation's cost
when those links are all equally fast (one host; or, on hosts of one type each, a stage whose
neighbours' types all reach it over the same link) and each cut tensor has one destination
stage or the mode is ``once``. So the DP value ``V`` is a lower bound on the global optimum,
reported as the bound, and the status is ``optimal`` exactly when the evaluator's bottleneck of
the returned placement equals ``V``.

**Devices.** The DP fixes the device *type* of each stage; concrete devices are then chosen by
evaluating every assignment of (type, host) classes consistent with those types (see
:mod:`._devices`; capped at :data:`_DEVICE_CHOICES`), which picks the hosts with the cheapest
true communication. A third pass charges the *slowest* links instead (no bound, but its
placement often evaluates better when links differ), and the placements of the order DP and
the balanced-time and uniform baselines are candidates too: the best evaluated one is returned.

**Speed.** Ideals are enumerated once as bitsets and their prefix sums (time per type, weights,
bytes leaving the ideal, weighted work) computed with array kernels; each stage ``(I, J)`` is
then scored for all candidates ``J`` of one ``I`` at once. The best heuristic's evaluated
bottleneck caps every stage, which bounds the candidate window, and a state whose remaining
work ``Σ_v min_τ λ_τ t_τ(v)`` cannot fit on the remaining devices under the cap is dropped
(see :func:`_rooms`). The work is about quadratic in the number of ideals: graphs with more
than :data:`IDEAL_LIMIT` are refused, and a time limit returns the best heuristic placement.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from functools import lru_cache

import networkx as nx
import numpy as np

from ..errors import SolverError
from ..evaluator import evaluate
from ..instance import Instance
from ..placement import Evaluation, Placement, Status
from ._devices import device_classes, device_sequences
from .base import Capabilities, Outcome, Scope, Settings, Solver
from .baselines import BalancedTime, Uniform
from .order_dp import split_order

IDEAL_LIMIT = 200_000
_DEVICE_CHOICES = 2_000
_TOLERANCE = 1e-9
_CHUNK = 8192
_LEADING_ZEROS = np.array([8 - b.bit_length() for b in range(256)], dtype=np.int64)


def _units(instance: Instance) -> tuple[np.ndarray, list[int]]:
    """Unit of each op (colocation groups and the ops between their members merged) and the
    predecessor bitmask of each unit."""
    graph = instance.graph
    dag = nx.DiGraph()
    dag.add_nodes_from(range(len(graph.ops)))
    dag.add_edges_from(graph.edges)
    for group in instance.options.colocate:
        members = [graph.index[op_id] for op_id in group]
        dag.add_edges_from(itertools.pairwise([*members, members[0]]))  # one cycle: one SCC
    condensed = nx.condensation(dag)
    unit_of = np.empty(len(graph.ops), dtype=np.int64)
    for op, unit in condensed.graph["mapping"].items():
        unit_of[op] = unit
    preds = [0] * condensed.number_of_nodes()
    for a, b in condensed.edges:
        preds[b] |= 1 << a
    return unit_of, preds


@lru_cache(maxsize=2)
def _enumerate(instance: Instance, limit: int) -> tuple[np.ndarray, list[int]] | None:
    """Ideals of the unit DAG as bitsets (by increasing size), or ``None`` beyond ``limit``."""
    unit_of, preds = _units(instance)
    succs: list[list[int]] = [[] for _ in preds]
    for b, mask in enumerate(preds):
        for a in range(mask.bit_length()):
            if mask >> a & 1:
                succs[a].append(b)
    ideals = [0]
    level = {0: sum(1 << u for u, mask in enumerate(preds) if mask == 0)}  # ideal -> addable units
    while level:
        following: dict[int, int] = {}
        for ideal, addable in level.items():
            rest = addable
            while rest:
                low = rest & -rest
                rest ^= low
                grown = ideal | low
                if grown in following:
                    continue
                now = addable & ~low
                for w in succs[low.bit_length() - 1]:
                    if preds[w] & ~grown == 0:
                        now |= 1 << w
                following[grown] = now
        ideals.extend(following)
        if len(ideals) > limit:
            return None
        level = following
    return unit_of, ideals


def ideal_count(instance: Instance, limit: int = IDEAL_LIMIT) -> int | None:
    """How many ideals the DP would visit, or ``None`` when there are more than ``limit``."""
    enumerated = _enumerate(instance, limit)
    return None if enumerated is None else len(enumerated[1])


@dataclass(frozen=True, eq=False)
class _Tables:
    """Per-ideal sums and the packed op membership of every ideal.

    Columns of ``packed`` are ops sorted by decreasing working set, so the first op of
    ``J \\ I`` in that order (the first set bit of ``J & ~I``) has the stage's largest one.
    """

    packed: np.ndarray  # (N, ⌈n/8⌉) uint8
    column: np.ndarray  # column of each op in ``packed``
    working_sorted: np.ndarray
    time: np.ndarray  # (N, T) finite op times per type
    unsupported: np.ndarray  # (N, T) ops the type cannot run
    own_params: np.ndarray  # (N,) weights with a single user
    out_bytes: np.ndarray  # (N,) tensors produced inside with a consumer outside
    out_count: np.ndarray
    work: np.ndarray  # (N, Λ) weighted work ``Σ_v min_τ λ_τ t_τ(v)`` for each weight vector λ

    def member(self, rows: np.ndarray, ops: np.ndarray) -> np.ndarray:
        """``member[r, i]``: whether op ``ops[i]`` is in ideal ``rows[r]``."""
        cols = self.column[ops]
        return (self.packed[rows[:, None], cols[None, :] >> 3] >> (7 - (cols[None, :] & 7))) & 1 > 0

    def row(self, ideal: int) -> np.ndarray:
        bits = np.unpackbits(self.packed[ideal])[: len(self.column)]
        return bits[self.column] > 0


@dataclass(frozen=True, eq=False)
class _Graph:
    """Tensors (with a producer and consumers) and shared weights as flat arrays."""

    producer: np.ndarray
    consumers: list[np.ndarray]
    size: np.ndarray
    flat: np.ndarray  # every tensor's consumers, concatenated
    starts: np.ndarray  # where each tensor's consumers start in ``flat``
    count: np.ndarray  # how many consumers each tensor has
    own_params: np.ndarray  # per op: bytes of the weights only it uses
    shared_users: list[np.ndarray]
    shared_size: np.ndarray


def _graph_arrays(instance: Instance) -> _Graph:
    graph = instance.graph
    producer, consumers, size = [], [], []
    for tensor in graph.tensors:
        if tensor.producer is None or not tensor.consumers:
            continue
        producer.append(graph.index[tensor.producer])
        consumers.append(np.array(sorted({graph.index[c] for c in tensor.consumers}), dtype=np.int64))
        size.append(tensor.bytes)
    users: dict[str, set[int]] = {}
    for v, op in enumerate(graph.ops):
        for w in op.weights:
            users.setdefault(w, set()).add(v)
    shared = [w for w, us in users.items() if len(us) > 1]
    own = np.zeros(len(graph.ops))
    for w, us in users.items():
        if len(us) == 1:
            own[next(iter(us))] += graph.weights[w]
    count = np.array([len(c) for c in consumers], dtype=np.int64)
    return _Graph(
        np.array(producer, dtype=np.int64),
        consumers,
        np.array(size, dtype=float),
        np.concatenate(consumers) if consumers else np.empty(0, dtype=np.int64),
        np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64),
        count,
        own,
        [np.array(sorted(users[w]), dtype=np.int64) for w in shared],
        np.array([graph.weights[w] for w in shared], dtype=float),
    )


def _work_weights(instance: Instance) -> np.ndarray:
    """Weight vectors λ (rows, max 1) for the work bounds: all ones, and each type's aggregate speed.

    Any λ ≥ 0 gives a valid bound (see :meth:`_DP.run`); the second row makes slow types count
    for less, so mixes of fast and slow devices are not bounded as if all were fastest.
    """
    times = instance.costs.times
    types = times.shape[1]
    if types == 1:
        return np.ones((1, 1))
    finite = np.where(np.isfinite(times), times, np.nan)
    speed = np.nansum(np.nanmin(finite, axis=1)) / np.maximum(np.nansum(finite, axis=0), 1e-300)
    return np.vstack([np.ones(types), speed / speed.max()])


def _tables(
    instance: Instance, unit_of: np.ndarray, ideals: list[int], arrays: _Graph, clock: _Clock
) -> _Tables:
    graph = instance.graph
    n, units = len(graph.ops), int(unit_of.max()) + 1
    working = graph.working_set
    order = np.argsort(-working, kind="stable")
    column = np.empty(n, dtype=np.int64)
    column[order] = np.arange(n)
    times = instance.costs.times
    finite = np.where(np.isfinite(times), times, 0.0)
    weighted = np.where(np.isfinite(times), times, np.inf)[:, None, :] * _work_weights(instance)[None, :, :]
    cheapest = weighted.min(axis=2)  # (n, Λ)
    cheapest = np.where(np.isfinite(cheapest), cheapest, 0.0)
    nbytes = (units + 7) // 8
    packed, parts = [], {name: [] for name in ("time", "unsupported", "params", "out_b", "out_c", "fast")}
    for lo in range(0, len(ideals), _CHUNK):
        clock.tick(lo, len(ideals))
        chunk = ideals[lo : lo + _CHUNK]
        raw = np.frombuffer(b"".join(i.to_bytes(nbytes, "little") for i in chunk), dtype=np.uint8)
        unit_bits = np.unpackbits(raw.reshape(len(chunk), nbytes), axis=1, bitorder="little")
        ops = unit_bits[:, unit_of] > 0  # (chunk, n) in op order
        packed.append(np.packbits(ops[:, order], axis=1))
        parts["time"].append(ops @ finite)
        parts["unsupported"].append(ops @ (~np.isfinite(times)).astype(float))
        parts["params"].append(ops @ arrays.own_params)
        parts["fast"].append(ops @ cheapest)
        if len(arrays.producer):
            inside = np.add.reduceat(ops[:, arrays.flat].astype(np.int64), arrays.starts, axis=1)
            out = ops[:, arrays.producer] & (inside < arrays.count[None, :])
            parts["out_b"].append(out @ arrays.size)
            parts["out_c"].append(out.sum(axis=1).astype(float))
        else:
            parts["out_b"].append(np.zeros(len(chunk)))
            parts["out_c"].append(np.zeros(len(chunk)))
    return _Tables(
        np.concatenate(packed),
        column,
        working[order],
        np.concatenate(parts["time"]),
        np.concatenate(parts["unsupported"]),
        np.concatenate(parts["params"]),
        np.concatenate(parts["out_b"]),
        np.concatenate(parts["out_c"]),
        np.concatenate(parts["fast"]),
    )


@dataclass(frozen=True)
class _Lattice:
    """Vectors ``c`` of devices used per type, flattened; ``moves[τ]`` = (from, to) indices."""

    size: int
    used: np.ndarray  # |c| of each vector
    vectors: np.ndarray  # (size, T)
    moves: tuple[tuple[np.ndarray, np.ndarray], ...]


def _lattice(instance: Instance) -> _Lattice:
    k = instance.options.stages
    caps = [min(count, k) for count in instance.cluster.type_counts]
    vectors = np.array(list(itertools.product(*(range(c + 1) for c in caps))), dtype=np.int64)
    strides = np.array([int(np.prod([c + 1 for c in caps[t + 1 :]])) for t in range(len(caps))])
    used = vectors.sum(axis=1)
    moves = []
    for t, cap in enumerate(caps):
        source = np.flatnonzero((vectors[:, t] < cap) & (used < k))
        moves.append((source, source + strides[t]))
    return _Lattice(len(vectors), used, vectors, tuple(moves))


def _rooms(instance: Instance, lattice: _Lattice, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``room[λ, c]``: the largest ``Σ λ_τ`` over the stages still open after vector ``c``
    (at most ``k - |c|`` of the devices left), and ``room_next[λ, c]``: the same after one more
    stage (the best move from ``c``; ``-inf`` when none).

    If every stage takes at most ``cap``, the work ``Σ_v min_τ λ_τ t_τ(v)`` of the ops still
    to place is at most ``cap · room[λ, c]``: a stage on type τ does at most ``λ_τ · cap``.
    """
    k, counts = instance.options.stages, np.array(instance.cluster.type_counts)
    room = np.zeros((len(weights), lattice.size))
    for c, vector in enumerate(lattice.vectors):
        left = k - int(lattice.used[c])
        for w, lam in enumerate(weights):
            values = np.sort(np.repeat(lam, counts - vector))[::-1]
            room[w, c] = values[:left].sum()
    room_next = np.full_like(room, -np.inf)
    for source, target in lattice.moves:
        room_next[:, source] = np.maximum(room_next[:, source], room[:, target])
    return room, room_next


@dataclass(frozen=True, eq=False)
class _Links:
    """``per_unit[τ, :, c]``: seconds per (tensor received, byte received, tensor sent, byte
    sent) charged to a stage of type τ entered from lattice vector ``c`` — the latency and
    inverse bandwidth of links to the types already in use (received) or still free (sent)."""

    per_unit: np.ndarray


def _links(instance: Instance, lattice: _Lattice, *, slowest: bool) -> _Links:
    """The fastest links (smallest latency, largest bandwidth: a lower estimate) between a
    device of type τ and another device of a type the stage can talk to, or the slowest."""
    cluster = instance.cluster
    types = len(cluster.type_names)
    pick_latency, pick_bandwidth = (np.fmax, np.fmin) if slowest else (np.fmin, np.fmax)
    latency, bandwidth = np.full((types, types), np.nan), np.full((types, types), np.nan)
    for a in range(len(cluster.devices)):
        for b in range(len(cluster.devices)):
            if a != b:
                ta, tb, link = cluster.type_index[a], cluster.type_index[b], cluster.link(a, b)
                latency[ta, tb] = pick_latency(latency[ta, tb], link.latency)
                bandwidth[ta, tb] = pick_bandwidth(bandwidth[ta, tb], link.bandwidth)
    counts = np.array(cluster.type_counts)
    shape = (types, lattice.size)
    charged = [np.zeros(shape), np.full(shape, np.inf), np.zeros(shape), np.full(shape, np.inf)]
    for t in range(types):
        for c, vector in enumerate(lattice.vectors):
            free = counts - vector - (np.arange(types) == t)
            for side, partners in ((0, vector > 0), (2, free > 0)):
                if partners.any():
                    charged[side][t, c] = pick_latency.reduce(latency[t, partners])
                    charged[side + 1][t, c] = pick_bandwidth.reduce(bandwidth[t, partners])
    latency_in, bandwidth_in, latency_out, bandwidth_out = (
        np.nan_to_num(x, nan=0.0 if i % 2 == 0 else np.inf) for i, x in enumerate(charged)
    )
    return _Links(np.stack([latency_in, 1 / bandwidth_in, latency_out, 1 / bandwidth_out], axis=1))


def _scaled(cap: float, room: np.ndarray) -> np.ndarray:
    """``cap · room`` with ``inf · 0 = 0`` (no stage left holds no work, even uncapped)."""
    out = np.where(room < 0, -np.inf, 0.0)  # negative room: no move exists
    positive = room > 0
    out[positive] = cap * room[positive]
    return out


class _OutOfTime(Exception):
    """The time limit ran out inside a DP pass."""


class _Clock:
    """Raises :class:`_OutOfTime` when another step as long as the last would pass the solve's
    deadline (one step — an ideal early in a pass, a chunk of tables — can take 0.2–0.5 s, so
    waiting until the deadline has passed overruns it); reports progress every few seconds."""

    def __init__(self, settings: Settings, what: str, deadline: float) -> None:
        self.settings, self.what, self.deadline = settings, what, deadline
        self.start = self.last = time.perf_counter()
        self.next_report = self.start + 5.0

    def tick(self, done: int, total: int) -> None:
        now = time.perf_counter()
        step, self.last = now - self.last, now
        if now + step > self.deadline:
            raise _OutOfTime(f"{self.what}: time limit reached after {done} of {total} ideals")
        if now > self.next_report:
            self.settings.report(f"{self.what}: {done}/{total} ideals, {now - self.start:.0f} s")
            self.next_report = now + 5.0


class _DP:
    """The tables of one instance, and the recurrence run under a cap on every stage's time."""

    def __init__(self, instance: Instance, unit_of: np.ndarray, ideals: list[int], clock: _Clock) -> None:
        self.instance = instance
        self.arrays = _graph_arrays(instance)
        self.tables = _tables(instance, unit_of, ideals, self.arrays, clock)
        self.lattice = _lattice(instance)
        self.memory = np.array([instance.cluster.device_types[t].memory for t in instance.cluster.type_names])
        self.full = len(ideals) - 1
        self.pairs = 0
        work = self.tables.work
        self.by_work = np.argsort(work[:, -1], kind="stable")  # window on the last weight vector
        self.sorted_work = work[self.by_work, -1]
        self.room, self.room_next = _rooms(instance, self.lattice, _work_weights(instance))

    def _candidates(self, ideal: int, cap: float, rest_limit: np.ndarray) -> np.ndarray:
        """Strict supersets ``J`` whose stage could fit under ``cap`` and leave coverable work.

        A stage on type τ has ``Σ_v t_τ(v) ≤ cap``, so its weighted work is at most ``cap``
        (weights are at most 1); the work left after it must be at most ``rest_limit[λ]``.
        """
        work = self.tables.work
        slack = _TOLERANCE * max(float(work[self.full].max()), 1e-300)
        low = max(work[ideal, -1], work[self.full, -1] - rest_limit[-1]) - slack
        high = work[ideal, -1] + cap + slack
        window = self.by_work[
            np.searchsorted(self.sorted_work, low) : np.searchsorted(self.sorted_work, high, "right")
        ]
        window = window[window != ideal]
        fits = ((work[window] - work[ideal]) <= cap + slack).all(axis=1) & (
            (work[self.full] - work[window]) <= rest_limit + slack
        ).all(axis=1)
        window = window[fits]
        mine = self.tables.packed[ideal]
        return window[((self.tables.packed[window] & mine) == mine).all(axis=1)]

    def _stage_parts(self, ideal: int, js: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For stages ``js[j] \\ ideal``: compute time on each type (inf where the stage does not
        fit or has an op the type cannot run), and the (count, bytes) of tensors received and
        sent, as columns ``[recv count, recv bytes, sent count, sent bytes]``."""
        t, a = self.tables, self.arrays
        inside = t.row(ideal)
        recv_b, recv_c = np.zeros(len(js)), np.zeros(len(js))
        sent_b, sent_c = t.out_bytes[js].copy(), t.out_count[js].copy()
        leaving = np.zeros(0, dtype=bool)
        if len(a.producer):
            leaving = inside[a.producer] & (np.add.reduceat(inside[a.flat], a.starts) < a.count)
        for x in np.flatnonzero(leaving):  # tensors leaving ``ideal``...
            outside = a.consumers[x][~inside[a.consumers[x]]]
            taken = t.member(js, outside)
            got = taken.any(axis=1)  # ...received by the stage
            recv_b += got * a.size[x]
            recv_c += got
            passing = ~taken.all(axis=1)  # ...still leaving ``J`` but not sent by the stage
            sent_b -= passing * a.size[x]
            sent_c -= passing
        params = t.own_params[js] - t.own_params[ideal]
        for users, size in zip(a.shared_users, a.shared_size, strict=True):
            outside = users[~inside[users]]
            if len(outside):
                params += t.member(js, outside).any(axis=1) * size
        diff = t.packed[js] & ~t.packed[ideal]
        first = (diff != 0).argmax(axis=1)
        lead = _LEADING_ZEROS[diff[np.arange(len(js)), first]]
        largest = t.working_sorted[np.minimum(first * 8 + lead, len(t.working_sorted) - 1)]
        memory = params + sent_b + recv_b + largest
        feasible = (t.unsupported[js] - t.unsupported[ideal] < 0.5) & (
            memory[:, None] <= self.memory[None, :] * (1 + _TOLERANCE)
        )
        compute = np.where(feasible, t.time[js] - t.time[ideal], np.inf)
        return compute, np.column_stack([recv_c, recv_b, sent_c, sent_b])

    def run(
        self, cap: float, clock: _Clock, tracks: list[tuple]
    ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """For each track ``(combine, links)``: ``F[ideal, c]`` with every stage ``≤ cap``, and
        back-pointers (ideal, vector). Tracks share the candidates and stage parts of each ideal."""
        t, lattice = self.tables, self.lattice
        count = len(t.work)
        tables = []
        for _ in tracks:
            best = np.full((count, lattice.size), np.inf)
            best[0, 0] = 0.0
            tables.append(
                (best, np.full(best.shape, -1, dtype=np.int64), np.full(best.shape, -1, dtype=np.int64))
            )
        work_limit = _scaled(cap, self.room) * (1 + _TOLERANCE) + 1e-300
        next_limit = _scaled(cap, self.room_next)
        for ideal in range(count - 1):
            clock.tick(ideal, count)
            rest = t.work[self.full] - t.work[ideal]  # drop states whose rest cannot fit under cap
            hopeless = (rest[:, None] > work_limit).any(axis=0)
            lives = []
            for best, _, _ in tables:
                best[ideal, hopeless] = np.inf
                lives.append(np.isfinite(best[ideal]))
            live = np.logical_or.reduce(lives)
            if not live.any():
                continue
            js = self._candidates(ideal, cap, next_limit[:, live].max(axis=1))
            if not len(js):
                continue
            self.pairs += len(js)
            compute, traffic = self._stage_parts(ideal, js)
            for (combine, links), (best, parent, parent_vector), mine in zip(
                tracks, tables, lives, strict=True
            ):
                if mine.any():
                    self._relax(
                        ideal, js, compute, traffic, combine, links, cap, mine, best, parent, parent_vector
                    )
        return tables

    def _relax(
        self, ideal, js, compute, traffic, combine, links, cap, live, best, parent, parent_vector
    ) -> None:
        """Extend every live state of ``ideal`` by the stages ``js \\ ideal`` on every type."""
        block, block_parent, block_vector = best[js], parent[js], parent_vector[js]
        row = best[ideal]
        changed = False
        for tau, (source, target) in enumerate(self.lattice.moves):
            keep = live[source]
            if not keep.any() or not np.isfinite(compute[:, tau]).any():
                continue
            source, target = source[keep], target[keep]
            comm = traffic @ links.per_unit[tau][:, source]
            own = compute[:, tau][:, None]
            cost = np.maximum(own, comm) if self.instance.options.overlap else own + comm
            cost[cost > cap] = np.inf
            value = combine(row[source][None, :], cost)
            current = block[:, target]
            better = value < current
            if not better.any():
                continue
            changed = True
            block[:, target] = np.where(better, value, current)
            block_parent[:, target] = np.where(better, ideal, block_parent[:, target])
            block_vector[:, target] = np.where(better, source[None, :], block_vector[:, target])
        if changed:
            best[js], parent[js], parent_vector[js] = block, block_parent, block_vector

    def finals(self) -> np.ndarray:
        """Lattice vectors that end a placement (``|c| = k`` with exact stages)."""
        used, k = self.lattice.used, self.instance.options.stages
        return np.flatnonzero(used == k if self.instance.options.exact_stages else (used >= 1) & (used <= k))

    def trace(
        self, parent: np.ndarray, parent_vector: np.ndarray, vector: int
    ) -> tuple[list[int], list[int]]:
        """(ideals of the chain, device type of each stage) ending at ``(V, vector)``."""
        ideals, types = [self.full], []
        ideal = self.full
        while ideal != 0:
            before, before_vector = int(parent[ideal, vector]), int(parent_vector[ideal, vector])
            types.append(
                int(np.flatnonzero(self.lattice.vectors[vector] != self.lattice.vectors[before_vector])[0])
            )
            ideal, vector = before, before_vector
            ideals.append(ideal)
        return ideals[::-1], types[::-1]


def _placed(
    instance: Instance, dp: _DP, parent: np.ndarray, parent_vector: np.ndarray, vector: int, label: str
) -> tuple[str, Placement, Evaluation] | None:
    """The DP's placement ending at ``(V, vector)``, on its best evaluated concrete devices."""
    chain, types = dp.trace(parent, parent_vector, vector)
    stage_of = [0] * len(instance.graph.ops)
    for s in range(len(types)):
        for v in np.flatnonzero(dp.tables.row(chain[s + 1]) & ~dp.tables.row(chain[s])):
            stage_of[v] = s
    chosen = _choose_devices(instance, tuple(stage_of), types)
    return None if chosen is None else (label, *chosen)


def _choose_devices(
    instance: Instance, stage_of: tuple[int, ...], types: list[int]
) -> tuple[Placement, Evaluation] | None:
    """Best evaluated concrete devices for stages of the given types (classes per type)."""
    cluster = instance.cluster
    classes = device_classes(cluster)
    allowed = [[c for c, members in enumerate(classes) if cluster.type_index[members[0]] == t] for t in types]
    best = None
    for devices in itertools.islice(device_sequences(classes, allowed), _DEVICE_CHOICES):
        placement = Placement(stage_of, devices)
        evaluation = evaluate(instance, placement)
        if evaluation.valid and (best is None or (evaluation.bottleneck, evaluation.latency) < best[2]):
            best = (placement, evaluation, (evaluation.bottleneck, evaluation.latency))
    return None if best is None else (best[0], best[1])


def incumbents(instance: Instance, settings: Settings) -> list[tuple[str, Placement, Evaluation]]:
    """Valid placements of the order DP and the balanced-time and uniform baselines."""
    found = []
    order, _ = split_order(instance, np.arange(len(instance.graph.ops)))
    candidates = [("order-dp", order)] + [
        (solver.name, solver.solve(instance, settings).placement) for solver in (BalancedTime(), Uniform())
    ]
    for label, placement in candidates:
        if placement is not None and (evaluation := evaluate(instance, placement)).valid:
            found.append((label, placement, evaluation))
    return found


def _better(a: tuple[str, Placement, Evaluation] | None, b: tuple[str, Placement, Evaluation] | None):
    """The one with the smaller (bottleneck, latency); ``a`` on ties."""
    if a is None or b is None:
        return a or b
    return b if (b[2].bottleneck, b[2].latency) < (a[2].bottleneck, a[2].latency) else a


class IdealDP(Solver):
    name = "ideal-dp"
    capabilities = Capabilities(scope=Scope.GLOBAL, heterogeneous=True, time_limit=True)

    def solve(self, instance: Instance, settings: Settings) -> Outcome:
        limit = settings.time_limit
        deadline = time.perf_counter() + limit if limit is not None else np.inf
        enumerated = _enumerate(instance, IDEAL_LIMIT)
        if enumerated is None:
            raise SolverError(
                f"ideal-dp: the graph has more than {IDEAL_LIMIT} ideals (downsets), too many for the"
                " exact DP; use --solver cp-sat or order-dp"
            )
        unit_of, ideals = enumerated
        settings.report(f"ideal-dp: {len(ideals)} ideals over {int(unit_of.max()) + 1} units")
        best = None
        for incumbent in incumbents(instance, settings):
            best = _better(best, incumbent)
        try:
            dp = _DP(instance, unit_of, ideals, _Clock(settings, "ideal-dp tables", deadline))
        except _OutOfTime as stop:
            return self._out_of_time(best, stop)
        cap = best[2].bottleneck * (1 + _TOLERANCE) if best else np.inf
        finals, floor = dp.finals(), _links(instance, dp.lattice, slowest=False)
        ceiling = _links(instance, dp.lattice, slowest=True)
        tracks = [(np.maximum, floor)]
        if not np.array_equal(floor.per_unit, ceiling.per_unit):
            tracks.append(
                (np.maximum, ceiling)
            )  # charging the slowest links: no bound, maybe a better placement
        try:
            runs = dp.run(cap, _Clock(settings, "ideal-dp pass 1", deadline), tracks)
        except _OutOfTime as stop:
            return self._out_of_time(best, stop)
        values, parent, parent_vector = runs[0]
        value = float(values[dp.full, finals].min()) if len(finals) else np.inf
        if not np.isfinite(value):
            return Outcome(
                None,
                Status.INFEASIBLE,
                np.inf,
                ("ideal-dp: no placement fits the devices' memory and op support (every placement checked)",),
            )
        if len(runs) > 1 and np.isfinite(runs[1][0][dp.full, finals].min()):
            upper, up_parent, up_vector = runs[1]
            vector = int(finals[np.argmin(upper[dp.full, finals])])
            best = _better(
                best, _placed(instance, dp, up_parent, up_vector, vector, "ideal-dp (slowest links)")
            )
        vector = int(finals[np.argmin(values[dp.full, finals])])
        try:  # tie-break by the sum of stage times, then fewer stages
            clock = _Clock(settings, "ideal-dp pass 2", deadline)
            tie_cap = value * (1 + _TOLERANCE) + 1e-300
            ((sums, parent, parent_vector),) = dp.run(tie_cap, clock, [(np.add, floor)])
            vector = int(min(finals, key=lambda c: (sums[dp.full, c], dp.lattice.used[c])))
        except _OutOfTime:
            pass
        best = _better(_placed(instance, dp, parent, parent_vector, vector, "ideal-dp"), best)
        if best is None:
            return Outcome(None, Status.NO_SOLUTION, value, ("ideal-dp: no device assignment is valid",))
        notes = [
            f"ideal-dp: {len(ideals)} ideals, {dp.pairs} stage candidates scored; DP value {value:.6g} s"
            " (a lower bound: communication is estimated from below unless links are uniform)",
            f"ideal-dp: returning the {best[0]} placement (the best evaluated of the DP's and heuristics')",
        ]
        if best[2].bottleneck <= value * (1 + _TOLERANCE):  # equal up to rounding: proven optimal
            return Outcome(best[1], Status.OPTIMAL, min(value, best[2].bottleneck), tuple(notes))
        return Outcome(best[1], Status.FEASIBLE, value, tuple(notes))

    @staticmethod
    def _out_of_time(best: tuple[str, Placement, Evaluation] | None, stop: _OutOfTime) -> Outcome:
        """The best heuristic placement when the time limit stops the DP (no bound of its own)."""
        if best is None:
            return Outcome(None, Status.NO_SOLUTION, 0.0, (str(stop),))
        return Outcome(best[1], Status.FEASIBLE, 0.0, (f"{stop}; returning the {best[0]} placement",))
