"""Exact DP over the ideals (downsets) of the DAG, with heterogeneous device types.

After Tarnawski et al., "Efficient algorithms for device placement of DNN graph operators"
(NeurIPS 2020). Every placement is a chain of ideals ``∅ = I_0 ⊂ I_1 ⊂ … ⊂ I_m = V`` (stage
``s`` is ``I_s \\ I_{s-1}``), so with ``c`` the vector of how many devices of each group (a
device type, or a (type, host) class) the stages so far use, and ``cost_τ(I, J)`` the time of
stage ``J \\ I`` on a device of group ``τ``:

    F(J, c + e_τ) = min_{I ⊂ J} max( F(I, c), cost_τ(I, J) ),   F(∅, 0) = 0,

subject to ``c_τ ≤`` (devices of group ``τ``) and ``|c| ≤ k`` (the state may also carry the
groups of the stages around the cut; see *What is exact*); the optimum is ``min F(V, c)``
over ``|c| ≤ k`` (``= k`` with exact stages). A second pass with sums in place of maxima and
every stage capped at the optimum breaks ties by the smaller sum of stage times, then by fewer
stages (the formulation's tie rule). Colocation groups, and every op on a path between two
members of a group, are contracted into single units before ideals are enumerated.

**What is exact.** Compute, op support and memory (weights used, bytes sent and received,
largest working set) depend on ``J \\ I`` and ``τ`` alone and are exact. Communication depends
on which devices the other stages use. The state knows some of it, and the DP charges each
tensor crossing into or out of the stage once per side at a *lower estimate* of its link:

- ``c`` counts devices per *group*, and tells which groups the earlier stages used and which
  are still free for later ones; a tensor is charged at the smallest latency and largest
  bandwidth of any link from the stage's group to a group already used (receiving) or still
  free (sending).
- At richer levels the groups are (type, host) classes, and the state also holds ``σ``, the
  class of the stage that ended at ``I``, and ``ν``, the class the next stage is committed to.
  The stage ending at ``I`` is a non-empty up-set of ``I``, so it holds one of ``I``'s maximal
  units ``m``: what the stage receives from ``m`` (the least over ``I``'s maximal units) comes
  over the link from ``σ``. Likewise the next stage holds one minimal unit ``w`` of ``V \\ J``:
  ``w``'s inputs made in the stage (the least over those units) go over the link to ``ν``.
- In ``per-destination`` mode a tensor read along a chain of ops (an attention mask read by
  every layer) is sent to at least as many stages as it takes to hold its readers outside
  ``J`` when no stage computes more than the cap (a stage holding two readers holds every op
  on the paths between them): the extra destinations are charged at the fastest link.

**Destinations.** That count is low when later stages are slow or many: on BERT-base over
A100/L4/T4 at k = 8 the DP sent the mask from the first stage to 4 stages while every one of
the 7 later stages holds a layer, 4 of them on the T4 host. At the level that *counts* them the
state also holds ``δ``, the stages still owed the tensor read along the longest chain (the
*counted* tensor): the stage that makes it chooses ``d`` (at least the fewest above), pays for
``d`` sends — at least the ``d`` smallest latencies and inverse bandwidths over the devices
still free, as its destinations are ``d`` distinct ones of them (:func:`_fanout`) — and owes
``δ = d``; each later stage holding one of its readers pays one off, the one holding the last
leaves ``δ = 0``, and a stage holding a reader when nothing is owed is not a move. So ``d`` is
exactly the number of stages the tensor goes to, and the sends are a lower estimate for any
devices. The states grow ``k + 2`` times, so only two levels count, types and classes with
``σ`` (with ``ν``, the link to the next stage could also charge one of the ``d`` sends twice;
:func:`_levels`).

On a chain, and generally when each cut's tensors run from the last unit of one stage to the
first unit of the next, this is the formulation's cost on any cluster. The DP value ``V`` is
a lower bound on the global optimum, reported as the bound, and the status is ``optimal``
exactly when the evaluator's bottleneck of the returned placement equals ``V``.

**Levels.** Every level is a valid bound, and the best is reported: device types with nothing
tracked (the fastest; its placement caps the next levels' stages), then types with ``δ`` when
a tensor is read along a chain (unless a type spans hosts: per type its sends are all priced
inside one host), classes with ``σ``, then with ``σ`` and ``δ``, then with ``σ`` and ``ν`` (see
:func:`_levels`; a level whose table would be too large is skipped). Each level first runs the
pass that proves its bound.
The passes that only look for better placements (the slowest links and the tie-break, below)
follow at once when the gap is closed (the tie rule) or when the later levels' bound passes
are predicted to fit after them; otherwise they wait and run once, at the last level finished,
with the time left. So under a tight limit the time goes to the bounds first: a rich level's
bound, where hosts are known, is often what closes a gap, and under ``auto`` CP-SAT and the
large-neighbourhood polish improve the placement after. A level predicted to overrun the time
limit is not started (see :func:`_predicted`; a later one may still fit); the time limit stops
the current pass, and the bounds and placements of the passes that finished are kept.

**Devices.** The DP fixes the device group of each stage; concrete devices are then chosen by
evaluating assignments of (type, host) classes of the groups' types, the DP's own first (see
:mod:`._devices`; capped at :data:`_DEVICE_CHOICES`), which picks the hosts with the cheapest
true communication. A placement pass charges the *slowest* links instead (no bound, but its
placement often evaluates better when links differ), and the placements of the order DP and
the balanced-time and uniform baselines are candidates too, with the best split of the ideals
over host orders (:mod:`.ideal_split`, run on these tables before the first level, whose cap
it tightens): the best evaluated one is returned.

**Speed.** Ideals are enumerated once as bitsets and their prefix sums (time per type, weights,
bytes leaving the ideal, weighted work) computed with array kernels; each stage ``(I, J)`` is
then scored for all candidates ``J`` of one ``I`` at once. The best heuristic's evaluated
bottleneck caps every stage, which bounds the candidate window, and a state whose remaining
work ``Σ_v min_τ λ_τ t_τ(v)`` cannot fit on the remaining devices under the cap is dropped
(see :func:`_rooms`). The work is about quadratic in the number of ideals: graphs with more
than :data:`IDEAL_LIMIT` are refused, and a time limit before the first level ends returns the
best heuristic placement.
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
from ..instance import CommMode, Instance
from ..placement import Evaluation, Placement, Status
from ._devices import device_sequences
from ._scoring import Scorer, TensorArrays
from .base import Capabilities, Outcome, Scope, Settings, Solver
from .baselines import BalancedTime, Uniform
from .chain_round import rounded_placement
from .ideal_split import sequence_split
from .order_dp import graph_order_split, split_seconds

IDEAL_LIMIT = 200_000
# Extending a level's states takes about (states ratio)^0.75 the last level's time; scoring the
# candidate stages costs about the same at every level (bert_legacy's first passes, 17 → 243 →
# 729 states: 0.6 → 3.9 → 8.4 s extending, 3.3 → 3.9 → 4.4 s scoring, bench/ideal_dp_passes.md):
# a level predicted to overrun is not started.
_LEVEL_GROWTH = 0.75
# The placement passes of a level (slowest links, tie-break) take about this many times its bound
# pass; they run at once when the later levels' bound passes still fit after them.
_PLACEMENT_PASSES = 2.0
_STATE_BUDGET = 6_000_000  # ideals × DP states: each pass fills three tables of this size
# ... and at the level that counts a tensor's stages, most of whose states are never reached (the
# stages owed are at most those left): BERT on 2 x 8 A100 at k = 16 needs 14 M (0.6 GB peak)
_COUNTING_BUDGET = 3 * _STATE_BUDGET
_COUNTED_READERS = 3
_DEVICE_CHOICES = 2_000
_INCUMBENT_SHARE = 0.25  # of a solver's time limit, at most, for the order DP's incumbent
_SEQUENCE_SHARE = 0.15  # of the time left for the ideal split over host orders (.ideal_split)
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
def _enumerate(instance: Instance, limit: int) -> tuple[np.ndarray, list[int], list[int]] | None:
    """Ideals of the unit DAG as bitsets (by increasing size) and the units each can grow by
    (the minimal units of its complement), or ``None`` beyond ``limit``."""
    unit_of, preds = _units(instance)
    succs: list[list[int]] = [[] for _ in preds]
    for b, mask in enumerate(preds):
        for a in range(mask.bit_length()):
            if mask >> a & 1:
                succs[a].append(b)
    ideals = [0]
    level = {0: sum(1 << u for u, mask in enumerate(preds) if mask == 0)}  # ideal -> addable units
    frontiers = list(level.values())
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
        frontiers.extend(following.values())
        if len(ideals) > limit:
            return None
        level = following
    return unit_of, ideals, frontiers


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
    shared_users: np.ndarray  # the users of each weight with several, concatenated
    shared_firsts: np.ndarray  # where each weight's users start in ``shared_users``
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
        _starts(count),
        count,
        own,
        np.array([u for w in shared for u in sorted(users[w])], dtype=np.int64),
        _starts([len(users[w]) for w in shared]),
        np.array([graph.weights[w] for w in shared], dtype=float),
    )


def _starts(lengths) -> np.ndarray:
    """Where each of consecutive runs of these lengths starts in their concatenation."""
    lengths = np.asarray(lengths, dtype=np.int64)
    return np.cumsum(lengths) - lengths


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


def _spread_tensors(instance: Instance, arrays: _Graph) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Tensors read along a chain of two or more ops (an attention mask read by every layer):
    ``(tensor, chain of readers in path order, interval)`` with ``interval[a, b]`` the least
    compute of the ops on paths from reader ``a`` to reader ``b`` (both included), each op on
    its fastest type. A stage holding readers ``a`` and ``b`` holds all of those ops (an op
    between them is above ``a``'s stage start and below ``b``'s stage end)."""
    graph = instance.graph
    fastest = np.where(np.isfinite(instance.costs.times), instance.costs.times, np.inf).min(axis=1)
    fastest = np.where(np.isfinite(fastest), fastest, 0.0)
    dag = nx.DiGraph()
    dag.add_nodes_from(range(len(graph.ops)))
    dag.add_edges_from(graph.edges)
    below: dict[int, set[int]] = {}
    spread = []
    for x, readers in enumerate(arrays.consumers):
        if len(readers) < 2:
            continue
        chain: list[int] = []
        for r in sorted(readers.tolist()):  # op order is topological
            if not chain or r in below.setdefault(chain[-1], nx.descendants(dag, chain[-1])):
                chain.append(r)
        if len(chain) < 2:
            continue
        interval = np.zeros((len(chain), len(chain)))
        above = [nx.ancestors(dag, b) | {b} for b in chain]
        for i, a in enumerate(chain):
            after = below.setdefault(a, nx.descendants(dag, a))
            for j in range(i + 1, len(chain)):
                interval[i, j] = fastest[a] + fastest[list(after & above[j])].sum()
        spread.append((x, np.array(chain, dtype=np.int64), interval))
    return spread


def _counted(spread: list[tuple[int, np.ndarray, np.ndarray]]) -> int | None:
    """The tensor (index in ``spread``) whose stages the counting level counts: the one read
    along the longest chain, if that has :data:`_COUNTED_READERS` readers or more (with two, the
    fewest stages under the cap are seldom below the truth, and the level costs about 2×)."""
    longest = max(range(len(spread)), key=lambda x: len(spread[x][1]), default=None)
    return longest if longest is not None and len(spread[longest][1]) >= _COUNTED_READERS else None


def _fewest_destinations(interval: np.ndarray, cap: float) -> np.ndarray:
    """``fewest[f]``: the fewest stages, each of compute at most ``cap``, that hold readers
    ``f, f+1, …`` of a chain (greedy runs of consecutive readers; ``fewest[m] = 0``)."""
    m = len(interval)
    fewest = np.zeros(m + 1, dtype=np.int64)
    for f in range(m):
        count, i = 0, f
        while i < m:
            count += 1
            j = i
            while j + 1 < m and interval[i, j + 1] <= cap * (1 + _TOLERANCE):
                j += 1
            i = j + 1
        fewest[f] = count
    return fewest


@dataclass(frozen=True, eq=False)
class _Destinations:
    """The tensors read along a chain (:func:`_spread_tensors`) as flat arrays: each one's
    ``producer`` and ``size``, its chain's ``readers`` concatenated (each chain starts at
    ``firsts``), and ``fewest[x, f]``, the fewest stages under the cap that hold readers
    ``f, f+1, …`` of tensor ``x``'s chain (padded past its length)."""

    producer: np.ndarray
    size: np.ndarray
    readers: np.ndarray
    firsts: np.ndarray
    fewest: np.ndarray


def _destinations(
    spread: list[tuple[int, np.ndarray, np.ndarray]], arrays: _Graph, cap: float
) -> _Destinations:
    tensors = np.array([x for x, _, _ in spread], dtype=np.int64)
    chains = [chain for _, chain, _ in spread]
    fewest = np.zeros((len(spread), max((len(c) for c in chains), default=0) + 1), dtype=np.int64)
    for row, (_, _, gaps) in enumerate(spread):
        fewest[row, : len(gaps) + 1] = _fewest_destinations(gaps, cap)
    return _Destinations(
        arrays.producer[tensors],
        arrays.size[tensors],
        np.concatenate(chains) if chains else np.zeros(0, dtype=np.int64),
        _starts([len(c) for c in chains]),
        fewest,
    )


_FRONTIER_UNITS = 8  # an ideal whose complement has more minimal units gets no send attribution


def _next_inputs(instance: Instance, unit_of: np.ndarray, frontiers: list[int], arrays: _Graph) -> np.ndarray:
    """``table[J, f, i]``: the ``i``-th tensor read by the ``f``-th minimal unit of the complement
    of ideal ``J`` from another unit (-1 past its inputs, -2 in unused unit slots; all -2 when
    there are more than :data:`_FRONTIER_UNITS` such units, which attributes nothing)."""
    units = int(unit_of.max()) + 1
    inputs: list[list[int]] = [[] for _ in range(units)]
    for x, (producer, readers) in enumerate(zip(arrays.producer, arrays.consumers, strict=True)):
        for unit in sorted({int(unit_of[r]) for r in readers} - {int(unit_of[producer])}):
            inputs[unit].append(x)
    width = max((len(i) for i in inputs), default=0) or 1
    padded = np.full((units, width), -1, dtype=np.int64)
    for unit, tensors in enumerate(inputs):
        padded[unit, : len(tensors)] = tensors
    table = np.full((len(frontiers), _FRONTIER_UNITS, width), -2, dtype=np.int64)
    for j, mask in enumerate(frontiers):
        members = [u for u in range(mask.bit_length()) if mask >> u & 1]
        if 0 < len(members) <= _FRONTIER_UNITS:
            table[j, : len(members)] = padded[members]
    return table


@dataclass(frozen=True)
class _Groups:
    """The device groups the DP counts: (type, host) classes when the state space allows,
    else device types. Devices of one class are interchangeable (:mod:`._devices`), so counting
    classes loses nothing; counting types forgets hosts, which only lowers the link estimates."""

    devices: tuple[tuple[int, ...], ...]
    type_of: np.ndarray  # type column of each group
    classes: bool

    @property
    def counts(self) -> np.ndarray:
        return np.array([len(members) for members in self.devices], dtype=np.int64)


def _groups(instance: Instance, classes: bool) -> _Groups:
    cluster = instance.cluster
    if classes:
        members = cluster.classes
    else:
        members = tuple(
            tuple(d for d in range(len(cluster.devices)) if cluster.type_index[d] == t)
            for t in range(len(cluster.type_names))
        )
    type_of = np.array([cluster.type_index[group[0]] for group in members], dtype=np.int64)
    return _Groups(members, type_of, classes)


@dataclass(frozen=True)
class _Lattice:
    """DP states ``(c, σ, ν, δ)``: ``c`` the devices used per group; ``σ`` the group of the stage
    that ended last (``G``: none yet) and ``ν`` the group the next stage is committed to
    (``G``: no next stage); ``δ`` the stages the counted tensor is still owed to (``0 … k``,
    ``k + 1``: not made yet; see *Destinations*). ``σ``, ``ν`` and ``δ`` each have one slot when
    not tracked. A state is ``δ · plain + (c, σ, ν)``: the plain states are those with ``δ = 0``."""

    size: int  # vectors c
    last_slots: int
    next_slots: int
    used: np.ndarray  # |c| of each vector
    vectors: np.ndarray  # (size, G)
    movable: tuple[np.ndarray, ...]  # per group κ: the vectors a stage on κ can extend
    grown: tuple[np.ndarray, ...]  # ... and the vectors it leads to
    owed_slots: int = 1

    @property
    def plain(self) -> int:
        return self.size * self.last_slots * self.next_slots

    @property
    def states(self) -> int:
        return self.plain * self.owed_slots

    def state(self, vector, last, following) -> np.ndarray:
        return (np.asarray(vector) * self.last_slots + last) * self.next_slots + following

    def vector_of(self, states: np.ndarray) -> np.ndarray:
        return states % self.plain // (self.last_slots * self.next_slots)

    def starts(self) -> np.ndarray:
        """No stage yet; the first stage may take any group (and the counted tensor is not made)."""
        return (
            self.state(0, self.last_slots - 1, np.arange(self.next_slots))
            + (self.owed_slots - 1) * self.plain
        )

    def sources(self, group: int) -> np.ndarray:
        """(vector, σ) states a stage on ``group`` extends: those committed to ``group``."""
        following = group if self.next_slots > 1 else 0
        return self.state(self.movable[group][:, None], np.arange(self.last_slots)[None, :], following)

    def targets(self, group: int) -> np.ndarray:
        """(vector, ν) states it leads to: its own group last, any commitment next."""
        last = group if self.last_slots > 1 else 0
        return self.state(self.grown[group][:, None], last, np.arange(self.next_slots)[None, :])


def _vectors(instance: Instance, groups: _Groups) -> tuple[np.ndarray, np.ndarray]:
    k = instance.options.stages
    caps = [min(int(count), k) for count in groups.counts]
    vectors = np.array(list(itertools.product(*(range(c + 1) for c in caps))), dtype=np.int64)
    return vectors[vectors.sum(axis=1) <= k], np.array(caps)


def _lattice(instance: Instance, groups: _Groups, track: int, counting: bool) -> _Lattice:
    """States for ``track`` = 2 (last and next group), 1 (last group only) or 0 (neither), and
    the stages owed the counted tensor when ``counting``."""
    k = instance.options.stages
    vectors, caps = _vectors(instance, groups)
    index = {tuple(v): i for i, v in enumerate(vectors.tolist())}
    used = vectors.sum(axis=1)
    movable, grown = [], []
    for g, cap in enumerate(caps):
        source = np.flatnonzero((vectors[:, g] < cap) & (used < k))
        after = vectors[source].copy()
        after[:, g] += 1
        movable.append(source)
        grown.append(np.array([index[tuple(v)] for v in after.tolist()], dtype=np.int64))
    slots = len(caps) + 1
    return _Lattice(
        len(vectors),
        slots if track >= 1 else 1,
        slots if track >= 2 else 1,
        used,
        vectors,
        tuple(movable),
        tuple(grown),
        k + 2 if counting else 1,
    )


@dataclass(frozen=True)
class _Level:
    """What one level's states hold (:func:`_lattice`): devices counted per ``groups``, the
    groups around the cut for ``track``, and the stages owed the counted tensor if ``counting``."""

    groups: _Groups
    track: int
    counting: bool = False

    def describe(self) -> str:
        groups = self.groups
        group, plural = ("(type, host) class", "classes") if groups.classes else ("type", "types")
        tracked = ("", f", the last stage's {group} tracked", f", the last and next stages' {plural} tracked")
        counted = ", the stages a tensor read along a chain goes to counted" if self.counting else ""
        return f"devices counted per {group}{tracked[self.track]}{counted}"

    def states(self, instance: Instance) -> int:
        """DP states of the level (see :func:`_lattice`)."""
        owed = instance.options.stages + 2 if self.counting else 1
        return len(_vectors(instance, self.groups)[0]) * (len(self.groups.devices) + 1) ** self.track * owed

    def work(self, instance: Instance) -> float:
        """The states that take work (for :func:`_predicted`): when counting, only some of the
        stages owed are reached; counted as two thirds of them, which overestimates a little (on
        bert_legacy over A100/L4/T4 at k = 8, from the level before, 22.0 s predicted for the
        17.8 s taken) as a counting level stopped by the time limit proves nothing."""
        return self.states(instance) / (1.5 if self.counting else 1)


def _predicted(previous: tuple[float, float, float], work: float) -> float:
    """Seconds of a level's bound pass with ``work`` states (:meth:`_Level.work`), from the last
    level's (seconds, of which extending states, work): scoring the candidate stages costs the
    same at every level, extending the states grows as their number to the power
    :data:`_LEVEL_GROWTH`."""
    seconds, relaxing, before = previous
    return seconds - relaxing + relaxing * (work / before) ** _LEVEL_GROWTH


def _levels(instance: Instance, ideals: int, counted: bool) -> list[_Level]:
    """The DP's levels, each a valid bound: device types with nothing tracked (fastest); then, if
    a tensor is read along a chain, the same with the stages it goes to counted (tighter, and
    about 2× slower: where types are hosts, as on A100/L4/T4, it is most of the gain; where a
    type spans hosts it is left out, as it prices every destination at that type's best link:
    on BERT over 2 × 8 A100 at k = 16 it proved no more than the plain level, in 8–11 s that
    ``auto`` then lacked for the levels below); the last stage's group tracked, without and with
    the count; then the last and next stages' groups tracked (not counting; not comparable with
    the one before: on BERT it bounds less, on small graphs it can bound more); each over (type,
    host) classes when the table of ideals × states fits its budget (:data:`_STATE_BUDGET`,
    :data:`_COUNTING_BUDGET` when counting), else over types, else skipped."""
    types, classes = _groups(instance, classes=False), _groups(instance, classes=True)
    spanning = len(classes.devices) > len(types.devices)  # some type has devices on several hosts
    levels = [_Level(types, 0)]
    for track, counting in ((0, True), (1, False), (1, True), (2, False)):
        if counting and (not counted or (track == 0 and spanning)):
            continue
        for groups in (types,) if track == 0 else (classes, types):  # the first that fits
            level = _Level(groups, track, counting)
            if ideals * level.states(instance) <= (_COUNTING_BUDGET if counting else _STATE_BUDGET):
                levels.append(level)
                break
    return levels


def _rooms(
    instance: Instance, groups: _Groups, lattice: _Lattice, weights: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``room[λ, c]``: the largest ``Σ λ_τ`` over the stages still open after vector ``c``
    (at most ``k - |c|`` of the devices left), and ``room_next[λ, c]``: the same after one more
    stage (the best move from ``c``; ``-inf`` when none).

    If every stage takes at most ``cap``, the work ``Σ_v min_τ λ_τ t_τ(v)`` of the ops still
    to place is at most ``cap · room[λ, c]``: a stage on type τ does at most ``λ_τ · cap``.
    """
    k, counts = instance.options.stages, groups.counts
    room = np.zeros((len(weights), lattice.size))
    for c, vector in enumerate(lattice.vectors):
        left = k - int(lattice.used[c])
        for w, lam in enumerate(weights):
            values = np.sort(np.repeat(lam[groups.type_of], counts - vector))[::-1]
            room[w, c] = values[:left].sum()
    room_next = np.full_like(room, -np.inf)
    for source, target in zip(lattice.movable, lattice.grown, strict=True):
        room_next[:, source] = np.maximum(room_next[:, source], room[:, target])
    return room, room_next


@dataclass(frozen=True, eq=False)
class _Links:
    """``per_unit[κ, :, c]``: seconds per (tensor received, byte received, tensor sent, byte
    sent) charged to a stage of group κ entered from vector ``c`` — the latency and inverse
    bandwidth of links to the groups already in use (received) or still free (sent);
    ``pair[σ, κ]``: the latency and inverse bandwidth from a device of group σ to another of κ."""

    per_unit: np.ndarray  # (G, 4, vectors)
    pair: np.ndarray  # (G, G, 2)
    # fanout[κ, :, c, d]: the least total latency and inverse bandwidth of one tensor sent by a
    # stage of group κ entered from vector c to d stages (inf: fewer devices are free)
    fanout: np.ndarray  # (G, 2, vectors, devices + 1); no d at a level that does not count

    def extra(self, group: int, vectors: np.ndarray, partner: np.ndarray, receiving: bool) -> np.ndarray:
        """(2, vectors, partners): the extra latency and inverse bandwidth, over the fastest
        charged by ``per_unit``, of a tensor that a stage of ``group`` entered from ``vectors``
        receives from (or sends to) a stage of group ``partner`` (an out-of-range partner —
        no stage — costs nothing extra)."""
        known = partner < len(self.pair)
        first = 0 if receiving else 2
        base = self.per_unit[group][first : first + 2, vectors]  # (2, V)
        pair = np.zeros((2, len(partner)))
        chosen = partner[known]
        pair[:, known] = (self.pair[chosen, group] if receiving else self.pair[group, chosen]).T
        out = pair[:, None, :] - base[:, :, None]
        out[:, :, ~known] = 0.0
        return out


def _links(instance: Instance, groups: _Groups, lattice: _Lattice, *, slowest: bool) -> _Links:
    """The fastest links (smallest latency, largest bandwidth: a lower estimate) between a
    device of group κ and another device of a group the stage can talk to, or the slowest."""
    cluster = instance.cluster
    count = len(groups.devices)
    group_of = [0] * len(cluster.devices)
    for g, members in enumerate(groups.devices):
        for d in members:
            group_of[d] = g
    pick_latency, pick_bandwidth = (np.fmax, np.fmin) if slowest else (np.fmin, np.fmax)
    latency, bandwidth = cluster.group_links(group_of, slowest=slowest)
    counts = groups.counts
    shape = (count, lattice.size)
    charged = [np.zeros(shape), np.full(shape, np.inf), np.zeros(shape), np.full(shape, np.inf)]
    for g in range(count):
        for c, vector in enumerate(lattice.vectors):
            free = counts - vector - (np.arange(count) == g)
            for side, partners in ((0, vector > 0), (2, free > 0)):
                if partners.any():
                    charged[side][g, c] = pick_latency.reduce(latency[g, partners])
                    charged[side + 1][g, c] = pick_bandwidth.reduce(bandwidth[g, partners])
    latency_in, bandwidth_in, latency_out, bandwidth_out = (
        np.nan_to_num(x, nan=0.0 if i % 2 == 0 else np.inf) for i, x in enumerate(charged)
    )
    pair = np.stack([np.nan_to_num(latency, nan=0.0), 1 / np.nan_to_num(bandwidth, nan=np.inf)], axis=2)
    per_unit = np.stack([latency_in, 1 / bandwidth_in, latency_out, 1 / bandwidth_out], axis=1)
    return _Links(per_unit, pair, _fanout(groups, lattice, pair, per_unit, slowest))


def _fanout(
    groups: _Groups, lattice: _Lattice, pair: np.ndarray, per_unit: np.ndarray, slowest: bool
) -> np.ndarray:
    """:attr:`_Links.fanout`. The ``d`` stages a tensor goes to are on ``d`` distinct devices,
    free when the sending stage runs, so its ``d`` latencies sum to at least the ``d``
    smallest over the free devices, and likewise its inverse bandwidths. (The slowest links,
    which only look for placements, charge the slowest link ``d`` times.)"""
    count, devices = len(groups.devices), int(groups.counts.sum())
    if lattice.owed_slots == 1:  # nothing counted: only the moves that count read it
        return np.zeros((count, 2, lattice.size, 0))
    fanout = np.full((count, 2, lattice.size, devices + 1), np.inf)
    for g in range(count):
        for c, vector in enumerate(lattice.vectors):
            free = np.maximum(groups.counts - vector - (np.arange(count) == g), 0)
            for side in range(2):
                if slowest:
                    costs = np.full(int(free.sum()), per_unit[g, 2 + side, c])
                else:
                    costs = np.sort(np.repeat(pair[g, :, side], free))
                fanout[g, side, c, : len(costs) + 1] = np.concatenate([[0.0], np.cumsum(costs)])
    return fanout


def _charged(amounts: np.ndarray, per_unit: np.ndarray) -> np.ndarray:
    """``amounts`` (J × (count, bytes)) at ``per_unit`` ((2, V, P) seconds per tensor and per
    byte): (J, V, P) seconds (broadcasting; an einsum of so small a sum is slower)."""
    return amounts[:, 0, None, None] * per_unit[0][None] + amounts[:, 1, None, None] * per_unit[1][None]


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

    def __init__(
        self, instance: Instance, unit_of: np.ndarray, ideals: list[int], frontiers: list[int], clock: _Clock
    ) -> None:
        self.instance = instance
        self.arrays = _graph_arrays(instance)
        self.tables = _tables(instance, unit_of, ideals, self.arrays, clock)
        self.unit_of, self.frontiers = unit_of, frontiers
        self.pair_producer = np.repeat(self.arrays.producer, self.arrays.count)
        self.pair_units = (unit_of[self.pair_producer], unit_of[self.arrays.flat])  # (producer, reader)
        self.full = len(ideals) - 1
        self.pairs = 0
        work = self.tables.work
        self.by_work = np.argsort(work[:, -1], kind="stable")  # window on the last weight vector
        self.sorted_work = work[self.by_work, -1]
        self.next_inputs: np.ndarray | None = None
        per_destination = instance.options.comm_mode is CommMode.PER_DESTINATION
        self.spread = _spread_tensors(instance, self.arrays) if per_destination else []
        self.counted = _counted(self.spread)
        self.destinations: _Destinations | None = None
        self.relax_seconds = 0.0  # spent extending states (the part that grows with the level's states)
        self.scorer = Scorer(instance, TensorArrays.of(instance))  # ranks the concrete devices of a chain
        self.set_level(_Level(_groups(instance, classes=False), 0))

    def set_level(self, level: _Level) -> None:
        """Count devices by the level's groups and track what :func:`_lattice` says for it."""
        instance = self.instance
        self.level = level
        groups, track = self.groups, self.track = level.groups, level.track
        self.counting = level.counting and self.counted is not None
        self.lattice = _lattice(instance, groups, track, self.counting)
        if track >= 2 and self.next_inputs is None:
            self.next_inputs = _next_inputs(instance, self.unit_of, self.frontiers, self.arrays)
        memory = np.array([instance.cluster.device_types[t].memory for t in instance.cluster.type_names])
        self.memory = memory[groups.type_of]
        self.room, self.room_next = _rooms(instance, groups, self.lattice, _work_weights(instance))

    def candidates(self, ideal: int, cap: float, rest_limit: np.ndarray) -> np.ndarray:
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

    def _last_units(self, inside: np.ndarray) -> np.ndarray:
        """The maximal units of the ideal ``inside`` (no unit of the ideal reads from them).

        The stage that ends at an ideal ``I`` is an up-set of ``I`` (what is left of ``I``
        after removing a down-set) and is not empty, so it holds at least one of them."""
        a = self.arrays
        units = np.unique(self.unit_of[inside])
        if not len(a.producer):
            return units
        producer, consumer = self.pair_units
        feeding = inside[self.pair_producer] & inside[a.flat] & (producer != consumer)
        return np.setdiff1d(units, producer[feeding])

    def _to_next(self, inside: np.ndarray, js: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(count, bytes) of the tensors stage ``js[j] \\ I`` certainly sends to the next stage:
        the least, over the minimal units of the complement of ``js[j]`` (the next stage holds
        one), of their inputs produced in the stage (zero when not tracked)."""
        if self.track < 2 or not len(self.arrays.producer):
            return np.zeros(len(js)), np.zeros(len(js))
        tensors = self.next_inputs[js]  # (J, units, inputs), -1 = none, -2 = unit slot unused
        real = tensors >= 0
        safe = np.where(real, tensors, 0)
        mine = real & ~inside[self.arrays.producer[safe]]
        count = mine.sum(axis=2).astype(float)
        size = (mine * self.arrays.size[safe]).sum(axis=2)
        unused = (tensors == -2).all(axis=2)
        count[unused], size[unused] = np.inf, np.inf
        count, size = count.min(axis=1), size.min(axis=1)
        return np.where(np.isfinite(count), count, 0.0), np.where(np.isfinite(size), size, 0.0)

    def stage_parts(self, ideal: int, js: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For stages ``js[j] \\ ideal``: compute time on each type (inf where the stage does not
        fit or has an op the type cannot run), and the (count, bytes) of tensors received and
        sent, as columns ``[recv count, recv bytes, sent count, sent bytes, last count, last
        bytes, next count, next bytes, made, fewest, holds, holds last]``. The *last* columns are
        a part of the received tensors that certainly comes from the stage ending at ``ideal``:
        the least, over the ideal's maximal units (one of which that stage holds), of what the
        stage receives from that unit; *next*, what the next stage certainly reads
        (:meth:`_to_next`). When counting, the last four are the counted tensor's: whether the
        stage makes it, the fewest stages its later readers need, whether the stage holds one of
        its readers (not made here), and its last; its sends are left to :meth:`_relax`."""
        t, a = self.tables, self.arrays
        inside = t.row(ideal)
        recv_b, recv_c = np.zeros(len(js)), np.zeros(len(js))
        sent_b, sent_c = t.out_bytes[js].copy(), t.out_count[js].copy()
        last = self._last_units(inside) if ideal and self.track else np.zeros(0, dtype=np.int64)
        last_c, last_b = np.zeros((2, len(js)))
        leaving = np.zeros(0, dtype=np.int64)
        if len(a.producer):
            leaving = np.flatnonzero(
                inside[a.producer] & (np.add.reduceat(inside[a.flat], a.starts) < a.count)
            )
        if len(leaving):  # tensors leaving ``ideal``, each with a reader outside it...
            counts = a.count[leaving]
            owner = np.repeat(np.arange(len(leaving)), counts)
            slots = np.arange(counts.sum()) + np.repeat(a.starts[leaving] - _starts(counts), counts)
            outside = ~inside[a.flat[slots]]
            owner = owner[outside]
            taken = t.member(js, a.flat[slots[outside]])
            firsts = np.flatnonzero(np.concatenate([[True], owner[1:] != owner[:-1]]))
            got = np.logical_or.reduceat(taken, firsts, axis=1).astype(float)  # ...received by the stage
            passing = 1.0 - np.logical_and.reduceat(taken, firsts, axis=1)  # ...leaving ``J``, not sent by it
            size = a.size[leaving]
            recv_c, recv_b = got.sum(axis=1), got @ size
            sent_c, sent_b = sent_c - passing.sum(axis=1), sent_b - passing @ size
            if len(last):  # what comes from each maximal unit of ``ideal``
                from_last = (self.unit_of[a.producer[leaving]][:, None] == last[None, :]).astype(float)
                last_c, last_b = (got @ from_last).min(axis=1), ((got * size) @ from_last).min(axis=1)
        spread = self.destinations  # tensors read in several later stages
        counted = np.zeros((len(js), 4))
        if spread is not None and len(spread.producer):
            made = t.member(js, spread.producer) & ~inside[spread.producer]
            readers = np.add.reduceat(t.member(js, spread.readers), spread.firsts, axis=1)
            fewest = spread.fewest[np.arange(len(spread.producer)), readers]
            extra = np.maximum(fewest - 1, 0) * made
            if self.counting:
                c = self.counted
                counted[:, 0], counted[:, 1] = made[:, c], fewest[:, c] * made[:, c]
                chain = self.spread[c][1]
                counted[:, 2] = (readers[:, c] > inside[chain].sum()) & ~made[:, c]  # holds a reader
                counted[:, 3] = readers[:, c] == len(chain)  # holds its last reader
            sent_c, sent_b = sent_c + extra.sum(axis=1), sent_b + extra @ spread.size
        next_c, next_b = self._to_next(inside, js)
        params = t.own_params[js] - t.own_params[ideal]
        if len(a.shared_size):  # a shared weight is stored where the stage holds one of its users
            held = np.add.reduceat(t.member(js, a.shared_users), a.shared_firsts, axis=1)
            params = (
                params + (held > np.add.reduceat(inside[a.shared_users], a.shared_firsts)) @ a.shared_size
            )
        diff = t.packed[js] & ~t.packed[ideal]
        first = (diff != 0).argmax(axis=1)
        lead = _LEADING_ZEROS[diff[np.arange(len(js)), first]]
        largest = t.working_sorted[np.minimum(first * 8 + lead, len(t.working_sorted) - 1)]
        memory = params + sent_b + recv_b + largest
        if self.counting:  # the counted tensor's fewest sends (one in ``out_count``) go to _relax
            sent_c, sent_b = sent_c - counted[:, 1], sent_b - counted[:, 1] * spread.size[self.counted]
        feasible = ((t.unsupported[js] - t.unsupported[ideal])[:, self.groups.type_of] < 0.5) & (
            memory[:, None] <= self.memory[None, :] * (1 + _TOLERANCE)
        )
        compute = np.where(feasible, (t.time[js] - t.time[ideal])[:, self.groups.type_of], np.inf)
        return compute, np.column_stack(
            [recv_c, recv_b, sent_c, sent_b, last_c, last_b, next_c, next_b, counted]
        )

    def run(
        self, cap: float, clock: _Clock, combine, links: _Links, spread_cap: float | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``F[ideal, state]`` with every stage ``≤ cap`` (stages combined by ``combine``: the
        maximum, or the sum to break ties), and back-pointers (ideal, state). The fewest
        destinations of a tensor read along a chain assume stages of at most ``spread_cap``
        (default ``cap``): under a lower cap and the first pass's ``spread_cap``, a second pass
        keeps the first's stage costs, so it finds its chain."""
        t, lattice = self.tables, self.lattice
        count = len(t.work)
        best = np.full((count, lattice.states), np.inf)
        best[0, lattice.starts()] = 0.0
        parent, parent_state = (
            np.full(best.shape, -1, dtype=np.int64),
            np.full(best.shape, -1, dtype=np.int64),
        )
        self.destinations = _destinations(self.spread, self.arrays, cap if spread_cap is None else spread_cap)
        vectors = lattice.vector_of(np.arange(lattice.states))
        work_limit = (_scaled(cap, self.room) * (1 + _TOLERANCE) + 1e-300)[:, vectors]
        next_limit = _scaled(cap, self.room_next)[:, vectors]
        owing = self._owing(count)
        owed = np.arange(lattice.states) // lattice.plain
        overdrawn = (owed > self.instance.options.stages - lattice.used[vectors]) & (
            owed < lattice.owed_slots - 1
        )
        for ideal in range(count - 1):
            clock.tick(ideal, count)
            rest = t.work[self.full] - t.work[ideal]  # drop states whose rest cannot fit under cap
            best[ideal, (rest[:, None] > work_limit).any(axis=0) | overdrawn] = np.inf
            best[ideal, : owing[ideal] * lattice.plain] = np.inf  # owing fewer stages than it needs
            live = np.isfinite(best[ideal])
            if not live.any():
                continue
            js = self.candidates(ideal, cap, next_limit[:, live].max(axis=1))
            if not len(js):
                continue
            self.pairs += len(js)
            compute, traffic = self.stage_parts(ideal, js)
            relaxing = time.perf_counter()
            self._relax(ideal, js, compute, traffic, combine, links, cap, live, best, parent, parent_state)
            self.relax_seconds += time.perf_counter() - relaxing
        return best, parent, parent_state

    def _owing(self, count: int) -> np.ndarray:
        """``owing[I]``: the fewest stages the counted tensor can still be owed at ideal ``I``
        once made (0 when not counting): the stages it is owed hold its readers outside ``I``,
        each under the cap, so there are at least the fewest that can."""
        if not self.counting:
            return np.zeros(count, dtype=np.int64)
        c, spread = self.counted, self.destinations
        inside = self.tables.member(np.arange(count), self.spread[c][1]).sum(axis=1)
        return np.minimum(spread.fewest[c, inside], self.lattice.owed_slots - 1)

    def _relax(
        self, ideal, js, compute, traffic, combine, links, cap, live, best, parent, parent_state
    ) -> None:
        """Extend every live state of ``ideal`` by the stages ``js \\ ideal`` on every group (in
        place, cell by cell: copying the rows of ``js`` took a third of a counting level)."""
        row = best[ideal]
        lattice, groups = self.lattice, len(self.groups.devices)
        plain = lattice.plain
        live = live.reshape(lattice.owed_slots, plain)
        owed_live = np.flatnonzero(live.any(axis=1))
        for group in range(groups):
            source, target = lattice.sources(group), lattice.targets(group)  # (V, σ), (V, ν)
            keep = live.any(axis=0)[source].any(axis=1)
            if not keep.any() or not np.isfinite(compute[:, group]).any():
                continue
            source, target = source[keep], target[keep]
            vectors = lattice.movable[group][keep]
            last = np.arange(lattice.last_slots) if lattice.last_slots > 1 else np.array([groups])
            following = np.arange(lattice.next_slots) if lattice.next_slots > 1 else np.array([groups])
            base = traffic[:, :4] @ links.per_unit[group][:, vectors]  # (J, V)
            received = _charged(traffic[:, 4:6], links.extra(group, vectors, last, True))  # (J, V, σ)
            sent = _charged(traffic[:, 6:8], links.extra(group, vectors, following, False))  # (J, V, ν)
            comm = base[:, :, None, None] + received[:, :, :, None] + sent[:, :, None, :]  # (J, V, σ, ν)
            own = compute[:, group][:, None, None, None]
            for rows, owed, after, fanout in self._moves(traffic, owed_live, links.fanout[group][:, vectors]):
                # the moves' (δ before, δ after) pairs stacked along the vectors' axis
                sources = (source[None] + owed[:, None, None] * plain).reshape(-1, source.shape[1])
                goals = (target[None] + after[:, None, None] * plain).reshape(-1, target.shape[1])
                alive = live.ravel()[sources].any(axis=1)
                if not alive.any():
                    continue
                spent = comm[rows]
                if len(owed) > 1 or not alive.all():
                    columns = np.tile(np.arange(len(vectors)), len(owed))[alive]
                    sources, goals, spent = sources[alive], goals[alive], spent[:, columns]
                    fanout = None if fanout is None else fanout[columns]
                if fanout is not None:
                    spent = spent + fanout[None, :, None, None]
                at = (js[rows][:, None, None], goals[None])
                cost = np.maximum(own[rows], spent) if self.instance.options.overlap else own[rows] + spent
                cost[cost > cap] = np.inf
                value = combine(row[sources][None, :, :, None], cost)
                pick = value.argmin(axis=2)  # the best last group for each (J, V, ν)
                value = np.take_along_axis(value, pick[:, :, None, :], axis=2)[:, :, 0, :]
                current = best[at]
                better = value < current
                if not better.any():
                    continue
                chosen = sources[np.arange(len(sources))[None, :, None], pick]
                best[at] = np.where(better, value, current)
                parent[at] = np.where(better, ideal, parent[at])
                parent_state[at] = np.where(better, chosen, parent_state[at])

    def _moves(self, traffic: np.ndarray, owed_live: np.ndarray, fanout: np.ndarray):
        """The moves of one ``_relax`` on a group: (the stages, as rows of ``js``; ``δ`` before
        and ``δ`` after, paired arrays; seconds added per vector or None), with ``fanout`` the
        group's :attr:`_Links.fanout` at the vectors extended. Without counting, one move keeps
        ``δ = 0``. Counting (see *Destinations*): the stage that makes the tensor goes from
        *not made* to ``δ = d`` for each ``d`` at least the fewest stages its later readers need,
        and pays ``d`` sends; a later stage holding a reader takes one off ``δ ≥ 1`` (the stage
        holding the last one leaves ``δ = 0``); any other stage keeps ``δ``."""
        if not self.counting:
            nothing_owed = np.zeros(1, dtype=np.int64)
            yield slice(None), nothing_owed, nothing_owed, None
            return
        made, fewest, holds, last = (
            traffic[:, 8] > 0.5,
            traffic[:, 9],
            traffic[:, 10] > 0.5,
            traffic[:, 11] > 0.5,
        )
        not_made = self.lattice.owed_slots - 1
        size = float(self.destinations.size[self.counted])
        rows = np.flatnonzero(~made & ~holds)
        if len(rows):
            yield rows, owed_live, owed_live, None
        owing = owed_live[(owed_live >= 1) & (owed_live < not_made)]
        for rows, owed in (
            (np.flatnonzero(holds & ~last), owing),
            (np.flatnonzero(holds & last), owing[owing == 1]),
        ):
            if len(rows) and len(owed):
                yield rows, owed, owed - 1, None
        if not_made not in owed_live:
            return
        for d in range(min(not_made, fanout.shape[2])):
            rows = np.flatnonzero(made & (fewest <= d) & ((fewest > 0) == (d > 0)))
            if len(rows):
                added = fanout[0, :, d] + (size * fanout[1, :, d] if size else 0.0)
                yield rows, np.array([not_made]), np.array([d]), added

    def finals(self) -> np.ndarray:
        """States that end a placement (``|c| = k`` with exact stages; no next stage committed)."""
        lattice, k = self.lattice, self.instance.options.stages
        used = lattice.used
        ends = np.flatnonzero(used == k if self.instance.options.exact_stages else (used >= 1) & (used <= k))
        return lattice.state(
            ends[:, None], np.arange(lattice.last_slots)[None, :], lattice.next_slots - 1
        ).ravel()

    def trace(self, parent: np.ndarray, parent_state: np.ndarray, state: int) -> tuple[list[int], list[int]]:
        """(ideals of the chain, device group of each stage) ending at ``(V, state)``."""
        ideals, groups = [self.full], []
        ideal = self.full
        vectors = self.lattice.vectors
        while ideal != 0:
            before, before_state = int(parent[ideal, state]), int(parent_state[ideal, state])
            grown = vectors[self.lattice.vector_of(state)] != vectors[self.lattice.vector_of(before_state)]
            groups.append(int(np.flatnonzero(grown)[0]))
            ideal, state = before, before_state
            ideals.append(ideal)
        return ideals[::-1], groups[::-1]


def _placed(
    instance: Instance,
    dp: _DP,
    parent: np.ndarray,
    parent_state: np.ndarray,
    state: int,
    label: str,
    deadline: float,
) -> tuple[str, Placement, Evaluation] | None:
    """The DP's placement ending at ``(V, state)``, on its best concrete devices."""
    chain, groups = dp.trace(parent, parent_state, state)
    stage_of = [0] * len(instance.graph.ops)
    for s in range(len(groups)):
        for v in np.flatnonzero(dp.tables.row(chain[s + 1]) & ~dp.tables.row(chain[s])):
            stage_of[v] = s
    chosen = _choose_devices(instance, dp.scorer, stage_of, [dp.groups.devices[g] for g in groups], deadline)
    return None if chosen is None else (label, *chosen)


def _choose_devices(
    instance: Instance, scorer: Scorer, stage_of: list[int], groups: list[tuple[int, ...]], deadline: float
) -> tuple[Placement, Evaluation] | None:
    """The best concrete devices for stages of the given device groups: every sequence of
    classes of the groups' types, those within the groups first (the DP's own choice, always
    scored; the others until ``deadline``), ranked by the vectorised scorer (the evaluator
    walks ops one by one: 2 000 sequences of a 515-op decoder took 5 s, past auto's share)
    and the best the independent evaluator finds valid returned."""
    cluster = instance.cluster
    classes = cluster.classes
    allowed = []
    for members in groups:
        same_type = [
            c for c, cls in enumerate(classes) if cluster.type_index[cls[0]] == cluster.type_index[members[0]]
        ]
        allowed.append(sorted(same_type, key=lambda c: classes[c][0] not in members))
    stages = np.asarray(stage_of)
    ranked = []
    for devices in itertools.islice(device_sequences(classes, allowed), _DEVICE_CHOICES):
        if ranked and time.perf_counter() > deadline:
            break
        bottleneck, latency, valid = scorer.score(stages, np.asarray(devices))
        if valid:
            ranked.append((bottleneck, latency, len(ranked), devices))
    for *_, devices in sorted(ranked):
        placement = Placement(tuple(stage_of), tuple(devices))
        evaluation = evaluate(instance, placement)
        if evaluation.valid:
            return placement, evaluation
    return None


def incumbents(
    instance: Instance, settings: Settings, *, rounded: bool = True
) -> list[tuple[str, Placement, Evaluation]]:
    """Valid placements of the order DP and the balanced-time and uniform baselines; the order
    DP only when it is predicted to take at most :data:`_INCUMBENT_SHARE` of the time limit
    (on Llama-7B at k = 16 it takes 17 s: CP-SAT and ideal-dp given 3 s took 20).

    With ``rounded``, also the dominator-chain relaxation rounded to a placement (:mod:`.chain_round`,
    within that share): on GPT-2 over mixed types at k = 8 it is the optimum (0.02 s), where the
    others are 32-60% slower and ideal-dp and CP-SAT given 3 s returned them; on Mixtral over
    H100/A100 0.43 ms against 0.62 (0.2-0.6 s); 1.3 s on the 110k-op MoE at k = 64."""
    found = []
    candidates = [
        (solver.name, solver.solve(instance, settings).placement) for solver in (BalancedTime(), Uniform())
    ]
    limit = settings.time_limit
    if limit is None or split_seconds(instance) <= _INCUMBENT_SHARE * limit:
        candidates.insert(0, ("order-dp", graph_order_split(instance)[0]))
    if rounded:
        deadline = np.inf if limit is None else time.perf_counter() + _INCUMBENT_SHARE * limit
        scorer = Scorer(instance, TensorArrays.of(instance))
        candidates.append(("chain rounding", rounded_placement(instance, scorer, deadline)[0]))
    for label, placement in candidates:
        if placement is not None and (evaluation := evaluate(instance, placement)).valid:
            found.append((label, placement, evaluation))
    return found


def _better(a: tuple[str, Placement, Evaluation] | None, b: tuple[str, Placement, Evaluation] | None):
    """The one with the smaller bottleneck, or with the smaller latency when the bottlenecks are
    equal up to rounding (the formulation's tie rule: the tie-break pass's chain, summed in
    another order, evaluated one ulp above a heuristic's and lost to it); ``a`` on ties."""
    if a is None or b is None:
        return a or b
    first, second = a[2], b[2]
    if abs(first.bottleneck - second.bottleneck) <= _TOLERANCE * max(first.bottleneck, second.bottleneck):
        return b if second.latency < first.latency else a
    return b if second.bottleneck < first.bottleneck else a


class IdealDP(Solver):
    name = "ideal-dp"
    capabilities = Capabilities(scope=Scope.GLOBAL, time_limit=True, gap_limit=True)

    def solve(self, instance: Instance, settings: Settings) -> Outcome:
        limit = settings.time_limit
        deadline = time.perf_counter() + limit if limit is not None else np.inf
        enumerated = _enumerate(instance, IDEAL_LIMIT)
        if enumerated is None:
            raise SolverError(
                f"ideal-dp: the graph has more than {IDEAL_LIMIT} ideals (downsets), too many for the"
                " exact DP; use --solver cp-sat or order-dp"
            )
        unit_of, ideals, frontiers = enumerated
        settings.report(f"ideal-dp: {len(ideals)} ideals over {int(unit_of.max()) + 1} units")
        best = None
        for incumbent in incumbents(instance, settings):
            best = _better(best, incumbent)
        try:
            dp = _DP(instance, unit_of, ideals, frontiers, _Clock(settings, "ideal-dp tables", deadline))
        except _OutOfTime as stop:
            return self._out_of_time(best, stop)
        if best is not None:  # a tighter cap for every level: fewer candidate stages
            share = time.perf_counter() + _SEQUENCE_SHARE * (deadline - time.perf_counter())
            k = min(instance.options.stages, len(instance.cluster.devices))
            found = sequence_split(dp, best[2].bottleneck, k, share, settings.seed, best[1].devices)
            best = _better(best, None if found is None else ("ideal split over host orders", *found))
        value, proven, stopped, previous, pending = -np.inf, None, None, None, None
        levels = _levels(instance, len(ideals), dp.counted is not None)
        for index, level in enumerate(levels):
            predicted = 0.0 if previous is None else _predicted(previous, level.work(instance))
            if time.perf_counter() + predicted > deadline:  # a later level may take less
                stopped = f"skipped the level with {level.describe()} (about {predicted:.0f} s)"
                continue
            dp.set_level(level)
            started, dp.relax_seconds = time.perf_counter(), 0.0
            try:
                level_value, best = self._bound_pass(instance, dp, best, settings, deadline)
            except _OutOfTime as stop:
                stopped = f"{stop} at the level with {level.describe()}"
                break
            previous = (time.perf_counter() - started, dp.relax_seconds, level.work(instance))
            settings.report(
                f"ideal-dp: bound {level_value:.6g} s with {level.describe()} ({previous[0]:.1f} s)"
            )
            if not np.isfinite(level_value):
                return Outcome(
                    None,
                    Status.INFEASIBLE,
                    np.inf,
                    (
                        "ideal-dp: no placement fits the devices' memory and op support"
                        " (every placement checked)",
                    ),
                )
            if proven is None or level_value > value:
                value, proven = level_value, level.describe()
            if (
                best is not None
                and settings.close_enough(best[2].bottleneck, value, _TOLERANCE)
                and best[2].bottleneck > value * (1 + _TOLERANCE)  # closed: the tie rule's passes
            ):
                pending = None  # within the gap limit: neither richer levels nor placement passes
                stopped = (
                    f"within the gap limit ({settings.gap_limit:.2%}) after the level with {level.describe()}"
                )
                break
            # the placement passes now when the gap is closed (for the tie rule) or when they
            # leave time for the later levels' bounds
            later = sum(_predicted(previous, after.work(instance)) for after in levels[index + 1 :])
            closed = best is not None and best[2].bottleneck <= value * (1 + _TOLERANCE)
            if not closed and time.perf_counter() + _PLACEMENT_PASSES * previous[0] + later > deadline:
                pending = (level, level_value)
                continue
            pending = None
            best = self._placement_passes(instance, dp, best, level_value, settings, deadline)
            if best is not None and best[2].bottleneck <= value * (1 + _TOLERANCE):
                break
        if pending is not None and not (best is not None and best[2].bottleneck <= value * (1 + _TOLERANCE)):
            level, level_value = pending  # the last level whose placement passes waited
            if dp.level is not level:
                dp.set_level(level)
            best = self._placement_passes(instance, dp, best, level_value, settings, deadline)
        if proven is None:
            return self._out_of_time(best, stopped)
        if best is None:
            return Outcome(None, Status.NO_SOLUTION, value, ("ideal-dp: no device assignment is valid",))
        notes = [
            f"ideal-dp: {len(ideals)} ideals, {dp.pairs} stage candidates scored; DP value {value:.6g} s"
            f" ({proven}; a lower bound: communication is estimated from below unless links are uniform)",
            f"ideal-dp: returning the {best[0]} placement (the best evaluated of the DP's and heuristics')",
        ]
        if stopped is not None:
            notes.append(f"ideal-dp: {stopped}; the bound is the last finished level's")
        if best[2].bottleneck <= value * (1 + _TOLERANCE):  # equal up to rounding: proven optimal
            return Outcome(best[1], Status.OPTIMAL, min(value, best[2].bottleneck), tuple(notes))
        return Outcome(best[1], Status.FEASIBLE, value, tuple(notes))

    @staticmethod
    def _bound_pass(
        instance: Instance,
        dp: _DP,
        best: tuple[str, Placement, Evaluation] | None,
        settings: Settings,
        deadline: float,
    ) -> tuple[float, tuple[str, Placement, Evaluation] | None]:
        """The level's DP value (``inf``: nothing fits), its stages capped by the best placement's
        bottleneck, and the better of that placement and the DP's own."""
        cap = best[2].bottleneck * (1 + _TOLERANCE) if best else np.inf
        finals, floor = dp.finals(), _links(instance, dp.groups, dp.lattice, slowest=False)
        values, parent, parent_state = dp.run(cap, _Clock(settings, "ideal-dp", deadline), np.maximum, floor)
        value = float(values[dp.full, finals].min()) if len(finals) else np.inf
        if not np.isfinite(value):
            return value, best
        state = int(finals[np.argmin(values[dp.full, finals])])
        placed = _placed(instance, dp, parent, parent_state, state, "ideal-dp", deadline)
        return value, _better(placed, best)

    @staticmethod
    def _placement_passes(
        instance: Instance,
        dp: _DP,
        best: tuple[str, Placement, Evaluation] | None,
        value: float,
        settings: Settings,
        deadline: float,
    ) -> tuple[str, Placement, Evaluation] | None:
        """``best`` or a better placement from the level whose DP value is ``value``, found by
        passes that prove nothing more, while time remains: the DP over the *slowest* links
        where links differ (its chain often evaluates better), then the chains of stages of at
        most ``value`` with the least sum of stage times (the formulation's tie rule), then fewer
        stages."""
        cap = best[2].bottleneck * (1 + _TOLERANCE) if best else np.inf
        finals, floor = dp.finals(), _links(instance, dp.groups, dp.lattice, slowest=False)
        ceiling = _links(instance, dp.groups, dp.lattice, slowest=True)
        passes = [("ideal-dp (slowest links)", cap, np.maximum, ceiling, (None,))]
        uniform = np.array_equal(floor.per_unit, ceiling.per_unit) and np.array_equal(
            floor.pair, ceiling.pair
        )
        if uniform or (best is not None and best[2].bottleneck <= value * (1 + _TOLERANCE)):
            passes = []  # the slowest links can only find a smaller bottleneck
        # stages of at most the DP value hold fewer readers of a chain-read tensor each, so the
        # estimate charges it more destinations; when that leaves no chain under the value, the
        # bound pass's destination counts keep its chains
        tie_cap = value * (1 + _TOLERANCE) + 1e-300
        passes.append(("ideal-dp", tie_cap, np.add, floor, (tie_cap, cap)))
        for label, limit, combine, links, spread_caps in passes:
            clock = _Clock(settings, label, deadline)
            for spread_cap in spread_caps:
                try:
                    table, parent, parent_state = dp.run(limit, clock, combine, links, spread_cap)
                except _OutOfTime:
                    return best
                if np.isfinite(table[dp.full, finals]).any():
                    used = dp.lattice.used[dp.lattice.vector_of(finals)]
                    state = int(
                        min(zip(finals, used, strict=True), key=lambda f: (table[dp.full, f[0]], f[1]))[0]
                    )
                    best = _better(best, _placed(instance, dp, parent, parent_state, state, label, deadline))
                    break
        return best

    @staticmethod
    def _out_of_time(best: tuple[str, Placement, Evaluation] | None, stop: _OutOfTime) -> Outcome:
        """The best heuristic placement when the time limit stops the DP (no bound of its own)."""
        if best is None:
            return Outcome(None, Status.NO_SOLUTION, 0.0, (str(stop),))
        return Outcome(best[1], Status.FEASIBLE, 0.0, (f"{stop}; returning the {best[0]} placement",))
