"""A lower bound that respects contiguity and op granularity along the graph's dominator chain.

**Dominators.** Add a super source before every source op and a super sink after every sink op.
An op ``d`` lies on every source→sink path exactly when no edge jumps over its position in the
topological order (an edge ``u → w`` with ``pos(u) < pos(d) < pos(w)``, super edges included,
is a path around ``d``; without one, every path must step onto ``d``). Call these ops
``d_1 < … < d_m``. Every op is comparable with every ``d_i`` (a path through the op passes
``d_i``), so the ops split into *segments*: segment ``b`` is ``d_b`` and the ops strictly between
``d_b`` and ``d_{b+1}`` (segment 0 may hold ops before ``d_1``). An edge leaving segment ``a``
ends in segment ``a`` or at ``d_{a+1}`` (a path using it passes ``d_{a+1}`` after it). So every
ideal (downset) of the graph is ``prefix(b) ∪ P`` — all segments before ``b`` and an ideal
``P ⊊`` segment ``b`` — and its crossing tensors (produced inside, read outside) are those of
segment ``b - 1`` read by ``d_b`` when ``P = ∅``, else those produced in ``P``.

**Broadcast tensors.** A tensor read along the whole graph (BERT's attention mask, read by
every layer) jumps over every residual add, leaving no dominators. Reading each tensor that
three or more ops read at its first reader only (keeping readers that would be left with no
other op-made input) is a relaxation — every placement stays valid and costs no more — so when
one segment holds most of the ops the bound is computed on that graph if it splits it.

**Positions.** The cuts ``J_0 = ∅ ⊂ J_1 ⊂ … ⊂ J_s = V`` of a placement map to *positions* in a
linear order (segment by segment; nested cuts never go backwards):

- a small segment (at most :data:`_EXACT_OPS` ops and :data:`_IDEAL_LIMIT` ideals; an
  Inception-v2 block of four branches has 7 392) contributes one position per ideal ``P``
  (sorted by size), with exact compute prefix ``C_τ(J)`` on each type and its exact crossing
  tensors;
- a large segment contributes its boundary (``P = ∅``) and ``G`` cells of its work on a
  reference type ``r`` (each type in turn while time remains, ranked by the bound of the
  relaxation without the links of handed tensors; every choice gives a valid bound and the
  largest is kept): a cut ``P ≠ ∅`` with ``x = Σ_{v∈P} t_r(v)`` in
  ``[x_g, x_{g+1})`` maps to cell ``g``. With ``L_τ(x)`` the least time on type ``τ`` of an
  ideal of the segment worth ``x`` on ``r``, relaxed to a fractional knapsack over *groups*
  (each branch below, or without branches each weakly connected component of the segment's
  ops but its head; every other op alone: ``P`` meets a group in an ideal of the group, so
  its time is at least the sum of each group's lower convex hull of (work, time) over its
  ideals, taken in increasing slope; ``L_r(x) = x``), a stage of type ``τ`` ending at ``P``
  computes at least ``L_τ(x_g)`` of the segment, and one starting there at least ``U_τ(X −
  x_{g+1})``, the same over up-sets (``X`` the segment's work on ``r``; both increasing). The
  groups keep an expert's cheap element-wise ops, nearly as fast on an A100 as on an MI300X,
  from standing in for its matmuls. Segments in between are charged exactly. The crossing
  tensors of such a cut are at least the tensors from ``d_b`` to ``d_{b+1}`` (``d_b ∈ P``,
  ``d_{b+1} ∉ P``) plus, for some op ``w ∉ P`` whose segment predecessors are all in ``P``,
  ``w``'s inputs from the segment (the cheapest such ``w`` is charged) or, when more, what
  ``P``'s parts of the *branches* send: at least one tensor per branch ``P`` must have started
  to hold ``x_g`` of work (an MoE layer's experts; :meth:`_Builder.touched_branches`), and at
  least the fractional knapsack over each branch's convex hull of (work, communication) over
  its ideals (:meth:`_Builder.branch_comm`), plus a tensor made outside the branches and read
  by them once its maker is certainly in ``P`` (:meth:`_Builder.shared_inputs`).

Each position gets, per type, ``end_τ`` and ``start_τ`` such that a stage on ``τ`` from cut
``I`` to cut ``J`` computes at least ``end_τ(J) − start_τ(I)``, and ``recv_τ(I)``/``send_τ(J)``,
the time of ``I``'s/``J``'s crossing tensors over the best link a device of type ``τ`` has
(smallest latency, largest bandwidth; one destination per tensor, a lower estimate in both
communication modes). When ``I`` is a segment boundary, or ``J`` lies beyond the boundary after
``I``'s segment (position > ``thr(I)``), the stage reads every crossing tensor of ``I`` and
writes every crossing tensor of ``J`` (by the edge property above), so its time is at least
``end_τ(J) + send_τ(J) − start_τ(I) + recv_τ(I)``; otherwise at least its compute plus the
least it certainly exchanges whatever it holds (:meth:`_Builder.least_exchanged`): it holds a
maximal op of ``J``, every tensor of which leaves it, and a minimal op of ``I``'s rest, every
op-made input of which comes from before it (Inception-v2's blocks of four branches, where a
stage between two cuts of one block paid only its compute: 16 × V100 at k = 16, 0.1525 →
0.1543 ms). From a cell of a segment with branches it also pays what it certainly
exchanges there: ending in a cell it
sends a tensor per branch it touches (it holds at least ``x_j − x_{i+1}`` of work and the join
is not in its end's ideal) and at least what its parts of the branches send (each branch's
lower convex hull of (work, bytes) over its parts ``D₂ \\ D₁``, a fractional knapsack: an
expert's output once it holds all of it; :func:`_parts_hull`), over the link to the next stage
when that one is full (it reads every tensor crossing the end), and receives one least tensor
per branch it touches, or what a branch's first op reads from its start's ideal if that is
less (an MoE expert's gather: the layer's hidden state; the 110k-op
MoE at k = 64, 128 cells: 21.5020 → 21.5938 ms), over the inter-host link when it receives
across hosts (:meth:`_Builder.head_inputs`); ending at the boundary it holds the join and
receives what its start's branch parts send (:meth:`_Builder.inner_stages`). With ``--overlap``
communication is dropped (``max(compute, comm) ≥ compute``).

**Nested stages.** Inside an exact segment both ends of a stage that is not full are known
ideals ``I ⊊ J`` of it (``J`` possibly the whole segment), and so is its cost: its compute,
the tensors of ``I`` it reads and those it makes that an op outside ``J`` reads, each once
(:meth:`_Builder.nested_stages`, over every such pair while they stay few). So from such an
``I`` a stage that is not full reaches at most the furthest ``J`` whose cost fits the
bottleneck; only the pairs that no further ``J`` beats are kept. On Inception-v2 (blocks of four
branches, 7 392 ideals each, where most stages at k = 16 start and end inside one block) this
proves the optimum on 16 × V100, 0.1543 → 0.1574 ms.

**Handed tensors.** The stage ending at a cut ``I`` is a non-empty up-set of ``I``, so it holds
one of ``I``'s maximal ops ``m``; the stage starting there holds one minimal op ``w`` of the
rest. So the tensors from ``m`` to ``w`` — at least the least, over such pairs, of their count
and bytes — go from the one stage straight to the other (at a segment boundary: from an op of
the segment before that only ``d_b`` reads, to ``d_b``; on a relaxed cell nothing is known). With
``σ`` and ``ν`` the types of the stages before and after, a stage of type ``κ`` pays them over
the best ``σ → κ`` link on receiving and ``κ → ν`` on sending: on top of what ``recv``/``send``
charge at ``κ``'s best link when it pays its cuts, and when it only computes the larger of
them and its least exchange at ``κ``'s best link (they are exchanged whatever it holds). An op
no op reads may end a stage alone, which hands nothing: then nothing is known at any later
cut either.

**Full stages.** Call a stage from ``I'`` to ``I`` *full* when ``I`` lies beyond the boundary
after ``I'``'s segment (the case above in which it pays its cuts). Then every tensor crossing
``I`` was made in that stage: one made in ``I'`` would cross ``I'`` as well, and by the edge
property be read in ``I'``'s segment or by the dominator after it — both inside ``I``. So when
the stage starting at ``I`` is full too, every crossing tensor of ``I`` goes from the one stage
straight to the other, and both pay all of them over the ``σ → κ`` link (on one host type
beside another, the inter-host link) — not only the handed ones.

**A full stage after one that is not.** A stage from cell ``i`` to cell ``j`` of a relaxed
segment with branches sends what its parts of the branches send, read after ``j`` in the
segment or by its join. A full stage after it holds all of those ops and ``d_{b+1}``, so it
receives all of that over the link between their types, and the tensors from ``d_b`` to
``d_{b+1}`` from the stage holding ``d_b`` (another: ``d_b`` lies before ``i``) at least over
its best link — across hosts when the stage before the first is a full one (which holds
``d_b``) in another group of hosts. The price depends on ``i``, which the DP's state does not
keep, so the state after the first stage holds a *virtual* end instead of ``j``: the earliest
position from which the full stage, priced as usual, reaches as far as from ``j`` with the
price added (its reach grows with its start only through ``start − recv``;
:meth:`_Relaxation._before_full`). The 110k-op MoE at k = 64, whose relaxation had an A100
stage compute 16 ms of a layer's experts between two MI300X stages, the second receiving what
it sent at the MI300X's own link (chain bound alone, 40 s): 21.7255 → 21.8057 ms.

**Hosts.** Group the hosts so that all the devices of each type lie in one group (a type on one
host: that host, as on the zoo's mixed clusters or per (type, host) class; MI300X on three
MI300X hosts: those three). With several groups, the counts ``c`` tell which groups the stages
so far use. A stage that is the first in its group (not the first stage) receives every tensor
from another host, and one after which its group has no free device sends every tensor to
another host, whatever the stages around it hold: when it is full, all the
crossing tensors of its start (end) go over the inter-host link, and when it is not, what it
certainly sends from a cell does (:func:`_host_sides`). That price needs neither the type before
nor the one after it (Mixtral on four types at k = 8, two devices a host: 0.43056 → 0.44442 ms
against an optimum of 0.46006; Inception-v1 there 0.12456 → 0.12793; the 110k-op MoE at
k = 64, three groups of MI300X, H100 and A100 hosts: 21.4046 → 21.4404 ms). A nested stage
is priced so too: on those sides what it receives or sends goes over the inter-host link.
Nested stages keep a variant per side (:class:`_Nested`), which also serves one that is not
the first in its group but follows a full stage on a link no faster than the inter-host one
(that stage made every tensor crossing its start, *Full stages*) or precedes one (which reads
every tensor crossing its end): Inception-v2 on 2 × 8 A100 at k = 16, where the stages at the
crossing start or end inside a block, 0.14157 → 0.14336 ms; Mixtral on A100/L4/T4 at k = 8,
1.3632 → 1.4197 ms. More generally the tensors crossing a cut are made in the stages from the
last full one up to the cut and read in those after it up to the next full one, so a stage
changing group between two full stages, with every stage in between on its side, pays across
hosts too (:meth:`_Relaxation._feasible_with_pairs`): Inception-v2 on 2 × 8 A100 at k = 16, whose
relaxation changed hosts twice through a nested stage, 0.14336 → 0.14497 ms. On a relaxed cell,
where no crossing tensor is known, a price across hosts is at least the best link's.

**Relaxed feasibility of a bottleneck ``B``.** ``reach_τ(I)`` is the furthest position ``J`` the
test above admits (``end`` replaced by its suffix minimum, so the admissible ``J`` form a prefix
and can be binary-searched), then made nondecreasing in ``I`` by a running maximum: an
over-estimate of how far one stage can go from any cut at or before ``I``. With ``F(c)`` the
furthest position reachable using ``c_τ`` stages of each type, ``F(0) = 0`` and
``F(c) = max_τ reach_τ(F(c − e_τ))`` — if the true placement's first stages reach cut ``J``
with counts ``c``, then ``F(c) ≥ pos(J)`` by induction, because ``reach_τ`` is monotone and
admits every real stage of time ``≤ B``. ``F(c)`` needs only the count vectors one stage
smaller, so each is computed once, layer by layer (``|c| = 1, …, k``). So if no ``F(c)``
reaches ``pos(V)``, no placement has bottleneck ``≤ B`` and ``B`` is a valid bound; the largest
such ``B`` is found by bisection. With handed tensors the state also carries ``σ`` (the last
stage's type), ``ν`` (the type the next stage is committed to) and whether each of the two is full,
``F(c + e_κ, κ, ν') = max_σ reach_σκν'(F(c, σ, κ))`` with the full or the partial reach, and
the same induction holds. The cheaper relaxation without them is bisected first and
brackets this one from below. Memory, colocation and exact stage counts are relaxed (dropping
constraints only lowers the optimum). A chain graph has a dominator at every op, so on one host
in a homogeneous cluster, or on hosts of one type each, this is the exact chain DP optimum.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import itertools
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np

from .branches import branch_labels
from .coarsen import _UnionFind
from .forked_probes import Probes, one_at_a_time
from .instance import Instance

_IDEAL_LIMIT = 8192  # a segment with more ideals is relaxed to cells ...
_QUICK_IDEAL_LIMIT = 4096  # ... or with more than this after the exact deadline (see _share_out) ...
_SMALL_IDEAL_LIMIT = 256  # ... or with more than this once the exact positions reach
_POSITION_BUDGET = 100_000  # this many (every probe of the bisection searches them all)
_EXACT_OPS = 60  # ideals are bitsets of one machine word's worth of ops
_CELLS = 64
_FINER = 2  # with a deadline and time left, the cells are refined by this factor, twice at most
_RELATIVE_GAP = 1e-5  # bisection stops when the bracket is this tight ...
_GAP_SHARE = 1e-3  # ... or below a known bottleneck, this share of the gap left to it
_COARSE_SHARE = 1e-2  # ... or this share, in a pass of cells that a finer one may follow
_GALLOP = 1e-3  # from a known bound, the bisection first probes this far above it, then twice as far …
_OPTIMAL = 1e-7  # first probe just below ``upper``: proves it optimal when infeasible
_NO_CHAIN = 0.5  # the broadcast relaxation is tried when one segment holds more of the ops
_SAFETY = 1e-9  # the bound is shrunk by this much against rounding in the prefix sums
_CLASS_STATES = 2_000_000  # DP states allowed when devices are counted per (type, host) class
_GROUP_IDEALS = 256  # a branch with more ideals of its own is relaxed op by op
_NESTED_PAIRS = 60_000_000  # nested pairs of exact positions priced one by one, at most
_NESTED_CHUNK = 1_000_000  # superset tests (starts × ideals, upper triangle) made at once
_PIECE = 16  # bits per table of :func:`_bit_tables`
_REUSED: contextvars.ContextVar[dict | None] = contextvars.ContextVar("chain_bound_reused", default=None)
_T = TypeVar("_T")
_NESTED_KINDS = 2  # beyond this many device kinds the bisection over exact positions needs the time ...
_NESTED_KIND_ROWS = 60_000  # ... unless kinds × exact positions stay this few (Mixtral: 44 k, 58 k)
_EXACT_SHARE = 0.6  # of the time to the deadline, for segments of more than _QUICK_IDEAL_LIMIT ideals,
_EXACT_SECONDS = 1.5  # ... when at least this much is left (Inception-v2's take 0.7 s, and the probes)
_NESTED_SHARE = 0.8  # of the time to the deadline, at most, for pricing nested stages
_QUICK_PRICING = 100_000  # pairs of ideals: fewer are priced at once, with no unpriced pass first


@dataclass(frozen=True)
class _Positions:
    """Per position (rows, last = all ops placed) and device type (columns); ``handed`` (rows ×
    (count, bytes)): tensors that certainly go from the stage ending at the cut to the stage
    starting there (``None``: nothing known); ``crossing`` (the same shape): the tensors that
    ``send``/``recv`` price, as raw amounts; ``cell``: rows that stand for several cuts (a
    stage may start and end in one); ``inner``: what stages inside relaxed segments with
    branches certainly exchange (:class:`_Inner`); ``least_sent``/``least_received`` (rows ×
    types): the least a stage ending/starting at the row sends/receives, whatever it holds
    (:meth:`_Builder.least_exchanged`), on each type's best link."""

    end: np.ndarray
    start: np.ndarray
    send: np.ndarray
    recv: np.ndarray
    threshold: np.ndarray
    handed: np.ndarray | None = None
    crossing: np.ndarray | None = None
    cell: np.ndarray | None = None
    inner: _Inner | None = None
    least_sent: np.ndarray | None = None
    least_received: np.ndarray | None = None
    nested: _Nested | None = None


@dataclass(frozen=True, eq=False)
class _Nested:
    """Stages inside exact segments, priced exactly (:meth:`_Builder.nested_stages`): per (host
    sides, type), the rows a stage starts at (``start``, each row's entries together), the row it
    ends at (``end``) and its time (``time``: compute, what it receives from its start's ideal and
    what it sends beyond its end, on the type's best link, or across hosts on the sides
    ``2 · opens + fills`` of :func:`_host_sides`), keeping per start only the ends that no further
    end beats on time; ``covered``: the rows whose every such stage is listed (stages slower than
    the bracket's upper end left out)."""

    start: dict[tuple[int, int], np.ndarray]
    end: dict[tuple[int, int], np.ndarray]
    time: dict[tuple[int, int], np.ndarray]
    covered: np.ndarray


@dataclass(frozen=True, eq=False)
class _Inner:
    """Stages inside the relaxed segments with branches (:meth:`_Builder.inner_stages`), per
    segment ``first``, the row of its first cell, and ``shape``, the index of its shape
    (:meth:`_Builder._shape_of`) in the other fields, stacked over the shapes (the 110k-op
    MoE's 61 layers: one; :attr:`representative`, a segment of each): from start cell ``i``,
    what a stage ending in cell ``j`` certainly sends (``send``: shapes × i × j × types on each
    type's best link; ``sent``: the raw (count, bytes)), the least tensor of each branch it
    touches (``touched``, raw; ``touched_time`` on each type's best link), and what one reaching
    the boundary after certainly receives (``received``: shapes × i × types). Such a stage
    receives at least the smaller of its touched tensors and what a branch's first op reads from
    before the start (``heads``: shapes × i × (count, bytes); ``head_time``: shapes × i × types
    on each type's best link). ``through`` (shapes × (count, bytes)): the tensors from ``d_b``
    to ``d_{b+1}``, which a full stage starting in a cell receives from the stage holding
    ``d_b``."""

    first: np.ndarray
    shape: np.ndarray
    send: np.ndarray
    sent: np.ndarray
    touched: np.ndarray
    touched_time: np.ndarray
    received: np.ndarray
    heads: np.ndarray
    head_time: np.ndarray
    through: np.ndarray

    @property
    def representative(self) -> np.ndarray:
        """The first segment of each shape (the compute before a segment cancels out of a stage's
        time inside it, so one stands for all)."""
        return np.unique(self.shape, return_index=True)[1]


@dataclass(frozen=True, eq=False)
class _Branches:
    """A segment's *branches*, in local op indices: ``join`` is the op with the most inputs from
    the segment (an MoE layer's combine); ``B(s)``, for each of its predecessors ``s`` in
    ``feeding``, is ``s`` and the ops whose paths to the join's predecessors all lead to ``s``
    (``label[u] = s``; -1 for ops in no branch). The branches are disjoint, and every op of
    ``B(s)`` has a path inside ``B(s)`` to ``s`` and on to the join. ``ancestors``: the join and
    its ancestors; ``predecessors``: each op's predecessors in the segment."""

    join: int
    feeding: np.ndarray
    label: np.ndarray
    ancestors: np.ndarray
    predecessors: list[list[int]]


@dataclass(frozen=True)
class _Pairs:
    """``latency[σ, κ]``, ``inverse[σ, κ]``: the best link from a device of type σ to another
    device of type κ (``inf`` latency where there is none), and ``base_*[κ]`` the best link of
    κ at all, which the positions' ``send``/``recv`` charge."""

    latency: np.ndarray
    inverse: np.ndarray
    base_latency: np.ndarray
    base_inverse: np.ndarray

    def link(self, sender: int, receiver: int) -> tuple[float, float] | None:
        """The link from type ``sender`` to type ``receiver`` (``None``: no stage at one end)."""
        types = len(self.latency)
        if sender >= types or receiver >= types:
            return None
        return float(self.latency[sender, receiver]), float(self.inverse[sender, receiver])

    def time(self, handed: np.ndarray, sender: int, receiver: int, less: int | None = None) -> np.ndarray:
        """Per position, the time of the handed tensors over the link from type ``sender`` to
        type ``receiver`` (an index past the types, no stage there, costs nothing), less the
        best link of type ``less`` when given (what ``send``/``recv`` already charge)."""
        types = len(self.latency)
        if sender >= types or receiver >= types:
            return np.zeros(len(handed))
        latency, inverse = self.latency[sender, receiver], self.inverse[sender, receiver]
        if less is not None:
            latency, inverse = latency - self.base_latency[less], inverse - self.base_inverse[less]
        return _priced(handed, (latency, inverse))


def _pairs(instance: Instance, latency: np.ndarray, bandwidth: np.ndarray) -> _Pairs:
    """The type-to-type links, over ``latency``/``bandwidth``, each type's best (see :class:`_Pairs`)."""
    pair_latency, pair_bandwidth = instance.cluster.group_links(instance.cluster.type_index)
    with np.errstate(divide="ignore"):
        inverse = 1.0 / np.nan_to_num(pair_bandwidth, nan=0.0)
        return _Pairs(np.nan_to_num(pair_latency, nan=np.inf), inverse, latency, 1.0 / bandwidth)


def dominators(instance: Instance) -> np.ndarray:
    """Whether each op lies on every source→sink path (no edge jumps over its position)."""
    n = len(instance.graph.ops)
    edges = np.asarray(instance.graph.edges, dtype=np.int64).reshape(-1, 2)
    cover = np.zeros(n + 1, dtype=np.int64)
    np.add.at(cover, edges[:, 0] + 1, 1)
    np.add.at(cover, edges[:, 1], -1)
    has_pred = np.zeros(n, dtype=bool)
    has_pred[edges[:, 1]] = True
    has_succ = np.zeros(n, dtype=bool)
    has_succ[edges[:, 0]] = True
    sources, sinks = np.flatnonzero(~has_pred), np.flatnonzero(~has_succ)
    cover[0] += len(sources)
    np.add.at(cover, sources, -1)  # super source → q covers 0..q-1
    np.add.at(cover, sinks + 1, 1)  # q → super sink covers q+1..n-1
    cover[n] -= len(sinks)
    return np.cumsum(cover)[:n] == 0


def segments(dominator: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """From :func:`dominators`' mask, each op's segment (a dominator and the ops up to the next;
    ops before the first dominator form segment 0) and the segments' first ops, with the op
    count at the end."""
    segment = np.cumsum(dominator) - (1 if dominator[0] else 0)
    return segment, np.searchsorted(segment, np.arange(int(segment[-1]) + 2))


def _links(instance: Instance) -> tuple[np.ndarray, np.ndarray]:
    """Per device type, the smallest latency and largest bandwidth of any link it can use."""
    latency, bandwidth = instance.cluster.group_links(instance.cluster.type_index)
    latency, bandwidth = np.fmin.reduce(latency, axis=1), np.fmax.reduce(bandwidth, axis=1)
    return np.nan_to_num(latency, nan=0.0), np.nan_to_num(bandwidth, nan=np.inf)


class _Builder:
    """Collects the positions of :class:`_Positions`, segment by segment.

    Tensors are flat arrays (op-produced tensors read by some op): ``producer``, ``size`` and
    the (tensor, consumer) pairs ``pair_tensor``/``pair_op``, distinct and sorted by tensor.
    """

    def __init__(self, instance: Instance) -> None:
        graph = instance.graph
        self.times = instance.costs.finite_times()
        self.latency, self.bandwidth = _links(instance)
        if instance.options.overlap:
            self.latency, self.bandwidth = 0.0 * self.latency, np.full_like(self.bandwidth, np.inf)
        # the inter-host link where stages may open or fill a group of hosts (:func:`_host_sides`):
        # nested stages are then priced with it too
        grouped = _host_groups(instance) is not None and not instance.options.overlap
        self.remote = _inter_host(instance) if grouped else None
        dom = dominators(instance)
        self.segment, self.bounds = segments(dom)
        self.heads = dom
        n_seg = len(self.bounds) - 1
        kept = [t for t in graph.tensors if t.producer is not None and t.consumers]
        self.producer = np.array([graph.index[t.producer] for t in kept], dtype=np.int64)
        self.size = np.array([t.bytes for t in kept], dtype=float)
        index = graph.index
        readers = np.array([index[c] for t in kept for c in t.consumers], dtype=np.int64)
        tensor = np.repeat(np.arange(len(kept)), [len(t.consumers) for t in kept])
        n = len(graph.ops)
        pairs = np.unique(tensor * n + readers)  # distinct, sorted by tensor
        self.pair_tensor, self.pair_op = pairs // n, pairs % n
        self.last_reader = np.full(len(kept), -1, dtype=np.int64)
        np.maximum.at(self.last_reader, self.pair_tensor, self.pair_op)
        # bytes and count of the tensors crossing into each segment (produced before, read in it)
        first, last = self.segment[self.producer] + 1, self.segment[self.last_reader] + 1
        crossing = np.zeros((n_seg + 2, 2))
        np.add.at(crossing, first, np.column_stack([self.size, np.ones(len(kept))]))
        np.add.at(crossing, last, -np.column_stack([self.size, np.ones(len(kept))]))
        self.crossing = np.cumsum(crossing, axis=0)
        order = np.argsort(self.segment[self.producer], kind="stable")
        self.by_segment = np.split(
            order, np.searchsorted(self.segment[self.producer][order], np.arange(1, n_seg))
        )
        pair_segment = self.segment[self.producer[self.pair_tensor]]
        order = np.argsort(pair_segment, kind="stable")
        self.pairs_by_segment = np.split(order, np.searchsorted(pair_segment[order], np.arange(1, n_seg)))
        self.first_reader = np.full(n, n, dtype=np.int64)  # n: the op's tensors are read by no op
        np.minimum.at(self.first_reader, self.producer[self.pair_tensor], self.pair_op)
        # ops before each index whose tensors no op reads: they may end a stage on their own
        self.dangling = np.concatenate([[0], np.cumsum(self.first_reader == n)])
        self.rows: list[tuple[np.ndarray, ...]] = []
        self.ideals: dict[int, list[int] | None] = {}
        self.late: dict[int, int] = {}  # segments relaxed for want of time: the pass that did it
        self.passes = 0  # :func:`_positions` calls so far
        self.exact_positions = 0
        self.hull_cache: dict[tuple, tuple] = {}
        # a segment's handed tensors and nested stages, keyed by everything they read: a
        # model's repeated layers are priced once (Llama-7B: 69 segments, five kinds)
        self.repeats: dict[tuple, object] = {}
        self.cells = _CELLS  # per relaxed segment
        self.branches: dict[int, _Branches | None] = {}
        self.cell_stages: list[tuple[int, tuple]] = []  # (first row, stages inside): see _Inner
        self.upper = np.inf  # stages slower than this need no pricing (the bisection stays below it)
        # types that share op times and best links (one type on two hosts) price nested stages once
        signature = np.vstack([self.times, self.latency[None, :], self.bandwidth[None, :]]).T
        _, self.kinds, self.kind_of = np.unique(signature, axis=0, return_index=True, return_inverse=True)
        self.price_nested = False  # whether exact segments price their nested stages
        self.nested_deadline = np.inf  # (time.perf_counter) when they stop: the rest stay unpriced
        self.exact_deadline = np.inf  # after it, segments of many ideals are relaxed to cells ...
        self.deadline = np.inf  # ... and after the call's own deadline, all but the smallest
        self.nested_parts: dict[int, list] = {}  # per segment, see nested_stages and _Nested
        self.nested_count = 0
        self.proven = 0.0  # the largest bottleneck any call on this builder proved infeasible

    def bracket(self, upper: float) -> None:
        """Bisect below ``upper`` from now on: nested stages priced under a smaller bracket
        left out some that a probe above it admits, so they are priced again."""
        if upper > self.upper:
            self.nested_parts, self.nested_count = {}, 0
        self.upper = upper

    def prices_kinds(self) -> bool:
        """Whether nested stages are priced for this many device kinds: on Mixtral across A100,
        L4 and T4 at k = 8 pricing them lifts the bound 1.149 -> 1.363 ms in 4 s (on four types
        0.4197 -> 0.4306 ms in 6 s); on Inception-v2 across A100, L4 and T4 (60 k exact
        positions) the bisection takes twice as long for nothing."""
        kinds = len(self.kinds)
        return kinds <= _NESTED_KINDS or kinds * self.exact_positions <= _NESTED_KIND_ROWS

    def pricing_work(self) -> int:
        """The pairs of ideals the pricing of nested stages has yet to go through, every segment
        decided first (as :func:`_positions` does; the decisions are kept)."""
        for b in range(len(self.bounds) - 1):
            self.segment_ideals(b)
        return sum(
            len(ideals) ** 2
            for b, ideals in self.ideals.items()
            if ideals is not None and len(ideals) > 1 and b not in self.nested_parts
        )

    def pricing_pending(self) -> bool:
        """Whether a pass may still price nested stages: some segment not yet decided exact or
        relaxed, or an exact one whose nested stages are not priced."""
        if not self.prices_kinds():
            return False
        if len(self.ideals) < len(self.bounds) - 1 or self.late:
            return True
        return any(
            ideals is not None and len(ideals) > 1 and b not in self.nested_parts
            for b, ideals in self.ideals.items()
        )

    def segment_ideals(self, b: int) -> list[int] | None:
        """Segment ``b``'s ideals (see :func:`_ideals`), or ``None`` when it is relaxed to cells;
        decided once per segment, in segment order, so every caller sees the same positions —
        but a segment relaxed only because the exact positions' time had run out is decided
        again by a later :func:`_positions` pass that has time for it (a solve's first, quick
        call must not leave a later, longer one with cells).

        They are ordered by their compute on the fastest type, then by size: nested ideals stay
        in order (so nested cuts never go backwards), and the suffix minima and running maxima
        of the relaxation lose little where a segment holds many parallel ops (experts)."""
        now = time.perf_counter()
        late = self.late.get(b)
        if b not in self.ideals or (late is not None and late < self.passes and now < self.exact_deadline):
            lo, hi = int(self.bounds[b]), int(self.bounds[b + 1])
            spent = self.exact_positions >= _POSITION_BUDGET
            limit = _SMALL_IDEAL_LIMIT
            if not spent and now < self.deadline:
                limit = _IDEAL_LIMIT if now < self.exact_deadline else _QUICK_IDEAL_LIMIT
            found = _ideals(self, b, lo, hi, limit) if hi - lo <= _EXACT_OPS else None
            if found:
                self.exact_positions += len(found)
                found = _by_work(found, self.times[lo:hi, int(np.argmin(self.times.sum(axis=0)))])
            self.late.pop(b, None)
            if found is None and limit < _IDEAL_LIMIT and not spent and hi - lo <= _EXACT_OPS:
                self.late[b] = self.passes  # relaxed for want of time: a later pass may retry
            self.ideals[b] = found
        return self.ideals[b]

    def comm(self, size: np.ndarray | float, count: np.ndarray | float) -> np.ndarray:
        """Time per type (last axis) of sending or receiving ``count`` tensors of ``size`` bytes."""
        return np.multiply.outer(count, self.latency) + np.divide.outer(size, self.bandwidth)

    def add(
        self,
        end: np.ndarray,
        start: np.ndarray,
        amounts: np.ndarray,
        threshold: np.ndarray,
        handed: np.ndarray,
        comm: np.ndarray | None = None,
        cell: np.ndarray | None = None,
    ) -> None:
        """Rows of positions; ``amounts`` (count, bytes) of the crossing tensors, priced per type
        unless ``comm`` gives the times; ``cell``: which rows are cells of a relaxed segment."""
        comm = self.comm(amounts[:, 1], amounts[:, 0]) if comm is None else comm
        cell = np.zeros(len(end), dtype=bool) if cell is None else cell
        self.rows.append((end, start, comm, threshold, handed, amounts, cell))

    def boundary_handed(self, b: int) -> np.ndarray:
        """(count, bytes) handed across the cut just before ``d_b``: the stage ending there
        holds an op of segment ``b - 1`` that only ``d_b`` reads (the cut's maximal ops), and the
        next stage holds ``d_b``; the least, over those ops, of what they send to ``d_b``."""
        lo = int(self.bounds[b])
        if b == 0 or not self.heads[lo] or self.dangling[lo]:
            return np.zeros(2)
        previous = self.pairs_by_segment[b - 1]
        to_head = previous[self.pair_op[previous] == lo]
        senders = self.producer[self.pair_tensor[to_head]]
        last = self.last_ops(b)
        count = np.array([np.sum(senders == m) for m in last], dtype=float)
        size = np.array([self.size[self.pair_tensor[to_head][senders == m]].sum() for m in last])
        return np.array([count.min(), size.min()]) if len(last) else np.zeros(2)

    def last_ops(self, b: int) -> np.ndarray:
        """The ops of segment ``b - 1`` that no op of it reads (only ``d_b`` or later ones): the
        maximal ops of the cut just before ``d_b``."""
        first, lo = int(self.bounds[b - 1]), int(self.bounds[b])
        return np.flatnonzero(self.first_reader[first:lo] >= lo) + first

    def segment_feeds(self, b: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """(count, bytes) of the tensors each op of segment ``b`` sends each other op of it
        (sender × reader, local indices)."""
        selected = self.pairs_by_segment[b]
        inner = selected[self.pair_op[selected] < hi]
        sender, reader = self.producer[self.pair_tensor[inner]] - lo, self.pair_op[inner] - lo
        feeds, sent = np.zeros((hi - lo, hi - lo)), np.zeros((hi - lo, hi - lo))
        np.add.at(feeds, (sender, reader), 1.0)
        np.add.at(sent, (sender, reader), self.size[self.pair_tensor[inner]])
        return feeds, sent

    def ideal_handed(self, b: int, lo: int, hi: int, members: np.ndarray) -> np.ndarray:
        """(count, bytes) per ideal ``P`` of segment ``b``: the least, over a maximal op ``m`` of
        ``P`` (one is in the stage ending at the cut) and a minimal op ``w`` of the segment's
        rest (one is in the next stage), of the tensors ``m`` sends ``w``."""
        handed = np.zeros((len(members), 2))
        handed[0] = self.boundary_handed(b)
        if self.dangling[lo] or len(members) < 2:
            return handed
        feeds, sent = self.segment_feeds(b, lo, hi)
        key = ("handed", members.shape, members.tobytes(), feeds.tobytes(), sent.tobytes())
        rows = self.repeats.get(key)
        if rows is None:
            rows = np.zeros((len(members), 2))
            step = max(1, 1_000_000 // (hi - lo) ** 2)
            for lo_row in range(1, len(members), step):
                maximal, minimal = _extremes(members[lo_row : lo_row + step], feeds)
                pair = maximal[:, :, None] & minimal[:, None, :]
                for column, amounts in enumerate((feeds, sent)):
                    values = np.where(pair, amounts[None, :, :], np.inf).reshape(len(pair), -1).min(axis=1)
                    rows[lo_row : lo_row + step, column] = np.where(np.isfinite(values), values, 0.0)
            self.repeats[key] = rows
        handed[1:] = rows[1:]
        return handed

    def least_exchanged(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        """(count, bytes) per row of segment ``b`` (as :meth:`segment_positions` made them):
        the least a non-empty stage ending at the row's cut ``J`` sends, and the least one
        starting there receives, whatever else it holds. The first holds a maximal op ``m`` of
        ``J`` (a non-empty up-set of ``J`` holds one), and every tensor ``m`` makes is read
        outside ``J``; the second holds a minimal op ``w`` of the rest, and every op-made input of
        ``w`` comes from ``J``. So each is at least the least, over such ops, of their tensors'
        count and bytes (0 where an op makes or reads none). At the boundary before ``d_b`` the
        maximal ops are those of segment ``b - 1`` that only ``d_b`` reads, and the one minimal
        op is ``d_b``; in a relaxed segment's cells they are some of the segment's ops (``d_b``
        excepted for the minimal one), so the least over those: on T5 the key and value
        projections hung at the encoder's end are cells, and a stage computing some of them
        receives a tensor (T5 on 2 × 8 A100 at k = 8: 0.4882 → 0.4915 ms)."""
        lo, hi = int(self.bounds[b]), int(self.bounds[b + 1])
        made, read = self.exchanged
        ideals = self.segment_ideals(b)
        rows = len(ideals) if ideals is not None else 1 + self.cells
        sent, received = np.zeros((rows, 2)), np.zeros((rows, 2))
        if b > 0 and self.heads[lo]:
            last = self.last_ops(b)
            sent[0] = made[last].min(axis=0) if len(last) else 0.0
            received[0] = read[lo]
        if ideals is None:  # a cell's cut holds d_b and leaves some op of the segment out
            sent[1:] = made[lo:hi].min(axis=0)
            received[1:] = read[lo + 1 : hi].min(axis=0) if hi - lo > 1 else 0.0
            return sent, received
        if len(ideals) < 2:
            return sent, received
        maximal, minimal = _extremes(_members(ideals[1:], hi - lo), self.segment_feeds(b, lo, hi)[0])
        for mask, amounts, out in ((maximal, made[lo:hi], sent), (minimal, read[lo:hi], received)):
            for column in range(2):
                out[1:, column] = np.where(mask, amounts[None, :, column], np.inf).min(axis=1)
        return sent, received

    @functools.cached_property
    def exchanged(self) -> tuple[np.ndarray, np.ndarray]:
        """Per op, (count, bytes) of the tensors it makes that some op reads, and of the
        op-made tensors it reads."""
        ops = len(self.first_reader)
        made = np.column_stack(
            [np.bincount(self.producer, minlength=ops), np.bincount(self.producer, self.size, minlength=ops)]
        ).astype(float)
        read = np.column_stack(
            [
                np.bincount(self.pair_op, minlength=ops),
                np.bincount(self.pair_op, self.size[self.pair_tensor], minlength=ops),
            ]
        ).astype(float)
        return made, read

    def segment_positions(self, b: int, prefix: np.ndarray, first: int, reference: int) -> bool:
        """Positions of segment ``b``, the first of them at row ``first``; whether relaxed."""
        lo, hi = int(self.bounds[b]), int(self.bounds[b + 1])
        ideals = self.segment_ideals(b)
        if ideals is not None:
            self.exact(b, lo, hi, ideals, prefix, first)
        else:
            self.relaxed(b, lo, hi, prefix, first, reference)
        return ideals is None

    def exact(self, b: int, lo: int, hi: int, ideals: list[int], prefix: np.ndarray, first: int) -> None:
        members = _members(ideals, hi - lo)
        partial = prefix[None, :] + members.astype(float) @ self.times[lo:hi]
        local = self.by_segment[b]
        inside = members[:, self.producer[local] - lo]  # ideal × tensor: producer inside
        read_outside = self.last_reader[local] >= hi
        selected = self.pairs_by_segment[b]
        column = np.searchsorted(local, self.pair_tensor[selected])
        consumer = self.pair_op[selected]
        in_segment = consumer < hi
        missing = np.zeros_like(inside)  # some reader of the tensor inside the segment is outside the ideal
        for c, op in zip(column[in_segment], consumer[in_segment], strict=True):
            missing[:, c] |= ~members[:, op - lo]
        crossing = inside & (missing | read_outside[None, :])
        amounts = np.column_stack([crossing.sum(axis=1), crossing.astype(float) @ self.size[local]])
        amounts[0] = self.crossing[b][::-1]
        threshold = np.full(len(ideals), first + len(ideals))
        threshold[0] = first
        self.add(partial, partial, amounts, threshold, self.ideal_handed(b, lo, hi, members))
        small = len(ideals) > 1 and len(local) <= 64 and self.prices_kinds()
        if self.price_nested and small and b not in self.nested_parts:
            self.nested_stages(b, ideals, inside, crossing)

    def nested_stages(
        self,
        b: int,
        ideals: list[int],
        inside: np.ndarray,
        crossing: np.ndarray,
    ) -> None:
        """Every stage ``J \\ I`` with ``I ⊊ J`` ideals of segment ``b``, ``I`` not empty and
        ``J`` possibly the whole segment (the next boundary's row), priced exactly on each type's
        best link: its compute, the tensors it reads that ``I`` made (the segment's ops other
        than ``d_b ∈ I`` read only tensors of the segment) and those it makes that an op outside
        ``J`` reads (once each: one destination at least). Such a stage is not full, so the
        relaxation charged it only its compute and least exchanges, while on Inception-v2 a
        stage inside a block of four branches reads and sends a tensor per branch it cuts.

        ``inside``/``crossing``: per ideal and tensor made in the segment, whether the ideal
        makes it and whether that tensor crosses the ideal. Kept per start and type: the ends
        that no end at a later row beats on time (:func:`_staircase`), stages slower than
        :attr:`upper` left out (no probe admits them). Rows are the segment's own (0 its
        boundary, ``len(ideals)`` the next one); found once per segment."""
        lo, hi = int(self.bounds[b]), int(self.bounds[b + 1])
        local = self.by_segment[b]
        bits = np.uint64(1) << np.arange(len(local), dtype=np.uint64)
        made = np.append((inside * bits).sum(axis=1, dtype=np.uint64), bits.sum(dtype=np.uint64))
        beyond = (self.last_reader[local] >= hi) * bits
        out = np.append((crossing * bits).sum(axis=1, dtype=np.uint64), beyond.sum(dtype=np.uint64))
        masks = np.array([*ideals, (1 << (hi - lo)) - 1], dtype=np.uint64)
        selected = self.pairs_by_segment[b]
        selected = selected[self.pair_op[selected] < hi]
        reads = np.zeros(hi - lo, dtype=np.uint64)  # per op, the segment's tensors it reads
        np.bitwise_or.at(
            reads, self.pair_op[selected] - lo, bits[np.searchsorted(local, self.pair_tensor[selected])]
        )
        times = self.times[lo:hi]
        read = (masks, made, out, reads, self.size[local], times)
        key = ("nested", self.upper, *(x.tobytes() for x in read))
        if key in self.repeats:
            kept, counted = self.repeats[key]
            if not self._over_budget(b, counted):
                self.nested_count += counted
                self.nested_parts[b] = kept
            return
        # the segment's own sums (a stage's time does not depend on what comes before it)
        partial = np.vstack([_members(ideals, hi - lo).astype(float) @ times, times.sum(axis=0)])
        read_by = _bit_tables(reads)
        kinds = self.kinds  # one column per distinct (op times, best link)
        priced = _bit_tables(self.comm(self.size[local], np.ones(len(local)))[:, kinds])  # per tensor
        singles = np.column_stack([np.ones(len(local)), self.size[local]])  # (count, bytes) per tensor
        far = None if self.remote is None else _bit_tables(_priced(singles, self.remote))
        partial = partial[:, kinds]
        kept: list[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]] = []  # kind, sides, rows, time
        counted = 0  # pairs × kinds of this segment so far
        step = max(1, 2 * _NESTED_CHUNK // len(masks))
        for low in range(1, len(ideals), step):
            # an ideal never sorts before one it contains (:func:`_by_work`): ends lie further on
            starts, ends = masks[low : low + step, None], masks[None, low + 1 :]
            i, j = np.nonzero(((ends & starts) == starts) & (ends != starts))
            i += low
            j += low + 1
            if time.perf_counter() > self.nested_deadline:  # a later call with more time may finish it
                self.price_nested = False
                return
            counted += len(i) * len(kinds)
            if self._over_budget(b, counted):
                return
            received = _looked_up(read_by, masks[j] & ~masks[i]) & made[i]
            sent = out[j] & ~made[i]  # disjoint from received: one lookup prices both
            compute = partial[j] - partial[i]
            if far is None:
                variants = {0: compute + _looked_up(priced, received | sent)}
            else:  # also opening (2) and/or filling (1) a group of hosts: received/sent across hosts
                near_in, near_out = _looked_up(priced, received), _looked_up(priced, sent)
                fast = compute + near_in + near_out
                within = (fast <= self.upper).any(axis=1)  # the slower variants only where this fits
                i, j, received, sent = i[within], j[within], received[within], sent[within]
                compute, near_in, near_out = compute[within], near_in[within], near_out[within]
                far_in, far_out = _looked_up(far, received)[:, None], _looked_up(far, sent)[:, None]
                variants = {
                    0: fast[within],
                    1: compute + near_in + far_out,
                    2: compute + far_in + near_out,
                    3: compute + far_in + far_out,
                }
            for sides, time_ in variants.items():
                for column in range(len(kinds)):
                    fits = time_[:, column] <= self.upper
                    chosen = _staircase(i[fits], j[fits], time_[fits, column])
                    rows = (i[fits][chosen].astype(np.int32), j[fits][chosen].astype(np.int32))
                    entry = (*rows, time_[fits, column][chosen])
                    kept.extend((kind, sides, *entry) for kind in np.flatnonzero(self.kind_of == column))
        self.nested_count += counted
        self.nested_parts[b] = kept
        self.repeats[key] = (kept, counted)

    def _over_budget(self, b: int, counted: int) -> bool:
        """Whether ``counted`` more nested pairs of segment ``b`` pass :data:`_NESTED_PAIRS`; if
        so the segment and those after it stay unpriced."""
        if self.nested_count + counted <= _NESTED_PAIRS:
            return False
        self.nested_parts[b], self.price_nested = [], False
        return True

    def relaxed(self, b: int, lo: int, hi: int, prefix: np.ndarray, first: int, reference: int) -> None:
        """The positions of segment ``b`` relaxed to cells (module docstring, *Positions*), the
        first at row ``first``. All but the compute before the segment and the rows is the same
        for segments of one shape (:meth:`_shape_of`), so it is found once per shape: the
        110k-op MoE's 61 layers took 2.7 s a reference type, one at a time."""
        key = ("relaxed", reference, self.cells, *self._shape_of(b, lo, hi))
        if key not in self.repeats:
            self.repeats[key] = self._relaxed_cells(b, lo, hi, reference)
        end, start, amounts, interior, inner = self.repeats[key]
        if inner is not None:
            self.cell_stages.append((first + 1, inner))
        self.add(
            np.vstack([prefix[None, :], prefix[None, :] + end]),
            np.vstack([prefix[None, :], prefix[None, :] + start]),
            np.vstack([self.crossing[b][::-1], amounts]),
            np.array([first] + [first + 1 + self.cells] * self.cells),
            np.vstack([self.boundary_handed(b)[None, :], np.zeros((self.cells, 2))]),
            np.vstack([self.comm(*self.crossing[b])[None, :], interior]),
            np.arange(self.cells + 1) > 0,
        )

    def _shape_of(self, b: int, lo: int, hi: int) -> tuple:
        """What the cells of segment ``b`` depend on, relative to its first op: whether that
        op is a dominator, the ops' times, and each tensor the segment makes (its place among
        them, its maker, its readers, its bytes)."""
        pairs = self.pairs_by_segment[b]
        _, tensor = np.unique(self.pair_tensor[pairs], return_inverse=True)
        return (
            bool(self.heads[lo]),
            hi - lo,
            self.times[lo:hi].tobytes(),
            tensor.astype(np.int64).tobytes(),
            (self.producer[self.pair_tensor[pairs]] - lo).tobytes(),
            (self.pair_op[pairs] - lo).tobytes(),
            self.size[self.pair_tensor[pairs]].tobytes(),
        )

    def _relaxed_cells(self, b: int, lo: int, hi: int, reference: int) -> tuple:
        """For :meth:`relaxed`: per cell, the least compute of a stage ending (``end``) and
        the most of one starting there (``start``), both less the compute before the segment;
        the crossing tensors' (count, bytes) and time on each type's best link; and what
        stages inside the segment exchange (:meth:`inner_stages`, ``None``: nothing known)."""
        times = self.times[lo:hi]
        totals = times.sum(axis=0)
        cuts = np.linspace(0.0, totals[reference], self.cells + 1)
        least, least_rest = self.work_curves(b, lo, hi, reference)
        end = np.column_stack([np.interp(cuts[:-1], xs, ys) for xs, ys in least])
        rest = cuts[-1] - cuts[1:]
        start = totals[None, :] - np.column_stack([np.interp(rest, xs, ys) for xs, ys in least_rest])
        local = self.by_segment[b]
        always = (
            local[(self.producer[local] == lo) & (self.last_reader[local] >= hi)]
            if self.heads[lo]
            else local[:0]
        )
        # inputs from the segment of each op w (d_b's tensors to d_{b+1} excluded: always counted)
        pairs = self.pairs_by_segment[b]
        pairs = pairs[~np.isin(self.pair_tensor[pairs], always)]
        readers = self.pair_op[pairs]
        inner = (readers >= lo) & (readers < hi)
        size = np.bincount(readers[inner] - lo, self.size[self.pair_tensor[pairs][inner]], minlength=hi - lo)
        count = np.bincount(readers[inner] - lo, minlength=hi - lo).astype(float)
        skip = 1 if self.heads[lo] else 0
        extra = self.comm(size[skip:], count[skip:]).min(axis=0) if hi - lo > skip else 0.0 * self.latency
        touched = self.touched_branches(b, lo, hi, times[:, reference], cuts)  # cells × (count, bytes)
        branches = self.branch_comm(b, lo, hi, reference, cuts[:-1], cuts[1:])  # cells × types
        branches, received = self.shared_inputs(b, lo, hi, reference, cuts, branches, always)
        through = np.array([len(always), self.size[always].sum()], dtype=float)  # see _Inner
        stages = self.inner_stages(b, lo, hi, reference, cuts, received)
        if stages is not None:
            stages = (*stages, through)
        interior = self.comm(through[1], through[0])[None, :] + np.maximum(extra[None, :], branches)
        return end, start, through + touched, interior, stages

    def segment_branches(self, b: int, lo: int, hi: int) -> _Branches | None:
        """The branches of segment ``b`` (see :class:`_Branches`), or ``None`` when its join has
        fewer than three predecessors in the segment; found once per segment."""
        if b not in self.branches:
            self.branches[b] = self._find_branches(b, lo, hi)
        return self.branches[b]

    def _inner_edges(self, b: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """The (producer, reader) pairs of segment ``b``'s tensors read inside it, in local
        op indices, each once per tensor read."""
        pairs = self.pairs_by_segment[b]
        inner = self.pair_op[pairs] < hi
        return self.producer[self.pair_tensor[pairs][inner]] - lo, self.pair_op[pairs][inner] - lo

    def segment_predecessors(self, b: int, lo: int, hi: int) -> list[list[int]]:
        """Each op's distinct predecessors in segment ``b`` (local indices)."""
        predecessors: list[list[int]] = [[] for _ in range(hi - lo)]
        for u, v in set(zip(*(side.tolist() for side in self._inner_edges(b, lo, hi)), strict=True)):
            predecessors[v].append(u)
        return predecessors

    def _find_branches(self, b: int, lo: int, hi: int) -> _Branches | None:
        source, target = self._inner_edges(b, lo, hi)
        if not len(target):
            return None
        join = int(np.bincount(target, minlength=hi - lo).argmax())
        feeding = np.unique(source[target == join])
        if len(feeding) < 3:
            return None
        predecessors = self.segment_predecessors(b, lo, hi)
        label = branch_labels(predecessors, join)
        ancestors = np.zeros(hi - lo, dtype=bool)  # of J, by the predecessors' transitive closure
        ancestors[join] = True
        for u in range(join, -1, -1):
            if ancestors[u]:
                ancestors[predecessors[u]] = True
        return _Branches(join, feeding, label, ancestors, predecessors)

    def join_outside(self, found: _Branches, work: np.ndarray, upper: np.ndarray) -> np.ndarray:
        """Whether an ideal of the segment worth at most ``upper`` of ``work`` certainly leaves
        the join out: it is worth less than the join and its ancestors, or those are the whole
        segment (an ideal holding the join is then the whole segment, which no cell is)."""
        if found.ancestors.all():
            return np.ones(np.shape(upper), dtype=bool)
        return np.asarray(upper) <= work[found.ancestors].sum()

    def least_tensors(self, b: int, lo: int, hi: int, found: _Branches) -> np.ndarray:
        """Per op of the segment, at each branch's feeding op, the branch's smallest tensor that
        some op reads (``inf`` elsewhere): what a branch touched by a cut sends at least."""
        smallest = np.full(hi - lo, np.inf)
        made = self.by_segment[b]
        mine = found.label[self.producer[made] - lo] >= 0
        np.minimum.at(smallest, found.label[self.producer[made[mine]] - lo], self.size[made[mine]])
        return smallest

    def touched_branches(self, b: int, lo: int, hi: int, work: np.ndarray, cuts: np.ndarray) -> np.ndarray:
        """Per cell, (count, bytes) of tensors certainly crossing a cut in it, one per *branch*
        the cut's ideal ``P`` touches (zero when none is certain): :meth:`branch_tensors` of
        the sets holding the cells' lower ends."""
        return self.branch_tensors(b, lo, hi, work, cuts[:-1], cuts[1:])

    def branch_tensors(
        self, b: int, lo: int, hi: int, work: np.ndarray, held: np.ndarray, upper: np.ndarray
    ) -> np.ndarray:
        """(count, bytes) of the tensors certainly sent out of a set ``S`` of the segment's ops
        holding at least ``held`` of ``work`` and lying in an ideal worth at most ``upper``
        (arrays of one shape; zero when nothing is certain), one per branch ``S`` touches.

        While the join is outside the ideal (certain when ``upper`` is below the work of the
        join and its ancestors, or when they are the whole segment), every branch ``S`` meets
        has an edge leaving the ideal from an op of ``S`` (its path to the join leaves the
        ideal after that op): a tensor of its own.
        ``S``'s work is at most the ops outside branches plus the branches it meets, so to hold
        ``held`` it meets at least as many as the heaviest branches need; each costs at least
        its smallest tensor."""
        shape = (*np.shape(held), 2)
        found = self.segment_branches(b, lo, hi)
        if found is None:
            return np.zeros(shape)
        label, feeding = found.label, found.feeding
        branch = label >= 0
        weights = np.bincount(label[branch], work[branch], minlength=hi - lo)[feeding]
        smallest = self.least_tensors(b, lo, hi, found)[feeding]
        least = np.sort(np.where(np.isfinite(smallest), smallest, 0.0))
        others = float(work[~branch].sum())
        heaviest = np.cumsum(np.sort(weights)[::-1])
        needed = held - others - _SAFETY * max(float(work.sum()), 1e-300)
        count = np.where(needed > 0, np.searchsorted(heaviest, needed, side="left") + 1, 0)
        count = np.minimum(count, len(feeding))
        count[~self.join_outside(found, work, upper)] = 0  # the join may be in it: nothing certain
        bytes_ = np.concatenate([[0.0], np.cumsum(least)])[count]
        return np.stack([count.astype(float), bytes_], axis=-1).reshape(shape)

    def branch_comm(
        self, b: int, lo: int, hi: int, reference: int, held: np.ndarray, upper: np.ndarray
    ) -> np.ndarray:
        """Per type (last axis), the least time, over the type's best link, of the tensors the
        branches' parts in an ideal ``P`` send out, when ``P`` holds at least ``held`` of the
        segment's work on ``reference`` and at most ``upper`` (zero when the join may be in
        ``P``); at least :meth:`branch_tensors`' one tensor per branch.

        ``P`` meets each branch ``B`` in an ideal ``D`` of ``B``; the tensors made in ``D`` and
        read in ``B \\ D``, by the join or outside the segment certainly cross (the join is
        not in ``P``), and tensors of distinct branches are distinct. Relaxed to fractions, the
        least total for work ``W`` takes, in increasing slope, the segments of each branch's
        lower convex hull of (work, time) over its ideals (:meth:`comm_curves`). An MoE
        expert's cheapest part to hold, up to its gated product, still sends one tensor for
        two thirds of the expert's work, not a whole expert's."""
        found = self.segment_branches(b, lo, hi)
        times = self.times[lo:hi]
        if found is None:
            return np.zeros((*np.shape(held), times.shape[1]))
        work = times[:, reference]
        need = np.maximum(held - float(work[found.label < 0].sum()) - _SAFETY * float(work.sum()), 0.0)
        hulls = np.stack(
            [np.interp(need, xs, ys) for xs, ys in self.comm_curves(b, lo, hi, reference)], axis=-1
        )
        counted = self.branch_tensors(b, lo, hi, work, held, upper)
        hulls[~self.join_outside(found, work, upper)] = 0.0
        return np.maximum(hulls, self.comm(counted[..., 1], counted[..., 0]))

    def comm_curves(self, b: int, lo: int, hi: int, reference: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per type, breakpoints ``(work, time)`` of the least communication of the branches'
        parts in an ideal (see :meth:`branch_comm`); a branch with more than
        :data:`_GROUP_IDEALS` ideals counts its least tensor spread over its work."""
        times = self.times[lo:hi]
        pieces = []
        for members, masks, shape in self._branch_shapes(b, lo, hi):
            key = ("comm", masks, shape, times[members].tobytes(), reference)
            if key not in self.hull_cache:
                self.hull_cache[key] = self._branch_comm_hull(masks, shape, times[members], reference)
            pieces.append(self.hull_cache[key])
        return [_knapsack(_joined([piece[t] for piece in pieces])) for t in range(times.shape[1])]

    def sends_curve(self, b: int, lo: int, hi: int, reference: int) -> tuple[np.ndarray, np.ndarray]:
        """Breakpoints ``(work, bytes)`` of the least a set of the branches' ops sends out of
        itself, each branch met in a *part* ``D₂ \\ D₁`` of two of its ideals (what a stage
        inside the segment holds of it; see :meth:`inner_stages`), relaxed to a fractional
        knapsack over each branch's lower convex hull of (work, bytes) over its parts."""
        work = self.times[lo:hi, reference]
        pieces = []
        for members, masks, shape in self._branch_shapes(b, lo, hi):
            key = ("sends", masks, shape, work[members].tobytes())
            if key not in self.hull_cache:
                self.hull_cache[key] = _parts_hull(masks, shape, work[members])
            pieces.append(self.hull_cache[key])
        return _knapsack(_joined(pieces))

    def _branch_shapes(self, b: int, lo: int, hi: int) -> list[tuple[np.ndarray, tuple, tuple]]:
        """Per branch of segment ``b``: its ops (local indices), their predecessor bitmasks
        within the branch, and its tensors as sorted (producer position, bytes, readers mask in
        the branch, read by the join or beyond the segment) — a branch's shape, which keys the
        hulls built from it (an MoE layer's 256 experts are one shape)."""
        found = self.segment_branches(b, lo, hi)
        assert found is not None
        pairs = self.pairs_by_segment[b]
        tensors, readers = self.pair_tensor[pairs], self.pair_op[pairs] - lo
        shapes = []
        for head in found.feeding:
            members = np.flatnonzero(found.label == head)
            position = np.full(hi - lo, -1, dtype=np.int64)
            position[members] = np.arange(len(members))
            mine = np.flatnonzero(position[self.producer[tensors] - lo] >= 0)  # tensors made in the branch
            outputs: dict[int, list] = {}  # tensor → [producer position, bytes, readers mask, read beyond]
            for t, r in zip(tensors[mine].tolist(), readers[mine].tolist(), strict=True):
                entry = outputs.setdefault(
                    t, [int(position[self.producer[t] - lo]), float(self.size[t]), 0, False]
                )
                if 0 <= r < hi - lo and position[r] >= 0:
                    entry[2] |= 1 << int(position[r])
                elif r == found.join or not 0 <= r < hi - lo:
                    entry[3] = True  # read by the join or beyond the segment: outside the ideal
            masks = tuple(
                sum(1 << int(position[u]) for u in found.predecessors[int(v)] if position[u] >= 0)
                for v in members
            )
            shapes.append((members, masks, tuple(tuple(entry) for entry in sorted(outputs.values()))))
        return shapes

    def _branch_comm_hull(
        self, masks: tuple[int, ...], outputs: tuple, times: np.ndarray, reference: int
    ) -> list:
        """Per type, the segments of one branch's lower convex hull of (work, communication)."""
        ideals = _downsets(masks, _GROUP_IDEALS)
        total = float(times[:, reference].sum())
        if ideals is None or total <= 0:
            least = min(size for _, size, _, _ in outputs) if outputs else 0.0
            time_ = self.comm(least, 1.0 if outputs else 0.0)
            return [(np.array([max(total, 1e-300)]), np.array([value])) for value in time_]
        inside = np.array([[ideal >> i & 1 for i in range(len(masks))] for ideal in ideals], dtype=bool)
        work = inside.astype(float) @ times[:, reference]
        count = np.zeros(len(ideals))
        size = np.zeros(len(ideals))
        for producer, bytes_, readers, beyond in outputs:
            read_outside = np.array([beyond or bool(readers & ~ideal) for ideal in ideals])
            crossing = inside[:, producer] & read_outside
            count += crossing
            size += crossing * bytes_
        comm = self.comm(size, count)  # ideals × types
        return [_lower_hull(work, comm[:, t]) for t in range(comm.shape[1])]

    def shared_inputs(
        self,
        b: int,
        lo: int,
        hi: int,
        reference: int,
        cuts: np.ndarray,
        branches: np.ndarray,
        always: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``branches`` (per cell and type, what a cut's branch parts send) plus, where it is
        certain, a tensor made outside the branches and read by them (an MoE layer's normalised
        hidden state, read by every expert's gather): the best such tensor alone. Returned for
        the cut, and for what a stage from the cut to the boundary after it receives (a tensor
        read beyond the block need not come to it).

        Its maker ``u`` is in the cut's ideal ``P`` when ``P``'s work exceeds that of the ops
        that do not descend from ``u`` (or ``u`` is the block's head). Then the tensor crosses
        the cut unless all its readers are in ``P``; a reader beyond the block never is, nor the
        join while it is certainly outside ``P`` (as in :meth:`branch_tensors`). If they all
        are, each branch that reads it is touched and sends at least its least tensor: ``P``
        pays the smaller of the tensor plus ``branches`` and the larger of those branch tensors
        and ``branches``. Tensors of the branches and this one are distinct."""
        found = self.segment_branches(b, lo, hi)
        if found is None:
            return branches, branches
        work = self.times[lo:hi, reference]
        join_out = self.join_outside(found, work, cuts[1:])
        made = self.by_segment[b]
        pairs = self.pairs_by_segment[b]
        mine = found.label[self.producer[made] - lo] >= 0
        smallest = self.least_tensors(b, lo, hi, found)
        least = self.comm(np.where(np.isfinite(smallest), smallest, 0.0), np.isfinite(smallest).astype(float))
        cut, received = branches, branches
        for tensor in made[~mine]:
            maker = int(self.producer[tensor]) - lo
            readers = self.pair_op[pairs[self.pair_tensor[pairs] == tensor]] - lo
            inside = (readers >= 0) & (readers < hi - lo)
            read_by = found.label[readers[inside]]
            if tensor in always or maker == found.join or not (read_by >= 0).any():
                continue
            holding = _holding_work(found.predecessors, work, maker)
            held = (maker == 0 and self.heads[lo]) | (cuts[:-1] > holding)
            cost = self.comm(self.size[tensor], 1.0)[None, :] + branches
            touched = least[np.unique(read_by[read_by >= 0])].sum(axis=0)
            in_block = np.minimum(cost, np.maximum(touched[None, :], branches))  # its readers in it
            if (readers[inside] == found.join).any():
                in_block = cost
            inner = np.where((held & join_out)[:, None], in_block, branches)
            received = np.maximum(received, inner)
            beyond = np.where(held[:, None], cost, branches) if (~inside).any() else inner
            cut = np.maximum(cut, beyond)
        return cut, received

    def inner_stages(
        self, b: int, lo: int, hi: int, reference: int, cuts: np.ndarray, branches: np.ndarray
    ) -> tuple[np.ndarray, ...] | None:
        """What a stage that starts in a cell of segment ``b`` and ends by the boundary after it
        certainly exchanges, for :meth:`_Relaxation.cell_limits` (``None`` without branches):

        - ending in cell ``j ≥ i`` it sends one tensor per branch it touches (it holds at least
          ``x_j − x_{i+1}`` of work, inside an ideal worth at most ``x_{j+1}``), and at least
          the bytes its parts of the branches send (:meth:`sends_curve`; the 110k-op MoE at
          k = 64, chain bound alone in 40 s: 21.6120 → 21.6762 ms); it receives at least the
          least tensor of each branch it touches or what a branch's first op reads from its
          start's ideal (:meth:`head_inputs`), whichever is less;
        - ending at the boundary it holds the join, so it receives every tensor the branches'
          parts in its start's ideal ``P`` send out (the rest of each branch lies between ``P``
          and the join): ``branches``, per cell and type, as :meth:`branch_comm` prices them."""
        found = self.segment_branches(b, lo, hi)
        if found is None:
            return None
        work = self.times[lo:hi, reference]
        g = len(cuts) - 1
        held = cuts[None, :-1] - cuts[1:, None]  # start cell i (rows) × end cell j (columns)
        upper = np.broadcast_to(cuts[None, 1:], (g, g))
        touched = self.branch_tensors(b, lo, hi, work, held, upper)  # i × j × (count, bytes)
        need = np.maximum(held - float(work[found.label < 0].sum()) - _SAFETY * float(work.sum()), 0.0)
        parts = np.interp(need, *self.sends_curve(b, lo, hi, reference))
        parts[~self.join_outside(found, work, upper)] = 0.0
        sent = touched.copy()
        sent[..., 1] = np.maximum(touched[..., 1], parts)
        send = self.comm(sent[..., 1], sent[..., 0])  # i × j × types
        send[np.tril_indices(g, -1)] = np.inf  # a stage never ends before it starts
        heads = self.head_inputs(b, lo, hi, work, cuts)
        reads = self.comm(touched[..., 1], touched[..., 0])
        return send, sent, touched, reads, branches, heads, self.comm(heads[:, 1], heads[:, 0])

    def head_inputs(self, b: int, lo: int, hi: int, work: np.ndarray, cuts: np.ndarray) -> np.ndarray:
        """Per cell, (count, bytes) at most of the tensors a first op of a branch (one with no
        predecessor in its branch) reads from ops certainly in a cut's ideal ``P`` there (the
        fewest and the smallest over those ops; an MoE expert's gather reads the layer's
        normalised hidden state and its routes).

        A stage ``S`` from ``P`` touching a branch holds an op of it whose predecessors in the
        branch are all in ``P``. Unless that op is a first op, it reads a tensor made in the
        branch, which ``S`` receives — one per branch touched, at least the least tensor of the
        branch, as :meth:`branch_tensors` counts what ``S`` sends. If it is a first op, ``S``
        receives what it reads from ``P``. So ``S`` receives at least the smaller of the two."""
        found = self.segment_branches(b, lo, hi)
        assert found is not None
        predecessors = found.predecessors
        firsts = [
            v
            for v in np.flatnonzero(found.label >= 0).tolist()
            if not any(found.label[u] == found.label[v] for u in predecessors[v])
        ]
        pairs = self.pairs_by_segment[b]
        tensors, readers = self.pair_tensor[pairs], self.pair_op[pairs] - lo
        makers = self.producer[tensors] - lo
        held_from: dict[int, float] = {}  # per maker: the work above which every ideal holds it

        def holds_from(maker: int) -> float:
            if maker not in held_from:
                head = maker == 0 and bool(self.heads[lo])
                held_from[maker] = -np.inf if head else _holding_work(predecessors, work, maker)
            return held_from[maker]

        count = np.full(len(cuts) - 1, np.inf)
        size = np.full(len(cuts) - 1, np.inf)
        for v in firsts:
            inputs = np.flatnonzero(readers == v)
            inputs = inputs[found.label[makers[inputs]] != found.label[v]]
            read = np.zeros((len(cuts) - 1, 2))
            for t in np.unique(tensors[inputs]).tolist():
                maker = int(self.producer[t]) - lo
                certain = cuts[:-1] > holds_from(maker)
                read[certain] += (1.0, float(self.size[t]))
            count, size = np.minimum(count, read[:, 0]), np.minimum(size, read[:, 1])
        return np.stack([count, size], axis=-1)  # every branch has a first op: none is left at inf

    def work_curves(self, b: int, lo: int, hi: int, reference: int) -> tuple[list, list]:
        """Per type, the breakpoints ``(xs, ys)`` of ``L_τ`` (least time of an ideal of the
        segment worth ``x`` on ``reference``) and of its twin for up-sets, both relaxed to
        fractions of *groups*: each branch (:meth:`segment_branches`), or in a segment without
        branches each weakly connected component of its ops but its head (the chains hung on
        T5's encoder output, :mod:`partition.tower_bound`), with at most :data:`_GROUP_IDEALS`
        ideals of its own; every other op alone.

        An ideal ``P`` meets a branch or component in an ideal of it (and the rest of the
        segment in an up-set), so its time is at least the sum, over groups, of each group's
        lower convex hull of (work, time) over its ideals; the least such sum for total work
        ``x`` takes the hull segments in increasing slope (a fractional knapsack). Without the groups an MoE
        expert's cheap element-wise ops, nearly as fast on an A100 as on an MI300X, would stand
        in for its matmuls."""
        found = self.segment_branches(b, lo, hi)
        predecessors = found.predecessors if found is not None else self.segment_predecessors(b, lo, hi)
        if found is not None:
            candidates = [np.flatnonzero(found.label == head) for head in found.feeding]
        else:
            keep = np.ones(hi - lo, dtype=bool)
            keep[0] = not self.heads[lo]  # the dominator head feeds every component
            candidates = _components(predecessors, keep)
        groups: list[np.ndarray] = []
        alone = np.ones(hi - lo, dtype=bool)
        for members in candidates:
            if len(members) > 1:
                groups.append(members)
                alone[members] = False
        groups.extend(np.array([v]) for v in np.flatnonzero(alone))
        times = self.times[lo:hi]
        down: list[tuple[np.ndarray, np.ndarray]] = []
        up: list[tuple[np.ndarray, np.ndarray]] = []
        pieces = [self.group_hulls(predecessors, members, times, reference) for members in groups]
        for t in range(times.shape[1]):
            for side, curves in ((0, down), (1, up)):
                curves.append(_knapsack(_joined([piece[side][t] for piece in pieces])))
        return down, up

    def group_hulls(
        self, predecessors: list[list[int]], members: np.ndarray, times: np.ndarray, reference: int
    ) -> tuple:
        """Per side (ideals, up-sets) and type, the segments ``(dx, dy)`` of one group's lower
        convex hull of (work on ``reference``, time), ``dx > 0``; cached by the group's shape."""
        if len(members) == 1:
            work, time_ = times[members[0], reference], times[members[0]]
            if work <= 0:
                empty = [(np.zeros(0), np.zeros(0))] * len(time_)
                return empty, empty
            single = [(np.array([work]), np.array([value])) for value in time_]
            return single, single
        position = {int(v): i for i, v in enumerate(members)}
        masks = tuple(
            sum(1 << position[u] for u in predecessors[int(v)] if int(u) in position) for v in members
        )
        key = (masks, times[members].tobytes(), reference)
        if key not in self.hull_cache:
            ideals = _downsets(masks, _GROUP_IDEALS)
            if ideals is None:  # too many: its ops alone
                parts = [self.group_hulls(predecessors, np.array([v]), times, reference) for v in members]
                self.hull_cache[key] = tuple(
                    [_joined([p[side][t] for p in parts]) for t in range(times.shape[1])] for side in (0, 1)
                )
            else:
                inside = np.array(
                    [[ideal >> i & 1 for i in range(len(members))] for ideal in ideals], dtype=float
                )
                points = inside @ times[members]  # ideals × types
                total = times[members].sum(axis=0)
                self.hull_cache[key] = tuple(
                    [_lower_hull(xy[:, reference], xy[:, t]) for t in range(times.shape[1])]
                    for xy in (points, total[None, :] - points)
                )
        return self.hull_cache[key]


def _components(predecessors: list[list[int]], keep: np.ndarray) -> list[np.ndarray]:
    """The weakly connected components of the ops where ``keep`` holds, by the predecessor
    lists (edges to other ops ignored), each in op order."""
    found = _UnionFind(len(predecessors))
    for v, inputs in enumerate(predecessors):
        for u in inputs:
            if keep[u] and keep[v]:
                found.union(u, v)
    return [np.array(group) for group in found.groups() if keep[group[0]]]


def _holding_work(predecessors: list[list[int]], work: np.ndarray, maker: int) -> float:
    """The work above which every ideal of a segment (ops in local indices, ``predecessors``
    within it, ``work`` per op) holds ``maker``: one without it holds none of its descendants."""
    successors: list[list[int]] = [[] for _ in predecessors]
    for v, preds in enumerate(predecessors):
        for u in preds:
            successors[u].append(v)
    return float(work[~_closure(successors, maker)].sum()) * (1 + 1e-9)


def _closure(neighbours: list[list[int]], v: int) -> np.ndarray:
    """``v`` and every op reachable from it along ``neighbours`` (per op, its list), as a mask."""
    reached = np.zeros(len(neighbours), dtype=bool)
    reached[v] = True
    stack = [v]
    while stack:
        for u in neighbours[stack.pop()]:
            if not reached[u]:
                reached[u] = True
                stack.append(u)
    return reached


def _priced(amounts: np.ndarray, link: tuple[float, float]) -> np.ndarray:
    """The time of (count, bytes) ``amounts`` (last axis) over ``link`` (latency, seconds per
    byte); nothing costs nothing, even over no link at all (infinite latency)."""
    with np.errstate(invalid="ignore"):
        return np.where(amounts[..., 0] > 0, amounts[..., 0] * link[0], 0.0) + np.where(
            amounts[..., 1] > 0, amounts[..., 1] * link[1], 0.0
        )


def _furthest(reaches: dict, key: tuple[int, int, int], starts: dict) -> np.ndarray:
    """For :meth:`_Relaxation._extend_pairs`: the furthest reach (rows × β after × γ before)
    over the start codes ``(receiving code, reach list index) → furthest start`` in ``starts``,
    of the reach lists ``reaches[(*key, receiving code)]``."""
    found = [
        np.where(position >= 0, reaches[(*key, receives)][index][0][position], -1)
        for (receives, index), position in starts.items()
    ]
    return np.max(found, axis=0)


def _starts(source: np.ndarray, codes: dict, last: int) -> dict[tuple[int, int], np.ndarray]:
    """For :meth:`_Relaxation._extend_pairs`: per start code ``(receiving code, reach list
    index)`` of ``codes``, the furthest start per row, β after and γ before, over the source
    states (rows × σ × φ × β × ψ × γ) that code lists, of the stage full when ``last``; codes
    no state reaches are left out."""
    starts = {}
    shape = (len(source), source.shape[3], source.shape[5])
    for key, by_after in codes.items():
        found = np.full(shape, -1, dtype=np.int64)
        for after, (sigma, phi, beta) in by_after.items():
            found[:, after] = source[:, sigma, phi, beta, last].max(axis=1)
        if (found >= 0).any():
            starts[key] = found
    return starts


def _before(cells: int) -> np.ndarray:
    """Per start cell ``i`` (rows) and end cell ``j``, whether ``j < i``."""
    return np.arange(cells)[None, :] < np.arange(cells)[:, None]


def _joined(segments: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Several lists of hull segments ``(dx, dy)`` as one."""
    return np.concatenate([dx for dx, _ in segments]), np.concatenate([dy for _, dy in segments])


def _knapsack(segments: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Breakpoints ``(xs, ys)`` of the fractional knapsack over hull segments ``(dx, dy)``: the
    least ``y`` for each ``x``, the segments taken in increasing slope (each group's hull is
    convex, so its own segments keep their order)."""
    dx, dy = segments
    order = np.argsort(dy / dx, kind="stable")
    return np.concatenate([[0.0], np.cumsum(dx[order])]), np.concatenate([[0.0], np.cumsum(dy[order])])


@functools.lru_cache(maxsize=256)
def _downsets(masks: tuple[int, ...], limit: int) -> tuple[int, ...] | None:
    """Every ideal of a small graph given by predecessor bitmasks (``None`` past ``limit``);
    remembered, as a model's repeated layers give the same graph again and again (Llama-7B's
    69 segments are five graphs)."""
    found, frontier = {0}, [0]
    while frontier:
        grown = []
        for ideal in frontier:
            for u, mask in enumerate(masks):
                if not ideal >> u & 1 and mask & ~ideal == 0 and (ideal | 1 << u) not in found:
                    found.add(ideal | 1 << u)
                    grown.append(ideal | 1 << u)
                    if len(found) > limit:
                        return None
        frontier = grown
    return tuple(sorted(found))


def _lower_hull(xs: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Segments ``(dx, dy)`` (``dx > 0``, slopes increasing) of the lower convex hull of the
    points from the origin (one of them) to the largest ``x``."""
    hull: list[tuple[float, float]] = []
    for x, y in sorted(zip(xs.tolist(), ys.tolist(), strict=True)):
        if hull and x == hull[-1][0]:
            continue  # sorted: the first point at an x is its lowest
        while len(hull) >= 2 and (hull[-1][0] - hull[-2][0]) * (y - hull[-2][1]) <= (
            hull[-1][1] - hull[-2][1]
        ) * (x - hull[-2][0]):
            hull.pop()
        hull.append((x, y))
    corners = np.array(hull)
    return np.diff(corners[:, 0]), np.diff(corners[:, 1])


def _parts_hull(masks: tuple[int, ...], outputs: tuple, work: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Segments of one branch's lower convex hull of (work, bytes sent out) over its *parts*
    ``C = D₂ \\ D₁``, ``D₁ ⊆ D₂`` ideals of it (``C = ∅`` the origin). ``C`` sends each tensor
    made in it and read outside ``D₂`` (nothing in ``D₁`` reads it: ``D₁`` is an ideal without
    its producer) or by the join or beyond the segment. Past :data:`_GROUP_IDEALS` ideals, the
    least tensor spread over the branch's work (a part holding work sends at least one)."""
    total = float(work.sum())
    if total <= 0 or not outputs:
        return np.zeros(0), np.zeros(0)  # no work that a stage must hold, or nothing to send
    ideals = _downsets(masks, _GROUP_IDEALS)
    if ideals is None:
        return np.array([total]), np.array([min(size for _, size, _, _ in outputs)])
    inside = np.array([[ideal >> i & 1 for i in range(len(masks))] for ideal in ideals], dtype=bool)
    sent = np.zeros((len(ideals), len(masks)))  # per ideal D₂ and producer: the bytes leaving D₂
    for producer, bytes_, readers, beyond in outputs:
        leaves = np.array([beyond or bool(readers & ~ideal) for ideal in ideals])
        sent[:, producer] += (inside[:, producer] & leaves) * bytes_
    held = inside.astype(float) @ work
    # bytes[D₁, D₂]: what D₂ sends but its producers in D₁
    bytes_ = np.maximum(sent.sum(axis=1)[None, :] - inside.astype(float) @ sent.T, 0.0)
    np.fill_diagonal(bytes_, 0.0)  # D₁ = D₂: the empty part, exactly the origin
    nested = np.array([[d1 & ~d2 == 0 for d2 in ideals] for d1 in ideals])
    parts_work = held[None, :] - held[:, None]
    return _lower_hull(parts_work[nested], bytes_[nested])


def _bit_tables(values: np.ndarray) -> np.ndarray:
    """For masks of ``len(values)`` ≤ 64 bits, ``values[k]`` (per bit ``k``; rows may be vectors)
    combined over the set bits of each 16-bit piece (pieces × 65 536 values × the value's own
    shape): summed, or OR-ed when they are masks themselves. :func:`_looked_up` combines a
    mask's pieces."""
    pieces = max(1, -(-len(values) // _PIECE))
    padded = np.zeros((pieces * _PIECE, *values.shape[1:]), dtype=values.dtype)
    padded[: len(values)] = values
    tables = np.zeros((pieces, 1 << _PIECE, *values.shape[1:]), dtype=values.dtype)
    for bit in range(_PIECE):  # a value's table entry is its lower bits' entry with this bit added
        size = 1 << bit
        for piece in range(pieces):
            low, high = tables[piece, :size], tables[piece, size : 2 * size]
            np.copyto(
                high,
                low | padded[piece * _PIECE + bit]
                if values.dtype == np.uint64
                else low + padded[piece * _PIECE + bit],
            )
    return tables


def _looked_up(tables: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """Per mask (uint64), the values of its set bits combined as :func:`_bit_tables` made them."""
    combine = np.bitwise_or if tables.dtype == np.uint64 else np.add
    piece = np.uint64((1 << _PIECE) - 1)
    result = tables[0][(masks & piece).astype(np.intp)]
    for position in range(1, len(tables)):
        combine(
            result,
            tables[position][((masks >> np.uint64(_PIECE * position)) & piece).astype(np.intp)],
            out=result,
        )
    return result


def _staircase(start: np.ndarray, end: np.ndarray, time_: np.ndarray) -> np.ndarray:
    """Which entries to keep of stages listed by start (each start's entries together, ends
    increasing): those faster than every entry of the same start with a later end. The furthest
    end within a bottleneck is then always kept; ties are kept, and rounding cannot drop an
    entry (subtracting one offset per start is monotone)."""
    if not len(start):
        return np.zeros(0, dtype=bool)
    start, time_ = start[::-1], time_[::-1]
    group = np.cumsum(np.r_[True, start[1:] != start[:-1]])
    spread = float(time_.max() - time_.min())
    shifted = time_ - group * (2.0 * spread + abs(float(time_.max())) + 1e-300)
    before = np.minimum.accumulate(shifted)
    keep = np.r_[True, shifted[1:] <= before[:-1]]
    return keep[::-1]


def _members(ideals: list[int], width: int) -> np.ndarray:
    """``ideals`` (bitsets over ``width`` ≤ 64 ops) as a boolean ideal × op matrix."""
    masks = np.array(ideals, dtype=np.uint64).reshape(-1, 1)
    return ((masks >> np.arange(width, dtype=np.uint64)) & np.uint64(1)).astype(bool)


def _extremes(members: np.ndarray, feeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per ideal (rows of ``members``, one segment's ops), its maximal ops (none of whose readers
    in the segment it holds) and the rest's minimal ops (all of whose makers in the segment it
    holds), with ``feeds`` the segment's tensors from op to op."""
    out = ~members
    return members & ((members.astype(float) @ feeds.T) == 0), out & ((out.astype(float) @ feeds) == 0)


def _by_work(ideals: list[int], times: np.ndarray) -> list[int]:
    """``ideals`` (bitsets over ops with these times) by compute, then size; compute in integer
    ticks, whose sums are exact, so an ideal never sorts before one it contains."""
    ticks = np.round(times / max(float(times.max()), 1e-300) * 2**40).astype(np.int64)
    members = _members(ideals, len(times)).astype(np.int64)
    return [ideals[i] for i in np.lexsort((members.sum(axis=1), members @ ticks))]


def _ideals(builder: _Builder, b: int, lo: int, hi: int, limit: int) -> list[int] | None:
    """Ideals of segment ``[lo, hi)`` as bitsets by increasing size (the whole segment left
    out: it is the next segment's empty ideal), or ``None`` past ``limit``."""
    preds = [0] * (hi - lo)
    selected = builder.pairs_by_segment[b]
    for t, c in zip(builder.pair_tensor[selected].tolist(), builder.pair_op[selected].tolist(), strict=True):
        if c < hi:
            preds[c - lo] |= 1 << (int(builder.producer[t]) - lo)
    found = _downsets(tuple(preds), limit)
    if found is None:
        return None
    full = (1 << (hi - lo)) - 1
    return sorted((ideal for ideal in found if ideal != full), key=lambda ideal: (ideal.bit_count(), ideal))


def _positions(builder: _Builder, reference: int) -> tuple[_Positions, bool]:
    """The positions, large segments measured on type ``reference``; whether any was relaxed."""
    builder.passes += 1
    for b in range(len(builder.bounds) - 1):  # every segment decided first: how many exact positions
        builder.segment_ideals(b)
    builder.rows, builder.cell_stages = [], []
    relaxed = False
    prefix = np.zeros(builder.times.shape[1])
    first = 0
    firsts = []
    for b in range(len(builder.bounds) - 1):
        relaxed |= builder.segment_positions(b, prefix, first, reference)
        firsts.append(first)
        first += len(builder.rows[-1][0])
        prefix = prefix + builder.times[builder.bounds[b] : builder.bounds[b + 1]].sum(axis=0)
    builder.add(prefix[None, :], prefix[None, :], np.zeros((1, 2)), np.array([first]), np.zeros((1, 2)))
    end, start, comm, threshold, handed, amounts, cell = (
        np.concatenate(parts) for parts in zip(*builder.rows, strict=True)
    )
    send = comm.copy()
    send[-1] = 0.0
    recv = comm.copy()
    recv[0] = 0.0
    inner = None
    if builder.cell_stages:
        # the relaxation of one shape is one object (_Builder.relaxed), numbered as first met
        unique = {id(stages): stages for _, stages in builder.cell_stages}
        number = {key: index for index, key in enumerate(unique)}
        shape = np.array([number[id(stages)] for _, stages in builder.cell_stages])
        parts = zip(*unique.values(), strict=True)
        first = np.array([first for first, _ in builder.cell_stages])
        inner = _Inner(first, shape, *(np.stack(part) for part in parts))
    least = [builder.least_exchanged(b) for b in range(len(builder.bounds) - 1)]
    sent, received = (
        builder.comm(amounts[:, 1], amounts[:, 0])
        for amounts in (np.vstack([*(part[side] for part in least), np.zeros((1, 2))]) for side in (0, 1))
    )
    nested = _nested(builder, firsts, len(end), end.shape[1]) if builder.nested_parts else None
    return (
        _Positions(end, start, send, recv, threshold, handed, amounts, cell, inner, sent, received, nested),
        relaxed,
    )


def _nested(builder: _Builder, firsts: list[int], rows: int, types: int) -> _Nested:
    """The exact segments' nested stages (:meth:`_Builder.nested_stages`) at their rows."""
    covered = np.zeros(rows, dtype=bool)
    parts: dict[tuple[int, int], list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
    for b, kept in builder.nested_parts.items():
        if kept:
            covered[firsts[b] + 1 : firsts[b] + len(builder.segment_ideals(b))] = True
        for kind, sides, start, end, time_ in kept:
            parts.setdefault((sides, kind), []).append((firsts[b] + start, firsts[b] + end, time_))
    for sides, kind in itertools.product(range(4 if builder.remote else 1), range(types)):
        parts.setdefault((sides, kind), [])

    def stacked(part: list, column: int, dtype: type) -> np.ndarray:
        return np.concatenate([entry[column] for entry in part]) if part else np.zeros(0, dtype=dtype)

    columns = [
        {key: stacked(part, column, dtype) for key, part in parts.items()}
        for column, dtype in enumerate((int, int, float))
    ]
    return _Nested(*columns, covered)


class _Relaxation:
    """Feasibility of a bottleneck in the relaxation of the module docstring.

    With ``pairs``, the state also holds the type ``σ`` of the stage that ended last and the type
    ``ν`` the next stage is committed to, and each cut's handed tensors are charged over the
    link from the stage before it to the stage after it (*Handed tensors* in the docstring)."""

    def __init__(
        self, instance: Instance, positions: _Positions, pairs: _Pairs | None = None, hosts: bool = False
    ) -> None:
        self.positions = p = positions
        self.full_end = np.minimum.accumulate((p.end + p.send)[::-1], axis=0)[::-1]
        self.full_start = p.start - p.recv
        none = np.zeros_like(p.end)
        self.least_sent = none if p.least_sent is None else p.least_sent
        self.least_received = none if p.least_received is None else p.least_received
        self.compute_end = np.minimum.accumulate((p.end + self.least_sent)[::-1], axis=0)[::-1]
        self.compute_start = p.start - self.least_received
        k = min(instance.options.stages, len(instance.cluster.devices))
        self.stages = k
        self.counts = tuple(min(c, k) for c in instance.cluster.type_counts)
        self.last = len(p.end) - 1
        self._nested: dict[tuple[float, int, int], np.ndarray] = {}  # the last probe's, per type and sides
        self._sent_over: dict[tuple[float, float], np.ndarray] = {}  # cell stages' sends, per link
        self._received: dict[tuple[int, bool], np.ndarray] = {}  # and receipts, per type and side
        self._codes: dict[tuple[int, int, bool], dict] = {}  # the pair DP's start codes, per stage kind
        self._split_codes: dict[tuple[int, bool, int], dict] = {}  # and split by the stage before
        self._after_cells: dict[tuple[int, int], np.ndarray] = {}  # a full stage after a cell stage
        self._least_costs: dict[tuple, np.ndarray] = {}  # stages from cells: least cost per end, per kind
        self.sides: list[np.ndarray] | None = None  # per type and count vector: 2 · opens + fills
        self.opens_next: list[np.ndarray] = []
        # per two types (index ``types``: none): in other groups of hosts (none without groups)
        self.apart = np.zeros((len(self.counts) + 1,) * 2, dtype=bool)
        self.remote: tuple[float, float] | None = None  # the inter-host link (latency, s per byte)
        # (with overlap communication is dropped: the positions price none)
        priced = hosts and p.crossing is not None and not instance.options.overlap
        located = _host_groups(instance) if priced else None
        if located is not None:
            self.remote = _inter_host(instance)
            # on a relaxed cell nothing crosses that is known, yet ``send``/``recv`` charge what a
            # stage certainly exchanges there at the best link: the larger price holds
            across = _priced(p.crossing, self.remote)[:, None]
            sent, received = np.maximum(p.send, across), np.maximum(p.recv, across)
            self.remote_full_end = np.minimum.accumulate((p.end + sent)[::-1], axis=0)[::-1]
            self.remote_full_start = p.start - received
            vectors, previous_of, _ = _count_layers(self.counts, self.stages)
            self.sides = _host_sides(vectors, previous_of, *located)
            # per type and count vector: a stage of that type after them opens its group
            in_group = _in_groups(vectors, located[0], len(located[1]))
            self.opens_next = [in_group[:, group] == 0 for group in located[0]]
            group = np.append(located[0], -1)  # index ``types``: no stage
            self.apart = (group[:, None] != group[None, :]) & (group[:, None] >= 0) & (group[None, :] >= 0)
        known = p.handed is not None and bool((p.handed > 0).any())
        self.pairs = pairs if known else None
        if self.pairs is not None:
            self._pair_arrays()

    def _pair_arrays(self) -> None:
        """Per (κ, ν, strong) the suffix-minimal ends and per (σ, κ, strong) the starts, as in
        :meth:`reach`, with the handed tensors' links added (index ``T``: no stage before or
        after); *strong* ones also price every crossing tensor over the σ → κ (κ → ν) link, which
        holds between two full stages (see :meth:`_feasible_with_pairs`)."""
        p, pairs = self.positions, self.pairs
        types = p.end.shape[1]
        handed, crossing = p.handed, p.crossing
        self.pair_full_end, self.pair_compute_end = {}, {}
        self.pair_full_start, self.pair_compute_start = {}, {}
        for k in range(types):
            for n in range(types + 1):
                weak = p.send[:, k] + pairs.time(handed, k, n, less=k)
                for strong, send in enumerate((weak, np.maximum(weak, pairs.time(crossing, k, n)))):
                    self.pair_full_end[k, n, strong] = np.minimum.accumulate((p.end[:, k] + send)[::-1])[::-1]
                compute = p.end[:, k] + np.maximum(pairs.time(handed, k, n), self.least_sent[:, k])
                self.pair_compute_end[k, n] = np.minimum.accumulate(compute[::-1])[::-1]
            for s in range(types + 1):
                weak = p.recv[:, k] + pairs.time(handed, s, k, less=k)
                for strong, recv in enumerate((weak, np.maximum(weak, pairs.time(crossing, s, k)))):
                    self.pair_full_start[s, k, strong] = p.start[:, k] - recv
                received = np.maximum(pairs.time(handed, s, k), self.least_received[:, k])
                self.pair_compute_start[s, k] = p.start[:, k] - received

    def _combine(self, full: np.ndarray, compute: np.ndarray) -> np.ndarray:
        threshold = self.positions.threshold
        best = np.maximum(np.where(full > threshold, full, -1), np.minimum(compute, threshold))
        return np.maximum.accumulate(np.maximum(best, np.arange(self.last + 1)))

    def reach(self, bottleneck: float, sides: int = 0) -> list[np.ndarray]:
        """Per type, the furthest position a stage reaches from each (a running maximum);
        ``sides`` (2 · opens + fills, see :func:`_host_sides`): the stage receives everything
        from other hosts (it opens its group of hosts) and/or sends everything to them (it fills
        it)."""
        p = self.positions
        opens, fills = bool(sides & 2), bool(sides & 1)
        full_start = self.remote_full_start if opens else self.full_start
        full_end = self.remote_full_end if fills else self.full_end
        reaches = []
        for t in range(p.end.shape[1]):
            full = np.searchsorted(full_end[:, t], full_start[:, t] + bottleneck, side="right") - 1
            start = self.compute_start[:, t] + bottleneck
            compute = np.searchsorted(self.compute_end[:, t], start, side="right") - 1
            limits = self.cell_limits(bottleneck, t, p.end[:, t], self.remote if fills else None, sides)
            reaches.append(self._combine(full, np.minimum(compute, limits)))
        return reaches

    def nested_limits(self, bottleneck: float, kind: int, sides: int = 0) -> np.ndarray:
        """Per position, the furthest a stage of type ``kind`` that is not full may reach from it:
        in an exact segment whose nested stages are priced (:class:`_Nested`), the furthest end
        of one within ``bottleneck`` (-1: none), priced across hosts on its ``sides`` (2 · opens +
        fills); elsewhere no limit. Kept for the last probe, per type and sides."""
        key = (bottleneck, kind, sides)
        if key in self._nested:
            return self._nested[key].copy()
        if any(b != bottleneck for b, *_ in self._nested):
            self._nested.clear()
        limits = np.full(self.last + 1, self.last, dtype=np.int64)
        nested = self.positions.nested
        if nested is not None:
            variant = (sides, kind)  # every side is listed where the relaxation knows of hosts
            start, end = nested.start[variant], nested.end[variant]
            limits[nested.covered] = -1
            if len(start):
                firsts = np.flatnonzero(np.r_[True, start[1:] != start[:-1]])
                ends = np.where(nested.time[variant] <= bottleneck, end, -1)
                limits[start[firsts]] = np.maximum.reduceat(ends, firsts)
        self._nested[key] = limits
        return limits.copy()

    def cell_limits(
        self,
        bottleneck: float,
        kind: int,
        end: np.ndarray,
        link: tuple[float, float] | None = None,
        sides: int = 0,
    ) -> np.ndarray:
        """Per position, the furthest a stage of type ``kind`` that is not full may reach from
        it: from a cell of a segment with branches, the furthest cell or boundary whose compute
        (with ``end`` per row) plus what :attr:`_Positions.inner` says it certainly exchanges
        fits ``bottleneck`` (-1: none); elsewhere no limit beyond its compute. ``link``
        (latency, seconds per byte) prices its sends instead of the type's best link: when the
        next stage is full it reads every tensor crossing the end, so these come straight to it.
        ``sides`` (2 · opens + fills) prices the nested stages across hosts on those sides.
        """
        limits = self.nested_limits(bottleneck, kind, sides)
        inner = self.positions.inner
        if inner is None:
            return limits
        cells = inner.send.shape[1]
        rows = inner.first[:, None] + np.arange(cells)[None, :]  # segments × cells
        start = self.positions.start[rows, kind]
        least = self._cell_costs(kind, link, bool(sides & 2))
        furthest = ((least <= bottleneck).sum(axis=2) - 1)[inner.shape]
        boundary = inner.first + cells
        to_boundary = end[boundary][:, None] - start + inner.received[inner.shape, :, kind] <= bottleneck
        limits[rows] = np.where(
            to_boundary, boundary[:, None], np.where(furthest >= 0, rows - np.arange(cells) + furthest, -1)
        )
        return limits

    def _cell_costs(self, kind: int, link: tuple[float, float] | None, across: bool) -> np.ndarray:
        """Per shape of relaxed segments with branches (:class:`_Inner`), start cell ``i`` and
        end cell ``j``, the least time over the ends ``j' ≥ j`` of a stage of type ``kind`` from
        ``i`` to ``j'`` that is not full, as :meth:`cell_limits` prices it (``inf`` before
        ``i``; the compute before the segment cancels out, so one segment stands for its shape):
        nondecreasing in ``j``, so the ends within a bottleneck are a prefix. ``link``/``across``
        as there. The same for every probe: kept."""
        key = (kind, link, across)
        if key not in self._least_costs:
            inner = self.positions.inner
            assert inner is not None
            cells = inner.send.shape[1]
            rows = inner.first[inner.representative][:, None] + np.arange(cells)[None, :]
            sending = inner.send[..., kind] if link is None else self._priced_sends(link)
            cost = self._received_inside(kind, across) + sending  # shapes × i × j
            cost += self.positions.end[rows, kind][:, None, :]
            cost -= self.positions.start[rows, kind][:, :, None]
            cost[:, _before(cells)] = np.inf  # a stage never ends before it starts
            self._least_costs[key] = np.minimum.accumulate(cost[..., ::-1], axis=2)[..., ::-1]
        return self._least_costs[key]

    def _received_inside(self, kind: int, across: bool) -> np.ndarray:
        """What a stage of type ``kind`` inside a relaxed segment certainly receives (shapes ×
        start cell × end cell; :class:`_Inner`), on ``kind``'s best link or, ``across``, over the
        inter-host link: the same for every probe, so kept."""
        across = across and self.remote is not None
        key = (-1 if across else kind, across)  # across hosts: the same for every type
        if key not in self._received:
            inner = self.positions.inner
            assert inner is not None
            if key[1]:
                heads = _priced(inner.heads, self.remote)
                self._received[key] = np.minimum(_priced(inner.touched, self.remote), heads[..., None])
            else:
                touched = inner.touched_time[..., kind]
                self._received[key] = np.minimum(touched, inner.head_time[..., kind, None])
        return self._received[key]

    def _priced_sends(self, link: tuple[float, float]) -> np.ndarray:
        """What stages inside relaxed segments certainly send (:attr:`_Inner.sent`) over ``link``
        (latency, seconds per byte): the same for every probe, so kept per link."""
        if link not in self._sent_over:
            assert self.positions.inner is not None
            self._sent_over[link] = _priced(self.positions.inner.sent, link)
        return self._sent_over[link]

    def _full_reach(self, bottleneck: float, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """The furthest position a full stage reaches from each (a running maximum), given the
        start (``start − recv``) and suffix-minimal end (``end + send``) arrays of its pricing."""
        reach = np.searchsorted(end, start + bottleneck, side="right") - 1
        return np.maximum.accumulate(np.where(reach > self.positions.threshold, reach, -1))

    def pair_reach(self, bottleneck: float, deadline: float | None = None) -> tuple[dict, dict, dict] | None:
        """The reaches of a stage of type κ before one of type ν, each with the previous types
        σ it holds for (one per distinct link from σ): ``full[κ, ν, strong send, strong
        receive]`` of a full stage (``-1`` where it cannot be one) and ``partial[κ, ν, strong
        send]`` of a stage that is not (it ends by the boundary after its start, paying its
        compute and what :meth:`cell_limits` says, its sends over κ → ν when strong: the next
        stage is full), each a running maximum as in :meth:`reach`; and the latter before a
        full stage, as that one is priced (:meth:`_before_full`). A stage holds an op, so it
        ends at a later position, or in the same one when that is a cell: no empty stage changes
        ``σ``. ``None`` once ``deadline`` has passed: the tables a probe builds first may
        outlast it."""
        types = self.positions.end.shape[1]
        threshold, here = self.positions.threshold, np.arange(self.last + 1)
        ends, handed = self.positions.end, self.positions.handed
        full: dict[tuple[int, int, int, int], list[tuple[np.ndarray, list[int]]]] = {}
        partial: dict[tuple[int, int, int], list[tuple[np.ndarray, list[int]]]] = {}
        raws: dict[tuple[int, int, int, int], list[np.ndarray]] = {}  # ``partial`` before the maxima
        for k in range(types):
            groups: dict[tuple | None, list[int]] = {}
            for s in range(types + 1):
                groups.setdefault(self.pairs.link(s, k), []).append(s)
            computed: dict[tuple | None, int] = {}  # next types with the same link share reaches
            for n in range(types + 1):
                if _past(deadline):
                    return None
                same = computed.setdefault(self.pairs.link(k, n), n)
                if same != n:
                    for key in [key for key in full if key[:2] == (k, same)]:
                        full[k, n, *key[2:]] = full[key]
                    for key in [key for key in partial if key[:2] == (k, same)]:
                        partial[k, n, *key[2:]] = partial[key]
                        raws[k, n, *key[2:]] = raws[key]
                    continue
                end = ends[:, k] + self.pairs.time(handed, k, n)
                computes = [  # per group of σ: the furthest its compute and least exchanges allow
                    np.searchsorted(
                        self.pair_compute_end[k, n], self.pair_compute_start[g[0], k] + bottleneck, "right"
                    )
                    - 1
                    for g in groups.values()
                ]
                for strong, far_in in itertools.product(
                    (0, 1) if self.sides is None else (0, 1, 2), (0,) if self.sides is None else (0, 1)
                ):
                    link = (None, self.pairs.link(k, n), self.remote)[strong]
                    far_out = strong == 2 or (strong == 1 and self._far(link))
                    sides = 2 * far_in + far_out
                    limits = np.minimum(threshold, self.cell_limits(bottleneck, k, end, link, sides))
                    partial[k, n, strong, far_in] = []
                    raws[k, n, strong, far_in] = []
                    for compute, previous in zip(computes, groups.values(), strict=True):
                        raw = np.minimum(compute, limits)
                        raws[k, n, strong, far_in].append(raw)
                        reach = np.where(raw > here, raw, np.where(self.positions.cell, here, -1))
                        partial[k, n, strong, far_in].append((np.maximum.accumulate(reach), previous))
                for sends, receives in itertools.product((0, 1), (0, 1)):
                    full[k, n, sends, receives] = [
                        (
                            self._full_reach(
                                bottleneck,
                                self.pair_full_start[g[0], k, receives],
                                self.pair_full_end[k, n, sends],
                            ),
                            g,
                        )
                        for g in groups.values()
                    ]
                if self.sides is not None:  # receiving across hosts: the same from every σ
                    every = list(range(types + 1))
                    for sends in (0, 1):
                        ends_n = self.pair_full_end[k, n, sends]
                        full[k, n, sends, 2] = [
                            (self._full_reach(bottleneck, self.remote_full_start[:, k], ends_n), every)
                        ]
            if self.sides is None:
                continue
            # sending across hosts (every tensor over the inter-host link): the same before every ν
            every = list(range(types + 1))
            sent = {
                receives: [
                    (
                        self._full_reach(
                            bottleneck, self.pair_full_start[g[0], k, receives], self.remote_full_end[:, k]
                        ),
                        g,
                    )
                    for g in groups.values()
                ]
                for receives in (0, 1)
            }
            sent[2] = [
                (
                    self._full_reach(bottleneck, self.remote_full_start[:, k], self.remote_full_end[:, k]),
                    every,
                )
            ]
            for n in range(types + 1):
                for receives, reaches in sent.items():
                    full[k, n, 2, receives] = reaches
        before_full = {} if self.positions.inner is None else self._before_full(raws, partial, deadline)
        return None if before_full is None else (full, partial, before_full)

    def _before_full(self, raws: dict, partial: dict, deadline: float | None = None) -> dict | None:
        """The reaches of a stage that is not full before a full one, ``[κ, ν, strong
        send][way][held]``, each keyed like :meth:`pair_reach`'s ``partial``: each
        stage from a cell ends at its *virtual* position (:meth:`_virtual_ends`) instead of its
        furthest one, per way the full stage receives (0: over its best links; 1: across hosts,
        when it opens its group or follows a run of the other's group) and per stage before the
        first (0: any; 1: a full one of another group than the full stage's, which holds ``d_b``,
        so the tensors to ``d_{b+1}`` cross hosts). ``None`` once ``deadline`` has passed."""
        here = np.arange(self.last + 1)
        types = self.positions.end.shape[1]
        kinds, helds = 1 if self.sides is None else 2, 1 if self.remote is None else 2  # ways, stages before
        before_full: dict[tuple[int, int, int], list[list[dict]]] = {}
        for (k, n, strong, far_in), raw_reaches in raws.items():
            if n == types or strong == 0:  # no next stage, or one that is not full
                continue
            if _past(deadline):
                return None
            ways = before_full.setdefault((k, n, strong), [[{} for _ in range(helds)] for _ in range(kinds)])
            for way, by_held in enumerate(ways):
                for held, lists in enumerate(by_held):
                    found = lists[k, n, strong, far_in] = []
                    for raw, (_, previous) in zip(raw_reaches, partial[k, n, strong, far_in], strict=True):
                        reach = self._virtual_ends(raw, k, n, way, held)
                        reach = np.where(reach > here, reach, np.where(self.positions.cell, here, -1))
                        found.append((np.maximum.accumulate(reach), previous))
        return before_full

    def _virtual_ends(self, raw: np.ndarray, k: int, n: int, way: int, held: int) -> np.ndarray:
        """``raw`` (per start, the furthest end of a stage of type ``k`` that is not full) with
        each start in a cell mapped to the earliest position from which the full stage of type
        ``n`` after it, priced as usual (``way``, :meth:`_before_full`), reaches as far as from
        any end ``j`` the stage may take with what it receives from it added: a full stage's
        reach grows with its start only through ``start − recv``, kept as a running maximum, so
        that position is the first whose running maximum meets the largest such value over the
        ends ``j`` up to the furthest (the boundary: nothing added). That value is bounded by the
        smaller of the running maximum at the furthest end and :meth:`_full_after_cells`' less
        the tensors from ``d_b`` to ``d_{b+1}``, over ``n``'s best link or, ``held`` by a full
        stage of another group, across hosts."""
        inner = self.positions.inner
        assert inner is not None
        cells = inner.send.shape[1]
        start = self.remote_full_start[:, n] if way else self.pair_full_start[k, n, 0]
        running = np.maximum.accumulate(start)
        link = (self.pairs.base_latency[n], self.pairs.base_inverse[n]) if held == 0 else self.remote
        through = _priced(inner.through, link)[inner.shape, None]  # segments × 1
        rows = inner.first[:, None] + np.arange(cells)[None, :]
        boundary = inner.first + cells
        ends = raw[rows]  # by the boundary: a stage that is not full ends there at the latest
        last_cell = np.clip(ends - inner.first[:, None], 0, cells - 1)
        segment, first = np.arange(len(inner.first))[:, None], np.arange(cells)[None, :]
        # the segment's own compute before it (its boundary row's start) and its shape's values
        before = self.positions.start[inner.first - 1, n][:, None]
        relative = self._full_after_cells(k, n)[inner.shape[:, None], first, last_cell]
        value = np.minimum(running[rows[segment, last_cell]], before + relative - through)
        value = np.where(ends >= boundary[:, None], np.maximum(value, start[boundary][:, None]), value)
        virtual = raw.copy()
        virtual[rows] = np.where(ends >= rows, np.searchsorted(running, value, side="left"), -1)
        return virtual

    def _full_after_cells(self, k: int, n: int) -> np.ndarray:
        """For a full stage of type ``n`` after one of type ``k`` from cell ``i`` to cell ``j``
        of a relaxed segment with branches, per shape of those segments (:class:`_Inner`),
        ``i`` and ``j``: the largest, over the ends ``i … j``, of its ``start`` (less the
        compute before the segment) less everything the stage before sends (``-inf`` before
        ``i``), over the ``k → n`` link — it is full, so it holds every op those tensors go to.
        The same for every probe: kept."""
        key = (k, n)
        if key not in self._after_cells:
            inner = self.positions.inner
            assert inner is not None
            cells = inner.send.shape[1]
            first = inner.first[inner.representative]
            rows = first[:, None] + np.arange(cells)[None, :]
            start = self.positions.start[rows, n] - self.positions.start[first - 1, n][:, None]
            value = start[:, None, :] - self._priced_sends(self.pairs.link(k, n))
            value[:, _before(cells)] = -np.inf
            self._after_cells[key] = np.maximum.accumulate(value, axis=2, out=value)
        return self._after_cells[key]

    def _far(self, link: tuple[float, float] | None) -> bool:
        """Whether ``link`` (latency, seconds per byte) is no faster than the inter-host one."""
        if link is None or self.remote is None:
            return False
        return link[0] >= self.remote[0] and link[1] >= self.remote[1]

    def feasible(self, bottleneck: float, deadline: float | None = None) -> bool:
        """Whether the relaxation admits ``bottleneck``; past ``deadline`` (``time.perf_counter``
        seconds) it gives up and admits it, proving nothing: a probe over many positions or
        classes can outlast the time its bisection had left (the MoE's 256 cells: 1 s), which
        matters where nothing follows the bound but the time limit."""
        if self.pairs is not None:
            return self._feasible_with_pairs(bottleneck, deadline)
        variants = {0: self.reach(bottleneck)}
        if self.sides is not None:
            used = set(np.unique(np.concatenate(self.sides)).tolist()) - {0}
            variants.update({sides: self.reach(bottleneck, sides) for sides in used})
        vectors, previous_of, layers = _count_layers(self.counts, self.stages)
        furthest = np.zeros(len(vectors), dtype=np.int64)
        for layer in layers:
            for t in range(len(self.counts)):
                rows = layer[vectors[layer, t] > 0]
                kinds = np.zeros(len(rows), dtype=np.int64) if self.sides is None else self.sides[t][rows]
                for sides, reaches in variants.items():
                    chosen = rows[kinds == sides]
                    reached = reaches[t][furthest[previous_of[t][chosen]]]
                    furthest[chosen] = np.maximum(furthest[chosen], reached)
            if (furthest[layer] >= self.last).any() or _past(deadline):
                return True
        return False

    def _feasible_with_pairs(self, bottleneck: float, deadline: float | None = None) -> bool:
        """``F(c, σ, φ, β, ν, ψ, γ)``: the furthest position reached with ``c_τ`` stages of each
        type (none empty), the last of type σ, the next committed to type ν; ``φ``/``ψ`` say
        whether the last/next stage is *full* (it ends beyond the boundary after its start, so it
        reads every crossing tensor of its start and writes every one of its end). When the stage
        ending at a cut ``I`` is full, every tensor crossing ``I`` was made in it (made before its
        start ``I'``, the tensor would cross ``I'`` too and be read by the boundary op after
        ``I'``, which is in ``I``: the edge property of the module docstring). So between two full
        stages every crossing tensor goes over the link from the one to the other.

        More generally the tensors crossing a cut are made in the stages from the last full one
        up to the cut and read in those after it up to the next full one (a stage that is not
        full stays inside its segment). With several groups of hosts, ``β`` says that every
        stage since the last full one is in σ's group; ``γ = 1`` commits every stage up to the
        next full one to ν's group, ``γ = 2`` obliges one of them to lie outside it: a stage in
        another group than σ's with ``β`` receives everything across hosts, and one followed by a
        stage of another group either commits (and sends everything across hosts; Inception-v2
        on 2 × 8 A100 at k = 16: a full stage on one host, then a nested one and a full one on
        the other, whose sends the relaxation priced at NVLink) or obliges. An obligation passes
        along the stages of its group that are not full and is met by one outside it; a full
        stage or the end with one pending is no placement (:meth:`_commitment_sources`). Left
        free, the relaxation of the 110k-op MoE at k = 64 sent the hidden state from an MI300X
        stage to the A100s after it at the MI300X's own link, every stage up to the next full
        one on an A100 (chain bound alone, 40 s: 21.6892 → 21.7255 ms). Without groups β and γ
        stay 0 (:attr:`_run_flags`, :attr:`_commitments`).

        A stage of type κ extends the states committed to (κ, ψ): ``F(c + e_κ, κ, ψ, …) ≥
        max reach(F(c, σ, φ, β, κ, ψ, γ))`` with the full reach when ``ψ``, else the partial
        one, priced as :meth:`_extend_pairs` says. With no stage yet every σ, φ, ν, ψ starts at
        position 0 with ``β`` off (an over-estimate, as the running maxima are; ``β`` on only for
        no type before, which no rule prices); a placement fits when some ``F(c, …, no next
        stage, …)`` reaches the end."""
        reaches = self.pair_reach(bottleneck, deadline)
        if reaches is None:
            return True
        types = len(self.counts)
        vectors, previous_of, layers = _count_layers(self.counts, self.stages)
        flags = self._run_flags
        shape = (len(vectors), types + 1, 2, flags, types + 1, 2, self._commitments)
        furthest = np.full(shape, -1, dtype=np.int64)
        furthest[0, :, :, 0] = 0
        furthest[0, types, :, flags - 1] = 0
        for layer in layers:
            for k in range(types):
                every = layer[vectors[layer, k] > 0]
                kinds = np.zeros(len(every), dtype=np.int64) if self.sides is None else self.sides[k][every]
                for sides in np.unique(kinds).tolist():
                    rows = every[kinds == sides]
                    self._extend_pairs(furthest, rows, previous_of[k][rows], k, sides, reaches)
            if (furthest[layer, :, :, :, types] >= self.last).any() or _past(deadline):
                return True
        return False

    def _extend_pairs(
        self,
        furthest: np.ndarray,
        rows: np.ndarray,
        previous: np.ndarray,
        k: int,
        sides: int,
        reaches: tuple[dict, dict, dict],
    ) -> None:
        """One step of :meth:`_feasible_with_pairs`: a stage of type ``k`` bringing the counts
        from ``previous`` to ``rows``; ``sides`` (2 · opens + fills) prices all it receives
        and/or sends across hosts whatever the stages around it hold; ``reaches``: what
        :meth:`pair_reach` gives.

        From a state (σ, φ, β) it receives across hosts when it opens its group, or with ``β``
        from another group, or (not full) after a full stage on a link no faster than the
        inter-host one; else a full one receives over the σ → κ link after a full stage. It
        sends across hosts when it fills its group or commits ``γ`` to another group; else a
        full one sends over the κ → ν link before a full stage, and one that is not full before
        a full one ends at its virtual end (:meth:`_before_full`). Not full, it passes on a
        commitment or an obligation it is bound by when its next stage is in its group; a next
        stage outside it meets an obligation and breaks a commitment (which γ may follow which:
        :meth:`_commitment_sources`).
        ``β`` stays on after a stage of its group and is on after a full stage."""
        types = len(self.counts)
        full, partial, before_full = reaches
        opens, fills = bool(sides & 2), bool(sides & 1)
        commitments = furthest.shape[6]
        source = furthest[previous, :, :, :, k]  # rows × σ × φ × β × ψ × γ
        for reach_of, last in ((partial, 0), (full, 1)):
            codes = self._start_codes(k, last, opens, reach_of)
            starts = _starts(source, codes, last)
            if not starts:
                continue
            for n in range(types + 1):
                # per sending code and whether a full stage follows one that is not:
                # rows × β after × γ before
                gathered: dict[tuple[int, bool], np.ndarray] = {}
                held_starts = None
                nexts = (0, 1) if n < types else (0,)  # the next stage is full (1) or not
                for following, committed in itertools.product(nexts, range(commitments)):
                    before = self._commitment_sources(k, last, n, committed)
                    if not before:
                        continue
                    sends = 2 if fills or (committed == 1 and self.apart[k, n]) else following
                    ahead = not last and following == 1 and (k, n, sends) in before_full
                    if (sends, ahead) not in gathered:
                        if not ahead:
                            gathered[sends, ahead] = _furthest(reach_of, (k, n, sends), starts)
                        else:
                            if held_starts is None:  # the starts by the stage before, once per ν
                                held = self._held_apart(k, opens, n, codes)
                                held_starts = {apart: _starts(source, c, 0) for apart, c in held.items()}
                            gathered[sends, ahead] = self._ahead(
                                rows, (k, n, sends), held_starts, before_full[k, n, sends], source.shape[3]
                            )
                    reached = gathered[sends, ahead][..., before]
                    furthest[rows, k, last, :, n, following, committed] = reached.max(axis=2)

    def _held_apart(self, k: int, opens: bool, n: int, codes: dict) -> dict:
        """The start codes of a stage of type ``k`` that is not full (``codes``, from
        :meth:`_start_codes`) split by the stage before it: ``[False]`` any, ``[True]`` a full
        one of another group than type ``n`` (empty without groups). The same for every probe:
        kept."""
        cache_key = (k, opens, n)
        if cache_key in self._split_codes:
            return self._split_codes[cache_key]
        split: dict[bool, dict] = {False: {}, True: {}}
        for key, by_after in codes.items():
            for after, (sigma, phi, beta) in by_after.items():
                held = (phi == 1) & self.apart[sigma, n]
                for apart in (False, True):
                    chosen = held == apart
                    if chosen.any():
                        indices = (sigma[chosen], phi[chosen], beta[chosen])
                        split[apart].setdefault(key, {})[after] = indices
        self._split_codes[cache_key] = split
        return split

    def _ahead(
        self, rows: np.ndarray, key: tuple[int, int, int], held_starts: dict, ways: list, flags: int
    ) -> np.ndarray:
        """For :meth:`_extend_pairs`: the furthest virtual ends (rows × β after × γ before) of a
        stage of type κ that is not full before a full one of type ν (``key``: κ, ν and the
        sending code), from the starts
        ``held_starts`` (:func:`_starts`, split by the stage before: :meth:`_held_apart`), over
        the reach lists ``ways`` (:meth:`_before_full`) for the way the full one will receive:
        across hosts when it opens its group, or with β (of ``flags``) after this one's from
        another group."""
        k, n, _ = key
        reached = None
        for held, starts in held_starts.items():
            if not starts:
                continue
            usual, *across = (_furthest(helds[int(held)], key, starts) for helds in ways)
            found = usual
            if across:  # with groups of hosts
                far = self.opens_next[n][rows][:, None] | (
                    (np.arange(flags) == 1)[None, :] & bool(self.apart[k, n])
                )
                found = np.where(far[..., None], across[0], usual)
            reached = found if reached is None else np.maximum(reached, found)
        assert reached is not None
        return reached

    @property
    def _commitments(self) -> int:
        """The values γ of :meth:`_feasible_with_pairs` takes: with groups of hosts 3 (free,
        committed, obliged), else 1."""
        return 3 if self.apart.any() else 1

    def _commitment_sources(self, k: int, last: int, n: int, committed: int) -> list[int]:
        """The values of γ before a stage of type ``k`` (full when ``last``) from which it may
        reach the state with next type ``n`` (``types``: none) and γ = ``committed``
        (:meth:`_feasible_with_pairs`); empty: no such state."""
        types = len(self.counts)
        if self._commitments == 1:
            return [0]
        if n == types:  # no stage follows: an obligation stays unmet
            return [0, 1] if committed == 0 else []
        apart = bool(self.apart[k, n])
        if last:  # a full stage meets what binds it (it is in its group), and commits or obliges
            return [0, 1] if (committed > 0) == apart else []
        if apart:  # its next stage leaves its group: an obligation is met, a commitment broken
            return [0, 2] if committed else []
        # its next stage stays in its group: it keeps a commitment or an obligation, or commits
        return ([0], [0, 1], [2])[committed]

    @property
    def _run_flags(self) -> int:
        """The values β and γ of :meth:`_feasible_with_pairs` take: 2 with groups of hosts, else 1."""
        return 2 if self.apart.any() else 1

    def _start_codes(self, k: int, last: int, opens: bool, reach_of: dict) -> dict:
        """For :meth:`_extend_pairs`, the states (σ, φ, β) a stage of type ``k`` (full when
        ``last``) extends, by how it is priced — ``(receiving code, index of σ's entry in the
        reach lists)`` — and by its ``β`` after, as index arrays (σ, φ, β). The same for every
        probe: kept."""
        cache_key = (k, last, opens)
        if cache_key in self._codes:
            return self._codes[cache_key]
        types = len(self.counts)
        flags, apart = self._run_flags, self.apart
        grouped: dict[tuple[int, int], dict[int, list[tuple[int, int, int]]]] = {}
        for sigma, phi, beta in itertools.product(range(types + 1), (0, 1), range(flags)):
            far = opens or bool(beta and apart[sigma, k])
            if last:  # after a full stage the σ → κ link prices every crossing tensor
                receives = 1 if phi else 2 if far else 0
            else:
                receives = int(far or (phi == 1 and self._far(self.pairs.link(sigma, k))))
            after = min(flags - 1, int(last or (beta and not apart[sigma, k])))
            listed = reach_of[k, 0, 0, receives]
            index = next(i for i, (_, group) in enumerate(listed) if sigma in group)
            grouped.setdefault((receives, index), {}).setdefault(after, []).append((sigma, phi, beta))
        codes = {
            key: {after: tuple(np.array(c) for c in zip(*found, strict=True)) for after, found in by.items()}
            for key, by in grouped.items()
        }
        self._codes[cache_key] = codes
        return codes


def _host_groups(instance: Instance) -> tuple[np.ndarray, np.ndarray] | None:
    """(group of each device type, devices of each group), the groups being the fewest sets of
    hosts that hold all the devices of their types (a type on one host: that host; MI300X on
    three hosts of MI300X only: those three), when there are several, else ``None``. A stage
    moving to another group changes host, and the stage counts per type tell which groups the
    stages so far use."""
    cluster = instance.cluster
    union = _UnionFind(len(cluster.hosts))
    column = {name: i for i, name in enumerate(cluster.type_names)}
    first_host = [-1] * len(cluster.type_names)
    for device in cluster.devices:
        t = column[device.type]
        if first_host[t] < 0:
            first_host[t] = device.host
        union.union(first_host[t], device.host)
    roots = sorted({union.find(h) for h in range(len(cluster.hosts))})
    if len(roots) < 2:
        return None
    group = {root: g for g, root in enumerate(roots)}
    size = np.bincount([group[union.find(d.host)] for d in cluster.devices], minlength=len(roots))
    return np.array([group[union.find(h)] for h in first_host]), size


def _inter_host(instance: Instance) -> tuple[float, float]:
    """The inter-host link as (latency, seconds per byte)."""
    inter = instance.cluster.inter_host_link
    return inter.latency, 1.0 / inter.bandwidth


def _host_sides(
    vectors: np.ndarray, previous_of: list[np.ndarray], type_group: np.ndarray, group_size: np.ndarray
) -> list[np.ndarray]:
    """Per type κ and count vector ``c``, for the stage of type κ that brings the counts to ``c``,
    the code ``2 · opens + fills``:
    whether it is the first stage in its group of hosts (:func:`_host_groups`) but not the first
    stage (every stage before it is on another host, so all it receives crosses hosts), and
    whether it fills its group (every stage after it is on another host, so all it sends crosses
    hosts)."""
    in_group = _in_groups(vectors, type_group, len(group_size))
    sides = []
    for kind, previous in enumerate(previous_of):
        group = type_group[kind]
        before = in_group[np.maximum(previous, 0)]
        first = (before[:, group] == 0) & (vectors[np.maximum(previous, 0)].sum(axis=1) > 0)
        fills = in_group[:, group] == group_size[group]
        sides.append(2 * first.astype(np.int64) + fills)
    return sides


def _in_groups(vectors: np.ndarray, type_group: np.ndarray, groups: int) -> np.ndarray:
    """Per count vector (rows) and group of hosts (columns), the stages it counts in the group."""
    return vectors @ (type_group[:, None] == np.arange(groups)[None, :])


def _count_layers(
    counts: tuple[int, ...], stages: int
) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """The count vectors ``c`` with ``c_τ ≤ counts[τ]`` and ``|c| ≤ stages`` (rows, the zero
    vector first), each one's row less one stage of each type (``previous_of[κ]``; -1 where
    ``c_κ = 0``), and the rows by ``|c| = 1, …, stages``: ``F(c)`` depends only on the layer
    before, so each is computed once."""
    grid = np.array(list(itertools.product(*(range(c + 1) for c in counts))), dtype=np.int64)
    used = grid.sum(axis=1)
    grid = grid[used <= stages]
    used = grid.sum(axis=1)
    compact = np.full([c + 1 for c in counts], -1, dtype=np.int64)
    compact[tuple(grid.T)] = np.arange(len(grid))
    previous_of = []
    for k in range(len(counts)):
        less = grid.copy()
        less[:, k] -= 1
        previous_of.append(np.where(less[:, k] >= 0, compact[tuple(np.maximum(less, 0).T)], -1))
    return grid, previous_of, [np.flatnonzero(used == s) for s in range(1, stages + 1)]


def _largest_segment(instance: Instance) -> int:
    """Ops in the largest segment between consecutive dominators."""
    return int(np.bincount(np.cumsum(dominators(instance))).max())


def _without_broadcasts(instance: Instance) -> Instance:
    """``instance`` with each tensor that three or more ops read (an attention mask read by
    every layer) read by its first reader only, except readers left with no other op-made input.

    A relaxation: every placement of ``instance`` is one of the result (fewer edges to respect)
    and costs no more there (fewer destinations), so its optimum is no larger. The dropped
    edges are what keeps the layers' residual adds from being dominators."""
    graph = instance.graph
    index = graph.index
    inputs = np.zeros(len(graph.ops), dtype=np.int64)
    for tensor in graph.tensors:
        if tensor.producer is not None:
            for consumer in set(tensor.consumers):
                inputs[index[consumer]] += 1
    tensors = []
    for tensor in graph.tensors:
        readers = sorted(set(tensor.consumers), key=index.__getitem__)
        if tensor.producer is None or len(readers) < 3:
            tensors.append(tensor)
            continue
        kept = [readers[0]] + [r for r in readers[1:] if inputs[index[r]] < 2]
        for r in readers[1:]:
            if inputs[index[r]] >= 2:
                inputs[index[r]] -= 1
        tensors.append(replace(tensor, consumers=tuple(kept)))
    return replace(instance, graph=replace(graph, tensors=tuple(tensors)))


def _by_host(instance: Instance) -> Instance | None:
    """The same problem with one device type per (type, host) class, when some type spans
    several hosts and the DP over class counts stays within :data:`_CLASS_STATES`, else
    ``None``. Devices of one class share their op times and links, so the optimum is the
    same; the relaxation then knows how many devices each host has and which links join them
    (a run of stages on one type must change host after as many stages as the host has)."""
    cluster = instance.cluster
    if len(cluster.classes) == len(cluster.type_names):
        return None
    classes = [(cluster.devices[m[0]].type, cluster.devices[m[0]].host) for m in cluster.classes]
    k = min(instance.options.stages, len(cluster.devices))
    sizes = [min(len(members), k) for members in cluster.classes]
    vectors = np.ones(k + 1)  # count vectors by their sum, capped at k stages
    for size in sizes:
        vectors = np.convolve(vectors, np.ones(size + 1))[: k + 1]
    grid = float(np.prod(np.array(sizes, dtype=float) + 1))  # the plain relaxation's table
    if max(grid, vectors.sum() * (len(classes) + 1) ** 2 * 4) > _CLASS_STATES:
        return None
    names = [f"{kind}@{cluster.hosts[host].name}" for kind, host in classes]
    name_of = dict(zip(classes, names, strict=True))
    devices = tuple(replace(d, type=name_of[d.type, d.host]) for d in cluster.devices)
    device_types = {name_of[c]: replace(cluster.device_types[c[0]], name=name_of[c]) for c in classes}
    split = replace(cluster, devices=devices, device_types=device_types)
    columns = [cluster.type_names.index(kind) for kind, _ in classes]
    costs = replace(
        instance.costs,
        type_names=split.type_names,
        times=instance.costs.times[:, columns],
        provenance=instance.costs.provenance[:, columns],
    )
    return replace(instance, cluster=split, costs=costs)


def chain_lower_bound(
    instance: Instance,
    upper: float | None = None,
    *,
    deadline: float | None = None,
    give_up: float | None = None,
    gap_limit: float = 0.0,
) -> float:
    """The largest bottleneck the relaxation proves infeasible (0 when none is found).

    Devices are counted per (type, host) class when that table is small (:func:`_by_host`),
    else per type. Each device type in turn measures the large segments, while time remains,
    ranked by the cheaper relaxation's bound (:func:`_ranked`); every choice gives a valid bound,
    so the largest is kept. With a deadline, time left refines a type's cells (:data:`_FINER`
    times as many, twice at most) while its passes raise the bound, before the next type: on the
    110k-op MoE at k = 64 the H100's cells at 256 gave 21.80 ms within 20 s, where a pass of each
    type at 64 and at 128 cells left none for them. ``upper`` (a known bottleneck)
    brackets the bisection; ``deadline`` (``time.perf_counter`` seconds) stops early — every
    infeasible value met so far is already a valid bound. A probe started before it finishes,
    unless ``give_up`` (a hard end: the caller's time limit) passes first: it then admits its
    bottleneck, proving nothing. With a ``gap_limit`` (relative), a bound proving ``upper`` within
    it is enough: every pass probes that value first and the search ends once it is proven.
    """
    goal = goal_of(upper, gap_limit)
    instance, builder, pairs, references = _prepared(instance)
    references = list(references)  # sorted below; the builder's own list stays fastest first
    builder.bracket(np.inf if upper is None else upper)
    builder.cells = _CELLS
    _share_out(builder, deadline)
    best = builder.proven  # what an earlier call of the solve proved (0 with a new builder)
    if (
        deadline is not None
        and builder.pricing_pending()
        and not best
        and builder.pricing_work() > _QUICK_PRICING  # the MoE's 64 exact segments: 27 k pairs
    ):
        # first the bound of the positions as they are, their nested stages unpriced: pricing
        # may take the time to the deadline and leave the bisection none (on a loaded machine,
        # Inception-v2 on 16 V100s at k = 16 got no chain bound at all from 3.5 s), and after
        # it the positions and the bisection take about as long again
        builder.price_nested = False
        started = time.perf_counter()
        positions, _ = _positions(builder, references[0])
        relaxation = _Relaxation(instance, positions, hosts=True)
        best = builder.proven = _bisect(relaxation, best, upper, deadline, give_up, goal=goal)
        builder.nested_deadline = min(builder.nested_deadline, deadline - 2 * (time.perf_counter() - started))
        if time.perf_counter() > deadline or _reached(best, goal):
            return best
    builder.price_nested = True
    built: dict[int, tuple[_Positions, bool]] = {}
    if pairs is not None and len(references) > 1:
        references, built, best = _ranked(instance, builder, references, best, upper, deadline, give_up, goal)
        if _reached(best, goal):
            return best
    building = 0.0  # the last positions' time: a reference that cannot build its own is left
    for reference in references:
        builder.cells = _CELLS
        while True:  # passes of ever finer cells while they raise the bound and time remains
            floor, started = best, time.perf_counter()
            ranked = built.pop(reference, None)  # its cheap relaxation is bisected already
            if not ranked and deadline is not None and time.perf_counter() + building > deadline:
                return best
            positions, relaxed = ranked or _positions(builder, reference)
            building = building if ranked else time.perf_counter() - started
            # a finer pass gallops up from this one's bound: no need to pin it down as closely
            # (the MoE's pair bisection at 64 cells: 17 probes, 0.55 s each) ...
            refined = deadline is not None and relaxed and builder.cells < _CELLS * _FINER**2
            share = _COARSE_SHARE if refined else _GAP_SHARE
            # ... and the first pass tries to prove ``upper`` optimal: a finer one's probes gallop
            first = builder.cells == _CELLS
            # the relaxation without the handed tensors' links is far cheaper: its value brackets
            # the bisection of the one with them from below (bisected already when ranked; a finer
            # pass skips it: it brackets nothing the coarser one with the links did not, and its
            # probe at that one's bound is admitted)
            relaxations = (None,) if pairs is None else (pairs,) if ranked or not first else (None, pairs)
            for links in relaxations:
                if links is not None and _past(deadline):
                    return best  # its first probes, near the incumbent and at the floor, are not timed
                relaxation = _Relaxation(instance, positions, links, hosts=True)
                best = builder.proven = max(
                    best, _bisect(relaxation, best, upper, deadline, give_up, share, first, goal)
                )
                if _reached(best, goal):
                    return best
            if not relaxed or _past(deadline):
                return best
            # a finer pass that cannot finish still raises the bound (its probes gallop up from
            # this one's), so when nothing but the time limit follows (``give_up``) it starts with
            # any time left (the MoE under ``anytime``: 21.46 → 21.53 ms), else with half a
            # pass's; one after a pass that proved nothing would spend its probes proving nothing
            # again (the MoE's A100 and MI300X cells after the H100's: 0.8 s at 64 cells, 2.4 s at
            # 128), and the next type gets the time instead
            if (upper is not None and best >= upper * (1 - _OPTIMAL)) or _reached(best, goal):
                return best
            followed = give_up is None
            if (
                deadline is None
                or builder.cells >= _CELLS * _FINER**2
                or best <= floor
                or (followed and deadline - time.perf_counter() < (time.perf_counter() - started) / 2)
            ):
                break
            builder.cells *= _FINER
    return best


def _ranked(
    instance: Instance,
    builder: _Builder,
    references: list[int],
    best: float,
    upper: float | None,
    deadline: float | None,
    give_up: float | None = None,
    goal: float | None = None,
) -> tuple[list[int], dict[int, tuple[_Positions, bool]], float]:
    """The reference types ordered by the bound of the relaxation without the handed tensors'
    links, with their positions kept for the pass that follows, and the best bound so far. Each
    is bisected from the best so far (one that proves less returns that value, and the stable
    sort keeps it behind the one that proved it). That relaxation is far cheaper (on the 110k-op
    MoE at k = 64 a probe takes 0.03 s against 0.3 s with the links) and ranks the references as
    the full one does (MI300X, H100, A100 cells: 20.67, 20.81, 20.47 ms without the links; 21.31,
    21.44 and less with them), so the full bisection, which under a deadline may run for one
    reference only, starts with the most telling one instead of the fastest type. When nothing is
    relaxed to cells the references give the same positions: the first is kept alone."""
    values: dict[int, float] = {}
    built: dict[int, tuple[_Positions, bool]] = {}
    for reference in references:
        positions, relaxed = built[reference] = _positions(builder, reference)
        relaxation = _Relaxation(instance, positions, hosts=True)
        values[reference] = _bisect(relaxation, best, upper, deadline, give_up, goal=goal)
        best = builder.proven = max(best, values[reference])
        if not relaxed or _past(deadline) or _reached(best, goal):
            break
    return sorted(references, key=lambda r: -values.get(r, 0.0)), built, best


def rules_out(instance: Instance, bottleneck: float, *, deadline: float | None = None) -> bool:
    """Whether the relaxation proves that no placement has a bottleneck of ``bottleneck`` or
    less: one probe of :func:`chain_lower_bound`'s bisection (large segments measured on the
    fastest type, nested stages not priced one by one), a quick verdict on how far a known
    placement can be from the optimum. Near ``deadline`` segments of many ideals become cells,
    which only weakens the verdict."""
    instance, builder, pairs, references = _prepared(instance)
    builder.price_nested = False
    builder.bracket(bottleneck)
    builder.cells = _CELLS
    _share_out(builder, deadline)
    positions, _ = _positions(builder, references[0])
    if not _Relaxation(instance, positions).feasible(bottleneck):
        return True
    return pairs is not None and not _Relaxation(instance, positions, pairs).feasible(bottleneck)


def _share_out(builder: _Builder, deadline: float | None) -> None:
    """Give exact positions and the pricing of nested stages their shares of the time to
    ``deadline`` (none: no limit); the bisection needs the rest."""
    left = np.inf if deadline is None else max(deadline - time.perf_counter(), 0.0)
    exact = _EXACT_SHARE * left if left >= _EXACT_SECONDS else 0.0  # cells converge in less
    builder.exact_deadline = time.perf_counter() + exact
    builder.nested_deadline = time.perf_counter() + _NESTED_SHARE * left
    builder.deadline = time.perf_counter() + left


def _prepared(instance: Instance) -> tuple[Instance, _Builder, _Pairs | None, list[int]]:
    """The instance the relaxation runs on (broadcast tensors read once where that splits the
    largest segment, devices counted per (type, host) class where that table is small), its
    builder, the links between types (``None`` with overlap) and the reference types, fastest
    first. Within :func:`reuse`, kept for the instance: a solve asks up to three times
    (``auto``'s choice, the anytime search, the end), and the builder's exact positions and
    nested stages take seconds on Inception-v2."""
    return reused(instance, "chain", lambda: _prepare(instance))


def reused(instance: Instance, what: str, make: Callable[[], _T]) -> _T:
    """``make()``, kept for ``instance`` under ``what`` within :func:`reuse` (made anew outside)."""
    kept = _REUSED.get()
    if kept is None:
        return make()
    hit = kept.get((what, id(instance)))
    if hit is not None and hit[0]() is instance:
        return hit[1]
    value = make()
    kept[what, id(instance)] = (weakref.ref(instance), value)
    return value


@contextlib.contextmanager
def reuse() -> Iterator[None]:
    """Within it, each instance's relaxation is built once (:func:`_prepared`), as is what else
    :func:`reused` keeps (its towers, the order DP's split of its graph order); a solve wraps
    itself in it. Per thread (a context variable), so solves in parallel threads keep theirs."""
    if _REUSED.get() is not None:
        yield
        return
    token = _REUSED.set({})
    try:
        yield
    finally:
        _REUSED.reset(token)


def _prepare(instance: Instance) -> tuple[Instance, _Builder, _Pairs | None, list[int]]:
    if _largest_segment(instance) > _NO_CHAIN * len(instance.graph.ops):
        relaxed = _without_broadcasts(instance)  # the relaxation also drops some communication
        if _largest_segment(relaxed) < _largest_segment(instance):
            instance = relaxed
    instance = _by_host(instance) or instance
    builder = _Builder(instance)
    pairs = None if instance.options.overlap else _pairs(instance, builder.latency, builder.bandwidth)
    totals = builder.times.sum(axis=0)
    _, distinct = np.unique(totals, return_index=True)  # one reference per type, not per class
    references = [int(r) for r in distinct[np.argsort(totals[distinct], kind="stable")]]
    return instance, builder, pairs, references


def _bisect(
    relaxation: _Relaxation,
    floor: float,
    upper: float | None,
    deadline: float | None,
    give_up: float | None = None,
    share: float = _GAP_SHARE,
    first: bool = True,
    goal: float | None = None,
) -> float:
    """The largest value found infeasible above ``floor`` (``floor`` when there is none); no
    probe starts after ``deadline``, and one still running at ``give_up`` stops, proving nothing.
    Below a known ``upper`` the bisection stops within ``share`` of the gap to it; in a ``first``
    pass it tries to prove ``upper`` optimal first and bisects plainly, in a later one it gallops
    up from ``floor`` (:func:`_bisect_below`); a caller's ``goal`` is probed first in any pass."""
    feasible = functools.partial(relaxation.feasible, deadline=give_up)
    if upper is not None and np.isfinite(upper):
        return _bisect_below(
            feasible, floor, upper, deadline, share, optimal_first=first, gallop=not first, goal=goal
        )
    if floor > 0 and feasible(floor):
        return floor
    lower, high = floor, max(floor, float(relaxation.positions.end[-1].min()) / relaxation.stages) or 1.0
    while not feasible(high):
        lower, high = high, 2.0 * high
        if _past(deadline):
            return max(floor, lower * (1 - _SAFETY))
    return max(floor, _narrowed(feasible, lower, high, deadline) * (1 - _SAFETY))


def _past(deadline: float | None) -> bool:
    """Whether ``deadline`` (``time.perf_counter`` seconds; ``None``: none) has passed."""
    return deadline is not None and time.perf_counter() > deadline


def _bisect_below(
    feasible: Callable[[float], bool],
    floor: float,
    upper: float,
    deadline: float | None,
    share: float = _GAP_SHARE,
    optimal_first: bool = True,
    gallop: bool = True,
    goal: float | None = None,
) -> float:
    """The largest value ``feasible`` rejects in ``[floor, upper)``, found by bisection
    (``floor``, a known bound, when none is); the probe at ``floor`` comes first (admitted, so is
    everything above it: one probe where another relaxation proved more; not in a galloping pass
    without ``optimal_first``, whose first step does as much), then the caller's ``goal`` (a
    bound that is enough: :func:`goal_of`), or with ``optimal_first`` one just below ``upper``,
    which proves ``upper`` optimal when it is rejected. With ``gallop``, from a known ``floor``
    the probes then gallop up (:data:`_GALLOP`, doubling) until one is admitted, so that under
    a deadline every probe made raises the bound: a finer pass usually adds a fraction of a
    percent (the MoE's 128 cells: 21.44 → 21.50 ms), which bisecting the whole gap left (8%)
    reaches only after a few probes near the incumbent, 0.6 s each there. A floor from a
    cheaper relaxation lies further below: the MoE's first pass with the handed tensors' links
    galloped 7 probes from 20.81 ms to 21.48 before one was admitted at 22.14, then bisected 5
    more."""
    # a later pass of one relaxation (no probe near ``upper``) gallops from its coarser pass's
    # bound, where its first step tells as much as a probe at the floor
    if floor > 0 and (optimal_first or not gallop) and feasible(floor):
        return floor
    if goal is None and optimal_first:
        goal = upper / (1 + _OPTIMAL)  # ``upper`` is optimal within solve's tolerance when rejected
    found = _narrowed(feasible, floor, upper, deadline, upper, share, gallop, goal=goal)
    return max(floor, found * (1 - _SAFETY))


def goal_of(upper: float | None, gap_limit: float) -> float | None:
    """The bound that proves a placement of bottleneck ``upper`` within ``gap_limit`` (relative)
    of the optimum, ``None`` without a limit: the bound a caller with a gap limit needs, and
    no more."""
    if upper is None or not np.isfinite(upper) or gap_limit <= 0:
        return None
    return upper / (1 + gap_limit)


def _reached(best: float, goal: float | None) -> bool:
    """Whether ``best`` proves the caller's ``goal`` (:func:`goal_of`; the bisections return a
    rejected value shrunk by :data:`_SAFETY`)."""
    return goal is not None and best >= goal * (1 - 2 * _SAFETY)


def _narrowed(
    feasible: Callable[[float], bool],
    lower: float,
    high: float,
    deadline: float | None,
    upper: float | None = None,
    share: float = _GAP_SHARE,
    gallop: bool = True,
    stride: float = _GALLOP,
    many: Probes | None = None,
    goal: float | None = None,
) -> float:
    """``lower`` raised, and ``high`` lowered, by bisection until they are within
    :data:`_RELATIVE_GAP`, or below a known bottleneck ``upper`` within ``share`` of
    the gap ``upper − lower`` (the gap the bound certifies moves by as little: 8.00% against
    8.01%, where a probe of the chain bound on the 110k-op MoE takes 0.3 s), or until the deadline
    would pass during the next round of probes (taken to last as long as the one before);
    ``lower`` stays rejected. Below ``upper``, from a known ``lower`` and with ``gallop`` the
    probes first gallop up from it (``stride`` above, then twice as far …) until one is admitted.
    With ``many = (width, test)`` (:func:`~partition.forked_probes.forked_probes`), each round
    probes ``width`` values at once: the gallop's next ``width`` steps, then the points that
    split the bracket into ``width + 1`` equal parts; the largest value rejected is the new
    ``lower``, the least admitted the new ``high``. A ``goal`` inside the bracket (a bound
    that is enough for the caller) takes the first round's first place, and once it is
    rejected the bisection ends. It is probed even when the bracket is already within the
    resolution: the 7B decoder at k = 16 met its bound 6·10⁻⁶ above the one proved, and
    without the probe at ``upper / (1 + 1e-7)``, which its relaxation rejects, the search
    polished a placement it could have proved optimal for the 17 s left."""
    width, test = many if many is not None else one_at_a_time(feasible)
    round_seconds = 0.0
    step = stride if gallop and upper is not None and lower > 0 else 0.0
    pending = goal is not None and lower < goal < high
    while pending or high - lower > max(
        _RELATIVE_GAP * high, 0.0 if upper is None else share * (upper - lower)
    ):
        if deadline is not None and time.perf_counter() + round_seconds > deadline:
            break
        started = time.perf_counter()
        room = width - pending  # the goal's probe takes one of the round's places
        values, value, stretch = [], lower, step
        while step > 0 and len(values) < room and value * (1 + stretch) < high:
            value, stretch = value * (1 + stretch), 2 * stretch
            values.append(value)
        if not values and room:  # bisecting (or the gallop's next step is past ``high``)
            step = stretch = 0.0
            values = [(lower * (room + 1 - j) + high * j) / (room + 1) for j in range(1, room + 1)]
        probed = [goal, *values] if pending else values
        admitted = test(probed)
        lower = max([lower, *(v for v, yes in zip(probed, admitted, strict=True) if not yes)])
        high = min([high, *(v for v, yes in zip(probed, admitted, strict=True) if yes)])
        if values:
            step = 0.0 if any(admitted[len(probed) - len(values) :]) else stretch
        round_seconds = time.perf_counter() - started
        if goal is not None and lower >= goal:
            break
        pending = False
    return lower
