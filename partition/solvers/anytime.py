"""Anytime search for large graphs: random-key order search, multi-level refinement, proven bound.

Formulation searched: a placement is a topological order ``π`` of the ops, a device sequence
``d_1, d_2, …`` (distinct devices, at most ``k``) and a contiguous split of ``π`` into stages
on those devices in turn. For a fixed ``π`` and sequence the split is found in three steps:

- *Bisection* on the bottleneck ``B``: stage ``c`` takes the longest interval ``[i, j)`` whose
  estimated time fits ``B`` and whose memory fits ``d_c`` (compute by prefix sums per device
  type; the tensors crossing ``i`` and ``j`` over the links from ``d_{c-1}`` and to
  ``d_{c+1}``; memory over-estimated — weights as if unshared, every crossing tensor
  buffered — so an accepted split always fits).
- A *banded DP*, ``F_c[j] = min_i max(F_{c-1}[i], cost_c(i, j))`` over starts ``i`` whose
  compute stays within the bisection's ``B``, with the exact distinct tensors and bytes each
  interval receives and sends: the optimum of this estimate for the order and sequence.
- *Boundary moves* on exact scores: the estimate still misses multi-destination charges and
  links to non-neighbour stages, so the bottleneck stage's cuts are moved while the exact
  score improves.

Every candidate is scored exactly (a vectorised copy of the evaluator's arithmetic); the
independent evaluator re-checks the final placement.

Search (Archer et al., ICML 2024 use the same random-key encoding of orders):

1. **Levels.** The exact coarsening of :mod:`partition.coarsen` (colocation hulls, free
   constant leaves) is the *fine* level; module blocks and bundles of parallel siblings, each
   at most ``grain`` (2% of the ideal stage time), give the *search* level.
2. **Device sequences.** The ``k`` fastest devices host by host (hosts ranked by their
   speed on this model); hosts are then reordered by local search (swap two hosts, or swap a
   used host for an unused one).
3. **Orders.** A biased random-key genetic search over search-level ops: a key vector decodes
   to the topological order that always takes the ready op of smallest key; the population
   starts from the graph's own order plus noise. Elites are kept, children inherit each key
   from the elite parent with probability 0.7, and fresh mutants keep diversity.
4. **Multi-level refinement.** The best coarse order is split again on the fine level, so
   cuts move to any fine boundary near the coarse ones (the banded DP runs there when the
   time left allows it), and so is that order with every arm of a fork-join block cut where
   it is narrow (:mod:`.branch_order`: the search level keeps an MoE expert whole, whose output
   a cut through the layer then sends). On small fine graphs the exact order DP
   (:func:`partition.solvers.order_dp.split_order`) over all device subsequences polishes each.
5. **Chain rounding** (:mod:`.chain_round`): after the first split, the dominator-chain
   relaxation of the lower bound is rounded to a placement (host runs of stages, cuts at the
   relaxation's positions), offered as a start.
6. **Tower interleaving** (:mod:`.tower_split`): on a graph of two towers (CLIP, T5), after
   the first split, the towers' orders interleaved as an estimated split over the incumbent's
   devices does, offered with the exact split of the order it gives.
7. **Cut shifting** on the fine level: every cut of the incumbent moves at once within a
   window of fine positions around it, by the banded DP's recurrence over the windows
   (:meth:`_Splitter.window_dp`, the estimate corrected per stage to the incumbent's exact
   times), each stage's ops in the order of step 4's cut arms. The search's cuts sit on
   coarse-op boundaries; on the 110k-op MoE at k = 64 this took 23.19 ms to 23.14 ms in 3 s
   (22.92 to 22.87 ms from the cut arms), where the banded DP over the fine level would need
   ~10¹⁰ cells.
8. **Large-neighbourhood polish** (:mod:`.lns`): CP-SAT re-solves windows of consecutive stages
   around the bottleneck stage on the fine level, everything else fixed, in the time left
   (at least ``_LNS_SHARE`` of the limit: steps 1–6 stop earlier to leave it; step 7 takes
   at most ``_SHIFT_SHARE`` of it). On a graph of two towers it first polishes the two-tower
   bound's witness rounded to a placement (:func:`.tower_split.witness_placements`; on mixed
   clusters the best rounded of the plain pass's, the one with group changes, those with
   a group of hosts' stages together and those along each order of the types that keeps every
   group's stages together), for
   ``_WITNESS_SHARE`` of that time, when it lies within ``_WITNESS_SLACK`` of the incumbent;
   the witnesses farther off, best rounded first, get in turn the time the incumbent's polish
   leaves: a polish stops, while another start waits, after ``_STALL_SHARE`` of its time in
   which it lowered the bottleneck by less than ``_STALL_GAIN``, while
   ``_SECOND_START_SECONDS`` remain. With two threads or more the incumbent and one rounded
   witness per thread are polished at once instead, and a polish that stalls so hands its
   thread to the next rounded witness (:func:`.lns.polish_together`). The polish's escape
   interleaves the towers anew along each incumbent's own order (:func:`.tower_split.along`,
   every cut moved at once).

Lower bound: :func:`partition.aggregate_bound.aggregate_lower_bound` on the *original*
instance (work over type-weighted aggregate speed plus a communication floor), valid however
heuristic the coarsening; on graphs of at most ``_STRUCTURAL_BOUND_OPS`` ops, also the
dominator-chain or two-tower bound before step 3, and when the incumbent meets it the search stops there;
if it does not, the bound gets a second turn before step 8, ``_BOUND_SHARE_OF_POLISH`` of the time
left. By then the search phases are over, and the polish's late windows seldom move the bottleneck
(CLIP on four types at k = 8: by 0.2%, 42 s into a 43-s polish), while the bound's richer passes
(nested stages priced across hosts, finer tower resolutions) were cut short by the first turn's
tenth: ``auto`` at 60 s, Inception-v2 on 2 × 8 A100 at k = 16 2.88% → 2.53%, T5 on four types at
k = 8 5.27% → 4.83%, CLIP there 5.02% → 4.71% (bench/scoreboard.md). That turn is below the
incumbent before the polish, and its bisection stops within its resolution of the relaxation's
value: a polish that reaches a placement that close to the bound stops there, and the bound gets
a turn below it, whose first probe may prove it (Inception-v2 over H100/A100 at k = 8 under
10 s: 0.23740162 ms, bound 0.23740111, proven optimal by that probe), else the polish goes on.
Deterministic for a fixed seed when the search converges (25 generations without improvement)
and the polish runs out of windows before the time limit (each window's CP-SAT search is
limited in deterministic time); otherwise the result is the best found when time ran out.
"""

from __future__ import annotations

import functools
import time
from dataclasses import replace

import numpy as np

from ..aggregate_bound import aggregate_lower_bound
from ..coarsen import Coarsening, coarsen_exact, module_groups, sibling_groups
from ..graph import keyed_topological_order
from ..instance import Instance
from ..placement import Placement, Status
from ..tower_bound import Towers, structural_lower_bound, towers
from ._devices import host_orders, host_ranking, host_sequence, neighbour_hosts, used_hosts
from ._scoring import Scorer, TensorArrays
from .base import OPTIMALITY_TOLERANCE, Capabilities, Outcome, Scope, Settings, Solver
from .branch_order import BranchSplit, branch_split
from .chain_round import rounded_placement
from .lns import PolishReport, Stall, Start, good_enough, polish, polish_together
from .order_dp import split_order
from .tower_split import along, interleave, witness_placements

_DEFAULT_TIME_LIMIT = 20.0
_GRAIN = 0.02  # search-level ops at most this fraction of the ideal stage time
_POLISH_WORK = 3e7  # run the exact order DP when n² · k · devices is below this
_DP_CELLS = 2e6  # banded split DP cells (positions × band × stages) allowed per candidate of the search
_DP_SECONDS_PER_CELL = 1.5e-7  # measured on 2 shared cores; sizes the DP of refinements to the time left
_TOLERANCE = 1e-9  # the evaluator's memory slack
_EVALUATE_SECONDS_PER_OP = 1.5e-5  # the independent evaluator and checks: 110k ops in ~1.1 s
_COARSEN_SECONDS_PER_OP = 2.5e-5  # heuristic coarsening, twice its cost on 2 shared cores (110k ops: 1.2 s)
_STALL_GENERATIONS = 25  # the genetic search ends after this many generations without improvement
_ROUNDING_SHARE = 0.25  # of the search time at most for the chain-DP rounding start (.chain_round)
_INTERLEAVING_SHARE = 0.1  # ... and for interleaving two towers (.tower_split)
_LNS_SHARE = 0.35  # of the time limit kept for the large-neighbourhood polish (more if the search converges)
_SHIFT_SHARE = 0.25  # of the polish's time at most for shifting every cut at once first
_WITNESS_SHARE = 0.5  # of the polish's time for the two-tower witness's placement, when it is a start ...
_WITNESS_SLACK = 1.02  # ... which it is within this factor of the incumbent's bottleneck
_STALL_SHARE = 1 / 3  # else the incumbent's polish stops after this share of its time ...
_STALL_GAIN = 0.01  # ... in which it lowered the bottleneck by less than this (relative) ...
_SECOND_START_SECONDS = 10.0  # ... while this much time is left, for the witness's polish
_RESEEDS = 2  # each witness polished again under this many other seeds, while time is left
_STRUCTURAL_BOUND_OPS = 5_000  # the chain or two-tower bound is tried before the order search up to this ...
_STRUCTURAL_BOUND_SHARE_LEFT = 0.1  # ... many ops, within this share of the search time left
_BOUND_SHARE_OF_POLISH = 0.5  # ... and again before the polish, within this share of its time
# The polish stops this close to the bound (relative), the resolution of the bound's bisections:
# a placement further above it lies above a bottleneck the relaxation admitted, no probe proves it.
_WITHIN_A_PROBE = 1e-5


def bounds_structurally(instance: Instance) -> bool:
    """Whether the search proves the dominator-chain or two-tower bound of ``instance`` itself
    (graphs of at most :data:`_STRUCTURAL_BOUND_OPS` ops), before its order search and again
    before its polish: a caller need not keep time for another turn after it."""
    return len(instance.graph.ops) <= _STRUCTURAL_BOUND_OPS


def bounded_towers(instance: Instance) -> Towers | None:
    """The graph's two towers (:func:`~partition.tower_bound.towers`) where the search bounds it
    itself (:func:`bounds_structurally`), else ``None``: the towers its interleaving and its
    polish's witnesses follow, and on which it needs no bound turn after it."""
    return towers(instance) if bounds_structurally(instance) else None


class _Splitter:
    """Estimated stage costs of intervals of one order, and the bisection split."""

    def __init__(self, instance: Instance, order: np.ndarray, tensors: TensorArrays) -> None:
        graph, cluster = instance.graph, instance.cluster
        n = len(order)
        position = np.empty(n, dtype=np.int64)
        position[order] = np.arange(n)
        times = instance.costs.times[order]
        self.prefix = np.vstack([np.zeros(times.shape[1]), np.where(np.isfinite(times), times, 0).cumsum(0)])
        self.blocked = np.vstack([np.zeros(times.shape[1]), (~np.isfinite(times)).cumsum(0)])
        first = position[tensors.producer]
        keys = np.unique(tensors.pair_tensor * (n + 1) + position[tensors.pair_consumer])
        tensor, consumer = keys // (n + 1), keys % (n + 1)
        starts = np.r_[True, tensor[1:] != tensor[:-1]]
        previous = np.where(starts, first[tensor], np.r_[0, consumer[:-1]])
        # received: position i in [previous + 1, consumer] has its next consumer at `consumer`
        self.recv_segments = (previous + 1, consumer, consumer, tensors.bytes[tensor])
        last = np.zeros(len(tensors.bytes), dtype=np.int64)
        np.maximum.at(last, tensor, consumer)
        has = np.zeros(len(tensors.bytes), dtype=bool)
        has[tensor] = True
        # sent: cut j in [first + 1, last] is crossed by the tensor
        self.send_segments = (first[has], last[has], tensors.bytes[has])
        cut_bytes = np.bincount(first[has] + 1, tensors.bytes[has], minlength=n + 2)
        cut_bytes -= np.bincount(last[has] + 1, tensors.bytes[has], minlength=n + 2)
        cut_count = np.bincount(first[has] + 1, minlength=n + 2) - np.bincount(last[has] + 1, minlength=n + 2)
        self.cut_bytes_array = cut_bytes.cumsum()[: n + 1]
        self.cut_count_array = cut_count.cumsum()[: n + 1].astype(float)
        self.weights_array = np.concatenate([[0.0], graph.param_bytes[order].cumsum()])
        self.cut_bytes = self.cut_bytes_array.tolist()
        self.cut_count = self.cut_count_array.tolist()
        self.weights = self.weights_array.tolist()
        self.working = graph.working_set[order]
        self.n = n
        self.order = order
        self.type_of_device = cluster.type_index
        self.capacity = [cluster.memory(d) for d in range(len(cluster.devices))]
        self.link = cluster.link
        devices = range(len(cluster.devices))
        self.latency = np.array([[cluster.link(a, b).latency for b in devices] for a in devices])
        self.bandwidth = np.array([[cluster.link(a, b).bandwidth for b in devices] for a in devices])
        self.overlap = instance.options.overlap
        self.exact_stages = instance.options.exact_stages

    def _received(self, i: int, device: int, ends: list[int], sequence: list[int]) -> float:
        """Time to receive every tensor crossing position ``i``, each over the link from its
        producer's stage (known: stages before ``i`` are placed) — tensors passing through to a
        later stage are charged too, so this over-estimates."""
        first, last, size = self.send_segments
        crossing = (first < i) & (last >= i)
        if not crossing.any():
            return 0.0
        sources = np.asarray(sequence)[np.searchsorted(np.asarray(ends), first[crossing], side="right")]
        return float((self.latency[sources, device] + size[crossing] / self.bandwidth[sources, device]).sum())

    def _longest(self, i: int, device: int, recv: float, after: int | None, bound: float, high: int) -> int:
        """The largest ``j ≤ high`` with ``[i, j)`` within ``bound`` on ``device`` (``i`` if none)."""
        column = self.type_of_device[device]
        prefix = self.prefix[:, column]
        limit = min(high, int(np.searchsorted(prefix, prefix[i] + bound, side="right")) - 1)
        if limit <= i:
            return i
        j = np.arange(i + 1, limit + 1)
        compute = prefix[j] - prefix[i]
        send = np.zeros(len(j))
        if after is not None:
            link = self.link(device, after)
            send = self.cut_count_array[j] * link.latency + self.cut_bytes_array[j] / link.bandwidth
        comm = recv + send
        time = np.maximum(compute, comm) if self.overlap else compute + comm
        largest = np.maximum.accumulate(self.working[i:limit])
        memory = (
            self.weights_array[j] - self.weights[i] + self.cut_bytes[i] + self.cut_bytes_array[j] + largest
        )
        fits = (
            (time <= bound)
            & (memory <= self.capacity[device] * (1 + _TOLERANCE))
            & (self.blocked[j, column] == self.blocked[i, column])
        )
        found = np.flatnonzero(fits)
        return int(j[found[-1]]) if len(found) else i

    def greedy(self, sequence: list[int], bound: float) -> list[int] | None:
        """Stage ends when each stage takes the longest interval within ``bound`` (``None``: no fit)."""
        ends: list[int] = []
        i, n = 0, self.n
        for c, device in enumerate(sequence):
            if i == n:
                break
            after = sequence[c + 1] if c + 1 < len(sequence) else None
            high = n - (len(sequence) - c - 1) if self.exact_stages else n
            recv = self._received(i, device, ends, sequence)
            j = self._longest(i, device, recv, after, bound, high if after is not None else n)
            if j == i or (after is None and j < n):
                return None
            ends.append(j)
            i = j
        return ends if i == n else None

    def split(self, sequence: list[int], lower: float) -> tuple[Placement, float] | None:
        """Bisection on the estimated bottleneck: the placement at the smallest feasible one, and it.

        The search starts at twice the lower bound and doubles until the greedy fits (giving up
        beyond the whole graph's time on the slowest type plus every tensor over the slowest
        link, which no stage can exceed), then halves the bracket to 0.01%.
        """
        ceiling = float(self.prefix[-1].max() + self.cut_count_array.sum() * self.latency.max())
        ceiling += float(self.cut_bytes_array.sum() / self.bandwidth.min())
        low = max(lower * (1 - 1e-6), 0.0)
        upper = max(2 * lower, ceiling * 1e-6)
        ends = self.greedy(sequence, upper)
        while ends is None:
            if upper > ceiling:
                return None
            low, upper = upper, upper * 2
            ends = self.greedy(sequence, upper)
        while upper - low > upper * 1e-4:
            middle = (low + upper) / 2
            found = self.greedy(sequence, middle)
            if found is None:
                low = middle
            else:
                upper, ends = middle, found
        return self.placement(ends, sequence), upper

    def _band_traffic(self, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Exact distinct bytes and tensor counts a stage receives and sends, over the band.

        ``recv[i, t]``: tensors made before ``i`` with a consumer in ``[i, i + t]`` (the stage
        ``[i, i + t + 1)``); ``send[j, t]``: tensors made in ``[j - 1 - t, j)`` used at ``j`` or later.
        """
        rows = self.n + 1

        def banded(row_lo, row_hi, offset_of_row, values):
            # one entry per (row, offset) with offset = offset_of_row(row) < width, then cumulative
            lengths = np.maximum(row_hi - row_lo + 1, 0)
            row = np.repeat(row_lo, lengths) + _ranks(lengths)
            owner = np.repeat(np.arange(len(lengths)), lengths)
            offset = offset_of_row(row, owner)
            keep = (offset >= 0) & (offset < width)
            flat = row[keep] * width + offset[keep]
            total = np.bincount(flat, values[owner[keep]], minlength=rows * width).reshape(rows, width)
            count = np.bincount(flat, minlength=rows * width).reshape(rows, width).astype(float)
            return total.cumsum(axis=1), count.cumsum(axis=1)

        lo, hi, consumer, size = self.recv_segments
        lo = np.maximum(lo, consumer - width + 1)
        recv = banded(lo, hi, lambda r, o: consumer[o] - r, size)
        first, last, size = self.send_segments
        last = np.minimum(last, first + width)
        send = banded(first + 1, last, lambda r, o: r - 1 - first[o], size)
        return recv[0], recv[1], send[0], send[1]

    def dp(self, sequence: list[int], upper: float, budget: float) -> Placement | None:
        """Exact min-max split of the estimate for this sequence, over a band of stage lengths.

        ``F_c[j] = min_i max(F_{c-1}[i], cost_c(i, j))`` with ``i`` limited to starts whose
        compute on the fastest type stays within ``upper`` (a feasible bottleneck).
        """
        n = self.n
        fastest = self.prefix.min(axis=1)
        starts = np.searchsorted(fastest, fastest - upper * (1 + 1e-9), side="left")
        width = int(max(1, (np.arange(n + 1) - starts).max()))
        if (n + 1) * width * len(sequence) > budget:
            return None
        j = np.arange(n + 1)[:, None]
        i = j - 1 - np.arange(width)[None, :]
        inside = i >= 0
        i = np.where(inside, i, 0)
        recv_bytes, recv_count, send_bytes, send_count = self._band_traffic(width)
        t = np.broadcast_to(np.arange(width)[None, :], i.shape)
        recv_bytes, recv_count = recv_bytes[i, t], recv_count[i, t]
        send_bytes, send_count = send_bytes[j[:, 0]], send_count[j[:, 0]]
        weights = np.asarray(self.weights)
        working = np.concatenate([self.working, [0.0]])
        largest = np.maximum.accumulate(
            np.where(inside, working[np.maximum(j - 1 - np.arange(width), 0)], 0.0), axis=1
        )
        memory = weights[j] - weights[i] + recv_bytes + send_bytes + largest
        rows = np.arange(n + 1)
        value = np.full(n + 1, np.inf)
        value[0] = 0.0
        choices, results = [], []
        for c, device in enumerate(sequence):
            column = self.type_of_device[device]
            compute = self.prefix[j, column] - self.prefix[i, column]
            blocked = self.blocked[j, column] - self.blocked[i, column] > 0
            cost = self._priced(sequence, c, compute, (recv_count, recv_bytes), (send_count, send_bytes))
            bad = ~inside | blocked | (memory > self.capacity[device] * (1 + _TOLERANCE))
            candidates = np.where(bad, np.inf, np.maximum(value[i], cost))
            best = np.argmin(candidates, axis=1)
            value = candidates[rows, best]
            choices.append(best)
            results.append(value[n])
        allowed = [len(sequence) - 1] if self.exact_stages else range(len(sequence))
        last = min(allowed, key=lambda c: (results[c], c))
        if not np.isfinite(results[last]):
            return None
        ends, end = [], n
        for c in range(last, -1, -1):
            ends.append(end)
            end = end - 1 - int(choices[c][end])
        return self.placement(ends[::-1], sequence)

    def window_dp(
        self, sequence: list[int], ends: list[int], radius: int, exact: np.ndarray
    ) -> Placement | None:
        """The min-max split of the estimate with each cut within ``radius`` positions of ``ends``.

        :meth:`dp`'s recurrence ``F_c[j] = min_i max(F_{c-1}[i], cost_c(i, j))`` with ``i`` and
        ``j`` in windows around the incumbent's cuts ``c - 1`` and ``c``: about ``k (2r + 1)²``
        cells per pass instead of ``n × band × k``, so it also runs on fine levels of 100k ops,
        where the cuts of a coarse split may move to any fine position near them, all at once.
        A second pass, with every stage capped at the optimum ``B``, keeps the cuts nearest the
        incumbent's (``G_c[j] = min_i G_{c-1}[i] + |j - e_c|`` over ``cost_c(i, j) ≤ B``): the
        min-max is indifferent to the other stages, and a cut moved for nothing may land where
        the estimate misses what the exact score charges (tensors skipping a stage). The stages
        keep ``sequence``'s devices and their number.
        """
        n, stages = self.n, len(ends)
        cuts = [0, *ends]
        windows = [np.arange(1)]
        for c in range(1, stages):
            windows.append(np.arange(max(1, cuts[c] - radius), min(n - 1, cuts[c] + radius) + 1))
        windows.append(np.array([n]))
        devices = sequence[:stages]

        def costs(c: int) -> np.ndarray:
            cost = self._window_costs(devices, c, windows[c], windows[c + 1])
            return cost + (exact[c] - cost[cuts[c] - windows[c][0], cuts[c + 1] - windows[c + 1][0]])

        value = np.zeros(1)
        for c in range(stages):
            value = np.maximum(value[:, None], costs(c)).min(axis=0)
        if not np.isfinite(value[0]):
            return None
        cap = float(value[0]) * (1 + 1e-9)
        moved, choices = np.zeros(1), []
        for c in range(stages):
            fits = costs(c) <= cap
            candidates = np.where(fits, moved[:, None], np.inf)
            best = np.argmin(candidates, axis=0)
            moved = candidates[best, np.arange(len(windows[c + 1]))] + np.abs(windows[c + 1] - cuts[c + 1])
            choices.append(best)
        found, at = [], 0
        for c in range(stages - 1, -1, -1):
            found.append(int(windows[c + 1][at]))
            at = int(choices[c][at])
        return self.placement(found[::-1], devices)

    def _window_costs(self, sequence: list[int], c: int, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
        """Estimated time of stage ``c`` as ``[i, j)`` for ``i`` in ``starts``, ``j`` in ``stops``
        (both contiguous ranges; ``inf`` where it is empty or does not fit), as :meth:`dp` prices
        it: the distinct tensors received over the link from the stage before and sent over the
        link to the stage after. A tensor received (made before ``i``, next read at ``r ≥ i``,
        so ``i`` lies in one of its receive segments ``[lo, r]``) counts for ``j > r``; one sent
        (made at ``f``, last read at ``l``) for ``i ≤ f < j ≤ l``: rectangles of the
        ``(i, j)`` grid, summed with 2-D difference arrays."""
        device = sequence[c]
        column = self.type_of_device[device]
        i, j = starts[:, None], stops[None, :]
        first_row, last_row, first_col, last_col = starts[0], starts[-1], stops[0], stops[-1]
        shape = (len(starts) + 1, len(stops) + 1)

        lo, hi, reader, size = self.recv_segments
        hit = (lo <= last_row) & (hi >= first_row) & (reader < last_col)
        row0, row1 = np.maximum(lo[hit], first_row) - first_row, np.minimum(hi[hit], last_row) - first_row + 1
        col0 = np.maximum(reader[hit] + 1, first_col) - first_col
        received = np.zeros((2, *shape))
        for layer, amount in enumerate((size[hit], np.ones(int(hit.sum())))):
            np.add.at(received[layer], (row0, col0), amount)
            np.add.at(received[layer], (row1, col0), -amount)

        made, last, size = self.send_segments
        col0 = np.maximum(made + 1, first_col)
        col1 = np.minimum(last, last_col)
        hit = (made >= first_row) & (col0 <= col1)
        row1 = np.minimum(made[hit], last_row) - first_row + 1
        col0, col1 = col0[hit] - first_col, col1[hit] - first_col + 1
        sent = np.zeros((2, *shape))
        for layer, amount in enumerate((size[hit], np.ones(int(hit.sum())))):
            np.add.at(sent[layer], (np.zeros_like(row1), col0), amount)
            np.add.at(sent[layer], (np.zeros_like(row1), col1), -amount)
            np.add.at(sent[layer], (row1, col0), -amount)
            np.add.at(sent[layer], (row1, col1), amount)
        recv_bytes, recv_count = received.cumsum(axis=1).cumsum(axis=2)[:, :-1, :-1]
        send_bytes, send_count = sent.cumsum(axis=1).cumsum(axis=2)[:, :-1, :-1]

        compute = self.prefix[j, column] - self.prefix[i, column]
        cost = self._priced(sequence, c, compute, (recv_count, recv_bytes), (send_count, send_bytes))
        memory = self.weights_array[j] - self.weights_array[i] + recv_bytes + send_bytes
        memory = memory + self._largest_working(i, j)
        bad = (
            (j <= i)
            | (self.blocked[j, column] - self.blocked[i, column] > 0)
            | (memory > self.capacity[device] * (1 + _TOLERANCE))
        )
        return np.where(bad, np.inf, cost)

    @functools.cached_property
    def _maxima(self) -> list[np.ndarray]:
        """A sparse table of the working sets' range maxima: level ``k`` holds the largest over
        each run of ``2^k`` positions."""
        table = [self.working]
        while 2 ** len(table) <= self.n:
            previous, half = table[-1], 2 ** (len(table) - 1)
            table.append(np.maximum(previous[:-half], previous[half:]))
        return table

    def _largest_working(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """The largest working set of the ops at positions ``[i, j)`` (0 where empty)."""
        length = np.maximum(j - i, 1)
        level = np.floor(np.log2(length)).astype(np.int64)
        result = np.zeros(np.broadcast_shapes(i.shape, j.shape))
        for k in np.unique(level):
            at = level == k
            left = np.broadcast_to(i, at.shape)[at]
            right = np.broadcast_to(j, at.shape)[at] - 2**k
            table = self._maxima[k]
            result[at] = np.maximum(
                table[np.minimum(left, len(table) - 1)], table[np.clip(right, 0, len(table) - 1)]
            )
        return np.where(j > i, result, 0.0)

    def _priced(
        self, sequence: list[int], c: int, compute: np.ndarray, received: tuple, sent: tuple
    ) -> np.ndarray:
        """Stage ``c``'s estimated time from its compute and the (count, bytes) it receives over
        the link from the stage before and sends over the link to the stage after."""
        comm = np.zeros_like(compute)
        if c > 0:
            link = self.link(sequence[c - 1], sequence[c])
            comm += received[0] * link.latency + received[1] / link.bandwidth
        if c + 1 < len(sequence):
            link = self.link(sequence[c], sequence[c + 1])
            comm += sent[0] * link.latency + sent[1] / link.bandwidth
        return np.maximum(compute, comm) if self.overlap else compute + comm

    def placement(self, ends: list[int], sequence: list[int]) -> Placement:
        stage_of = np.empty(self.n, dtype=np.int64)
        start = 0
        for s, end in enumerate(ends):
            stage_of[self.order[start:end]] = s
            start = end
        return Placement(tuple(stage_of.tolist()), tuple(sequence[: len(ends)]))


def _polish(
    scorer: Scorer, order: np.ndarray, placement: Placement, deadline: float
) -> tuple[Placement, tuple[float, float]]:
    """Move the bottleneck stage's boundaries along ``order`` while the exact score improves.

    The split's estimate misses multi-destination charges and links to non-neighbour stages;
    this local search on exact scores repairs what they cost, one boundary move at a time.
    """
    devices = np.asarray(placement.devices)
    position_stage = np.asarray(placement.stage_of)[order]
    ends = [*(int(e) for e in np.flatnonzero(np.diff(position_stage)) + 1), len(order)]

    def stage_of(cuts: list[int]) -> np.ndarray:
        result = np.empty(len(order), dtype=np.int64)
        result[order] = np.repeat(np.arange(len(cuts)), np.diff([0, *cuts]))
        return result

    def times(cuts: list[int]) -> tuple[float, float]:
        bottleneck, latency, valid = scorer.score(stage_of(cuts), devices[: len(cuts)])
        return (bottleneck, latency) if valid else (np.inf, np.inf)

    best = times(ends)
    while time.perf_counter() < deadline:
        column = scorer.type_of_device[devices[: len(ends)]]
        stage_times = np.bincount(
            stage_of(ends), scorer.times[order, column[position_stage]], minlength=len(ends)
        )
        improved = False
        for b in np.argsort(-stage_times)[:2]:
            for boundary in (b - 1, b):  # the stage's left cut is ends[b - 1], its right cut ends[b]
                if boundary < 0 or boundary >= len(ends) - 1:
                    continue
                low = ends[boundary - 1] if boundary > 0 else 0
                for step in (1, 2, 4, 8, 16, 32):
                    for sign in (1, -1):
                        moved = ends[boundary] + sign * step
                        if not low < moved < ends[boundary + 1]:
                            continue
                        trial = [*ends[:boundary], moved, *ends[boundary + 1 :]]
                        score = times(trial)
                        if score < best:
                            best, ends, improved = score, trial, True
        position_stage = np.repeat(np.arange(len(ends)), np.diff([0, *ends]))
        if not improved:
            break
    return Placement(tuple(stage_of(ends).tolist()), tuple(devices[: len(ends)].tolist())), best


def _ranks(lengths: np.ndarray) -> np.ndarray:
    """``0, 1, …, L-1`` for each length ``L``, concatenated."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.arange(total) - starts


def _best_split(splitter: _Splitter, sequence: list[int], lower: float, dp_budget: float) -> Placement | None:
    """The bisection split, improved by the banded DP when its cells fit ``dp_budget``."""
    found = splitter.split(sequence, lower)
    if found is None:
        return None
    greedy, upper = found
    return splitter.dp(sequence, upper, dp_budget) or greedy


def _decode(keys: np.ndarray, preds: list[list[int]], succs: list[list[int]]) -> np.ndarray:
    """The topological order that always takes the ready op of smallest key."""
    order = keyed_topological_order(succs, [len(p) for p in preds], [float(k) for k in keys])
    return np.asarray(order, dtype=np.int64)


class _Search:
    """State of one anytime run: levels, incumbent, deadline, progress."""

    def __init__(self, instance: Instance, settings: Settings) -> None:
        self.instance = instance
        self.settings = settings
        self.started = time.perf_counter()
        limit = settings.time_limit if settings.time_limit is not None else _DEFAULT_TIME_LIMIT
        # leave the caller time to re-evaluate the placement on the original graph; the search
        # phases stop at `deadline`, the large-neighbourhood polish runs until `end`
        self.end = self.started + limit - len(instance.graph.ops) * _EVALUATE_SECONDS_PER_OP
        self.deadline = self.started + (self.end - self.started) * (1 - _LNS_SHARE)
        self.rng = np.random.default_rng(settings.seed)
        self.k = min(instance.options.stages, len(instance.cluster.devices))
        self.bound = aggregate_lower_bound(instance)
        self.bound_source = "work over type-weighted aggregate speed + communication floor"
        if settings.known_bound > self.bound:  # after CP-SAT under auto
            self.bound, self.bound_source = settings.known_bound, "proven before the search"
        self.fine = coarsen_exact(instance)
        fine = self.fine.instance
        ideal = np.where(np.isfinite(fine.costs.times), fine.costs.times, np.inf).min(axis=1).sum() / self.k
        self.identity = Coarsening(fine, tuple((v,) for v in range(len(fine.graph.ops))), True)
        self.coarse = self.identity
        if len(fine.graph.ops) * _COARSEN_SECONDS_PER_OP <= limit / 4:  # else search the fine level
            level = self.identity.then(module_groups(fine, _GRAIN * ideal), exact=False)
            self.coarse = level.then(sibling_groups(level.instance, _GRAIN * ideal), exact=False)
        self.fine_tensors = TensorArrays.of(fine)
        self.coarse_tensors = TensorArrays.of(self.coarse.instance)
        self.fine_scorer = Scorer(fine, self.fine_tensors)
        self.coarse_scorer = Scorer(self.coarse.instance, self.coarse_tensors)
        self.coarse_rank = np.empty(len(fine.graph.ops), dtype=np.int64)  # each fine op's coarse op
        for c, members in enumerate(self.coarse.members):
            self.coarse_rank[list(members)] = c
        self.best: tuple[float, float] = (np.inf, np.inf)
        self.best_placement: Placement | None = None  # on the fine level
        self.best_order: np.ndarray | None = None  # coarse-level order
        self.best_hosts: list[list[int]] = host_ranking(instance)
        self.evaluations = 0

    def remaining(self) -> float:
        return self.deadline - time.perf_counter()

    def proven_by_structural_bound(self, seconds: float) -> bool:
        """Raise the bound to the dominator-chain or two-tower bound (:mod:`partition.chain_bound`,
        :mod:`partition.tower_bound`, on the original instance) where that is cheap, within
        ``seconds``; whether the incumbent now meets it, so that the search can stop: on the 7B
        decoder at k = 32 it does after the first splits."""
        if self.best_placement is None or not bounds_structurally(self.instance):
            return False
        deadline = time.perf_counter() + max(seconds, 0.0)
        value, name = structural_lower_bound(
            self.instance,
            self.best[0],
            floor=self.bound,
            deadline=deadline,
            workers=self.settings.threads,
            gap_limit=self.settings.gap_limit,
        )
        if value > self.bound:
            self.bound, self.bound_source = value, name
        return self.met()

    def met(self) -> bool:
        """Whether the incumbent meets the bound, within the settings' gap limit if one is set."""
        return self.settings.close_enough(self.best[0], self.bound, OPTIMALITY_TOLERANCE)

    def report(self, what: str) -> None:
        gap = self.best[0] / self.bound - 1 if self.bound > 0 and np.isfinite(self.best[0]) else np.inf
        self.settings.report(
            f"anytime {time.perf_counter() - self.started:6.1f}s {what}: best {self.best[0]:.6g} s,"
            f" bound {self.bound:.6g} s, gap {gap:.2%}"
        )

    def offer_fine(self, placement: Placement | None) -> bool:
        if placement is None:
            return False
        stage_of = np.asarray(placement.stage_of, dtype=np.int64)
        bottleneck, latency, valid = self.fine_scorer.score(stage_of, np.asarray(placement.devices))
        self.evaluations += 1
        if valid and (bottleneck, latency) < self.best:
            self.best, self.best_placement = (bottleneck, latency), placement
            return True
        return False

    def resplit(self, order: np.ndarray, placement: Placement) -> Placement | None:
        """The bisection split of a fine-level ``order`` over ``placement``'s devices."""
        found = _Splitter(self.fine.instance, order, self.fine_tensors).split(
            list(placement.devices), self.bound
        )
        return None if found is None else found[0]

    def dp_budget(self) -> float:
        """DP cells a refinement may use: half the time left."""
        return max(_DP_CELLS, self.remaining() / 2 / _DP_SECONDS_PER_CELL)

    def try_coarse(
        self, order: np.ndarray, hosts: list[list[int]], *, thorough: bool = False, polish: bool = False
    ) -> tuple[float, Placement | None]:
        """Split a coarse order on the coarse level; score it exactly; offer its expansion."""
        placement = _best_split(
            _Splitter(self.coarse.instance, order, self.coarse_tensors),
            host_sequence(hosts, self.k),
            self.bound,
            self.dp_budget() if thorough else _DP_CELLS,
        )
        if placement is None:
            return np.inf, None
        if thorough or polish:
            deadline = time.perf_counter() + self.remaining() / (4 if thorough else 10)
            placement, _ = _polish(self.coarse_scorer, order, placement, deadline)
        stage_of = np.asarray(placement.stage_of, dtype=np.int64)
        bottleneck, _, valid = self.coarse_scorer.score(stage_of, np.asarray(placement.devices))
        self.evaluations += 1
        if not valid:
            return np.inf, None
        expanded = Placement(tuple(stage_of[self.coarse_rank].tolist()), placement.devices)
        if self.offer_fine(expanded):
            self.best_order, self.best_hosts = order, hosts
        return bottleneck, placement

    def interleave_towers(self) -> None:
        """Offer the two towers interleaved over the incumbent's devices (:mod:`.tower_split`),
        and the exact split of the order that interleaving gives, where the graph has towers."""
        found = bounded_towers(self.instance)
        if self.best_placement is None or found is None:
            return
        deadline = time.perf_counter() + max(self.remaining(), 0.0) * _INTERLEAVING_SHARE
        fine = self.fine.instance
        ids = [op.id for op in self.instance.graph.ops]
        devices = list(self.best_placement.devices)
        # the first round only: the later ones' placements, offered here, move the order search
        # into other basins (CLIP on 2 × 8 A100 at k = 16 ended at 0.3070 ms, not 0.3053);
        # the polish's escape charges the sends (reinterleaved)
        for interleaved in interleave(
            fine, self.fine.members, ids, found, devices, self.bound, self.best[0], deadline, rounds=1
        ):
            if interleaved.placement.num_stages == self.k or not self.instance.options.exact_stages:
                self.offer_fine(interleaved.placement)  # its empty stages dropped
            splitter = _Splitter(fine, interleaved.order, self.fine_tensors)
            self.offer_fine(_best_split(splitter, devices, self.bound, self.dp_budget()))

    def reinterleaved(self, found: Towers, placement: Placement, deadline: float) -> Placement | None:
        """The towers ``found`` interleaved anew along ``placement``'s own order
        (:func:`.tower_split.along`), the escape of the polish (:func:`.lns.polish`): the best
        round that beats ``placement``, else ``None`` (the polish offers what it ends at)."""
        best, best_key = (
            None,
            self.fine_scorer.score(np.asarray(placement.stage_of), np.asarray(placement.devices))[:2],
        )
        ids = [op.id for op in self.instance.graph.ops]
        for interleaved in along(
            self.fine.instance, self.fine.members, ids, found, placement, self.bound, best_key[0], deadline
        ):
            candidate = interleaved.placement
            if candidate.num_stages == placement.num_stages:
                bottleneck, latency, valid = self.fine_scorer.score(
                    np.asarray(candidate.stage_of), np.asarray(candidate.devices)
                )
                if valid and (bottleneck, latency) < best_key:
                    best, best_key = candidate, (bottleneck, latency)
        return best

    def polish_with_witness(self, settings: Settings) -> tuple[str, ...]:
        """The large-neighbourhood polish until the end, from the incumbent and, on a graph of two
        towers, from the two-tower bound's witness rounded to a placement
        (:func:`.tower_split.witness_placements`; on mixed clusters also the witness of the pass
        with group changes, whose stages visit the hosts as placements pay for it, and those
        keeping a group of hosts' stages together; the best rounded is kept: CLIP over
        A100/L4/T4 at k = 8 0.8556 ms against 0.9134 for the plain pass's, T5 on H100/A100 0.4807
        with the A100s together against 0.4857). The polish is a local search that ends where
        its start's basin does. A witness within :data:`_WITNESS_SLACK` of the incumbent is
        polished first, for :data:`_WITNESS_SHARE` of the time: on CLIP over 16 V100s at k = 16
        the incumbent (0.3483 ms) polishes to 0.3455, the witness (0.3494) to 0.3423 (0.3410
        with the escape, :meth:`reinterleaved`). Farther ones get, best rounded first, the time
        the incumbent's polish leaves: that polish stops after :data:`_STALL_SHARE` of its time
        in which it lowered the bottleneck by less than :data:`_STALL_GAIN` (T5 on H100/A100 at
        k = 8: by 0.5% in 13 s, its last gain 15 s before the end; the A100s' witness then
        polishes from 0.4807 ms to 0.4272 against 0.4320), while :data:`_SECOND_START_SECONDS`
        remain (:meth:`_stall`), and so does each witness's while another waits (T5 on
        A100/L4/T4: the second, 0.9615 ms, polishes to 0.7644 where the best ends at 0.7698);
        a witness is polished without the escape (which would interleave the towers
        along it, back into the incumbent's basin) and with partial hints (:func:`.lns.polish`).
        On CLIP over 2 × 8 A100 at k = 16 the witness rounds to 0.3368 ms, 10% above the
        incumbent, and polishes to 0.3030 ms in about 12 s of a core under half the seeds, where
        the incumbent's polish stays at 0.3053 (the bound: 0.2978). With ``settings.threads ≥ 2``
        the starts are polished at once, the witnesses without the escape; they are the
        incumbent and the best rounded witnesses, one per thread, as where a polish ends does
        not follow how its start rounds (T5 over A100/L4/T4 at k = 8: the second best rounded,
        0.9615 ms, polishes to 0.7644, the best, 0.9027, to 0.7698), and the other witnesses
        wait, in turn, for a polish that stalls as the incumbent's does with one thread
        (:meth:`_stall`) to hand its thread over (CLIP over A100/L4/T4 at k = 8: the fifth,
        rounded 0.9068, polishes to 0.8230 where the others end at 0.8322). Once every witness
        has had its turn they wait again, under other seeds (:data:`_RESEEDS`): where the polish
        of one start ends turns on its windows' searches (that CLIP witness, 45 s of a core
        under each of nine seeds: 0.30304–0.30521 ms, within 2% of the bound under five).
        Returns the notes of the polishes."""
        assert self.best_placement is not None
        fine, notes = self.fine.instance, []
        starts = [self.best_placement]
        escape, found, far, later = None, bounded_towers(self.instance), [], []
        if found is not None:
            escape = functools.partial(self.reinterleaved, found)
            # traced within the share of the polish it would start
            deadline = time.perf_counter() + max(self.end - time.perf_counter(), 0.0) * _WITNESS_SHARE
            ranked = self._ranked_witnesses(deadline)
            # the best rounded, one per thread (their polished ends do not follow their order)
            for witness, score in ranked[: max(settings.threads, 1)]:
                if score[0] <= _WITNESS_SLACK * self.best[0]:
                    starts.insert(len(starts) - 1, witness)
                else:
                    far.append(witness)
            later = [witness for witness, _ in ranked[max(settings.threads, 1) :]]

        def taken(report: PolishReport, start: Placement, reseed: int = 0) -> None:
            self.offer_fine(report.placement)
            if start is not starts[-1]:  # the incumbent's is last in turn
                source = "the two-tower witness" + (f", seed + {reseed}" if reseed else "")
                notes.extend(f"{note} (from {source})" for note in report.notes if report.windows)
            else:
                notes.extend(report.notes)

        # the farther witnesses, best rounded first, polished without the escape and with partial
        # hints; then again, under other seeds, while time is left
        witnesses = [Start(witness, complete_hints=False) for witness in far + later]
        witnesses += [replace(w, reseed=r) for r in range(1, _RESEEDS + 1) for w in witnesses]
        if settings.threads >= 2 and (len(starts) > 1 or far):
            # a thread each: no start waits for another's share; a polish that stalls hands its
            # thread to the next witness while one waits. The escape is the incumbent's alone:
            # along a witness it interleaves the towers anew, into the best interleavings' basin
            # (CLIP over four types at k = 8: the witness rounded to 0.55353 ms took one and
            # ended there, at 0.53792; without, 0.5359-0.5365)
            jobs = [Start(start, escape if start is starts[-1] else None) for start in starts]
            jobs += witnesses[: len(far)]
            polished = polish_together(
                fine,
                jobs,
                settings,
                self.end,
                self.fine_scorer,
                witnesses[len(far) :],
                self._stall,
                self.polish_target(),
            )
        else:  # the incumbent's polish alone until the end, unless a witness waits
            stall = self._stall() if witnesses else None
            enough = good_enough(self.polish_target())
            for turn, start in enumerate(starts):
                share = _WITNESS_SHARE if turn + 1 < len(starts) else 1.0
                deadline = time.perf_counter() + max(self.end - time.perf_counter(), 0.0) * share
                if self.met():
                    break
                taken(
                    polish(fine, start, settings, deadline, self.fine_scorer, escape, stall, enough=enough),
                    start,
                )
            # in the time the incumbent's polish left, in turn, each yielding as it did
            polished = []
            if witnesses and not self.met():
                polished = polish_together(
                    fine,
                    witnesses[:1],
                    settings,
                    self.end,
                    self.fine_scorer,
                    witnesses[1:],
                    self._stall,
                    self.polish_target(),
                )
        for job, report in polished:
            taken(report, job.placement, job.reseed)
        return tuple(notes)

    def polish_target(self) -> float:
        """The bottleneck at which the polish stops: within the gap limit of the bound (none
        without one), and on graphs the search bounds itself within :data:`_WITHIN_A_PROBE` of
        that, where one probe of the structural bound at the placement may prove it
        (:meth:`prove_or_polish`)."""
        if not bounds_structurally(self.instance):
            return self.settings.target(self.bound)
        return self.bound * (1 + self.settings.gap_limit) * (1 + _WITHIN_A_PROBE)

    def prove_or_polish(self, settings: Settings) -> tuple[str, ...]:
        """After a polish that stopped at :meth:`polish_target` without meeting the bound: the
        structural bound below the new incumbent, in :data:`_BOUND_SHARE_OF_POLISH` of the time
        left, then, unless it meets the incumbent, the polish from there until the end. The
        bound's last turn was below the incumbent before the polish, whose optimum it may miss
        by its resolution: Inception-v2 over H100/A100 at k = 8 under 10 s, 0.23740162 ms
        polished, bound 0.23740111, where the probe at the placement proves it optimal. Returns
        the notes of the polish."""
        if self.met() or self.best[0] > self.polish_target() or time.perf_counter() >= self.end:
            return ()
        if self.proven_by_structural_bound((self.end - time.perf_counter()) * _BOUND_SHARE_OF_POLISH):
            self.report("structural bound met")
            return ()
        assert self.best_placement is not None
        report = polish(self.fine.instance, self.best_placement, settings, self.end, self.fine_scorer)
        self.offer_fine(report.placement)
        return report.notes

    def _stall(self) -> Stall:
        """When a polish beginning now yields to a start that waits: once it has gone
        :data:`_STALL_SHARE` of the time left lowering the bottleneck by less than
        :data:`_STALL_GAIN`, while :data:`_SECOND_START_SECONDS` remain."""
        seconds = max(self.end - time.perf_counter(), 0.0) * _STALL_SHARE
        return Stall(seconds, self.end - _SECOND_START_SECONDS, _STALL_GAIN)

    def _ranked_witnesses(self, deadline: float) -> list[tuple[Placement, tuple[float, float]]]:
        """The two-tower relaxation's witnesses rounded to valid placements
        (:func:`.tower_split.witness_placements`, traced until ``deadline``), best scored first,
        one of each score."""
        ranked: dict[tuple[float, float], Placement] = {}
        for traced in witness_placements(
            self.instance, self.fine.instance, self.fine.members, self.bound, self.best[0], deadline
        ):
            if traced.num_stages != self.k and self.instance.options.exact_stages:
                continue
            scored = self.fine_scorer.score(np.asarray(traced.stage_of), np.asarray(traced.devices))
            if scored[2]:
                ranked.setdefault(scored[:2], traced)
        return [(ranked[score], score) for score in sorted(ranked)]

    def shift_cuts(self) -> None:
        """Move every cut of the incumbent at once within windows of fine positions
        (:meth:`_Splitter.window_dp`), the estimate corrected per stage to the incumbent's exact
        times, while that improves it, in :data:`_SHIFT_SHARE` of the polish's time: the search
        splits coarse orders, so its cuts sit on coarse-op boundaries, and on large fine levels
        the banded DP cannot move them."""
        deadline = time.perf_counter() + (self.end - time.perf_counter()) * _SHIFT_SHARE
        while self.best_placement is not None and time.perf_counter() < deadline:
            stage_of = np.asarray(self.best_placement.stage_of, dtype=np.int64)
            devices = np.asarray(self.best_placement.devices)
            order = np.lexsort((self.rank, stage_of))  # stage by stage: a topological order
            ends = [*(np.flatnonzero(np.diff(stage_of[order])) + 1).tolist(), len(order)]
            # a third of the time left: a cut moved far may move on in the next round
            # (the deadline may pass between the loop's test and here)
            left = max(deadline - time.perf_counter(), 0.0)
            cells = left / 3 / _DP_SECONDS_PER_CELL / 2 / len(ends)  # two passes
            radius = min(int((np.sqrt(cells) - 1) / 2), len(order))
            if radius < 1:
                return
            exact, _ = self.fine_scorer.stage_times(stage_of, devices)
            splitter = _Splitter(self.fine.instance, order, self.fine_tensors)
            if not self.offer_fine(splitter.window_dp(devices.tolist(), ends, radius, exact)):
                return

    @functools.cached_property
    def branch_split(self) -> BranchSplit | None:
        """The arms of the fine level's fork-join blocks cut where narrow (:mod:`.branch_order`)."""
        return branch_split(self.fine.instance, self.fine_tensors)

    @functools.cached_property
    def rank(self) -> np.ndarray:
        """Each fine op's place in the graph's order with the arms cut where narrow: the order
        :meth:`shift_cuts` keeps within a stage, so that a cut moved inside a block still
        crosses the arms where they are narrow."""
        natural = np.arange(len(self.fine.instance.graph.ops))
        if self.branch_split is None:
            return natural
        rank = np.empty_like(natural)
        rank[self.branch_split.apply(natural)] = natural
        return rank

    def refine(self, order: np.ndarray, hosts: list[list[int]]) -> None:
        """Split the expanded order on the fine level, and the same order with the arms of each
        fork-join block cut where narrow (the search level keeps an MoE layer's experts whole:
        on the 110k-op MoE at k = 64 that order's split is 1.4% shorter); polish each with the
        exact order DP if small."""
        expanded = self.coarse.expand_order(order)
        fine = self.fine.instance
        sequence = host_sequence(hosts, self.k)
        small = len(expanded) ** 2 * self.k * len(fine.cluster.devices) <= _POLISH_WORK
        split = self.branch_split
        for fine_order in (expanded,) if split is None else (expanded, split.apply(expanded)):
            if self.remaining() <= 0 and self.best_placement is not None:
                return
            splitter = _Splitter(fine, fine_order, self.fine_tensors)
            self.offer_fine(_best_split(splitter, sequence, self.bound, self.dp_budget()))
            if small and self.remaining() > 0:
                self.offer_fine(split_order(fine, fine_order)[0])


class Anytime(Solver):
    name = "anytime"
    capabilities = Capabilities(scope=Scope.HEURISTIC, time_limit=True, gap_limit=True)

    def solve(self, instance: Instance, settings: Settings) -> Outcome:
        search = _Search(instance, settings)
        coarse = search.coarse.instance
        settings.report(
            f"anytime: {len(instance.graph.ops)} ops, {len(search.fine.members)} after exact coarsening,"
            f" {len(coarse.graph.ops)} at the search level; k ≤ {search.k}, bound {search.bound:.6g} s"
        )
        preds: list[list[int]] = [[] for _ in coarse.graph.ops]
        succs: list[list[int]] = [[] for _ in coarse.graph.ops]
        for u, v in coarse.graph.edges:
            succs[u].append(v)
            preds[v].append(u)
        natural = np.arange(len(coarse.graph.ops))
        for variant in host_orders(search.best_hosts, search.k):
            if search.best_placement is not None and search.remaining() <= 0:
                break
            search.try_coarse(natural, variant, polish=True)
        search.report("first split")
        # after the first split, so that the order search keeps an incumbent order of its own
        share = time.perf_counter() + search.remaining() * _ROUNDING_SHARE
        search.offer_fine(
            rounded_placement(search.fine.instance, search.fine_scorer, share, search.resplit)[0]
        )
        search.report("chain rounding")
        search.interleave_towers()
        search.report("towers interleaved")
        if search.best_order is not None and search.remaining() > 0:
            search.try_coarse(search.best_order, search.best_hosts, thorough=True)
            search.report("coarse DP")
        if search.best_order is not None and search.remaining() > 0 and search.coarse is not search.identity:
            search.refine(search.best_order, search.best_hosts)
            search.report("refined")
        polished: tuple[str, ...] = ()
        if search.proven_by_structural_bound(search.remaining() * _STRUCTURAL_BOUND_SHARE_LEFT):
            search.report("structural bound met")
        else:
            self._evolve(search, preds, succs)
            if (
                search.best_order is not None
                and search.remaining() > 0
                and search.coarse is not search.identity
            ):
                search.refine(search.best_order, search.best_hosts)
            search.shift_cuts()
            search.report("cuts shifted")
            if search.proven_by_structural_bound((search.end - time.perf_counter()) * _BOUND_SHARE_OF_POLISH):
                search.report("structural bound met")
            elif search.best_placement is not None and not search.met():
                polished = search.polish_with_witness(settings)
                polished += search.prove_or_polish(settings)
        search.report("done")
        if search.best_placement is None:
            return Outcome(
                None,
                Status.NO_SOLUTION,
                search.bound,
                ("anytime: no split of the orders tried fits the devices' memory",),
            )
        return Outcome(
            search.fine.expand(search.best_placement),
            Status.FEASIBLE,
            search.bound,
            (
                f"anytime: {search.evaluations} placements scored in"
                f" {time.perf_counter() - search.started:.1f} s; search level"
                f" {len(coarse.graph.ops)} ops (heuristic), fine level {len(search.fine.members)} ops"
                f" (exact); bound = {search.bound_source}",
                *polished,
            ),
        )

    @staticmethod
    def _evolve(search: _Search, preds: list[list[int]], succs: list[list[int]]) -> None:
        """Biased random-key genetic search over orders, with host-order moves on the elite."""
        n = len(preds)
        base = np.arange(n) / max(n, 1)
        rng = search.rng
        size, elite = 12, 3
        population = [base] + [base + rng.normal(0, sigma, n) for sigma in np.geomspace(1e-3, 0.2, size - 1)]
        scores = []
        for keys in population:
            if search.remaining() <= 0:
                return
            scores.append(search.try_coarse(_decode(keys, preds, succs), search.best_hosts)[0])
        generation = stalled = 0
        while search.remaining() > 0 and stalled < _STALL_GENERATIONS and not search.met():
            generation += 1
            before = search.best
            ranked = np.argsort(scores, kind="stable")
            elites = [population[i] for i in ranked[:elite]]
            elite_scores = [scores[i] for i in ranked[:elite]]
            children, child_scores = list(elites), list(elite_scores)
            used = min(used_hosts(search.best_hosts, search.k), len(search.best_hosts))
            if len(search.best_hosts) > 1 and search.best_order is not None:
                candidate = neighbour_hosts(search.best_hosts, used, rng)
                search.try_coarse(search.best_order, candidate)
            while len(children) < size and search.remaining() > 0:
                if len(children) >= size - 2:
                    keys = base + rng.normal(0, 0.05, n)
                else:
                    first = elites[int(rng.integers(elite))]
                    second = population[int(rng.integers(len(population)))]
                    keys = np.where(rng.random(n) < 0.7, first, second)
                children.append(keys)
                child_scores.append(search.try_coarse(_decode(keys, preds, succs), search.best_hosts)[0])
            population, scores = children, child_scores
            stalled = stalled + 1 if search.best >= before else 0
            if stalled == 0 or generation % 10 == 0:
                search.report(f"generation {generation}")
