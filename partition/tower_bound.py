"""A lower bound for graphs made of two independent towers (CLIP's image and text encoders,
T5's encoder and decoder).

The dominator chain of :mod:`partition.chain_bound` gives such a graph nothing: no op but the
final similarity lies on every path, so one segment holds every op. Yet each tower alone is a
chain of residual blocks, and a stage holds a contiguous piece of each.

**Relaxations that expose the towers** (each keeps every placement valid and costs it no
more, so the optimum can only fall):

- Tensors read by three or more ops are read by their first reader only
  (:func:`~partition.chain_bound._without_broadcasts`); once the towers are found, each gets
  back the readers near the first one (:func:`_with_near_readers`).
- *Hung chains*, when the towers are still joined. An op whose one op-made input comes from
  far back (more than :data:`_SPAN` of the ops; T5's cross-attention key and value projections
  of the encoder's output), with the later ops that read only it and each other, keeps its
  input and loses its readers outside the chain: the chain hangs at the end of its producer's
  tower, and the precedences cut are remembered.
- In the largest segment, the ops other than its first dominator fall into weakly connected
  components with no edge between them. The two with the most work are the towers ``A`` and
  ``B``. The ops after the segment (the join: CLIP's similarity logits) go with ``B``, their
  inputs from ``A`` dropped; every other op is deleted (small components). A placement
  restricted to the remaining ops still puts producers at or before their readers, computes
  less and sends fewer tensors; it may leave stages empty, which the DP below allows. (Kept,
  the join's 12 µs lift CLIP's bound on 16 V100s at k = 8 by 0.28%.)
- *Floating paths.* A cheap path that reads a tower's first op and feeds its end (CLIP's text
  tower finds its end-of-text token by an ArgMax over the token ids) jumps over every residual
  add of the tower. In each tower the reader at the end of the longest edge is deleted, with
  every later op left without an op-made input, while that shrinks the tower's largest segment
  and all deleted work stays within :data:`_FLOATING_SHARE` of the graph's on every type.

**Products of positions.** An ideal ``J`` of what is left is ``J_A ∪ J_B`` with ``J_X`` an
ideal of tower ``X``, and nested cuts stay nested in each tower. So the chain bound's
positions of each tower alone (its cuts' compute prefixes ``end``/``start`` and crossing
tensors ``send``/``recv`` per type, at each type's best link) place every cut at a pair
``(a, b)``, and a stage from ``(a, b)`` to ``(a', b')`` on type ``τ`` takes at least
``cost_A(a, a') + cost_B(b, b')``: its compute is the sum of the two parts', and its tensors
are those of ``A`` and those of ``B``, priced one by one. A part's cost is 0 when it stays at
its position, else the chain bound's: ``end(a') + send(a') − start(a) + recv(a)`` when ``a'``
lies beyond the boundary after ``a``'s segment (the part then reads and writes every crossing
tensor of its ends), otherwise its compute ``end(a') − start(a)`` plus ``least_sent(a') +
least_received(a)``: a part is a non-empty up-set of the cut it ends at and a non-empty
down-set of the rest of the cut it starts at, so it holds a maximal op of the one, all of whose
tensors leave it, and a minimal op of the other, all of whose op-made inputs come from before
it (:meth:`~partition.chain_bound._Builder.least_exchanged`: the least of these per cut; on
CLIP at k = 8 and 16 they lift the bound 0.3–1.6%). ``end`` and ``end + send`` (with the least
sent) are replaced by their suffix minima and ``start`` and ``start − recv`` (less the least
received) by their prefix maxima, which only lowers a part's cost and makes it no larger from
a later start. Consecutive positions of one segment are merged into groups of at most ``1/R``
of the tower's work on the fastest type (``end``, ``send``, ``recv`` and the least exchanges
the group's least, ``start`` its largest): a part inside one group costs 0, one between groups
at least the formula above.

**Work a part holds.** A segment relaxed to cells prices a part inside it by positions, the
least time on ``τ`` of an ideal at its end less the most of one at its start, and the two ideals
need not be nested in ``τ``'s order: T5's hung key and value projections (12 chains of MatMul,
Reshape, Transpose, about 4 µs each) are cells of 2.7 µs of an H100 that span 20 µs of an A100,
and parts on an A100 holding 13 µs of H100 work were priced 0.2 µs. But the part is the
difference of nested ideals, so it holds at least the reference work the end's group certainly
holds less what the start's may, and it is a set of the segment's ops: it computes on ``τ`` at
least the fractional knapsack that takes the ops cheapest on ``τ`` per unit of reference work
first (:class:`_Floor`; the cost then lowered to its envelopes again). T5 on H100/A100 at
k = 8: 0.40872 → 0.41225 ms; on four types 0.42499 → 0.42681. And the part meets each chain of
the segment (T5's MatMul, Reshape, Transpose) in a contiguous piece, which receives the tensor
before it unless it starts the chain and sends the one after it unless it ends it: the knapsack
takes the segments of each chain's lower convex hull of (reference work, time with those
transfers) over its pieces, not its ops one by one (:func:`_segment_floor`; an A100 holding
Reshapes and Transposes without their MatMuls was priced 1.04 times their H100 work, now at
least 1.27: T5 on H100/A100 0.41224 → 0.41367 ms, on four types 0.42681 → 0.42831). Exact
segments go without: their positions come from the ideals themselves, and on CLIP over four
types the floor lifted parts there by at most 1.3 µs, no bound, and slowed the search by a
sixth (114 → 134 s).

**Exact windows.** In the tower the DP reads as a matrix (the staircase's), a part that starts
in an exact segment (its ideals enumerated) and ends in it or in the next is priced exactly
(:func:`_exact_parts`): its compute, every tensor of the tower it reads and does not make, and
every one it makes that an op beyond its end reads, once each. Such a part is not full, and the
least exchanges charge it one tensor each way where a part inside an attention block reads and
sends one per path it cuts. A group's price is the least over the starts at or before its last
row, and over the ends in it or later (:class:`_Window`), so it stays no larger from a later start
nor to a nearer end. On CLIP over 2 × 8 A100 at k = 16 the bound's stages hold both towers,
filled with such parts of the image tower: 0.29559 → 0.29703 ms. Setting them up takes a pass
or two (0.1–0.3 s on CLIP), so only the last passes price them, while time remains: the one with
the broadcasts' charges (else one of their own) and the one with a type per host; the coarser
passes and the group changes do without, and so does the witness.

**Cut precedences.** A hung chain's op ``u`` in one tower fed ``w`` in the other, and every
cut of the graph holding ``w`` holds ``u``. A cut's part in ``w``'s tower holds ``w`` once it
lies at or beyond the boundary after ``w``'s segment, and one holding ``u`` lies beyond the
boundary before ``u``'s; so no reachable pair has ``u``'s tower at or before the latter while
``w``'s is at or beyond the former (T5's decoder waits for the encoder). When ``u``'s segment is
relaxed to cells, a cut holding every ``u`` that the ``w`` up to some row of the other tower
read holds at least their work and their ancestors' in the segment, so it lies beyond the last
cell whose work stays below that (T5's decoder at its third layer needs the key and value
projections of three layers, not of one).

**Hung tensors.** The tensor ``u`` made for ``w`` is not in either tower, but the stage holding
``w`` receives it unless it holds ``u``. ``B``, the tower of the readers, is also priced with
every such tensor a part certainly reads (it lies at or before the boundary before every
reader's segment and ends at or beyond the boundary after one of theirs), at each type's best
link, and a stage pays that price when its part of ``A`` holds less of the hung segment's work
than one chain needs to make a hung tensor: at most ``upper(a') − max(lower(a), floor)`` of it,
the work its end's cut may hold less what its start's surely holds (T5 on 8 H100s at k = 8:
0.3714 → 0.3729 ms; on A100/L4/T4, 0.6901 → 0.7016). A part that may make some pays the price
less a maker's hung tensors (the costliest maker's) per maker whose *own* ancestors past the
boundary (those no other maker descends from: T5's projection, reshape and transpose, not the
encoder's last op) its work can hold: a maker it holds without them has one in its start's
cut, so the stage receives one of their inner tensors instead — the difference, when cheaper,
is spared too, and so are the inner tensors the least receipts of ``A`` may already charge; a
start whose cut holds less than an own ancestor's root has no such maker (T5 on A100/L4/T4 at
k = 8, where a hung tensor costs 15.5 µs and a chain 17.7 µs of an A100, decoder stages that
held a chain or two paid none of the other hung tensors their layers read: 0.70431 → 0.71997
ms). A later start then may cost more, so past the hung segment's boundary every point is
extended, not only the undominated ones.

**Hung tensors sent.** No cut sends a hung tensor either, but the maker's stage sends it unless
it holds the readers. A part of ``A`` that certainly holds work past the boundary holds own
ancestors of at least that work (less what no maker owns) over the most one maker owns of
makers (:meth:`_Hung.touched`), and sends a tensor for each: its hung tensor, or, when the part
lacks the maker, the one along which the path from its own ancestor to the maker leaves the
part, distinct per maker. So a stage costs at least its ``A`` part's compute and receipts,
those sends less one per maker whose readers its ``B`` part may hold, and its ``B`` part's
price (:meth:`_Product._exits_reach`; the more of ``B`` a stage holds, the fewer sends). T5 on
H100/A100 at k = 8: 0.41367 → 0.41498 ms, where a stage holding 21 of the hung ops was charged
none of the tensors it sent to the decoder's stages. It slows the pass with group changes about
twofold (T5 over four types at k = 8, no deadline: 22.8 → 44–48 s, and no higher there).

**Broadcast tensors.** The relaxation keeps a mask's first reader (and those near it), but every
reader still reads it. A part whose start's cut holds every kept reader, and so the mask's
maker, and that certainly holds a dropped reader receives the mask once
(:func:`_with_broadcast_receipts`). The stage holding the maker sends it to every other stage
holding a reader, and readers that no stage within the probed bottleneck can hold two of need
a stage each; so the points also say whether the maker is placed yet, and the stage that
places it pays those sends less the one the relaxed tower may charge (:class:`_Sender`). Both
slow the search (its second tower's reach steps up at each receipt, the points double), so they
get a pass of their own at the finest resolution, after the group changes. CLIP's causal mask
on 16 V100s at k = 16: 0.33250 → 0.33506 ms.

**Hosts.** With the hosts grouped so that all the devices of each type lie in one group
(:func:`~partition.chain_bound._host_groups`; on the zoo's mixed clusters each type has a host
of its own), the counts of stages per type tell which groups the stages so far use. A stage
that is the first in its group, but not the first stage, receives every tensor from another
host; one after which its group has no free device sends every tensor to another host. Such a
stage's parts are priced from each tower's positions with every link the inter-host one
(:func:`_across_hosts`): on its starts when it opens its group, on its ends when it fills it
(T5 on four types at k = 8, two devices a host: 0.41138 → 0.42215 ms; CLIP there 0.51127 →
0.51921). Likewise the stage that places a broadcast tensor's maker: the stages holding the
readers it sends to come after it, and at most the devices its group has left (the counts say
how many) lie there, so it sends the others to another host (:meth:`_Product._charges`; CLIP
on four types at k = 8, no deadline: 0.52387 → 0.52500 ms).

**Group changes.** Call a stage's part in a tower *full* when it ends beyond the boundary after
its start's segment. Then every crossing tensor of that tower at its end was made in it (the
chain bound's *Full stages*: one made before its start would cross the start too, and be read
by ops inside its end). So when the next stage lies in another group of hosts:

- if the stage's part in a tower is full, the next stage receives from other hosts what it reads
  of that tower's crossing tensors: all of them when its part there is full, else at least the
  op-made inputs of a minimal op of its part (the least received), all made in the stage;
- if the next stage's part in a tower is full, it reads every crossing tensor of that tower at
  the cut, so all the stage made and sends — every crossing tensor when its own part is full,
  else at least the least it sends (its maximal op's tensors, each read outside the cut) — go
  to another host.

:meth:`_Product.feasible_across` adds to the state the last stage's group, the fullness of its
two parts and its commitment: the next stage is in the same group, or in another one with
parts of the fullness given. A stage is then priced across hosts on the starts of the towers
whose previous part was full and on the ends of those whose next part is full (CLIP on
H100/A100 at k = 8: 0.50681 → 0.50908 ms; T5 there 0.40702 → 0.40872). It is far slower than
:meth:`_Product.feasible`, whose bound brackets it from below, so it runs last, at the finest
resolution reached, while time remains. It prices the broadcast tensors' receipts too and,
where its table doubled stays within :data:`_ACROSS_STATES`, the maker's sends (the points say
whether the maker is placed, as in the broadcasts' pass): without them the pass's witness on
CLIP over A100/L4/T4 at k = 8 had the text tower's first stage compute 0.7888 of 0.8035 ms and
send nothing for the causal mask that three later stages read; with them 0.80236 → 0.80850 ms.
Its probes take seconds (6 s on CLIP over four types at k = 8), so with several workers (the
solver's threads) a round probes as many values at once, each in a forked process
(:mod:`partition.forked_probes`, :func:`~partition.chain_bound._narrowed`): there, with no
deadline, the bound reaches 0.52500 ms in 68.8 s with two workers against 100.2 s with one.

**A type on several hosts.** With one type on both hosts of 2 × 8 A100 there is one group, and
every tensor is priced at NVLink. The same instance with a type per host
(:func:`_types_by_host`: the same placements at the same cost) has a group per host, so a last
pass at the finest resolution, with the broadcasts' charges, prices the stages that open or fill
a host across hosts (CLIP at k = 16: 0.29703 → 0.29782 ms). Its count vectors are the products of
the hosts' (81 at k = 16 against 17), so it runs only while time remains.

**Feasibility of a bottleneck ``T``.** The points ``(a, G_c[a])`` cover every pair ``(a*, b*)``
that a placement's first stages, ``c_τ`` of each type, may reach: some point has ``a ≥ a*``
and ``G_c[a] ≥ b*`` (past the hung segment's boundary, ``a = a*``: there the DP keeps a point
per row, the ceilings only lower it and the floors only move points no placement's pair of
that row needs); ``G_0`` holds ``(0, 0)``. A stage of type ``τ`` from a point ``(a, G[a])``
of ``G_{c − e_τ}`` that no other point dominates to ``a'`` leaves ``T − cost_A(a, a')`` for
``B``, and ``G_c[a'] ≥`` the furthest ``b'`` that budget admits from ``G[a]`` (a binary search:
both costs are monotone in the end and no larger from a later start, so the undominated points
cover every pair below them). The cut precedences then lower a point to its row's ceiling, or
move one below its row's floor to the last row whose floor it clears (ceilings and floors are
nondecreasing, so the points still cover every pair the precedences allow). By induction every
placement's cuts stay covered; so if no ``G_c[last_A]`` reaches ``last_B``, ``T`` is infeasible
and a valid bound. The largest such ``T`` is bisected, with the positions refined (``R``
doubled) while time remains. Memory, colocation, exact stage counts, links between particular
stage types and host counts are relaxed. With ``--overlap`` communication is dropped, as in the
chain bound.
"""

from __future__ import annotations

import copy
import functools
import itertools
import math
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from .chain_bound import (
    _EXACT_OPS,
    _NO_CHAIN,
    _SAFETY,
    _bisect_below,
    _Builder,
    _closure,
    _components,
    _count_layers,
    _host_groups,
    _host_sides,
    _in_groups,
    _joined,
    _knapsack,
    _largest_segment,
    _links,
    _lower_hull,
    _members,
    _narrowed,
    _past,
    _Positions,
    _positions,
    _reached,
    _Relaxation,
    _without_broadcasts,
    chain_lower_bound,
    dominators,
    goal_of,
    reused,
)
from .cluster import Device
from .coarsen import _adjacency
from .costs import CostTable
from .forked_probes import forked_probes
from .instance import CommMode, Instance

_SPAN = 0.05  # of the ops: an op whose one input is made further back than this heads a hung chain
_FLOATING_SHARE = 0.02  # of the graph's work (every type) that deleted floating paths may hold
_RESOLUTIONS = (200, 400, 800)  # groups of positions per tower, refined while time remains
_MAX_ROWS = 3_000  # grouped rows of the smaller tower (its cost matrices are rows² per type)
# the witness with group changes is traced where its table is at most this large: on four types
# (2.2 M cells) one probe takes 5 s, the polish's last gains (CLIP there 0.54281 -> 0.54323 ms at
# 60 s), on A100/L4/T4 (0.6 M) 1 s
_ACROSS_WITNESS_CELLS = 1_000_000
_ACROSS_PASSES = 4  # time left, in passes of the last resolution, for the bisection with group changes
_ACROSS_STEP = 0.0025  # its first probe this far above the plain bound (relative), then twice as far …
_WITNESS_FACTORS = (1.001, 1.003, 1.01, 1.03)  # above the bound, where a primal start is traced
_BROADCAST_PASSES = 3  # time left, in plain passes of the last resolution, for the broadcasts' pass
_ACROSS_STATES = 20_000_000  # its table's entries at most (count vectors × keys × rows; 160 MB)
_MAX_OPS = 20_000  # larger graphs are left to the chain bound (finding towers is quadratic at worst)
_HOST_PASSES = 16  # time left, in plain passes of the last resolution, for the pass with a type per host
_EXACT_PASSES = 6  # time left, in plain passes of the last resolution, for the exact windows
_EXACT_PAIRS = 1_000_000  # (start, end) rows of a window priced exactly (:func:`_exact_parts`) at most
_CHAIN_OPS = 64  # ops of a chain whose pieces the floor prices (their number is quadratic)
_BLOCK_SEQUENCES = 48  # type sequences with each group of hosts' stages together, traced at most


@dataclass(frozen=True, eq=False)
class _Window:
    """Parts that start in one exact segment and end in it or in the next, priced exactly on
    each type's best link (:func:`_exact_parts`), grouped as the DP reads them: per start group
    (``starts``) and end group (``ends``, consecutive), ``time`` (starts × ends × types) is the
    least price of a part starting at or before the group's last row in the segment and ending
    in the group or later in the window; ``before``, the group before the segment's (-1 for the
    first), whose costs bound the parts starting before the segment."""

    starts: np.ndarray
    ends: np.ndarray
    before: int
    time: np.ndarray
    after: int | None  # the group after the window's last end, if any

    def lift(self, cost: np.ndarray, kind: int) -> None:
        """Raise ``cost`` (groups², type ``kind``, rows before the segment's already lifted) to
        these prices where they are larger. A part from a start before the segment costs at least
        the row ``before``'s, and one ending beyond the window at least the column ``after``'s:
        so the prices stay no larger from a later start nor to a nearer end, as the DP and its
        witness assume."""
        price = self.time[:, :, kind]
        if self.before >= 0:
            price = np.minimum(price, cost[self.before, self.ends][None, :])
        if self.after is not None:
            price = np.minimum(price, cost[self.starts, self.after][:, None])
        price = np.minimum.accumulate(price[:, ::-1], axis=1)[:, ::-1]
        later = self.ends[None, :] > self.starts[:, None]
        block = np.ix_(self.starts, self.ends)
        cost[block] = np.where(later, np.maximum(cost[block], price), cost[block])


@dataclass(frozen=True, eq=False)
class _Floor:
    """The least compute of a part that starts and ends in one segment, from the reference
    work it certainly holds: ``work_end[a'] − work_start[a]`` (groups; the suffix minima of the
    least reference work of a cut in the group, and the prefix maxima of the most). Such a part
    is a set of the segment's ops, so on type ``τ`` it takes at least the fractional knapsack
    that takes the ops, and the pieces of chains with their transfers, cheapest on ``τ`` per unit
    of reference work first (:func:`_segment_floor`): per segment ``s``, ``work[s]`` and
    ``time[s]`` (points × types) are its cumulative reference work and time on each type;
    ``segment``, each group's, −1 where the floor is left out: an exact segment, or one where it
    lifts nothing (the module docstring's *Work a part holds*)."""

    work_end: np.ndarray
    work_start: np.ndarray
    segment: np.ndarray
    work: tuple[np.ndarray, ...]
    time: tuple[np.ndarray, ...]

    def lift(self, cost: np.ndarray, kind: int, threshold: np.ndarray) -> np.ndarray:
        """``cost`` (groups², type ``kind``) raised to the floor where a part ends by the
        ``threshold`` after its start (inside its segment), then lowered to its envelopes: no
        larger to a nearer end nor from a later start, as the DP assumes."""
        cost = np.where(_inside(threshold), np.maximum(cost, self._values(kind)), cost)
        cost = np.minimum.accumulate(cost[:, ::-1], axis=1)[:, ::-1]
        return np.minimum.accumulate(cost, axis=0)

    def lifting(self, tower: _Tower) -> _Floor | None:
        """The floor on the segments where it prices some part of ``tower`` above its compute
        positions on some type (elsewhere it would only slow the search), or ``None``."""
        if (self.segment < 0).all():
            return None
        inside = _inside(tower.threshold) & (self.segment >= 0)[:, None]
        lifts = np.zeros(len(inside), dtype=bool)
        for kind in range(tower.compute_end.shape[1]):
            compute = tower.compute_end[None, :, kind] - tower.compute_start[:, None, kind]
            above = self._values(kind) > compute * (1 + 1e-9) + 1e-15  # not by rounding
            lifts |= (inside & above).any(axis=1)
        kept = np.isin(self.segment, self.segment[lifts])
        return replace(self, segment=np.where(kept, self.segment, -1)) if lifts.any() else None

    def _values(self, kind: int) -> np.ndarray:
        """The floor of every part (groups²) on type ``kind``, zero from a dropped segment."""
        held = np.maximum(self.work_end[None, :] - self.work_start[:, None], 0.0)
        floor = np.zeros_like(held)
        for number in np.unique(self.segment[self.segment >= 0]):
            starts = self.segment == number
            floor[starts] = np.interp(held[starts], self.work[number][:, kind], self.time[number][:, kind])
        return floor

    def reach(self, kind: int, start: np.ndarray, budget: np.ndarray) -> np.ndarray:
        """Per part from group ``start`` (elementwise), the furthest group whose floor stays
        within ``budget``."""
        limit = np.full(len(start), np.inf)
        segments = self.segment[start]
        for number in np.unique(segments[segments >= 0]):
            parts = segments == number
            work, time_ = self.work[number][:, kind], self.time[number][:, kind]
            left = budget[parts]
            point = np.searchsorted(time_, left, "right") - 1  # the last point within the budget
            inside = (point >= 0) & (point < len(time_) - 1)
            at = np.clip(point, 0, len(time_) - 2)
            slope = (work[at + 1] - work[at]) / np.maximum(time_[at + 1] - time_[at], 1e-300)
            beyond = np.where(point < 0, -np.inf, np.inf)  # not even nothing, or everything
            held = np.where(inside, work[at] + (left - time_[at]) * slope, beyond)
            limit[parts] = self.work_start[start[parts]] + held
        return np.searchsorted(self.work_end, limit, "right") - 1


def _inside(threshold: np.ndarray) -> np.ndarray:
    """Which parts (groups²) end after their start and by its ``threshold``: inside its segment."""
    rows = np.arange(len(threshold))
    return (rows[None, :] <= threshold[:, None]) & (rows[None, :] > rows[:, None])


def _floor(measured: _Measured, starts: np.ndarray) -> _Floor:
    """The :class:`_Floor` of ``measured`` grouped with first rows ``starts``."""
    positions, reference = measured.positions, measured.reference
    bounds = list(itertools.pairwise(measured.bounds.astype(int)))
    relaxed = np.array([measured.ideals.get(b) is None for b in range(len(bounds))])
    # exact segments get none: their positions come from the ideals themselves
    none = np.zeros((1, measured.instance.costs.times.shape[1]))
    segments = [
        _segment_floor(measured.instance, lo, hi, reference) if relaxed[b] else (none, none)
        for b, (lo, hi) in enumerate(bounds)
    ]
    # the last row is no segment's: it starts no part
    segment = np.minimum(np.searchsorted(measured.firsts, starts, "right") - 1, len(segments) - 1)
    return _Floor(
        np.minimum.accumulate(np.minimum.reduceat(positions.end[:, reference], starts)[::-1])[::-1],
        np.maximum.accumulate(np.maximum.reduceat(positions.start[:, reference], starts)),
        np.where(relaxed[segment], segment, -1),
        tuple(work for work, _ in segments),
        tuple(time_ for _, time_ in segments),
    )


def _chains(instance: Instance, lo: int, hi: int) -> list[tuple[list[int], list[float]]]:
    """The chains of two or more of the ops ``lo:hi``: each op after the first has one
    predecessor among them, and is its one successor among them. Per chain its ops and, per
    link, the bytes of the least tensor the link carries."""
    graph = instance.graph
    predecessors, successors = (
        [[w for w in near if lo <= w < hi] for near in side[lo:hi]] for side in _adjacency(graph)
    )
    carried: dict[tuple[int, int], float] = {}
    for tensor in graph.tensors:
        u = graph.index.get(tensor.producer or "", -1)
        for reader in tensor.consumers if lo <= u < hi else ():
            link = (u, graph.index[reader])
            carried[link] = min(carried.get(link, math.inf), tensor.bytes)
    chains: list[tuple[list[int], list[float]]] = []
    chain_of: dict[int, int] = {}
    for v in range(lo, hi):
        before = predecessors[v - lo]
        if len(before) == 1 and len(successors[before[0] - lo]) == 1:
            ops, links = chains[chain_of[before[0]]]
            ops.append(v)
            links.append(carried[before[0], v])
            chain_of[v] = chain_of[before[0]]
        else:
            chain_of[v] = len(chains)
            chains.append(([v], []))
    return [chain for chain in chains if len(chain[0]) > 1]


def _segment_floor(instance: Instance, lo: int, hi: int, reference: int) -> tuple[np.ndarray, np.ndarray]:
    """The :class:`_Floor`'s points (reference work, least time; points × types, from zero) of
    the ops ``lo:hi``: the fractional knapsack over the other ops one by one and over the pieces
    of their chains (:func:`_chains`). A part meets a chain in a contiguous piece (the
    difference of two prefixes), which receives the link before it from an earlier stage unless
    it starts the chain, and sends the link after it to a later one unless it ends it, each at
    least on its type's best link. So each chain gives the segments of its lower convex hull of
    (reference work, time with those transfers) over its pieces, and the knapsack takes them
    and the other ops cheapest per unit of reference work first (T5's hung chains, MatMul,
    Reshape, Transpose: a Reshape alone costs an A100 1.04 times its H100 work, a piece without
    its MatMul at least 1.49 with its transfer, a whole chain 1.27). Chains of more than
    :data:`_CHAIN_OPS` ops go op by op."""
    times = instance.costs.finite_times()
    chains = [chain for chain in _chains(instance, lo, hi) if len(chain[0]) <= _CHAIN_OPS]
    chained = {v for ops, _ in chains for v in ops}
    alone = times[[v for v in range(lo, hi) if v not in chained and times[v, reference] > 0]]
    hulls = []  # per chain, per type: its hull's segments
    for ops, links in chains:
        work = np.concatenate([[0.0], np.cumsum(times[ops, reference])])
        total = np.vstack([np.zeros((1, times.shape[1])), np.cumsum(times[ops], axis=0)])
        # per link, then a zero row: a piece that ends the chain sends nothing, and one that
        # starts it (its link "before", index -1) receives nothing
        transfer = np.vstack([_transfer_times(instance, links), np.zeros((1, times.shape[1]))])
        first, last = np.triu_indices(len(ops))  # the piece ops[first..last]
        held = np.append(work[last + 1] - work[first], 0.0)  # and the empty piece
        cost = np.vstack([total[last + 1] - total[first] + transfer[first - 1] + transfer[last], total[:1]])
        hulls.append([_lower_hull(held, cost[:, t]) for t in range(times.shape[1])])
    curves = [
        _knapsack(_joined([(alone[:, reference], alone[:, t]), *(hull[t] for hull in hulls)]))
        for t in range(times.shape[1])
    ]
    points = max(len(work) for work, _ in curves)  # the types' curves padded with their last point
    padded = [[np.pad(side, (0, points - len(side)), mode="edge") for side in curve] for curve in curves]
    return np.stack([work for work, _ in padded], axis=1), np.stack([time_ for _, time_ in padded], axis=1)


@dataclass(frozen=True)
class _Tower:
    """One tower's grouped positions as the DP reads them (rows × types): ``full_start`` and
    ``compute_start`` the prefix maxima of ``start − recv`` and of ``start`` less the least
    received, ``full_end`` and ``compute_end`` the suffix minima of ``end + send`` and of ``end``
    plus the least sent; ``threshold`` the last row of the segment after each row's (beyond it
    a part pays its crossing tensors); ``group_of`` each ungrouped row's group (a boundary row
    is a group of its own); ``exact``, the parts inside a segment and the next priced exactly
    (the staircase's tower only: :meth:`costs`)."""

    full_start: np.ndarray
    compute_start: np.ndarray
    full_end: np.ndarray
    compute_end: np.ndarray
    threshold: np.ndarray
    group_of: np.ndarray
    need: np.ndarray | None = None
    price: np.ndarray | None = None
    exact: tuple[_Window, ...] = ()
    floor: _Floor | None = None
    plain_end: np.ndarray | None = None  # the suffix minima of end: compute alone, nothing sent

    @property
    def last(self) -> int:
        return len(self.threshold) - 1

    @functools.cached_property
    def _sorted_steps(self) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_steps` of every start (types × broadcasts × rows), sorted once: a step
        depends on the start's row alone, and sorting them per call made a probe with group
        changes 8% slower (CLIP on four types at k = 8: 6.4 s against 5.9 s)."""
        assert self.need is not None and self.price is not None
        need = self.need.transpose(1, 0, 2)
        order = np.argsort(need, axis=1, kind="stable")
        prices = np.broadcast_to(self.price.T[:, :, None], need.shape)
        needs = np.take_along_axis(need, order, axis=1)
        return needs, np.cumsum(np.take_along_axis(prices, order, axis=1), axis=1)

    def _steps(self, kind: int, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per part from ``start`` (elementwise; columns), the rows from which its end
        certainly holds a reader of each broadcast tensor (:func:`_with_broadcast_receipts`),
        in increasing order, and the receipts' prices summed up to each of them."""
        needs, paid = self._sorted_steps
        return needs[kind][:, start], paid[kind][:, start]

    def costs(self, kind: int) -> np.ndarray:
        """``cost[a, a']`` of a part on type ``kind`` from row ``a`` to row ``a'`` (0 on the
        diagonal, ``inf`` below it)."""
        rows = np.arange(self.last + 1)
        full = self.full_end[None, :, kind] - self.full_start[:, None, kind]
        compute = self.compute_end[None, :, kind] - self.compute_start[:, None, kind]
        cost = np.maximum(np.where(rows[None, :] > self.threshold[:, None], full, compute), 0.0)
        if self.floor is not None:
            cost = self.floor.lift(cost, kind, self.threshold)
        for window in self.exact:  # in order: each envelope reads the rows before it, lifted
            window.lift(cost, kind)
        if self.need is not None:
            charged = rows[None, None, :] >= self.need[:, kind, :, None]
            cost += (charged * self.price[:, kind, None, None]).sum(axis=0)
        cost[rows[None, :] < rows[:, None]] = np.inf
        cost[rows, rows] = 0.0
        return cost

    def reach(self, kind: int, start: np.ndarray, budget: np.ndarray) -> np.ndarray:
        """The furthest row a part on type ``kind`` from row ``start`` reaches within ``budget``
        (elementwise; at least ``start``, -1 where the budget is negative). With broadcast
        receipts the price steps up at each row of :meth:`_steps`: the part reaches the
        furthest row below the next step that the budget less the steps passed admits."""
        furthest = self._unpriced_reach(kind, start, budget)
        if self.need is not None:
            first_step = self._sorted_steps[0][kind][0, start]
            stepped = np.flatnonzero(furthest >= first_step)  # the others pass no step
            furthest[stepped] = self._stepped_reach(kind, start[stepped], budget[stepped], furthest[stepped])
        return np.where(budget >= 0, np.maximum(furthest, start), -1)

    def _stepped_reach(
        self, kind: int, start: np.ndarray, budget: np.ndarray, unpriced: np.ndarray
    ) -> np.ndarray:
        """:meth:`reach` of parts whose unpriced reach (``unpriced``) passes a step."""
        needs, paid = self._steps(kind, start)
        furthest = np.minimum(unpriced, needs[0] - 1)
        for step, (need, price) in enumerate(zip(needs, paid, strict=True)):
            later = self._unpriced_reach(kind, start, budget - price)
            if step + 1 < len(needs):
                later = np.minimum(later, needs[step + 1] - 1)
            furthest = np.maximum(furthest, np.where((budget >= price) & (later >= need), later, -1))
        return furthest

    def _unpriced_reach(self, kind: int, start: np.ndarray, budget: np.ndarray) -> np.ndarray:
        """The furthest row within ``budget`` as a full part (beyond the start's segment) if it
        gets that far, else inside the segment. ``full_end`` is nondecreasing, so a part gets
        beyond exactly when the row after its threshold fits; each search then runs over only
        the parts that need it (the searches were a third of a probe with group changes)."""
        threshold = self.threshold[start]
        limit = self.full_start[start, kind] + budget  # the largest full_end the budget admits
        after = np.minimum(threshold + 1, self.last)
        # "not above", not "at most": a NaN limit goes beyond, as searchsorted puts it past every row
        beyond = (threshold < self.last) & ~(self.full_end[after, kind] > limit)
        inside = np.flatnonzero(~beyond)
        furthest = np.empty(len(start), dtype=np.int64)
        searched = slice(None) if self.floor is not None else beyond  # the floor needs it inside too
        full = np.searchsorted(self.full_end[:, kind], limit[searched], "right") - 1
        furthest[searched] = full
        start, budget = start[inside], budget[inside]
        compute_start = self.compute_start[start, kind]
        compute = np.searchsorted(self.compute_end[:, kind], compute_start + budget, "right") - 1
        if self.floor is not None:
            # at least as far as a full part: one from an earlier segment that ends in this one
            # is not floored, and a later start must cost no more (the matrix's envelope)
            compute = np.minimum(compute, np.maximum(self.floor.reach(kind, start, budget), full[inside]))
        furthest[inside] = np.minimum(compute, threshold[inside])
        return furthest


@dataclass(frozen=True)
class Towers:
    """The two towers of a graph as instances of their own, and the precedences ``(u, w)``
    (op ids: ``u`` in one tower fed ``w`` in the other) that hanging chains cut; ``hung`` the
    ids of the hung chains' ops."""

    first: Instance
    second: Instance
    links: tuple[tuple[str, str], ...]
    hung: frozenset[str] = frozenset()


def _chain(predecessors: list[list[int]], first: int) -> np.ndarray:
    """``first`` and every later op all of whose op-made inputs are in the chain (ops are in
    topological order, so each op's inputs are decided before it)."""
    chain = np.zeros(len(predecessors), dtype=bool)
    chain[first] = True
    for v in range(first + 1, len(predecessors)):
        chain[v] = bool(predecessors[v]) and chain[predecessors[v]].all()
    return chain


def _hung(instance: Instance) -> tuple[Instance, tuple[tuple[str, str], ...], frozenset[str]]:
    """``instance`` with its far-fed chains hung on their producers (module docstring), the
    (producer, reader) op ids of the tensors' readers that were cut, and the chains' op ids."""
    graph = instance.graph
    predecessors = _adjacency(instance.graph)[0]
    reach = _SPAN * len(graph.ops)
    hung = np.zeros(len(graph.ops), dtype=bool)
    for v, inputs in enumerate(predecessors):
        if not hung[v] and len(inputs) == 1 and v - inputs[0] > reach:
            hung |= _chain(predecessors, v)
    ids = {op.id for op, chained in zip(graph.ops, hung, strict=True) if chained}
    cut = tuple(
        (t.producer, c) for t in graph.tensors if t.producer in ids for c in t.consumers if c not in ids
    )
    if not cut:
        return instance, (), frozenset()
    tensors = tuple(
        replace(t, consumers=tuple(c for c in t.consumers if c in ids)) if t.producer in ids else t
        for t in graph.tensors
    )
    return replace(instance, graph=replace(graph, tensors=tensors)), tuple(dict.fromkeys(cut)), frozenset(ids)


def _without_ops(instance: Instance, drop: np.ndarray) -> Instance:
    """``instance`` without the ops where ``drop`` holds, their tensors and colocation groups."""
    graph = instance.graph
    gone = {op.id for op, dropped in zip(graph.ops, drop, strict=True) if dropped}
    tensors = tuple(
        replace(t, consumers=tuple(c for c in t.consumers if c not in gone))
        for t in graph.tensors
        if t.producer not in gone
    )
    ops = tuple(op for op, dropped in zip(graph.ops, drop, strict=True) if not dropped)
    costs = instance.costs
    costs = replace(costs, times=costs.times[~drop], provenance=costs.provenance[~drop])
    return replace(
        instance,
        graph=replace(graph, ops=ops, tensors=tensors),
        costs=costs,
        options=replace(instance.options, colocate=()),
    )


def _labels(instance: Instance) -> np.ndarray:
    """Per op, its weakly connected component among the largest segment's ops other than the
    segment's first dominator (-1 for every other op)."""
    heads = dominators(instance)
    segment = np.cumsum(heads)
    inside = (segment == np.bincount(segment).argmax()) & ~heads
    label = np.full(len(heads), -1, dtype=np.int64)
    for number, members in enumerate(_components(_adjacency(instance.graph)[0], inside)):
        label[members] = number
    return label


def _without_floating(tower: Instance, allowance: np.ndarray) -> Instance:
    """``tower`` with its floating paths deleted (module docstring), at most ``allowance``
    seconds of work per type."""
    while _largest_segment(tower) > _NO_CHAIN * len(tower.graph.ops):
        edges = np.asarray(tower.graph.edges, dtype=np.int64).reshape(-1, 2)
        if not len(edges):
            break
        drop = _chain(_adjacency(tower.graph)[0], int(edges[np.argmax(edges[:, 1] - edges[:, 0]), 1]))
        work = tower.costs.finite_times()[drop].sum(axis=0)
        if (work > allowance).any():
            break
        candidate = _without_broadcasts(_without_ops(tower, drop))
        if _largest_segment(candidate) >= _largest_segment(tower):
            break
        tower, allowance = candidate, allowance - work
    return tower


def _with_near_readers(tower: Instance, original: Instance) -> Instance:
    """``tower`` with the readers the broadcast relaxation dropped given back where they lie
    within ``span`` ops (in the graph's order) of their tensor's first reader in the tower, for
    the widest ``span`` (doubled, then bisected) whose largest segment stays within
    :data:`_EXACT_OPS` or the tower's own. Still a relaxation (every reader is one of
    ``original``'s). The relaxation is for readers far apart (a mask every layer reads), but a
    residual stream is read three times in its block — by the norm's first op, its scaling and
    the next residual add — and with only the first reader left a cut after the norm's
    ``rsqrt`` sent one number per token: on T5 on A100/L4/T4 at k = 8 this lifts the bound
    0.6544 → 0.6901 ms."""
    index, ops = original.graph.index, {op.id for op in tower.graph.ops}
    readers = {
        t.name: sorted((c for c in set(t.consumers) if c in ops), key=index.__getitem__)
        for t in original.graph.tensors
    }

    def restored(span: int) -> Instance:
        tensors = []
        for tensor in tower.graph.tensors:
            kept = set(tensor.consumers)
            if tensor.producer is not None and kept:
                first = min(index[c] for c in kept)
                kept |= {c for c in readers.get(tensor.name, ()) if index[c] <= first + span}
            tensors.append(replace(tensor, consumers=tuple(sorted(kept, key=index.__getitem__))))
        return replace(tower, graph=replace(tower.graph, tensors=tuple(tensors)))

    limit = max(_EXACT_OPS, _largest_segment(tower))
    good, bad = 0, 1
    while bad < len(tower.graph.ops) and _largest_segment(restored(bad)) <= limit:
        good, bad = bad, 2 * bad
    while bad - good > 1:
        middle = (good + bad) // 2
        good, bad = (middle, bad) if _largest_segment(restored(middle)) <= limit else (good, middle)
    return restored(good) if good else tower


def towers(instance: Instance) -> Towers | None:
    """The two towers of ``instance`` (module docstring), or ``None`` when, after the broadcast
    relaxation, its dominator chain is useful, or its largest segment holds fewer than two
    components even with the far-fed chains hung, or it has more than :data:`_MAX_OPS` ops.
    Found once per instance within :func:`~partition.chain_bound.reuse` (the anytime search's
    interleaving and the bounds of a solve all ask)."""
    return reused(instance, "towers", lambda: _towers(instance))


def _towers(instance: Instance) -> Towers | None:
    ops = len(instance.graph.ops)
    if ops > _MAX_OPS or _largest_segment(instance) <= _NO_CHAIN * ops:
        return None
    hung = _without_broadcasts(instance)
    if _largest_segment(hung) <= _NO_CHAIN * ops:
        return None
    cut: tuple[tuple[str, str], ...] = ()
    chained: frozenset[str] = frozenset()
    component = _labels(hung)
    if len(np.unique(component[component >= 0])) < 2:  # joined by chains from far back (T5)
        hung, cut, chained = _hung(hung)
        component = _labels(hung)
    labels = np.unique(component[component >= 0])
    if len(labels) < 2:
        return None
    times = hung.costs.finite_times()
    reference = times.sum(axis=0).argmin()
    work = np.array([times[component == c, reference].sum() for c in labels])
    allowance = _FLOATING_SHARE * times.sum(axis=0)
    segment = np.cumsum(dominators(hung))
    tail = segment > np.bincount(segment).argmax()  # the join after the towers (CLIP's logits)
    found = []
    for number, label in enumerate(labels[np.argsort(-work, kind="stable")[:2]]):
        kept = (component == label) | (tail if number == 1 else False)
        tower = _with_near_readers(_without_floating(_without_ops(hung, ~kept), allowance), instance)
        deleted = times[kept].sum(axis=0) - tower.costs.finite_times().sum(axis=0)
        allowance = allowance - deleted
        found.append(tower)
    first, second = ({op.id for op in tower.graph.ops} for tower in found)
    links = tuple((u, w) for u, w in cut if (u in first and w in second) or (u in second and w in first))
    return Towers(found[0], found[1], links, chained)


def _grouped(
    positions: _Positions, reference: int, resolution: int, receipts: tuple[np.ndarray, np.ndarray] | None
) -> tuple[_Positions, np.ndarray, np.ndarray]:
    """``positions`` with consecutive rows of one segment merged while their compute on
    ``reference`` spans at most ``1/resolution`` of the total (module docstring), and each
    old row's group; segment boundaries (rows whose threshold is themselves) and the last
    row stay alone. ``receipts`` (see :func:`_receipts`) are added to the ends and starts
    after the groups are chosen, so that a tower charged them is grouped as it is without."""
    end, threshold = positions.end, positions.threshold
    rows = len(end)
    width = end[-1, reference] / resolution
    firsts = [0]
    for row in range(1, rows):
        first = firsts[-1]
        interior = threshold[row] != row and threshold[first] != first and row != rows - 1
        narrow = end[row, reference] - end[first, reference] <= width
        if interior and threshold[row] == threshold[first] and narrow:
            continue
        firsts.append(row)
    starts = np.array(firsts)
    group_of = np.searchsorted(starts, np.arange(rows), "right") - 1

    def reduced(values: np.ndarray, how) -> np.ndarray:
        return how.reduceat(values, starts, axis=0)

    ends, starts_ = receipts if receipts is not None else (0.0, 0.0)
    grouped = _Positions(
        reduced(end + ends, np.minimum),
        reduced(positions.start + starts_, np.maximum),
        reduced(positions.send, np.minimum),
        reduced(positions.recv, np.minimum),
        group_of[threshold[starts]],
    )
    return grouped, group_of, starts


@dataclass(frozen=True)
class _Measured:
    """One tower's positions on the reference type, before grouping; ``firsts``, each
    segment's first row (its boundary, the empty ideal) and then the last row; the
    positions' least exchanges are what a part ending/starting at each row certainly sends and
    receives; ``cuts``, per segment relaxed to cells, the work on the reference type at which
    each cell starts (and the segment's total)."""

    instance: Instance
    positions: _Positions
    firsts: np.ndarray
    segment: np.ndarray
    reference: int
    cuts: dict[int, np.ndarray]
    bounds: np.ndarray  # each segment's first op, then the op count
    ideals: dict[int, list[int] | None]  # each segment's ideals (bitsets), None for cells

    def cut(self, row: int) -> np.ndarray:
        """The ops of a cut at ``row`` (a mask): every segment before the row's and, of its own,
        the row's ideal, or for a cell the prefix of the segment's ops whose work on the
        reference type is nearest the cell's middle (a downset: a segment's ops are contiguous
        in the order and read only earlier ops), as :mod:`.solvers.chain_round` rounds them."""
        n = len(self.instance.graph.ops)
        b = int(np.searchsorted(self.firsts, row, "right")) - 1
        if b >= len(self.bounds) - 1:
            return np.ones(n, dtype=bool)
        lo, hi = int(self.bounds[b]), int(self.bounds[b + 1])
        held = np.arange(n) < lo
        k = row - int(self.firsts[b])
        ideals = self.ideals.get(b)
        if ideals is not None:
            held[lo:hi] = _members([ideals[k]], hi - lo)[0]
        else:
            cuts = self.cuts[b]
            middle = (cuts[k] + cuts[min(k + 1, len(cuts) - 1)]) / 2
            work = np.cumsum(self.instance.costs.finite_times()[lo:hi, self.reference])
            held[lo : lo + int(np.searchsorted(work, middle))] = True
        return held

    def rows(self, op: str) -> tuple[int, int]:
        """The boundary rows before and after ``op``'s segment: a cut at or before the first
        lacks ``op``, one at or beyond the second holds it."""
        segment = int(self.segment[self.instance.graph.index[op]])
        return int(self.firsts[segment]), int(self.firsts[segment + 1])

    def lacking(self, ops: set[str]) -> int:
        """The last row at or before which a cut lacks one of ``ops``: the boundary before the
        last of their segments, or, when that segment is relaxed to cells, the last cell whose
        work stays below what the ops and their ancestors in the segment need (a cut in cell
        ``g`` holds work below ``cuts[g + 1]``)."""
        index = self.instance.graph.index
        segment = max(int(self.segment[index[op]]) for op in ops)
        first = int(self.firsts[segment])
        cuts = self.cuts.get(segment)
        if cuts is None:
            return first
        predecessors = _adjacency(self.instance.graph)[0]
        needed = {index[op] for op in ops if self.segment[index[op]] == segment}
        stack = list(needed)
        while stack:
            for u in predecessors[stack.pop()]:
                if u not in needed and self.segment[u] == segment:
                    needed.add(u)
                    stack.append(u)
        work = self.instance.costs.finite_times()[sorted(needed), self.reference].sum()
        return first + int(np.searchsorted(cuts[1:], work * (1 - 1e-9), "right"))


def _measured(instance: Instance, reference: int) -> _Measured:
    builder = _Builder(instance)
    positions, _ = _positions(builder, reference)
    firsts = np.cumsum([0] + [len(row[0]) for row in builder.rows])
    cuts = {}
    for b in range(len(builder.bounds) - 1):
        if positions.cell is not None and positions.cell[firsts[b] + 1 : firsts[b + 1]].any():
            lo, hi = int(builder.bounds[b]), int(builder.bounds[b + 1])
            total = builder.times[lo:hi, reference].sum()
            cuts[b] = np.linspace(0.0, total, firsts[b + 1] - firsts[b])
    return _Measured(
        instance, positions, firsts, builder.segment, reference, cuts, builder.bounds, dict(builder.ideals)
    )


def _precedences(x: _Measured, y: _Measured, links: tuple[tuple[str, str], ...]) -> list[tuple[int, int]]:
    """Per cut precedence ``(u, w)`` with ``u`` in ``x`` and ``w`` in ``y``: the row of ``x`` at or
    before which a cut lacks ``u``, and the row of ``y`` from which it holds ``w``. A cut of ``y``
    at or beyond a row holds every ``w`` whose row that is or comes before, so the ``x`` part
    must hold all their ``u`` (:meth:`_Measured.lacking`: T5's decoder at its third layer needs
    the key and value projections of three layers, not of one)."""
    present = [(u, w) for u, w in links if u in x.instance.graph.index and w in y.instance.graph.index]
    holding = sorted({y.rows(w)[1] for _, w in present})
    return [(x.lacking({u for u, w in present if y.rows(w)[1] <= row}), row) for row in holding]


def _receipts(y: _Measured, tensors: list[tuple[str, float, list[str]]]) -> tuple[np.ndarray, np.ndarray]:
    """``(E, S)`` (rows × types) that charge each part of ``y`` the hung tensors (maker, bytes,
    readers) it certainly reads, on each type's best link, when added to its ends and starts: a
    part from row ``b`` to ``b'`` holds a reader of a tensor when ``b`` lies at or before the boundary
    before every reader's segment and ``b'`` at or beyond the boundary after some reader's.
    ``E(b')`` is the time of the tensors some reader of which lies in a segment ending at or
    before ``b'``, ``S(b)`` that of the tensors some reader of which lies in a segment starting
    before ``b``: ``E(b') − S(b)`` counts every tensor certainly read once and no other
    positively. Readers outside ``y`` (deleted with a small component) are left out."""
    rows = len(y.positions.end)
    times = _transfer_times(y.instance, [size for _, size, _ in tensors])
    ends, starts = (np.zeros((rows + 1, times.shape[1])) for _ in range(2))
    for (_, _, everyone), time_ in zip(tensors, times, strict=True):
        readers = [w for w in everyone if w in y.instance.graph.index]
        if not readers:
            continue
        ends[min(y.rows(w)[1] for w in readers)] += time_
        starts[min(y.rows(w)[0] for w in readers) + 1] += time_
    return np.cumsum(ends[:-1], axis=0), np.cumsum(starts[:-1], axis=0)


def _transfer_times(instance: Instance, sizes: Sequence[float]) -> np.ndarray:
    """Per tensor of ``sizes`` (bytes) and per device type, one transfer on the type's best
    link; zeros when communication overlaps compute (the bound drops it)."""
    latency, bandwidth = _links(instance)
    times = latency[None, :] + np.asarray(sizes, dtype=float).reshape(-1, 1) / bandwidth[None, :]
    return np.zeros_like(times) if instance.options.overlap else times


def _tower(
    measured: _Measured,
    reference: int,
    resolution: int,
    receipts: tuple[np.ndarray, np.ndarray] | None = None,
    broadcasts: tuple[list[_Broadcast], float] | None = None,
) -> _Tower:
    """``measured`` grouped at ``resolution`` as the DP reads it, charged the hung tensors'
    ``receipts`` (:func:`_receipts`) and the ``broadcasts``' (with the bisection's upper end:
    :func:`_with_broadcast_receipts`)."""
    grouped, group_of, starts = _grouped(measured.positions, reference, resolution, receipts)
    relaxation = _Relaxation(measured.instance, grouped)
    sent, received = (
        np.minimum.reduceat(least, starts, axis=0)
        for least in (measured.positions.least_sent, measured.positions.least_received)
    )
    tower = _Tower(
        np.maximum.accumulate(relaxation.full_start, axis=0),
        np.maximum.accumulate(grouped.start - received, axis=0),
        relaxation.full_end,
        np.minimum.accumulate((grouped.end + sent)[::-1], axis=0)[::-1],
        grouped.threshold,
        group_of,
    )
    tower = replace(
        tower,
        floor=_floor(measured, starts).lifting(tower),
        plain_end=np.minimum.accumulate(grouped.end[::-1], axis=0)[::-1],
    )
    if broadcasts is None or not broadcasts[0]:
        return tower
    return _with_broadcast_receipts(tower, measured, *broadcasts)


def _exact_parts(measured: _Measured) -> list[tuple[int, np.ndarray]]:
    """Per exact segment ``b`` (its ideals enumerated) and the next: the first row of ``b`` and
    ``price[i, j]`` (types last), the least :class:`_PartPrices` price of a part from row
    ``firsts[b] + i`` or an earlier row of ``b`` to row ``firsts[b] + j`` (in ``b``, then in
    ``b + 1``). Such a part is not full, so the positions charge it its compute and least
    exchanges only, while one inside an attention block reads and sends a tensor per path it
    cuts (CLIP's image parts that fill the bound's interleaved stages). Windows whose pairs
    exceed :data:`_EXACT_PAIRS` end at their segment, or are left out."""
    prices = _PartPrices(measured.instance)
    bounds, firsts = measured.bounds, measured.firsts
    found = []
    for b in range(len(bounds) - 1):
        ideals = measured.ideals.get(b)
        if ideals is None:
            continue
        lo, middle = int(bounds[b]), int(bounds[b + 1])
        starts = _members(ideals, middle - lo)
        ends = [starts]
        following = measured.ideals.get(b + 1) if b + 2 < len(bounds) else None
        if following is not None and len(ideals) * (len(ideals) + len(following)) <= _EXACT_PAIRS:
            whole = np.ones((len(following), middle - lo), dtype=bool)  # segment b, then an ideal of b + 1
            ends.append(np.hstack([whole, _members(following, int(bounds[b + 2]) - middle)]))
        elif len(ideals) ** 2 > _EXACT_PAIRS:
            continue
        width = ends[-1].shape[1]
        start = np.pad(starts, ((0, 0), (0, width - starts.shape[1])))
        end = np.vstack([np.pad(e, ((0, 0), (0, width - e.shape[1]))) for e in ends])
        found.append((int(firsts[b]), np.minimum.accumulate(prices.of(start, end, lo), axis=0)))
    return found


class _PartPrices:
    """What parts ``J \\ I`` of a tower take on each type's best link: the compute of their
    ops, every tensor of the tower they read that they do not make, and every one they make
    that an op outside ``J`` reads, once each (at least one destination)."""

    def __init__(self, instance: Instance) -> None:
        graph = instance.graph
        index = graph.index
        self.times = instance.costs.finite_times()
        self.latency, self.bandwidth = _links(instance)
        self.silent = instance.options.overlap  # communication overlaps compute: the bound drops it
        tensors = [t for t in graph.tensors if t.producer is not None and t.consumers]
        self.producer = np.array([index[t.producer] for t in tensors], dtype=np.int64)
        self.size = np.array([t.bytes for t in tensors], dtype=float)
        self.readers = [np.unique([index[c] for c in t.consumers]) for t in tensors]
        self.pair_tensor = np.repeat(np.arange(len(tensors)), [len(r) for r in self.readers])
        self.pair_reader = np.concatenate([np.zeros(0, dtype=np.int64), *self.readers])

    def of(self, start: np.ndarray, end: np.ndarray, lo: int) -> np.ndarray:
        """``price[i, j, type]`` of the part ``end[j] \\ start[i]`` (ideals as masks over the
        ops ``lo``, ``lo + 1`` … of the tower, everything before ``lo`` held by both); ``inf``
        where ``start[i]`` is not in ``end[j]``."""
        hi = lo + start.shape[1]
        work = self.times[lo:hi]
        price = (end.astype(float) @ work)[None, :, :] - (start.astype(float) @ work)[:, None, :]
        if not self.silent:
            count, volume = self._exchanges(start, end, lo, hi)
            price = price + count[:, :, None] * self.latency + volume[:, :, None] / self.bandwidth
        price[start.astype(np.int64) @ (~end).T.astype(np.int64) > 0] = np.inf
        return price

    def _exchanges(
        self, start: np.ndarray, end: np.ndarray, lo: int, hi: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The count and bytes of the tensors each part receives or sends."""
        producer = self.producer
        inside = np.flatnonzero((producer >= lo) & (producer < hi))
        pairs = (self.pair_reader >= lo) & (self.pair_reader < hi)
        entering = np.unique(self.pair_tensor[pairs & (producer[self.pair_tensor] < lo)])
        count = np.zeros((len(start), len(end)))
        volume = np.zeros_like(count)
        lacking, holding = (~start).astype(np.int64), end.astype(np.int64)
        for k in np.concatenate([inside, entering]).astype(np.int64):
            readers = self.readers[k]
            local = readers[(readers >= lo) & (readers < hi)] - lo
            read = lacking[:, local] @ holding[:, local].T > 0  # a reader in the part
            made = int(producer[k]) - lo
            if made < 0:
                moved = read
            else:  # made in the part and read beyond its end, or made before it and read in it
                beyond = bool((readers >= hi).any()) | (holding[:, local] == 0).any(axis=1)
                ours = (lacking[:, made][:, None] == 1) & (holding[:, made][None, :] == 1)
                moved = (ours & beyond[None, :]) | (read & start[:, made][:, None])
            count += moved
            volume += moved * self.size[k]
        return count, volume


def _windows(parts: list[tuple[int, np.ndarray]], group_of: np.ndarray) -> tuple[_Window, ...]:
    """:func:`_exact_parts` grouped as ``group_of`` groups the rows (a start group stands for
    its last row, an end group for its cheapest)."""
    windows = []
    for first, price in parts:
        starts = group_of[first + np.arange(price.shape[0])]
        ends = group_of[first + np.arange(price.shape[1])]
        last = np.flatnonzero(np.append(np.diff(starts) != 0, True))
        opening = np.flatnonzero(np.insert(np.diff(ends) != 0, 0, True))
        time = np.minimum.reduceat(price[last], opening, axis=1)
        after = int(ends[-1]) + 1
        beyond = after if after <= group_of[-1] else None
        windows.append(_Window(starts[last], ends[opening], int(group_of[first]) - 1, time, beyond))
    return tuple(windows)


@dataclass(frozen=True)
class _Broadcast:
    """A tensor made in a tower whose readers there the broadcast relaxation dropped, all but
    ``kept`` (op ids): its size and the ``dropped`` readers."""

    size: float
    producer: str
    kept: tuple[str, ...]
    dropped: tuple[str, ...]


def _broadcasts(instance: Instance, tower: Instance) -> list[_Broadcast]:
    """The tensors of ``tower`` made there that ``instance`` has readers of in ``tower`` which
    ``tower`` lacks (an attention mask every layer reads: CLIP's text tower)."""
    index, found = tower.graph.index, []
    original = {t.name: t for t in instance.graph.tensors}
    for tensor in tower.graph.tensors:
        if tensor.producer is None or not tensor.consumers:
            continue
        dropped = sorted({c for c in original[tensor.name].consumers if c in index} - set(tensor.consumers))
        if dropped:
            found.append(_Broadcast(tensor.bytes, tensor.producer, tuple(tensor.consumers), tuple(dropped)))
    return found


def _with_broadcast_receipts(
    tower: _Tower, measured: _Measured, broadcasts: list[_Broadcast], upper: float
) -> _Tower:
    """``tower`` charging a part that certainly holds a dropped reader of a broadcast tensor
    one receipt of it, on each type's best link.

    A part whose start's cut lies at or beyond the boundary after every kept reader's segment
    (so its cut holds the tensor's maker, an ancestor of theirs) and before a dropped reader's
    segment, and whose end's cut lies at or beyond the boundary after it, holds that reader
    and not the maker: its stage receives the tensor. The relaxed tower charges it nothing for
    the tensor: its kept readers are all before the part, so the tensor crosses neither of the
    part's cuts, and the dropped readers read nothing of it there. One receipt, however many
    readers the part holds. A start before the kept readers' boundary is charged too, which
    keeps a later start never costing more; that is harmless only when such a part, already
    priced without the receipt, costs at least ``upper`` (every probed bottleneck is below),
    so a reader is used on a type only where it does. On CLIP the text tower's causal mask
    (23.7 KB, eleven readers dropped) goes to every stage with text layers."""
    if measured.instance.options.overlap:  # communication overlaps compute: the bound drops it
        return tower
    rows = tower.last + 1
    price = _transfer_times(measured.instance, [broadcast.size for broadcast in broadcasts])
    group_of = tower.group_of
    need = np.full((*price.shape, rows), rows, dtype=np.int64)
    for kind in range(price.shape[1]):  # one cost matrix at a time (rows² each)
        cost = tower.costs(kind)
        for number, broadcast in enumerate(broadcasts):
            kept_from = max(measured.rows(w)[1] for w in broadcast.kept)
            earliest = int(group_of[kept_from])  # a boundary row is a group of its own
            for reader in broadcast.dropped:
                if measured.rows(reader)[0] < kept_from:
                    continue
                before, after = (int(group_of[row]) for row in measured.rows(reader))
                if earliest > 0 and cost[:earliest, after:].min() < upper:
                    continue
                np.minimum(need[number, kind, : before + 1], after, out=need[number, kind, : before + 1])
    return replace(tower, need=need, price=price)


@dataclass(frozen=True)
class _Sender:
    """What the stage holding a broadcast tensor's maker sends (:meth:`_Product.feasible`): the
    maker lies in tower ``side`` of the product; a cut at or before group ``lack_to`` may lack
    it, one at or beyond ``hold_from`` may hold it; ``spans[i, j]``, the least work (over the
    types) of a stage holding the ``i``-th and ``j``-th of its readers that descend from every
    kept reader (``i < j``), and ``price`` and ``remote``, one send of the tensor per type on
    its best link and on the inter-host one."""

    side: int
    lack_to: int
    hold_from: int
    spans: np.ndarray
    price: np.ndarray
    remote: np.ndarray

    def sends(self, bottleneck: float) -> int:
        """The least number of sends the maker's stage pays at ``bottleneck`` beyond the one the
        relaxed tower may charge: readers taken in order while no stage within ``bottleneck``
        can hold one with any taken before are each in a stage of their own, so the maker's
        stage, holding at most one, sends to the others."""
        taken: list[int] = []
        for reader in range(len(self.spans)):
            if all(self.spans[before, reader] > bottleneck for before in taken):
                taken.append(reader)
        return max(len(taken) - 1, 0)


def _sender(measured: _Measured, tower: _Tower, broadcasts: list[_Broadcast], side: int) -> _Sender | None:
    """The :class:`_Sender` of ``tower``'s largest broadcast tensor (``None``: none, or its
    sends are not counted per destination).

    Per destination, the stage holding the maker sends the tensor to every other stage holding
    a reader. The relaxed tower charges it at most once (where the cut at the stage's end lacks
    a kept reader; then the stage holds none of the readers that descend from the kept ones),
    so the extra sends counted are one fewer than the stages those readers need. On CLIP's text
    tower, six at most 0.33 ms apart on 16 V100s: five sends of the causal mask, 16 µs."""
    instance = measured.instance
    options = instance.options
    if not broadcasts or options.overlap or options.comm_mode is not CommMode.PER_DESTINATION:
        return None
    broadcast = max(broadcasts, key=lambda b: b.size)
    graph = instance.graph
    index = graph.index
    predecessors, successors = _adjacency(graph)
    readers = sorted({*broadcast.kept, *broadcast.dropped}, key=index.__getitem__)
    above = {r: _closure(predecessors, index[r]) for r in readers}
    kept = [index[r] for r in broadcast.kept]
    later = [r for r in readers if above[r][kept].all()]
    below = {r: _closure(successors, index[r]) for r in later}
    times = instance.costs.finite_times()
    spans = np.zeros((len(later), len(later)))
    for i, first in enumerate(later):
        for j in range(i + 1, len(later)):
            held = below[first] & above[later[j]]
            held[[index[first], index[later[j]]]] = True
            spans[i, j] = times[held].sum(axis=0).min()
    before, after = measured.rows(broadcast.producer)
    group_of = tower.group_of
    price = _transfer_times(instance, [broadcast.size])[0]
    remote = np.maximum(_transfer_times(_across_hosts(instance), [broadcast.size])[0], price)
    return _Sender(side, int(group_of[after]) - 1, int(group_of[before]) + 1, spans, price, remote)


@dataclass(frozen=True)
class _Hung:
    """What the staircase tower's hung chains cost the stages of the other (module docstring):
    ``tower``, the other tower charged the hung tensors its parts read (:func:`_receipts`);
    ``boundary``, the staircase's group of the boundary before the first segment holding an op
    that makes a hung tensor; per staircase group the least (``lower``) and most (``upper``)
    work on the reference type its cuts hold, and ``floor``, that work at the boundary. A part
    from group ``a`` to ``a'`` holds at most ``upper[a'] − max(lower[a], floor)`` of the work
    past the boundary, and its start's cut at most ``upper[a] − floor``. ``makers``: what the
    makers of the hung tensors need (:class:`_Makers`); per type, ``largest`` the most time of
    the hung tensors one maker makes, ``total`` of them all, and ``passed`` what
    :meth:`spared` adds once the start's cut may hold a maker's own ancestor. ``exit``, per
    type, the least transfer of a hung tensor or an inner one; per maker, ``lacking`` and
    ``holding``, the other tower's groups up to which a cut may lack all its readers and from
    which one may hold one (:func:`_reader_spans`, :meth:`readable`)."""

    tower: _Tower
    boundary: int
    lower: np.ndarray
    upper: np.ndarray
    floor: float
    makers: _Makers
    largest: np.ndarray
    total: np.ndarray
    passed: np.ndarray
    exit: np.ndarray
    lacking: np.ndarray
    holding: np.ndarray

    def readable(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """How many makers have a reader that a part of the other tower from group ``starts``
        to ``ends`` (elementwise) may hold: its start lies at or before a group from which cuts
        hold one, and its end at or past one up to which they lack it. Looked up by where the
        start and end fall among the makers' groups (:attr:`_readers`)."""
        holding, lacking, counts = self._readers
        return counts[np.searchsorted(holding, starts), np.searchsorted(lacking, ends, "right")]

    @functools.cached_property
    def _readers(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The distinct ``holding`` and ``lacking`` groups, sorted, and ``counts[i, j]``: how many
        makers have ``holding`` at or after the ``i``-th and ``lacking`` at or before the
        ``j − 1``-th (every start before the ``i``-th, every end from the ``j − 1``-th on)."""
        holding, lacking = np.unique(self.holding), np.unique(self.lacking)
        after = self.holding[None, :] >= np.append(holding, np.inf)[:, None]
        before = self.lacking[None, :] <= np.insert(lacking.astype(float), 0, -np.inf)[:, None]
        return holding, lacking, (after[:, None, :] & before[None, :, :]).sum(axis=2)

    def touched(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """How many makers a staircase part from group ``starts`` to ``ends`` (elementwise)
        certainly holds an own ancestor of: the work past the boundary it certainly holds, less
        what no maker owns, over the most one maker owns. Each costs the stage a send: the
        maker's hung tensor, unless the stage holds its readers, or, when the part lacks the
        maker, the tensor along which the own ancestors' path to it leaves the part (an inner
        one, distinct per maker). The least and most work are enveloped first, so that a later
        start touches no more. Makers that own no work give no count."""
        if self.makers.widest <= 0:
            return np.zeros(len(starts), dtype=np.int64)
        lower = np.minimum.accumulate(self.lower[::-1])[::-1]
        upper = np.maximum.accumulate(self.upper)
        held = lower[ends] - np.maximum(upper[starts], self.floor) - self.makers.shared
        return np.ceil(np.maximum(held, 0.0) / self.makers.widest - 1e-9).astype(np.int64)

    def spared(self, kind: int, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """The most time of the hung tensors' receipts that a stage of type ``kind`` whose
        staircase part goes from group ``starts`` to ``ends`` spares by making them (*Hung
        tensors*). Holding a maker, the part holds the maker and every ancestor of it past the
        boundary that its start's cut lacks: at least the maker alone, and its whole work there
        less what the cut may hold; below both it holds no maker and spares nothing. Else it
        spares at most a maker's hung tensors (the costliest maker's) per maker whose own
        ancestors its work can hold; the others it makes hold an own ancestor in the start's
        cut, so it receives an inner tensor of theirs instead (only when the cut may hold an
        own root: ``passed``, which also gives back the inner tensors the staircase's least
        receipts may charge)."""
        makers = self.makers
        held = self.upper[ends] - np.maximum(self.lower[starts], self.floor)
        before = np.maximum(self.upper[starts] - self.floor, 0.0)
        none = held < np.maximum(makers.alone, makers.whole - before)
        if makers.own <= 0:  # chains without work: a part may make them all
            return np.where(none, 0.0, np.inf)
        made = np.floor(np.maximum(held, 0.0) / makers.own)
        spared = made * self.largest[kind] + np.where(before >= makers.root, self.passed[kind], 0.0)
        return np.where(none, 0.0, spared)


def _across_hosts(instance: Instance) -> Instance:
    """``instance`` with every link the inter-host one: its towers' positions then price each
    crossing tensor as a stage that only talks to other hosts pays it."""
    cluster = instance.cluster
    hosts = tuple(replace(h, intra_link=cluster.inter_host_link) for h in cluster.hosts)
    return replace(instance, cluster=replace(cluster, hosts=hosts))


def _mixed(local: _Tower, remote: _Tower, sides: int) -> _Tower:
    """``local`` with the starts (what a part receives; ``sides & 2``) and/or the ends (what it
    sends; ``sides & 1``) of ``remote``, the same tower priced across hosts (same rows, groups).
    Both must carry the same hung tensors' receipts, if any: :func:`_receipts` charges a part
    ``E(b') − S(b)`` through its end and its start, which two price tables do not telescope (a
    hung tower's ends taken across hosts so lifted T5 on H100/A100 at k = 8 to 0.42929 ms, above
    a placement of 0.42717)."""
    starts = remote if sides & 2 else local
    ends = remote if sides & 1 else local
    return replace(
        local,
        full_start=starts.full_start,
        compute_start=starts.compute_start,
        full_end=ends.full_end,
        compute_end=ends.compute_end,
    )


class _Product:
    """Feasibility of a bottleneck over the product of two towers' positions (module docstring);
    ``first`` indexes the staircase, ``second`` is searched. ``ceilings`` are the cut
    precedences (row of ``first`` lacking, row of ``second`` holding) from ``first`` to
    ``second``, ``floors`` those (row of ``second`` lacking, row of ``first`` holding) back;
    ``hung``, what the hung chains on ``first`` cost ``second`` (``None``: none); ``remote``,
    the two towers priced across hosts, for the stages that open or fill a group of hosts
    (``None``, or a single group: none)."""

    def __init__(
        self,
        instance: Instance,
        first: _Tower,
        second: _Tower,
        ceilings: list,
        floors: list,
        hung: _Hung | None = None,
        remote: tuple[_Tower, _Tower] | None = None,
        sender: _Sender | None = None,
        order: tuple[int, int] = (0, 1),
    ) -> None:
        self.first, self.second, self.hung, self.sender = first, second, hung, sender
        self.order = order  # the towers (of :class:`Towers`) that ``first`` and ``second`` are
        stages = min(instance.options.stages, len(instance.cluster.devices))
        counts = tuple(min(c, stages) for c in instance.cluster.type_counts)
        self.vectors, self.previous_of, self.layers = _count_layers(counts, stages)
        # 2 · receives from other hosts + sends to them (chain_bound._host_sides) -> the towers
        self.towers = {0: (first, second)}
        self.sides = None
        self.type_group: np.ndarray | None = None  # with the towers priced across hosts ...
        self.room: np.ndarray | None = None  # ... count vectors × groups: the devices left there
        hosts = _host_groups(instance)
        if remote is not None and hosts is not None:
            for sides in (1, 2, 3):
                self.towers[sides] = (_mixed(first, remote[0], sides), _mixed(second, remote[1], sides))
            self.sides = _host_sides(self.vectors, self.previous_of, *hosts)
            self.type_group, groups = hosts[0], len(hosts[1])
            self.room = hosts[1][None, :] - _in_groups(self.vectors, hosts[0], groups)
        self.costs = {
            (kind, sides): towers[0].costs(kind)
            for kind in range(len(counts))
            for sides, towers in self.towers.items()
        }
        # a at or before u's lacking row keeps b below w's holding row; a at or beyond w's
        # holding row needs b beyond u's lacking row
        self.ceiling = np.full(first.last + 1, second.last, dtype=np.int64)
        self.floor = np.full(first.last + 1, -1, dtype=np.int64)
        for lacking, holding in ceilings:  # the last group that lies at or before ``lacking``
            top = first.group_of[lacking + 1] - 1
            np.minimum(self.ceiling[: top + 1], second.group_of[holding] - 1, out=self.ceiling[: top + 1])
        for lacking, holding in floors:
            start = first.group_of[holding]
            np.maximum(self.floor[start:], second.group_of[lacking], out=self.floor[start:])

    def _excluded(self, points: np.ndarray) -> np.ndarray:
        """``points`` without the pairs the cut precedences exclude: one in a row that must be
        above it moves to the last row that need not be (the floor is nondecreasing, so it
        still covers every pair below it that is allowed), then each is lowered to its row's
        ceiling (nondecreasing too)."""
        low = (points >= 0) & (points <= self.floor)
        if low.any():
            values = points[low]
            rows = np.searchsorted(self.floor, values, "left") - 1
            points = np.where(low, -1, points)
            np.maximum.at(points, rows[rows >= 0], values[rows >= 0])
        return np.minimum(points, self.ceiling)

    def _starts(self, points: np.ndarray) -> np.ndarray:
        """The points stages are extended from: those no other point dominates (a later start
        never costs more) — with hung chains, among the points up to the hung boundary, then
        every point beyond it: there a later start may hold less of the hung segment and pay
        the hung tensors, so each point stands only for itself (its own row is exact, as the
        DP keeps a point per row and the ceilings only lower it)."""
        top = len(points) if self.hung is None else self.hung.boundary + 1
        head = points[:top]
        later = np.append(np.maximum.accumulate(head[::-1])[::-1][1:], -1)
        corners = np.flatnonzero((head >= 0) & (head > later))
        if self.hung is None:
            return corners
        return np.concatenate([corners, top + np.flatnonzero(points[top:] >= 0)])

    def _extend(
        self, kind: int, points: np.ndarray, bottleneck: float, best: np.ndarray, sides: int = 0
    ) -> None:
        """Raise ``best`` to what a stage of type ``kind`` reaches from ``points`` (``sides``:
        ``2 · opens + fills`` of its group of hosts, so it receives and/or sends across hosts)."""
        starts = self._starts(points)
        if not len(starts):
            return
        budget = bottleneck - self.costs[kind, sides][starts]
        # only the parts of the first tower that fit (a fifth of the pairs on CLIP) are searched
        fits, ends = np.nonzero(budget >= 0)
        origin, left = points[starts][fits], budget[fits, ends]
        found = self._second_reach(kind, sides, starts[fits], ends, origin, left, bottleneck)
        reached = np.full(budget.shape, -1, dtype=np.int64)
        reached[fits, ends] = found
        np.maximum(best, reached.max(axis=0), out=best)

    def _second_reach(
        self,
        kind: int,
        priced: int,
        starts: np.ndarray,
        ends: np.ndarray,
        origin: np.ndarray,
        left: np.ndarray,
        bottleneck: float | None = None,
    ) -> np.ndarray:
        """The furthest row of the second tower that a stage of type ``kind`` reaches from row
        ``origin`` within ``left`` seconds, its first tower's part going from row ``starts`` to
        row ``ends`` (elementwise), the second part priced as ``priced`` says (``2 · across on
        its start + across on its end``). The second part's price with the hung tensors'
        receipts (local links), less what the first part may spare by making some
        (:meth:`_Hung.spared`), is a second valid price, and with ``bottleneck`` (the stage's
        whole budget) the first part's sends of hung tensors a third (:meth:`_exits_reach`): the
        largest is used."""
        found = self.towers[priced][1].reach(kind, origin, left)
        if self.hung is not None:
            spared = self.hung.spared(kind, starts, ends)
            charged = spared < self.hung.total[kind]
            hung = self.hung.tower.reach(kind, origin[charged], left[charged] + spared[charged])
            found[charged] = np.minimum(found[charged], hung)
            if bottleneck is not None:
                found = np.minimum(found, self._exits_reach(kind, priced, bottleneck, starts, ends, origin))
        return found

    def _exits_reach(
        self,
        kind: int,
        priced: int,
        bottleneck: float,
        starts: np.ndarray,
        ends: np.ndarray,
        origin: np.ndarray,
    ) -> np.ndarray:
        """The furthest row of the second tower a stage reaches (as :meth:`_second_reach`) when
        its staircase part is priced its compute, its receipts and a send per maker it touches
        (:meth:`_Hung.touched`) whose readers its second part cannot hold: a valid price, as
        those sends are of no tower's crossing tensors. The further the second part reaches,
        the more readers it may hold (:meth:`_Hung.readable`) and the fewer sends; so per count
        ``held`` of them, the reach within the budget less ``touched − held`` sends, where the
        part there may hold that many, and the furthest of those: the one of the largest count
        that holds (a larger budget reaches no less), so the counts are tried from the top, a
        count that fails giving way to the readers its reach holds (T5 over four types at k =
        8: 1.6 tries a part instead of 3.2). The largest integer where a part touches no maker."""
        hung, first = self.hung, self.first
        assert hung is not None and first.plain_end is not None
        touched = hung.touched(starts, ends)
        reach = np.full(len(starts), np.iinfo(np.int64).max)
        some = np.flatnonzero(touched > 0)
        if not len(some):
            return reach
        starts, ends, origin, touched = starts[some], ends[some], origin[some], touched[some]
        full = ends > first.threshold[starts]
        begun = np.where(full, first.full_start[starts, kind], first.compute_start[starts, kind])
        left = bottleneck - np.maximum(first.plain_end[ends, kind] - begun, 0.0)
        second = self.towers[priced][1]
        held = np.minimum(touched, hung.readable(origin, np.full_like(origin, self.second.last)))
        furthest = np.full(len(starts), -1, dtype=np.int64)
        trying = np.arange(len(starts))  # the parts whose count is not found yet
        while len(trying):
            at, count = origin[trying], held[trying]
            found = second.reach(kind, at, left[trying] - (touched[trying] - count) * hung.exit[kind])
            holds = np.where(found >= 0, hung.readable(at, found), 0)
            done = holds >= count  # always for a count of 0
            furthest[trying[done]] = found[done]
            # a smaller count reaches no further, so holds no more readers than this one: the
            # counts above them fail too, and the next to try is that many
            held[trying[~done]] = holds[~done]
            trying = trying[~done]
        reach[some] = furthest
        return reach

    def _charges(self, bottleneck: float) -> np.ndarray:
        """Per count vector (rows) and type, what the stage of that type that places the
        :class:`_Sender`'s maker and brings the counts to the row pays for its sends at
        ``bottleneck``: each on its best link, and those that the devices left in its group of
        hosts cannot take (the readers' stages come after it) on the inter-host one."""
        assert self.sender is not None
        sends, price = self.sender.sends(bottleneck), self.sender.price
        local = np.broadcast_to(sends * price, (len(self.vectors), len(price)))
        if self.room is None or self.type_group is None:
            return local
        across = np.maximum(sends - self.room[:, self.type_group], 0)
        return local + across * (self.sender.remote - price)

    def feasible(self, bottleneck: float, sending: bool = False) -> bool:
        """Whether the stages reach both towers' ends within ``bottleneck``. ``sending`` with a
        :class:`_Sender`: the points also say whether a stage so far holds the broadcast
        tensor's maker (``furthest[c, held]``); until then every cut may lack it, the stage
        that takes it pays its sends, and the last stage must have passed it."""
        return self._table(bottleneck, sending)[1] is not None

    def _table(
        self, bottleneck: float, sending: bool, block: int | None = None
    ) -> tuple[np.ndarray, tuple[int, int] | None]:
        """The points of :meth:`feasible` (count vectors × phases × held × first tower's rows) up
        to the first layer that reaches both ends, and that layer's count vector and phase
        reaching them. With ``block``, a group of hosts whose stages come one after another,
        the phases say whether its stages are yet to come, come now or are over
        (:meth:`_moves`); else there is one."""
        first, second = self.first, self.second
        sender = self.sender if sending else None
        charge = None if sender is None else self._charges(bottleneck)
        phases = 1 if block is None else 3
        shape = (len(self.vectors), phases, 1 + (sender is not None), first.last + 1)
        furthest = np.full(shape, -1, dtype=np.int64)
        furthest[0, 0, 0, 0] = 0
        for layer in self.layers:
            for row in layer:
                best = furthest[row]
                for kind, previous in enumerate(self.previous_of):
                    if previous[row] >= 0:
                        sides = 0 if self.sides is None else int(self.sides[kind][row])
                        extend = functools.partial(self._extend, kind, sides=sides)
                        paid = None if charge is None else charge[row, kind]
                        for before, after in self._moves(kind, block):
                            sources = furthest[previous[row], before]
                            self._extend_holding(extend, sources, bottleneck, best[after], paid)
                for points in best.reshape(-1, best.shape[-1]):
                    points[:] = self._excluded(points)
            reached = np.argwhere(furthest[layer, :, -1, first.last] >= second.last)
            if len(reached):
                return furthest, (int(layer[reached[0][0]]), int(reached[0][1]))
        return furthest, None

    def _moves(self, kind: int, block: int | None) -> tuple[tuple[int, int], ...]:
        """The phases (:meth:`_table`) a stage of type ``kind`` goes from and to: with ``block``,
        one of its group opens it or goes on in it (0 or 1 to 1), any other stage keeps it yet
        to come (0) or closes it (1 or 2 to 2)."""
        if block is None:
            return ((0, 0),)
        assert self.type_group is not None
        if self.type_group[kind] == block:
            return ((0, 1), (1, 1))
        return ((0, 0), (1, 2), (2, 2))

    def along(self, sequence: Sequence[int]) -> _Product:
        """This product with its stages' types fixed to ``sequence`` (stage by stage): each
        count vector is reached only from the one before it there. Not a bound: its
        :meth:`witness` is a primal start (:func:`tower_witnesses`)."""
        previous_of = [np.full_like(previous, -1) for previous in self.previous_of]
        vector = np.zeros(self.vectors.shape[1], dtype=self.vectors.dtype)
        row = 0
        for kind in sequence:
            vector[kind] += 1
            following = int(np.flatnonzero((self.vectors == vector).all(axis=1))[0])
            previous_of[kind][following], row = row, following
        restricted = copy.copy(self)
        restricted.previous_of = previous_of
        return restricted

    def witness(self, bottleneck: float, block: int | None = None) -> list[tuple[int, int, int]] | None:
        """Stages (type, end row in the first tower, end row in the second) that reach both
        towers' ends within ``bottleneck`` in the relaxation with the maker's sends, if any
        (``None``: none do), traced back
        through :meth:`_table`: from each stage's end, a point of the count vector one stage of
        its type fewer from which such a stage reaches it (its first part costs no more to a
        nearer end, so points the precedences moved to an earlier row are found too). With
        ``block``, a group of hosts whose stages the witness keeps together (not a bound: a
        primal start, :func:`tower_witnesses`)."""
        furthest, reached = self._table(bottleneck, sending=True, block=block)
        if reached is None:
            return None
        charge = None if self.sender is None else self._charges(bottleneck)
        step_back = functools.partial(
            self._step_back, furthest, bottleneck=bottleneck, charge=charge, block=block
        )
        row, phase = reached
        return self._traced(step_back, row, (phase, furthest.shape[2] - 1))

    def _traced(
        self, step_back: Callable, row: int, state: object, deadline: float | None = None
    ) -> list[tuple[int, int, int]] | None:
        """The stages from both towers' ends in ``(row, state)`` of a table back to their starts,
        each found by ``step_back(row, state, a, b)`` (its type, the state it starts from and
        its start; ``None``: none found); ``None`` when a step finds none or ``deadline``
        passes."""
        a, b = self.first.last, self.second.last
        stages = []
        while row != 0:
            step = None if _past(deadline) else step_back(row, state, a, b)
            if step is None:
                return None
            kind, row, state, start_a, start_b = step
            stages.append((kind, a, b))
            a, b = start_a, start_b
        return stages[::-1]

    def _step_back(
        self,
        furthest: np.ndarray,
        row: int,
        state: tuple[int, int],
        a: int,
        b: int,
        bottleneck: float,
        charge: np.ndarray | None,
        block: int | None,
    ) -> tuple[int, int, tuple[int, int], int, int] | None:
        """A stage ending at ``(a, ≥ b)`` in state ``(row, (phase, held))`` of the table: its
        type, the state it starts from and its start ``(a₀, b₀)``; ``None`` when none is found."""
        sender = self.sender
        phase, held = state
        for kind, previous in enumerate(self.previous_of):
            before = int(previous[row])
            if before < 0:
                continue
            sides = 0 if self.sides is None else int(self.sides[kind][row])
            for (was, now), source in itertools.product(
                self._moves(kind, block), {held, 0} if charge is not None else {0}
            ):
                if now != phase:
                    continue
                price = charge[row, kind] if charge is not None and source != held else 0.0
                if sender is not None and charge is not None:
                    maker_end = a if sender.side == 0 else b
                    if (source == 0 and held == 0 and maker_end > sender.lack_to) or (
                        held == 1 and source == 0 and maker_end < sender.hold_from
                    ):
                        continue
                points = furthest[before, was, source]
                starts = np.flatnonzero(points[: a + 1] >= 0)
                if not len(starts):
                    continue
                left = bottleneck - price - self.costs[kind, sides][starts, a]
                fits = left >= 0
                starts, left = starts[fits], left[fits]
                ends = np.full(len(starts), a)
                origins = points[starts]
                reach = self._second_reach(kind, sides, starts, ends, origins, left, bottleneck - price)
                found = np.flatnonzero(reach >= b)
                if len(found):
                    start = int(starts[found[0]])
                    return kind, before, (was, source), start, int(points[start])
        return None

    def _extend_holding(
        self,
        extend: Callable[[object, float, np.ndarray], None],
        sources: Sequence,
        bottleneck: float,
        best: np.ndarray,
        charge: float | None,
    ) -> None:
        """Raise ``best[held]`` to what ``extend(sources[held], budget, target)`` (a stage from
        the states that hold the sender's maker or not) reaches within ``bottleneck``, and with
        the sender's ``charge`` (of the stage's type, at ``bottleneck``), from the states before
        the maker to those past it, the stage paying the sends: its part in the maker's tower
        starts where the cut may lack the maker (every point before it does) and ends where it
        may hold it."""
        sender = self.sender
        if charge is None or sender is None:
            extend(sources[0], bottleneck, best[0])
            return
        lacking, holding = np.full_like(best[0], -1), np.full_like(best[1], -1)
        extend(sources[0], bottleneck, lacking)
        extend(sources[0], bottleneck - charge, holding)
        if sender.side == 0:  # rows are the first tower's
            lacking[..., sender.lack_to + 1 :] = -1
            holding[..., : sender.hold_from] = -1
        else:
            np.minimum(lacking, sender.lack_to, out=lacking)
            holding[holding < sender.hold_from] = -1
        np.maximum(best[0], lacking, out=best[0])
        np.maximum(best[1], holding, out=best[1])
        extend(sources[1], bottleneck, best[1])

    @functools.cached_property
    def _either_end(self) -> dict[tuple[int, int], np.ndarray]:
        """:attr:`costs` with each part's end at the cheaper of its prices locally and across
        hosts: the pass with group changes tries both, and finds the parts that fit either way
        once, on these."""
        return {
            (kind, sides): np.minimum(cost, self.costs[kind, sides | 1])
            for (kind, sides), cost in self.costs.items()
        }

    @property
    def prices_changes(self) -> bool:
        """Whether :meth:`feasible_across` applies: the towers are priced across hosts, there
        are several groups of hosts, and its table stays within :data:`_ACROSS_STATES`."""
        return self.room is not None and self.across_cells <= _ACROSS_STATES

    @property
    def across_cells(self) -> int:
        """The size of :meth:`feasible_across`'s table (0 without groups of hosts)."""
        return 0 if self.room is None else self.room.size * _KEYS * (self.first.last + 1)

    def feasible_across(
        self, bottleneck: float, deadline: float | None = None, sending: bool = False
    ) -> bool:
        """:meth:`feasible` with the group changes of the module docstring. ``furthest[c,
        held, key]``, the points of the states with counts ``c``, whether the maker is placed
        (with ``sending``) and ``key`` (:func:`_state_key`): the last stage's group, the
        fullness of its parts and its commitment. A stage of
        group ``h`` extends the states of its group committed to the same group, and those of
        the other groups committed to a next stage in another group with parts of its
        fullness (the same for every such group, so their points are merged first).
        ``sending``: the stage that places the :class:`_Sender`'s maker pays its sends, as in
        :meth:`feasible` (CLIP on A100/L4/T4 at k = 8: 0.80236 → 0.80850 ms, where the pass
        without them had the text tower's first stage send its causal mask to three stages).

        Past ``deadline`` (``time.perf_counter`` seconds) the probe gives up, admitting
        ``bottleneck``: one probe can take longer than the whole plain pass (CLIP on four types
        at k = 8: 6.2 s against 0.3 s), and its first was started with no time to measure."""
        table = self._across_table(bottleneck, deadline, sending)
        return table is None or table[1] is not None  # past the deadline nothing is proven

    def _across_table(
        self, bottleneck: float, deadline: float | None, sending: bool = False
    ) -> tuple[np.ndarray, tuple[int, int] | None] | None:
        """The points of :meth:`feasible_across` (count vectors × held × keys × first tower's
        rows) up to the first layer that reaches both ends, and that layer's count vector and
        key reaching them (``None`` where none does); ``None`` past ``deadline``."""
        assert self.type_group is not None and self.room is not None
        first, second = self.first, self.second
        groups = self.room.shape[1]
        sender = self.sender if sending else None
        charge = None if sender is None else self._charges(bottleneck)
        shape = (len(self.vectors), 1 + (sender is not None), groups * _KEYS, first.last + 1)
        furthest = np.full(shape, -1, dtype=np.int64)
        for layer in self.layers:
            for row in layer:
                if _past(deadline):
                    return None
                best = furthest[row]
                sources = [self._across_sources(furthest[:, held], row) for held in range(shape[1])]
                for (kind, sides, group, other, variants), *holding in zip(*sources, strict=True):
                    paid = None if charge is None else charge[row, kind]
                    stage = functools.partial(self._extend_across, kind, sides=sides, group=group)
                    for received, found in variants.items():
                        by_held = [_points(found), *(_points(h[4][received], placed=True) for h in holding)]
                        extend = functools.partial(stage, received=received, other=other)
                        self._extend_holding(extend, by_held, bottleneck, best, paid)
                for points in best.reshape(-1, best.shape[-1]):
                    points[:] = self._excluded(points)
            reached = np.argwhere(furthest[layer, -1, :, first.last] >= second.last)
            if len(reached):
                return furthest, (int(layer[reached[0][0]]), int(reached[0][1]))
        return furthest, None

    def _across_sources(self, furthest: np.ndarray, row: int) -> Iterator[tuple[int, int, int, bool, dict]]:
        """Per type whose stage brings the counts to ``row``: ``(kind, sides, group, other,
        variants)``, the variants by what the stage receives across hosts (the previous stage's
        full parts), each a list of ``(points, fullness needed, source)``: the points are those
        of the states ``source = (count vector, groups, key)`` (merged over the groups), or the
        first stage's start (``None``)."""
        assert self.type_group is not None and self.room is not None and self.sides is not None
        groups = self.room.shape[1]
        for kind, previous in enumerate(self.previous_of):
            before = int(previous[row])
            if before < 0:
                continue
            sides = int(self.sides[kind][row])
            group = int(self.type_group[kind])
            # a next stage in another group needs a free device there
            other = bool((np.delete(self.room[row], group) > 0).any())
            if before == 0:
                origin = np.full(self.first.last + 1, -1, dtype=np.int64)
                origin[0] = 0
                yield kind, sides, group, other, {(0, 0): [(origin, None, None)]}
                continue
            states = furthest[before].reshape(groups, _KEYS, -1)
            elsewhere = tuple(g for g in range(groups) if g != group)
            others = states[list(elsewhere)].max(axis=0)  # committed to another group
            same = (states[group, 0], None, (before, (group,), 0))
            variants: dict[tuple[int, int], list] = {(0, 0): [same]}
            for key in range(1, _KEYS):
                full, nexts = divmod(key - 1, 4)
                variants.setdefault((full >> 1, full & 1), []).append(
                    (others[key], (nexts >> 1, nexts & 1), (before, elsewhere, key))
                )
            yield kind, sides, group, other, variants

    def witness_across(
        self, bottleneck: float, deadline: float | None = None
    ) -> list[tuple[int, int, int]] | None:
        """:meth:`witness` in the pass with group changes (``None``: no stages reach both ends
        within ``bottleneck``, or ``deadline`` passed first): from each stage's end, a variant
        whose points a stage of its type extends to it, then one start of them (the points
        halved while some half still does), and the state those points came from. Its stages
        visit the groups of hosts as placements pay for it: on CLIP over A100/L4/T4 at k = 8
        the text tower stays on host 0 and the witness rounds to 0.8556 ms, where
        :meth:`witness`'s T4 that makes the causal mask sends it to host 0 (0.9134)."""
        table = self._across_table(bottleneck, deadline)
        if table is None or table[1] is None:
            return None
        furthest, (row, key) = table
        step_back = functools.partial(self._across_step_back, furthest[:, 0], bottleneck=bottleneck)
        return self._traced(step_back, row, key, deadline)

    def _across_step_back(
        self, furthest: np.ndarray, row: int, key: int, a: int, b: int, bottleneck: float
    ) -> tuple[int, int, int, int, int] | None:
        """A stage ending at ``(a, ≥ b)`` in state ``(row, key)`` of :meth:`_across_table`: its
        type, the state it starts from and its start ``(a₀, b₀)``; ``None`` when none is found.
        A point the precedences moved to an earlier row was reached at ``a`` or beyond."""
        group = key // _KEYS
        for kind, sides, kind_group, other, variants in self._across_sources(furthest, row):
            if kind_group != group:
                continue
            for received, found in variants.items():
                extension = (kind, bottleneck, sides, group, received, other)
                for points, need, source in found:
                    if not self._reaches(extension, points, need, key, a, b):
                        continue
                    starts = np.flatnonzero(points >= 0)
                    while len(starts) > 1:
                        half = starts[: len(starts) // 2]
                        kept = np.full_like(points, -1)
                        kept[half] = points[half]
                        starts = (
                            half if self._reaches(extension, kept, need, key, a, b) else starts[len(half) :]
                        )
                    start = int(starts[0])
                    if source is None:
                        return kind, 0, 0, start, int(points[start])
                    before, candidates, state = source
                    came = next(  # the group the merged points came from
                        g for g in candidates if furthest[before, g * _KEYS + state, start] == points[start]
                    )
                    return kind, before, came * _KEYS + state, start, int(points[start])
        return None

    def _reaches(
        self, extension: tuple, points: np.ndarray, need: tuple[int, int] | None, key: int, a: int, b: int
    ) -> bool:
        """Whether a stage (``extension``: its type, the bottleneck, its pricing, group, receipts
        across hosts, and whether a next stage may lie in another group) from ``points`` whose
        parts must have the fullness ``need`` reaches a point at or beyond ``(a, b)`` in state
        ``key``."""
        assert self.room is not None
        kind, bottleneck, sides, group, received, other = extension
        best = np.full((self.room.shape[1] * _KEYS, self.first.last + 1), -1, dtype=np.int64)
        self._extend_across(kind, [(points, need)], bottleneck, best, sides, group, received, other)
        return bool((best[key, a:] >= b).any())

    def _extend_across(
        self,
        kind: int,
        variants: list[tuple[np.ndarray, tuple[int, int] | None]],
        bottleneck: float,
        best: np.ndarray,
        sides: int,
        group: int,
        received: tuple[int, int],
        other: bool,
    ) -> None:
        """Raise ``best`` (keys × rows) to what a stage of type ``kind`` in ``group`` reaches from
        each variant's points, whose parts must have the variant's fullness (``None``: any; the
        previous stage committed to it); ``received`` says which towers' starts come from
        another host (the previous stage's part there was full and it is in another group).
        Each commitment the stage makes prices its ends across hosts in the towers whose next
        part it says is full; without ``other`` the next stage is in its group or there is none.
        The variants are searched together, each distinct point once (one search per pricing)."""
        found_starts = [(self._starts(points), points, need) for points, need in variants]
        found_starts = [(s, points, need) for s, points, need in found_starts if len(s)]
        if not found_starts:
            return
        starts, origins, admits = self._distinct_starts(found_starts)
        priced = sides | 2 * received[0]
        table = self._either_end[kind, priced] if other else self.costs[kind, priced]
        fitting, fitting_ends = np.nonzero(table[starts] <= bottleneck)
        full_fitting = (fitting_ends > self.first.threshold[starts[fitting]]).astype(np.int64)
        keep = (admits[fitting] >> 2 * full_fitting) & 3 > 0  # some variant admits a part so full
        fitting, fitting_ends, full_fitting = fitting[keep], fitting_ends[keep], full_fitting[keep]
        for ends_a in (0, 1) if other else (0,):
            left = bottleneck - self.costs[kind, priced | ends_a][starts[fitting], fitting_ends]
            keep = left >= 0
            fits, ends, full_a, left = fitting[keep], fitting_ends[keep], full_fitting[keep], left[keep]
            if not len(fits):
                continue
            origin, admitted = origins[fits], admits[fits] >> 2 * full_a
            ceiling = self.second.threshold[origin]
            # the hung tensors' sends once for both pricings of the second part, at the lower
            exits = None
            if self.hung is not None:
                exits = self._exits_reach(kind, sides, bottleneck, starts[fits], ends, origin)
            for ends_b in (0, 1) if other else (0,):
                priced_b = sides | 2 * received[1] | ends_b
                found = self._second_reach(kind, priced_b, starts[fits], ends, origin, left)
                if exits is not None:
                    found = np.minimum(found, exits)
                partial = np.minimum(found, ceiling)
                for full_b, reached in enumerate((partial, np.where(found > ceiling, found, -1))):
                    live = np.flatnonzero((admitted >> full_b) & 1 & (reached >= 0))
                    same = [None] if (ends_a, ends_b) == (0, 0) else []  # or no next stage
                    for commitment in same + ([(ends_a, ends_b)] if other else []):
                        keys = group * _KEYS + _state_key(full_a[live], full_b, commitment)
                        # on the flat view: numpy's fast path for one index array, 4× the 2-D one
                        np.maximum.at(best.reshape(-1), keys * best.shape[1] + ends[live], reached[live])

    def _distinct_starts(
        self, found_starts: list[tuple[np.ndarray, np.ndarray, tuple[int, int] | None]]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The distinct points ``(a, G[a])`` the variants' starts hold, as two arrays of rows,
        each with the fullness of the parts some variant holding it admits (:func:`_admitted`).
        A stage reaches the same from a point whatever the variant, and the variants share many
        points (CLIP over four types at k = 8: 169 k distinct of 299 k; T5 there 48 k of 129 k)."""
        starts = np.concatenate([s for s, _, _ in found_starts])
        origins = np.concatenate([points[s] for s, points, _ in found_starts])
        admits = np.concatenate([np.full(len(s), _admitted(need)) for s, _, need in found_starts])
        rows = self.second.last + 1
        pairs, variant_pairs = np.unique(starts * rows + origins, return_inverse=True)
        merged = np.zeros(len(pairs), dtype=np.int64)
        np.bitwise_or.at(merged, variant_pairs, admits)
        return pairs // rows, pairs % rows, merged


def _admitted(need: tuple[int, int] | None) -> int:
    """The fullness ``(full_a, full_b)`` a variant admits of a stage's parts (``need``; ``None``:
    any), as bits ``2 · full_a + full_b``: a point several variants hold admits what any does,
    which two bits apart (one per part) would not say."""
    return sum(
        1 << (2 * full_a + full_b)
        for full_a in (0, 1)
        for full_b in (0, 1)
        if need is None or need == (full_a, full_b)
    )


def _points(found: list, placed: bool = False) -> list[tuple[np.ndarray, tuple[int, int] | None]]:
    """The points and fullness needed of a variant's sources (:meth:`_Product._across_sources`);
    ``placed``: of those past a stage, without the first stage's start, which lacks every op."""
    return [(points, need) for points, need, source in found if not placed or source is not None]


_KEYS = 17  # per group: committed to the same group, or (4 fullness pairs) × (4 next fullness pairs)


def _state_key(full_a: np.ndarray, full_b: int, commitment: tuple[int, int] | None) -> np.ndarray:
    """The key within a group of a stage whose parts are full as given and which commits the next
    stage to its group (``None``: key 0, whatever its parts) or to another group with parts of
    the fullness ``commitment``."""
    if commitment is None:
        return np.zeros_like(full_a)
    return 1 + 4 * (2 * full_a + full_b) + 2 * commitment[0] + commitment[1]


def _hung_tensors(instance: Instance, found: Towers) -> list[tuple[str, float, list[str]]]:
    """The tensors the hung chains' ops make for readers in the other tower: maker, bytes and
    those readers."""
    wanted: dict[str, set[str]] = {}
    for u, w in found.links:
        wanted.setdefault(u, set()).add(w)
    return [
        (t.producer, t.bytes, sorted(set(t.consumers) & wanted[t.producer]))
        for t in instance.graph.tensors
        if t.producer in wanted and set(t.consumers) & wanted[t.producer]
    ]


@dataclass(frozen=True)
class _Makers:
    """What the makers of the hung tensors need past the hung boundary (in the staircase's
    segment holding the first of them, and later), as work on the reference type: ``whole``,
    the least of a maker with its ancestors there (what a part starting at the boundary holds
    with it); ``alone``, of a maker alone; ``own``, of a maker's own ancestors (itself and those
    no other maker descends from: distinct makers' are disjoint); ``root``, of an own ancestor
    with no own predecessor (a cut holding an own ancestor holds such a root). ``inner``, the
    bytes of the tensors an own ancestor makes for another of the same maker, and ``reads``, the
    most of them one op reads; ``widest``, the most own work of one maker, and ``shared``, the
    work there that no maker owns. The first four works are shaded down, the last two up, so
    rounding only lowers the bound."""

    whole: float
    alone: float
    own: float
    root: float
    inner: tuple[float, ...]
    reads: int
    widest: float
    shared: float


def _makers(x: _Measured, makers: set[str], segment: int) -> _Makers:
    """:class:`_Makers` for the ops ``makers`` of ``x`` past the boundary before ``segment``."""
    graph = x.instance.graph
    predecessors = _adjacency(graph)[0]
    times = x.instance.costs.finite_times()[:, x.reference]
    ancestries = []
    for op in makers:
        v = graph.index[op]
        needed, stack = {v}, [v]
        while stack:
            for u in predecessors[stack.pop()]:
                if x.segment[u] >= segment and u not in needed:
                    needed.add(u)
                    stack.append(u)
        ancestries.append((v, needed))
    shared = Counter(u for _, needed in ancestries for u in needed)
    owned = [{u for u in needed if shared[u] == 1} for _, needed in ancestries]
    roots = [u for own in owned for u in own if not set(predecessors[u]) & own]
    owner = {graph.ops[u].id: i for i, own in enumerate(owned) for u in own}
    inner = [
        t
        for t in graph.tensors
        if t.producer in owner and any(owner.get(c) == owner[t.producer] for c in t.consumers)
    ]
    reads = Counter(c for t in inner for c in t.consumers if owner.get(c) == owner[t.producer])
    shade = 1 - 1e-9
    return _Makers(
        min(float(times[sorted(needed)].sum()) for _, needed in ancestries) * shade,
        min(float(times[v]) for v, _ in ancestries) * shade,
        min(float(times[sorted(own)].sum()) for own in owned) * shade,
        min(float(times[u]) for u in roots) * shade,
        tuple(t.bytes for t in inner),
        max(reads.values(), default=0),
        max(float(times[sorted(own)].sum()) for own in owned) / shade,
        max(float(times[x.segment >= segment].sum()) - float(times[sorted(set().union(*owned))].sum()), 0.0)
        / shade,
    )


def _hung_costs(
    x: _Measured, y: _Measured, staircase: _Tower, found: Towers, tensors: list, resolution: int
) -> _Hung:
    """:class:`_Hung` for the hung chains of ``x`` (the staircase, grouped as ``staircase``)
    read by ``y``, at ``resolution``. A stage whose part makes some hung tensors and receives
    an inner tensor for each of the others spares, once its start's cut may hold an own
    ancestor, what a received inner tensor costs less than a hung one, and the inner tensors
    the staircase's least receipts may charge it (``reads`` of the largest); with more than
    one segment past the boundary, or that segment's ideals enumerated (its parts then priced
    every tensor they read), it may spare them all."""
    index = x.instance.graph.index
    makers = {u for u, _ in found.links if u in index}
    segment = min(int(x.segment[index[u]]) for u in makers)
    boundary = int(x.firsts[segment])
    group_of = staircase.group_of
    firsts = np.flatnonzero(np.diff(group_of, prepend=-1))
    reference = x.reference
    needs = _makers(x, makers, segment)
    times = _transfer_times(y.instance, [size for _, size, _ in tensors])
    # one maker may make several hung tensors (a tensor per reader): a stage holding it spares
    # them all (a seven-op chain with skip edges on two hosts: a bound of 103 ms over 78)
    made_by = np.array([maker for maker, _, _ in tensors])
    per_maker = np.array([times[made_by == maker].sum(axis=0) for maker in dict.fromkeys(made_by)])
    largest, total = np.max(per_maker, axis=0), np.sum(times, axis=0)
    passed = np.zeros_like(largest)
    if needs.inner:
        inner = _transfer_times(y.instance, needs.inner)
        cheaper = np.maximum(largest - np.min(inner, axis=0), 0.0)  # than a maker's hung tensors
        passed = needs.reads * np.max(inner, axis=0) + len(per_maker) * cheaper
        if int(x.segment.max()) > segment or x.ideals.get(segment) is not None:
            passed = total
    readers = _tower(y, reference, resolution, _receipts(y, tensors))
    return _Hung(
        readers,
        int(group_of[boundary]),
        np.minimum.reduceat(x.positions.end[:, reference], firsts),
        np.maximum.reduceat(x.positions.start[:, reference], firsts),
        float(x.positions.end[boundary, reference]),
        needs,
        largest,
        total,
        passed,
        _transfer_times(y.instance, [*(size for _, size, _ in tensors), *needs.inner]).min(axis=0),
        *_reader_spans(y, tensors, readers.group_of),
    )


def _reader_spans(y: _Measured, tensors: list, group_of: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:attr:`_Hung.lacking` and :attr:`_Hung.holding`: per maker of the hung ``tensors``
    (maker, bytes, readers), the first group of ``y`` at or before whose rows a cut lacks one of
    its readers, and the last from which a cut holds one; a maker none of whose readers ``y``
    holds spans every group."""
    spans: dict[str, tuple[int, int]] = {}
    for maker, _, everyone in tensors:
        rows = [y.rows(w) for w in everyone if w in y.instance.graph.index]
        lacking = min((int(group_of[lacks]) for lacks, _ in rows), default=0)
        holding = max((int(group_of[holds]) for _, holds in rows), default=int(group_of[-1]))
        known = spans.get(maker, (lacking, holding))
        spans[maker] = (min(known[0], lacking), max(known[1], holding))
    return np.array([lo for lo, _ in spans.values()]), np.array([hi for _, hi in spans.values()])


def tower_lower_bound(
    instance: Instance,
    upper: float,
    *,
    floor: float = 0.0,
    deadline: float | None = None,
    give_up: float | None = None,
    workers: int = 1,
    gap_limit: float = 0.0,
) -> float:
    """The largest bottleneck the two-tower relaxation proves infeasible in ``(floor, upper)``
    (``upper`` a known bottleneck, ``floor`` a known bound), or ``floor`` when it proves none or
    ``instance`` is not made of two towers. ``deadline`` (``time.perf_counter`` seconds) stops
    the bisection and the refinement early; every value found infeasible by then is valid. A
    probe with group changes running at ``give_up`` (a hard end) stops, proving nothing; with
    ``workers`` of them, as many probes run at once (:mod:`partition.forked_probes`). With a
    ``gap_limit`` (relative), a bound proving ``upper`` within it is enough: each pass probes it
    first, the pass with group changes too, and the passes end once it is proven."""
    goal = goal_of(upper, gap_limit)
    found = towers(instance)
    late = _past(deadline)
    if found is None or not np.isfinite(upper) or floor >= upper or late or _reached(floor, goal):
        return floor
    setting = _setting(instance, found, upper)
    if _past(deadline):
        return floor
    broadcasts = setting.broadcasts
    best = floor
    product: _Product | None = None
    for resolution in _RESOLUTIONS:
        started = time.perf_counter()
        built = setting.product(resolution, charged=False, exact=False)
        if built is None:  # its cost matrices would not fit
            break
        product, finest = built, resolution
        best = max(best, _bisect_below(product.feasible, best, upper, deadline, goal=goal))
        if _reached(best, goal):
            return best
        left = None if deadline is None else deadline - time.perf_counter()
        if left is not None and left < 2 * (time.perf_counter() - started):  # a finer pass takes longer
            break
    if product is None:
        return best
    left = np.inf if deadline is None else deadline - time.perf_counter()
    last_pass = time.perf_counter() - started
    if product.prices_changes and left > _ACROSS_PASSES * last_pass:
        # with the broadcasts' receipts, and the maker's sends where their table fits
        across_product = setting.product(finest, charged=True, exact=False) if any(broadcasts) else product
        assert across_product is not None  # built before at this resolution
        sending = across_product.sender is not None and 2 * across_product.across_cells <= _ACROSS_STATES
        across = functools.partial(across_product.feasible_across, deadline=give_up, sending=sending)
        # a probe costs about a whole plain pass and under a deadline only a few run: galloping
        # up from the plain bound spends them below it where bisecting from the middle of the
        # gap spent them above (T5 on four types at k = 8, ``auto`` at 60 s: 5.54% → 5.27%)
        with forked_probes(across, workers) as many:
            raised = _narrowed(
                across, best, upper, deadline, upper, 0.0, stride=_ACROSS_STEP, many=many, goal=goal
            )
        best = max(best, raised * (1 - _SAFETY))
        if _reached(best, goal):
            return best
    # the broadcast tensors' receipts slow every search of the second tower, and the maker's
    # sends double the points: a pass of their own at the finest resolution, after the group
    # changes (which lift the mixed clusters' bounds more and were timed by the plain passes)
    left = np.inf if deadline is None else deadline - time.perf_counter()
    # the exact windows cost a pass or two to set up (0.1-0.3 s on CLIP, where a plain pass at
    # 200 groups takes 0.05-0.6 s): only in the last passes, when there is time for them
    exact = left > _EXACT_PASSES * last_pass
    if any(broadcasts) and left > _BROADCAST_PASSES * last_pass:
        charged = setting.product(finest, charged=True, exact=exact)
        assert charged is not None  # built before at this resolution
        sending = functools.partial(charged.feasible, sending=True)
        best = max(best, _bisect_below(sending, best, upper, deadline, optimal_first=False, goal=goal))
    elif exact:
        windowed = setting.product(finest, charged=False, exact=True)
        assert windowed is not None  # built before at this resolution
        best = max(
            best, _bisect_below(windowed.feasible, best, upper, deadline, optimal_first=False, goal=goal)
        )
    left = np.inf if deadline is None else deadline - time.perf_counter()
    split = _types_by_host(instance)
    if split is not None and left > _HOST_PASSES * last_pass and not _reached(best, goal):
        divided = Towers(
            *(_types_by_host(tower) or tower for tower in (found.first, found.second)),
            found.links,
            found.hung,
        )
        product = _setting(split, divided, upper).product(finest, charged=True, exact=exact)
        if product is not None:
            sending = functools.partial(product.feasible, sending=True)
            best = max(best, _bisect_below(sending, best, upper, deadline, optimal_first=False, goal=goal))
    return best


def _types_by_host(instance: Instance) -> Instance | None:
    """``instance`` with each device type that spans several hosts split into a type per host
    (same op times; ``None`` where none does). Its placements are the instance's, at the same
    cost, but the stage counts per type now tell which hosts the stages so far use: stages that
    open or fill a host pay across hosts (*Hosts*), where one type on 2 × 8 A100 kept every
    link NVLink (CLIP at k = 16: 0.29703 -> 0.29782 ms)."""
    cluster = instance.cluster
    hosts: dict[str, set[int]] = {}
    for device in cluster.devices:
        hosts.setdefault(device.type, set()).add(device.host)
    if all(len(h) == 1 for h in hosts.values()):
        return None

    def name(device: Device) -> str:
        spread = len(hosts[device.type]) > 1
        return f"{device.type}@{cluster.hosts[device.host].name}" if spread else device.type

    devices = tuple(replace(device, type=name(device)) for device in cluster.devices)
    split = replace(
        cluster,
        devices=devices,
        device_types={name(d): cluster.device_types[d.type] for d in cluster.devices},
    )
    first = {}
    for device, renamed in zip(cluster.devices, devices, strict=True):
        first.setdefault(renamed.type, cluster.type_names.index(device.type))
    columns = [first[t] for t in split.type_names]
    costs = instance.costs
    costs = CostTable(split.type_names, costs.times[:, columns], costs.provenance[:, columns])
    return replace(instance, cluster=split, costs=costs)


def _setting(instance: Instance, found: Towers, upper: float) -> _Setting:
    """The towers' positions (measured on the fastest type) and what else the products of
    :func:`tower_lower_bound` and :func:`tower_witnesses` are built from."""
    reference = int(instance.costs.finite_times().sum(axis=0).argmin())
    measured = (_measured(found.first, reference), _measured(found.second, reference))
    remote = None
    if _host_groups(instance) is not None:
        remote = [_measured(_across_hosts(tower), reference) for tower in (found.first, found.second)]
    forward, backward = (_precedences(x, y, found.links) for x, y in (measured, measured[::-1]))
    tensors = _hung_tensors(instance, found)
    broadcasts = (_broadcasts(instance, found.first), _broadcasts(instance, found.second))
    return _Setting(instance, found, measured, remote, forward, backward, tensors, broadcasts, upper)


@dataclass(frozen=True)
class _Setting:
    """What :func:`tower_lower_bound` builds its products from at every resolution: the two
    towers' positions (``remote``: priced across hosts, or ``None``), the cut precedences each
    way, the hung tensors, each tower's broadcast tensors and the bisection's upper end."""

    instance: Instance
    found: Towers
    measured: tuple[_Measured, _Measured]
    remote: list[_Measured] | None
    forward: list[tuple[int, int]]
    backward: list[tuple[int, int]]
    tensors: list[tuple[str, float, list[str]]]
    broadcasts: tuple[list[_Broadcast], list[_Broadcast]]
    upper: float
    exact: dict[int, list[tuple[int, np.ndarray]]] = field(default_factory=dict)  # per tower, once

    def product(self, resolution: int, charged: bool, exact: bool) -> _Product | None:
        """The product at ``resolution`` (``None`` where the staircase's cost matrices would
        not fit), ``charged`` the broadcast tensors' receipts and sends, ``exact`` the
        staircase's exact windows."""
        measured, tensors = self.measured, self.tensors
        pairs = zip(measured, self.broadcasts, strict=True)
        parts = [
            _tower(m, m.reference, resolution, None, (b, self.upper) if charged else None) for m, b in pairs
        ]
        # the priced-across-hosts towers add three cost matrices per type: only while they stay small
        small = max(part.last for part in parts) < _MAX_ROWS // 2
        remote = self.remote
        far = None if remote is None or not small else [_tower(m, m.reference, resolution) for m in remote]
        ceilings, floors = self.forward, self.backward
        # the staircase over the tower the hung chains hang on, else over the one with fewer rows
        hung_first = bool(tensors) and self.found.links[0][0] in measured[0].instance.graph.index
        flip = not hung_first if tensors else parts[0].last > parts[1].last
        order = (1, 0) if flip else (0, 1)
        if flip:
            parts, ceilings, floors = parts[::-1], floors, ceilings
            far = None if far is None else far[::-1]
        if parts[0].last >= _MAX_ROWS:  # segment boundaries stay
            return None
        staircase = order[0]
        if exact:
            if staircase not in self.exact:
                self.exact[staircase] = _exact_parts(measured[staircase])
            parts[0] = replace(parts[0], exact=_windows(self.exact[staircase], parts[0].group_of))
        hung = None
        if tensors:
            x, y = (measured[t] for t in order)
            hung = _hung_costs(x, y, parts[0], self.found, tensors, resolution)
        sender = None
        if charged:
            senders = (
                _sender(measured[t], parts[side], self.broadcasts[t], side) for side, t in enumerate(order)
            )
            sender = max((s for s in senders if s is not None), key=lambda s: s.price.max(), default=None)
        far = None if far is None else tuple(far)
        return _Product(self.instance, *parts, ceilings, floors, hung, far, sender, order)


def tower_witnesses(
    instance: Instance, bound: float, upper: float, deadline: float | None = None
) -> list[list[tuple[int, np.ndarray]]]:
    """The stages of the relaxation's witnesses just above ``bound`` (below ``upper``), at the
    finest resolution with the broadcast tensors charged: the plain pass's, and on mixed
    clusters, where its table has at most :data:`_ACROSS_WITNESS_CELLS` cells, the pass's with
    group changes (:meth:`_Product.witness_across`), then per group of hosts the plain pass's
    with that group's stages one after another (``block``), then the plain pass's along each
    order of the stages' types that keeps every group's stages together (:func:`_block_sequences`,
    :meth:`_Product.along`). The relaxation prices a tensor sent
    between hosts at its type's best link, so its witnesses may change host at every stage: on
    T5 over H100/A100 at k = 8 the first two send the encoder's output between the hosts and
    round to 0.4876 and 0.4857 ms (20 s of the polish: 0.4319, 0.4318), the one with the A100s
    together (H100 × 3, A100 × 4, H100) to 0.4807 (polished: 0.4272). And the polish seldom
    changes the order of a start's types: on CLIP over A100/L4/T4 at k = 8 every witness of the
    passes themselves rounds to 0.8556 ms and polishes to 0.8322, the one along A100, L4, A100,
    L4 and the T4s rounds to 0.9068 and polishes to 0.8230 (on four types, H100 × 2, A100 × 2,
    V100 × 2, H200 × 2 or H200 × 2, A100 × 2, H100 × 2, V100 × 2: 0.5392, 0.5343, against 0.5403
    from `auto`'s starts). Per stage its device
    type and the ops of the original graph (a mask) that the two towers' cuts at its end hold.
    Primal starts (:func:`~partition.solvers.tower_split.witness_placements`), not bounds: none
    where the graph has no towers, none of a pass whose witness is not found below ``upper`` or
    whose next try would end past ``deadline`` (``time.perf_counter`` seconds; each is a probe
    of the finest pass, 0.3–0.4 s on CLIP over four types, 5 s with the group changes there,
    0.6 s with a group's stages together, and a bound found under a short limit lies below
    every try: the four overran a 3-s ``auto`` by 1.2 s). The pass with group changes stops at
    ``deadline`` too."""
    found = towers(instance)
    if found is None or not np.isfinite(upper) or bound <= 0:
        return []
    setting = _setting(instance, found, upper)
    # without the exact windows: their set-up would eat a short polish, and the rounding starts
    # no better from their witnesses (CLIP on 16 V100 at k = 16: 0.3534 ms against 0.3494)
    product = setting.product(_RESOLUTIONS[-1], charged=True, exact=False)
    if product is None:
        return []
    traces: list[Callable[[float], list[tuple[int, int, int]] | None]] = [product.witness]
    if product.prices_changes and product.across_cells <= _ACROSS_WITNESS_CELLS:
        traces.append(functools.partial(product.witness_across, deadline=deadline))
    if product.room is not None:  # each group of hosts in turn with its stages together
        traces.extend(
            functools.partial(product.witness, block=group) for group in range(product.room.shape[1])
        )
        traces.extend(product.along(sequence).witness for sequence in _block_sequences(product))
    index = instance.graph.index
    ids = [
        np.array([index[op.id] for op in setting.measured[t].instance.graph.ops], dtype=np.int64)
        for t in product.order
    ]
    starts = [
        np.searchsorted(tower.group_of, np.arange(tower.last + 1))
        for tower in (product.first, product.second)
    ]
    witnesses = []
    for trace in traces:
        stages = _traced_above(trace, bound, upper, deadline)
        if stages is None:
            continue
        cuts = []
        for kind, a, b in stages:
            held = np.zeros(len(instance.graph.ops), dtype=bool)
            for t, group, ops, first_rows in zip(product.order, (a, b), ids, starts, strict=True):
                held[ops[setting.measured[t].cut(int(first_rows[group]))]] = True
            cuts.append((kind, held))
        witnesses.append(cuts)
    return witnesses


def _block_sequences(product: _Product) -> list[tuple[int, ...]]:
    """The stage type sequences that take every device and keep each group of hosts' stages one
    after another: the groups in every order and, inside each, every distinct order of its
    types. None where a device stays idle (a sequence would also choose which), and none when
    there would be more than :data:`_BLOCK_SEQUENCES`."""
    if product.type_group is None or product.room is None:
        return []
    counts = product.vectors.max(axis=0)
    if counts.sum() != len(product.layers):
        return []
    groups = [
        Counter({kind: int(count) for kind, count in enumerate(counts) if product.type_group[kind] == group})
        for group in range(product.room.shape[1])
    ]
    inside = [
        math.factorial(kinds.total()) // math.prod(map(math.factorial, kinds.values())) for kinds in groups
    ]
    if math.factorial(len(groups)) * math.prod(inside) > _BLOCK_SEQUENCES:
        return []
    orders = [list(_arrangements(kinds)) for kinds in groups]
    return [
        tuple(kind for order in chosen for kind in order)
        for turn in itertools.permutations(range(len(groups)))
        for chosen in itertools.product(*(orders[group] for group in turn))
    ]


def _arrangements(kinds: Counter) -> Iterator[tuple[int, ...]]:
    """The distinct orders of the multiset ``kinds`` (kind → count), in lexicographic order, each
    made once: a group of 16 devices of one type has one, not 16! to sort out."""
    if kinds.total() == 0:
        yield ()
        return
    for kind in sorted(k for k, count in kinds.items() if count):
        kinds[kind] -= 1
        for rest in _arrangements(kinds):
            yield (kind, *rest)
        kinds[kind] += 1


def _traced_above(
    trace: Callable[[float], list[tuple[int, int, int]] | None],
    bound: float,
    upper: float,
    deadline: float | None,
) -> list[tuple[int, int, int]] | None:
    """The stages ``trace`` finds at the first of :data:`_WITNESS_FACTORS` above ``bound`` where
    there are any, below ``upper``; ``None`` when none is found or the next try would end past
    ``deadline`` (each taking as long as the one before)."""
    probe = 0.0
    for factor in _WITNESS_FACTORS:
        if bound * factor >= upper or (deadline is not None and time.perf_counter() + probe > deadline):
            return None
        started = time.perf_counter()
        stages = trace(bound * factor)
        probe = time.perf_counter() - started
        if stages is not None:
            return stages
    return None


def structural_lower_bound(
    instance: Instance,
    upper: float,
    *,
    floor: float = 0.0,
    deadline: float | None = None,
    give_up: float | None = None,
    workers: int = 1,
    gap_limit: float = 0.0,
) -> tuple[float, str]:
    """The two-tower bound where it proves more than ``floor``, else the dominator-chain bound
    (:func:`~partition.chain_bound.chain_lower_bound`), with the name of the relaxation that
    gave it (``""`` when neither rises above ``floor``). Where towers are found, the chain's
    largest segment holds most of the ops, so its relaxed cells add nothing (CLIP on
    ``hetero-a100-l4-t4`` at k = 4: 0.92 against 1.36 ms) and would only spend the time left.
    ``workers``: the two-tower bisection's probes run at once (:func:`tower_lower_bound`);
    ``gap_limit``: a bound proving ``upper`` within it is enough (both relaxations)."""
    value, name = floor, ""
    if _reached(floor, goal_of(upper, gap_limit)):  # nothing more is needed: build neither
        return value, name
    tower = tower_lower_bound(
        instance, upper, floor=floor, deadline=deadline, give_up=give_up, workers=workers, gap_limit=gap_limit
    )
    if tower > value:
        return tower, "two-tower relaxation"
    if _past(deadline):
        return value, name
    chain = chain_lower_bound(instance, upper, deadline=deadline, give_up=give_up, gap_limit=gap_limit)
    if chain > value:
        value, name = chain, "dominator-chain relaxation"
    return value, name
