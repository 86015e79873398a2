"""Split two towers at once: the best interleaving of their orders for a device sequence.

A graph made of two towers (CLIP's image and text encoders, T5's encoder and decoder; found by
:func:`partition.tower_bound.towers`) has placements that no split of one topological order
reaches cheaply: each stage may hold a piece of each tower, and where the pieces change hands
decides how well op granularity lets the stages balance. On CLIP at k = 8 on 8 H100s the
genetic order search ends at 0.4768 ms in a minute and near 0.4743 ms in five; the
interleaving below gives 0.4757 ms in half a second, which the polish then takes to 0.4743.

Formulation (a heuristic: an estimate, then the caller's exact scoring). Each op goes with a
tower: its own, or for an op in neither or on a hung chain, the tower of its first reader.
Tower ``X`` keeps its ops in graph order, ``x_0 < … < x_{n-1}``; stage ``c`` of a device
sequence ``d_1, …, d_k`` holds positions ``[i, j)`` of tower ``A`` and ``[p, q)`` of ``B``, and
its estimated time is

    cost_c(i, j) + cost_c(p, q),  cost_c(i, j) = C_τ(j) − C_τ(i) + recv(i, j) + send(i, j)

with ``τ`` the type of ``d_c``, ``C_τ`` the tower's compute prefix sums, and ``recv``/``send``
the tensors made before ``i`` and read in ``[i, j)``, or made in it and read at or after ``j``,
each once, over the links from ``d_{c-1}`` and to ``d_{c+1}``; a tensor of the other tower
counts as made before ``0`` (read here) or read at ``n`` (made here). Both are unions of
rectangles of the ``(i, j)`` grid (2-D difference arrays).

For a bottleneck ``T``, ``G_c[j]`` is the furthest ``q`` reached in ``B`` with ``A`` at ``j``
after ``c`` stages: ``G_0[0] = 0`` and

    G_c[j] = max over corners i ≤ j of G_{c-1}:  max { q : cost_c(i, j) + cost_c(G_{c-1}[i], q) ≤ T }

where the corners are the points no other point dominates, and the inner maximum is a binary
search over the suffix minima of ``cost_c(p, ·)``. Keeping only the furthest ``q`` is exact
when a later start never costs more (two chains whose tensors are all alike), a heuristic
otherwise. An edge between the towers bounds ``q`` from above (``B`` holds a reader of ``A``'s
op only once ``A`` holds it: T5's cross-attention, CLIP's similarity logits) or from below.
The smallest ``T`` with ``G_c[n_A] ≥ n_B`` for some ``c ≤ k`` is bisected and its stages are
traced back: a placement over the non-empty stages, and an order (the ready op of smallest
key, keyed by stage) for the caller's exact split.

``send`` counts a tensor once, where its producer pays a send per later stage reading it; so
the split is estimated again with each tensor charged as often as the traced splits sent it
(rounds, until one sends nothing more often than charged). The towers' orders are the graph's,
or (:func:`along`) a placement's own, stage by stage, which puts that placement among the
splits weighed.

:func:`witness_placements` rounds the two-tower *bound's* witnesses instead (their exact segment
positions, priced as the relaxation prices them; :func:`~partition.tower_bound.tower_witnesses`):
a start for the polish rather than an estimate.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..chain_bound import _narrowed
from ..coarsen import _adjacency
from ..graph import keyed_topological_order
from ..instance import CommMode, Instance
from ..placement import Placement
from ..tower_bound import Towers, tower_witnesses

_MAX_POSITIONS = 1_000  # a tower with more ops would make the n² cost grids (8 MB each) too large
_SEND_ROUNDS = 8  # estimates at most, each charging the sends per destination the ones before traced


def _labels(
    members: tuple[tuple[int, ...], ...],
    original_ids: list[str],
    found: Towers,
    predecessors: list[list[int]],
    successors: list[list[int]],
) -> np.ndarray:
    """Per op (op ``v`` stands for the original ops ``members[v]``; its graph's ``predecessors``
    and ``successors``), 0 or 1: the
    tower of its first original op, or for an op in neither (CLIP's ArgMax over the token ids,
    which the tower relaxation deletes) or on a hung chain (T5's cross-attention key and value
    projections, which the relaxation hangs on the encoder) the tower of its first reader, else
    of an input."""
    ids = [{op.id for op in tower.graph.ops} - found.hung for tower in (found.first, found.second)]
    label = np.array(
        [0 if original_ids[m[0]] in ids[0] else 1 if original_ids[m[0]] in ids[1] else -1 for m in members],
        dtype=np.int64,
    )
    for v in range(len(label) - 1, -1, -1):
        readers = [w for w in sorted(successors[v]) if label[w] >= 0]
        if label[v] < 0 and readers:
            label[v] = label[readers[0]]
    for v in range(len(label)):
        inputs = [u for u in predecessors[v] if label[u] >= 0]
        if label[v] < 0:
            label[v] = label[inputs[0]] if inputs else 0
    return label


class _Grid:
    """One tower's compute prefix sums per type and its ``recv``/``send`` tensors over the
    ``(i, j)`` grid (bytes and counts), positions ``0 … n``. A tensor of the other tower read
    here counts as made before position 0 (the other tower's part that makes it is usually in
    an earlier stage: T5's encoder output), and one made here and read there as read at ``n``.
    Tensor ``t`` is sent ``sends[t]`` times (once per destination stage)."""

    def __init__(self, instance: Instance, ops: np.ndarray, others: np.ndarray, sends: np.ndarray) -> None:
        n = len(ops)
        self.n = n
        times = instance.costs.finite_times()[ops]
        self.prefix = np.vstack([np.zeros((1, times.shape[1])), np.cumsum(times, axis=0)])  # (n+1, types)
        position = np.full(len(instance.graph.ops), -2, dtype=np.int64)  # -2: in neither
        position[others] = -1
        position[ops] = np.arange(n)
        index = instance.graph.index
        received = np.zeros((2, n + 2, n + 2))  # (bytes, count) difference arrays
        sent = np.zeros((2, n + 2, n + 2))
        for t, tensor in enumerate(instance.graph.tensors):
            if tensor.producer is None or position[index[tensor.producer]] == -2:
                continue
            p = int(position[index[tensor.producer]])
            at = {int(position[index[c]]) for c in tensor.consumers}
            readers = sorted(at - {-2, -1})
            value = np.array([tensor.bytes, 1.0])
            previous = p  # received by [i, j) when the first reader at or after i lies before j
            for r in readers:
                received[:, previous + 1, r + 1] += value
                received[:, r + 1, r + 1] -= value
                previous = r
            last = n if -1 in at else readers[-1] if readers else -1
            if p >= 0 and last > p:  # sent by [i, j) holding p when the last reader lies at or after j
                value = value * sends[t]
                sent[:, 0, p + 1] += value
                sent[:, p + 1, p + 1] -= value
                sent[:, 0, last + 1] -= value
                sent[:, p + 1, last + 1] += value
        self.received = np.cumsum(np.cumsum(received, axis=1), axis=2)[:, : n + 1, : n + 1]
        self.sent = np.cumsum(np.cumsum(sent, axis=1), axis=2)[:, : n + 1, : n + 1]

    def costs(self, kind: int, inbound: tuple[float, float], outbound: tuple[float, float]) -> np.ndarray:
        """``cost[i, j]`` of a part ``[i, j)`` on type ``kind`` (``inf`` below the diagonal, 0 on
        it), tensors priced at (latency, seconds per byte) ``inbound`` and ``outbound``."""
        compute = self.prefix[None, :, kind] - self.prefix[:, None, kind]
        comm = (
            self.received[0] * inbound[1]
            + self.received[1] * inbound[0]
            + self.sent[0] * outbound[1]
            + self.sent[1] * outbound[0]
        )
        cost = compute + comm
        rows = np.arange(self.n + 1)
        cost[rows[None, :] < rows[:, None]] = np.inf
        cost[rows, rows] = 0.0
        return cost


def _links(instance: Instance, devices: list[int]) -> list[tuple[tuple[float, float], tuple[float, float]]]:
    """Per stage, the (latency, seconds per byte) of the links from the stage before and to the
    stage after (none: free; with ``--overlap`` communication is dropped, as in the bounds)."""
    cluster = instance.cluster

    def link(a: int | None, b: int | None) -> tuple[float, float]:
        if a is None or b is None or instance.options.overlap:
            return 0.0, 0.0
        found = cluster.link(a, b)
        return found.latency, 1.0 / found.bandwidth

    return [
        (
            link(devices[c - 1] if c else None, devices[c]),
            link(devices[c], devices[c + 1] if c + 1 < len(devices) else None),
        )
        for c in range(len(devices))
    ]


class _Interleaving:
    """The recurrence of the module docstring for one device sequence; ``A`` is the tower with
    fewer positions (its points are looped over), ``B`` is binary-searched."""

    def __init__(
        self,
        instance: Instance,
        grids: tuple[_Grid, _Grid],
        devices: list[int],
        limits: tuple[np.ndarray, np.ndarray],
    ) -> None:
        first, second = grids
        kinds = [instance.cluster.type_index[d] for d in devices]
        built: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}  # stages alike share their grids
        self.a_costs, self.b_suffix = [], []
        for kind, links in zip(kinds, _links(instance, devices), strict=True):
            if (kind, links) not in built:
                b = second.costs(kind, *links)
                suffix = np.minimum.accumulate(b[:, ::-1], axis=1)[:, ::-1]
                built[kind, links] = first.costs(kind, *links), suffix
            a_cost, b_suffix = built[kind, links]
            self.a_costs.append(a_cost)
            self.b_suffix.append(b_suffix)
        self.n_a, self.n_b = first.n, second.n
        self.ceiling, self.floor = limits  # the q the edges between the towers allow with A at j

    def run(self, bottleneck: float) -> list[tuple[np.ndarray, np.ndarray]] | None:
        """Per stage the frontier ``G_c`` and each point's corner (``None``: ``T`` infeasible)."""
        frontier = np.full(self.n_a + 1, -1, dtype=np.int64)
        frontier[0] = 0
        steps = []
        for a_cost, b_suffix in zip(self.a_costs, self.b_suffix, strict=True):
            later = np.append(np.maximum.accumulate(frontier[::-1])[::-1][1:], -1)
            corners = np.flatnonzero((frontier >= 0) & (frontier > later))
            best = np.full(self.n_a + 1, -1, dtype=np.int64)
            source = np.full(self.n_a + 1, -1, dtype=np.int64)
            for i in corners:
                budget = bottleneck - a_cost[i]
                ends = np.searchsorted(b_suffix[frontier[i]], budget, side="right") - 1
                ends = np.minimum(ends, self.ceiling)
                ends = np.where((budget >= 0) & (ends >= self.floor), ends, -1)
                better = ends > best
                best[better], source[better] = ends[better], i
            steps.append((best, source))
            frontier = best
            if frontier[self.n_a] >= self.n_b:
                return steps
        return None

    def stages(self, steps: list[tuple[np.ndarray, np.ndarray]]) -> list[tuple[int, int, int, int]]:
        """The traced stages ``(i, j, p, q)``, first to last."""
        j, q = self.n_a, self.n_b
        traced = []
        for c in range(len(steps) - 1, -1, -1):
            i = int(steps[c][1][j])
            p = int(steps[c - 1][0][i]) if c else 0
            traced.append((i, j, p, q))
            j, q = i, p
        return traced[::-1]


def _limits(instance: Instance, a_ops: np.ndarray, b_ops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per position ``j`` of ``A``, the furthest and the least ``q`` of ``B`` the edges between
    the towers allow: ``B`` holds a reader of ``A``'s op ``u`` only once ``A`` holds ``u`` (T5's
    cross-attention, CLIP's similarity logits), and ``A`` a reader of ``B``'s op only once
    ``B`` holds it."""
    n_a, n_b = len(a_ops), len(b_ops)
    in_a = np.full(len(instance.graph.ops), -1, dtype=np.int64)
    in_b = in_a.copy()
    in_a[a_ops], in_b[b_ops] = np.arange(n_a), np.arange(n_b)
    ceiling = np.full(n_a + 1, n_b, dtype=np.int64)
    floor = np.zeros(n_a + 1, dtype=np.int64)
    for u, v in instance.graph.edges:
        if in_a[u] >= 0 and in_b[v] >= 0:  # q > pos(v) needs j > pos(u)
            ceiling[in_a[u]] = min(ceiling[in_a[u]], in_b[v])
        elif in_b[u] >= 0 and in_a[v] >= 0:  # j > pos(v) needs q > pos(u)
            floor[in_a[v] + 1] = max(floor[in_a[v] + 1], in_b[u] + 1)
    return np.minimum.accumulate(ceiling[::-1])[::-1], np.maximum.accumulate(floor)


@dataclass(frozen=True)
class Interleaved:
    """The traced interleaving as a placement over the non-empty stages, and a topological
    order that lists the stages in turn (each stage's part of one tower, then of the other),
    for an exact split."""

    placement: Placement
    order: np.ndarray
    estimate: float  # the bottleneck of the estimate the split met


def _destinations(instance: Instance, stage_of: np.ndarray) -> np.ndarray:
    """Per tensor of ``instance``, the sends its producer's stage pays under ``stage_of``: one
    per other stage reading it (at least one; always one in ``once`` mode)."""
    index = instance.graph.index
    counts = np.ones(len(instance.graph.tensors))
    if instance.options.comm_mode is CommMode.ONCE:
        return counts
    for t, tensor in enumerate(instance.graph.tensors):
        if tensor.producer is not None and len(tensor.consumers) > 1:
            made = stage_of[index[tensor.producer]]
            counts[t] = max(len({int(stage_of[index[c]]) for c in tensor.consumers} - {int(made)}), 1)
    return counts


def interleave(
    instance: Instance,
    members: tuple[tuple[int, ...], ...],
    original_ids: list[str],
    found: Towers,
    devices: list[int],
    lower: float,
    upper: float,
    deadline: float,
    rank: np.ndarray | None = None,
    rounds: int = _SEND_ROUNDS,
) -> tuple[Interleaved, ...]:
    """The towers ``found`` of the original graph interleaved over ``devices`` on ``instance``,
    a coarsening of it whose op ``v`` stands for the original ops ``members[v]`` (ids
    ``original_ids``), as the estimate's best split does (module docstring), bisected in
    ``[lower, upper]`` until ``deadline``; empty when no interleaving fits ``upper``. Each
    tower's positions follow ``rank`` (a key per op, ties in graph order, that orders every
    edge forward: a placement's stages; default the graph's order).

    The estimate counts a tensor read by several later stages once, where its producer pays a
    send per destination (CLIP's causal mask, read by every text layer, cost the stage making it
    13 µs more than estimated on 16 V100s at k = 16, its interleaving 0.3546 ms against the
    estimate's 0.3412). So the split is estimated again, each tensor's sends charged as often as
    the traced interleavings sent it at most, until none sends a tensor more often than charged,
    in at most ``rounds`` rounds (default :data:`_SEND_ROUNDS`): one interleaving per round, the
    last the one whose estimate counts its own sends (0.3438 ms there)."""
    predecessors, successors = _adjacency(instance.graph)
    label = _labels(members, original_ids, found, predecessors, successors)
    towers = [np.flatnonzero(label == 0), np.flatnonzero(label == 1)]
    if rank is not None:
        towers = [t[np.argsort(rank[t], kind="stable")] for t in towers]
    if min(len(t) for t in towers) == 0 or max(len(t) for t in towers) > _MAX_POSITIONS:
        return ()
    a_ops, b_ops = towers[::-1] if len(towers[0]) > len(towers[1]) else towers
    limits = _limits(instance, a_ops, b_ops)
    sends, found_rounds = np.ones(len(instance.graph.tensors)), []
    for _ in range(rounds):
        grids = (_Grid(instance, a_ops, b_ops, sends), _Grid(instance, b_ops, a_ops, sends))
        interleaving = _Interleaving(instance, grids, devices, limits)
        traced = _bisected(interleaving, lower, upper, deadline)
        if traced is None:
            break
        high, stages = traced
        stage_of, order = _placed(instance, stages, a_ops, b_ops, predecessors, successors)
        used, compact = np.unique(stage_of, return_inverse=True)
        placement = Placement(tuple(compact.tolist()), tuple(devices[c] for c in used))
        found_rounds.append(Interleaved(placement, order, high))
        counts = _destinations(instance, stage_of)
        if (counts <= sends).all() or time.perf_counter() > deadline:
            break
        sends = np.maximum(sends, counts)
    return tuple(found_rounds)


def along(
    instance: Instance,
    members: tuple[tuple[int, ...], ...],
    original_ids: list[str],
    found: Towers,
    placement: Placement,
    lower: float,
    upper: float,
    deadline: float,
) -> tuple[Interleaved, ...]:
    """:func:`interleave` over ``placement``'s devices with each tower in ``placement``'s own
    order (its ops stage by stage, in graph order within a stage), so that ``placement`` is
    among the splits the estimate weighs: every cut moves at once, where the polish's windows
    move ops between neighbouring stages only. The graph's order is one the bound's witness
    does not keep: on CLIP over 16 V100s at k = 16 the witness rounded (0.3494 ms) gives 0.3420
    along its own order, against 0.3438 along the graph's."""
    stage_of = np.asarray(placement.stage_of, dtype=np.int64)  # with ties in graph order: topological
    return interleave(
        instance, members, original_ids, found, list(placement.devices), lower, upper, deadline, stage_of
    )


def _bisected(
    interleaving: _Interleaving, lower: float, upper: float, deadline: float
) -> tuple[float, list[tuple[int, int, int, int]]] | None:
    """The least bottleneck in ``[lower, upper]`` the estimate admits, bisected until
    ``deadline``, and its traced stages; ``None`` when ``upper`` does not fit."""
    steps = interleaving.run(upper)
    if steps is None:
        return None
    best = (upper, steps)  # the bisection's high end only falls: the last fit is the best

    def fits(bottleneck: float) -> bool:
        nonlocal best
        found = interleaving.run(bottleneck)
        if found is not None:
            best = (bottleneck, found)
        return found is not None

    _narrowed(fits, lower, upper, deadline)
    return best[0], interleaving.stages(best[1])


def _placed(
    instance: Instance,
    stages: list[tuple[int, int, int, int]],
    a_ops: np.ndarray,
    b_ops: np.ndarray,
    predecessors: list[list[int]],
    successors: list[list[int]],
) -> tuple[np.ndarray, np.ndarray]:
    """The traced ``stages`` as a stage per op (empty stages kept) and a topological order keyed
    by stage (each stage's part of ``A``, then of ``B``)."""
    n = len(instance.graph.ops)
    stage_of = np.full(n, -1, dtype=np.int64)
    key = np.full(n, np.inf)
    for c, (i, j, p, q) in enumerate(stages):
        stage_of[a_ops[i:j]] = stage_of[b_ops[p:q]] = c
        key[a_ops[i:j]] = c + np.arange(j - i) / (2 * (j - i + 1))
        key[b_ops[p:q]] = c + 0.5 + np.arange(q - p) / (2 * (q - p + 1))
    for v in range(n):  # the limits keep every edge forward; this makes sure of it (ops are in order)
        stage_of[v] = max([stage_of[v], *stage_of[predecessors[v]].tolist()])
    order = keyed_topological_order(successors, [len(p) for p in predecessors], key.tolist())
    return stage_of, np.asarray(order, dtype=np.int64)


def witness_placements(
    original: Instance,
    instance: Instance,
    members: tuple[tuple[int, ...], ...],
    bound: float,
    upper: float,
    deadline: float | None = None,
) -> list[Placement]:
    """The two-tower bound's witnesses just above ``bound`` (:func:`~partition.tower_bound.tower_witnesses`
    on ``original``, within ``deadline``: the plain pass's, and on mixed clusters the pass's with
    group changes, one per group of hosts keeping its stages together and one per order of the
    types keeping every group's together) as placements of
    ``instance``, a coarsening of it whose op ``v`` stands for the original ops ``members[v]``;
    none for a witness with more stages of a type than devices.

    Each op goes to the first stage whose cut holds it (a coarse op: its members' latest), an op in
    neither tower (CLIP's ArgMax path) to the least loaded stage its placed inputs and readers
    allow; then every op moves at least to its inputs' stages, and stage ``c`` gets the next
    device of its witness's type in host order. The witness prices every part at the relaxation's
    costs, so the placement is a start for the polish, not an estimate: on CLIP over 16 V100s
    at k = 16 it rounds to 0.3494 ms and 10 s of the polish take it to 0.3423, where the order
    search and the polish end at 0.3455 (`bench/broadcast_mask.md`)."""
    rounded = (
        _rounded(original, instance, members, cuts)
        for cuts in tower_witnesses(original, bound, upper, deadline)
    )
    return [placement for placement in rounded if placement is not None]


def _rounded(
    original: Instance,
    instance: Instance,
    members: tuple[tuple[int, ...], ...],
    cuts: list[tuple[int, np.ndarray]],
) -> Placement | None:
    """The witness ``cuts`` (per stage its type and the original ops its end's cut holds) as a
    placement of ``instance`` (:func:`witness_placements`)."""
    stage = np.full(len(original.graph.ops), -1, dtype=np.int64)
    for c, (_, held) in enumerate(cuts):
        stage[(stage < 0) & held] = c
    stage_of = np.array([stage[list(group)].max() for group in members], dtype=np.int64)
    predecessors, successors = _adjacency(instance.graph)
    kinds = np.array([kind for kind, _ in cuts], dtype=np.int64)
    times = instance.costs.finite_times()
    load = np.bincount(
        stage_of[stage_of >= 0], times[stage_of >= 0, kinds[stage_of[stage_of >= 0]]], len(cuts)
    )
    for v in np.flatnonzero(stage_of < 0):  # in order: a placed input decides the lowest stage
        low = max((int(stage_of[u]) for u in predecessors[v]), default=0)
        high = min((int(stage_of[w]) for w in successors[v] if stage_of[w] >= 0), default=len(cuts) - 1)
        chosen = low + int(np.argmin(load[low : max(high, low) + 1]))
        stage_of[v] = chosen
        load[chosen] += times[v, kinds[chosen]]
    for v in range(len(stage_of)):  # ops are in topological order
        stage_of[v] = max([int(stage_of[v]), *(int(stage_of[u]) for u in predecessors[v])])
    used, stage_of = np.unique(stage_of, return_inverse=True)
    free: dict[int, list[int]] = {}
    for device, kind in enumerate(instance.cluster.type_index):
        free.setdefault(kind, []).append(device)
    devices = []
    for c in used:
        if not free.get(int(kinds[c])):
            return None
        devices.append(free[int(kinds[c])].pop(0))
    return Placement(tuple(stage_of.tolist()), tuple(devices))
