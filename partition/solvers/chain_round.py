"""Primal placements by rounding the dominator-chain relaxation (:mod:`partition.chain_bound`).

**Positions rounded to ideals.** The chain bound's positions are re-used: a position of a small
(exact) segment ``b`` *is* an ideal — every segment before ``b`` plus the segment's ideal ``P``
(the bound's own enumeration). A position of a large (relaxed) segment is a cell
``[x_g, x_{g+1})`` of the segment's work on the reference type (the fastest); it is rounded to
the prefix of the segment's ops in topological order whose reference work is nearest the cell's
middle — a downset (the segment's ops are contiguous in the order and read only earlier ops),
which for an MoE block is the norm, router and top-k plus whole experts in order.

**Primal prices.** The relaxed rows' fractional-knapsack envelopes are replaced by the rounded
cut's exact compute prefix per type and its crossing tensors (produced before the cut, read at
or after it), and every stage pays ``recv(I) + compute + send(J)`` (the bound's compute-only
case for cuts inside one segment is dropped). A stage from ``I`` reaches the furthest ``J``
within ``B`` (the bound's running maximum over earlier starts is dropped too: a primal stage
starts where the previous one ended). Each position is priced twice: over the host's own link
and over the slowest link its type may use (the inter-host link on multi-host clusters).

**Host runs.** A run is ``m`` consecutive stages on one host's devices of one type; its first
stage receives and its last sends over the slow link, the stages inside use the fast one, so a
run's reach from ``I`` is the composition of ``m`` single-stage reaches. With ``r_τ`` runs of
type ``τ`` (at most its host count) and ``c`` stages (at most ``k``), ``F[r, c]`` is the furthest
position reached, ``F[r + e_τ, c + m] ≥ run_τm(F[r, c])``, one run per round; the state with
all ops reached and fewest stages is traced back through the stored tables to (type, stage
ends) per run, runs are given distinct hosts of their type, and nested cuts become stages (a
cut not containing the previous one is joined with it; empty stages are dropped).

**Primal bisection.** The estimate still misses multi-destination charges and links between
non-neighbouring stages, so each traced placement is scored exactly (the evaluator's arithmetic,
:class:`._scoring.Scorer`). ``B`` runs from the chain bound upwards in geometric steps until a
rounding lands within ``B``, then bisects between the last ``B`` that did not and the best
score; the best valid placement is kept. A caller may pass ``resplit``: another split of the
rounded stage order over the same devices (the anytime search's splitter, which charges tensors
over the links they really take), scored too. Heuristic: no optimality claim; the bound
returned is the chain bound.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from ..chain_bound import (
    _CELLS,
    _bisect,
    _Builder,
    _Positions,
    _positions,
    _Relaxation,
    _share_out,
)
from ..instance import Instance
from ..placement import Placement
from ._scoring import Scorer

_STEPS = (
    1.0005,
    1.002,
    1.005,
    1.01,
    1.02,
    1.04,
    1.07,
    1.1,
    1.15,
    1.2,
    1.3,
    1.5,
    2,
    3,
    5,
    8,
    13,
    20,
)  # B / bound
_REFINE = 6  # bisection steps between the last failing and the best B

Resplit = Callable[[np.ndarray, Placement], Placement | None]


class _Runs:
    """Host runs: for each type, its hosts' devices, and the furthest position a run reaches.

    A run of ``m`` stages on one host of type ``τ`` from position ``I``: its first stage
    receives over the inter-host link and its last sends over it, the stages in between use the
    host's link; ``run(τ, m)`` composes the single-stage reaches accordingly.
    """

    def __init__(self, instance: Instance, best: _Positions, worst: _Positions) -> None:
        cluster = instance.cluster
        self.hosts: list[list[list[int]]] = [[] for _ in cluster.type_names]  # type → hosts → devices
        for h in range(len(cluster.hosts)):
            on_host = [d for d, device in enumerate(cluster.devices) if device.host == h]
            for t in sorted({cluster.type_index[d] for d in on_host}):
                self.hosts[t].append([d for d in on_host if cluster.type_index[d] == t])
        self.k = min(instance.options.stages, len(cluster.devices))

        def mixed(recv: _Positions, send: _Positions) -> _Relaxation:
            return _Relaxation(
                instance, _Positions(best.end, best.start, send.send, recv.recv, best.threshold)
            )

        self.first, self.middle = mixed(worst, best), mixed(best, best)
        self.last, self.alone = mixed(best, worst), mixed(worst, worst)
        self.end = self.middle.last

    def reaches(self, bottleneck: float) -> list[list[list[np.ndarray]]]:
        """Per type and run length ``m`` (index ``m - 1``), the reach of each stage of the run."""
        first, middle = _reach(self.first, bottleneck), _reach(self.middle, bottleneck)
        last, alone = _reach(self.last, bottleneck), _reach(self.alone, bottleneck)
        runs = []
        for t, hosts in enumerate(self.hosts):
            longest = min(max((len(h) for h in hosts), default=0), self.k)
            runs.append(
                [[alone[t]]] + [[first[t], *[middle[t]] * (m - 2), last[t]] for m in range(2, longest + 1)]
            )
        return runs


def _reach(relaxation: _Relaxation, bottleneck: float) -> np.ndarray:
    """Per position (rows) and type (columns), the furthest position a stage *starting there*
    reaches within ``bottleneck`` when every stage pays its cuts' communication (the bound's
    running maximum over earlier starts is dropped: a primal stage starts where the last ended)."""
    here = np.arange(relaxation.last + 1)
    columns = [
        np.searchsorted(relaxation.full_end[:, t], relaxation.full_start[:, t] + bottleneck, side="right") - 1
        for t in range(relaxation.full_end.shape[1])
    ]
    return np.maximum(np.column_stack(columns), here[:, None]).T


def _compose(stages: list[np.ndarray], start: np.ndarray) -> np.ndarray:
    for reach in stages:
        start = reach[start]
    return start


def _trace(runs: _Runs, bottleneck: float) -> list[tuple[int, list[int]]] | None:
    """(type, stage ends) of each run of a covering at ``bottleneck`` with at most one run per
    host and ``k`` stages, or ``None`` when the estimate admits none.

    ``F[r, c]``: the furthest position reached with ``r_τ`` runs of each type and ``c`` stages;
    each round adds one run (type ``τ``, length ``m``): ``F[r + e_τ, c + m] ≥ run_τm(F[r, c])``.
    """
    reaches = runs.reaches(bottleneck)
    shape = [len(h) + 1 for h in runs.hosts] + [runs.k + 1]
    tables = [np.zeros(shape, dtype=np.int64)]
    for _ in range(sum(len(h) for h in runs.hosts)):
        furthest = tables[-1]
        grown = furthest.copy()
        for t, by_length in enumerate(reaches):
            for m, stages in enumerate(by_length, start=1):
                later = [slice(None)] * len(shape)
                earlier = [slice(None)] * len(shape)
                later[t], earlier[t] = slice(1, None), slice(0, -1)
                later[-1], earlier[-1] = slice(m, None), slice(0, -m)
                np.maximum(
                    grown[tuple(later)], _compose(stages, furthest[tuple(earlier)]), out=grown[tuple(later)]
                )
        tables.append(grown)
        if grown.max() >= runs.end or np.array_equal(grown, furthest):
            break
    done = np.argwhere(tables[-1] >= runs.end)
    if len(done) == 0:
        return None
    state = list(done[np.argmin(done[:, -1])])  # fewest stages
    target, result = runs.end, []
    for r in range(len(tables) - 1, 0, -1):
        previous = tables[r - 1]
        if previous[tuple(state)] >= target:
            continue
        for t, by_length in enumerate(reaches):
            for m, stages in enumerate(by_length, start=1):
                before = [*state[:-1], state[-1] - m]
                before[t] -= 1
                if min(before) < 0:
                    continue
                start = int(previous[tuple(before)])
                ends = [start]
                for reach in stages:
                    ends.append(int(reach[ends[-1]]))
                if ends[-1] >= target:
                    result.append((t, [min(e, target) for e in ends[1:]]))
                    state, target = before, start
                    break
            else:
                continue
            break
        if target <= 0:
            break
    return result[::-1] if target <= 0 else None


class _Rounder:
    """Real ideals of the positions built for one reference type.

    Position ``p`` is ``ops[:lo] ∪ extra`` with ``extra`` ops of segment ``[lo, hi)``: an exact
    segment's ideal (a bitset over the segment) or a relaxed cell's prefix of the segment.
    """

    def __init__(self, builder: _Builder, reference: int) -> None:
        rows: list[tuple[int, np.ndarray]] = []
        relaxed: set[int] = set()
        times = builder.times[:, reference]
        for b in range(len(builder.bounds) - 1):
            lo, hi = int(builder.bounds[b]), int(builder.bounds[b + 1])
            ideals = builder.segment_ideals(b)
            if ideals is not None:
                for ideal in ideals:
                    rows.append(
                        (lo, lo + np.array([u for u in range(hi - lo) if ideal >> u & 1], dtype=np.int64))
                    )
            else:
                work = np.concatenate([[0.0], np.cumsum(times[lo:hi])])
                cells = np.linspace(0.0, work[-1], _CELLS + 1)
                cut = np.clip(np.searchsorted(work, (cells[:-1] + cells[1:]) / 2), 1, hi - lo - 1)
                rows.append((lo, np.arange(lo, lo)))
                relaxed.update(range(len(rows), len(rows) + len(cut)))
                rows.extend((lo, np.arange(lo, lo + c)) for c in cut.tolist())
        self.rows = rows
        self.n = len(builder.segment)
        # the op-index cut of each relaxed row (its ideal is ops[:cut]), -1 for exact rows
        self.cuts = np.array(
            [lo + len(extra) if i in relaxed else -1 for i, (lo, extra) in enumerate(rows)], dtype=np.int64
        )

    def priced(self, builder: _Builder, positions: _Positions) -> _Positions:
        """``positions`` with each relaxed row's envelopes replaced by the rounded cut's exact
        compute prefix and crossing tensors (produced before the cut, read at or after it), and
        every stage charged its communication: a primal estimate of the rounded cuts."""
        n = self.n
        cut_of = np.zeros(n + 2)
        np.add.at(cut_of, builder.producer + 1, builder.size)
        np.add.at(cut_of, builder.last_reader + 1, -builder.size)
        count_of = np.bincount(builder.producer + 1, minlength=n + 2) - np.bincount(
            builder.last_reader + 1, minlength=n + 2
        )
        cut_bytes, cut_count = np.cumsum(cut_of)[: n + 1], np.cumsum(count_of)[: n + 1].astype(float)
        prefix = np.vstack([np.zeros(builder.times.shape[1]), builder.times.cumsum(axis=0)])
        rows = np.flatnonzero(self.cuts >= 0)
        cuts = self.cuts[rows]
        end, start = positions.end.copy(), positions.start.copy()
        send, recv = positions.send.copy(), positions.recv.copy()
        end[rows] = start[rows] = prefix[cuts]
        send[rows] = recv[rows] = builder.comm(cut_bytes[cuts], cut_count[cuts])
        return _Positions(end, start, send, recv, np.arange(len(end)))

    def stage_of(self, ends: list[int]) -> np.ndarray:
        """Each op's stage when stage ``s`` ends at position ``ends[s]`` (the last at all ops);
        ideals are made nested by union with the earlier ones, and empty stages dropped."""
        stage_of = np.full(self.n, -1, dtype=np.int64)
        for s, p in enumerate(ends[:-1]):
            lo, extra = self.rows[p] if p < len(self.rows) else (self.n, np.arange(0))
            inside = np.zeros(self.n, dtype=bool)
            inside[:lo] = True
            inside[extra] = True
            stage_of[inside & (stage_of < 0)] = s
        stage_of[stage_of < 0] = len(ends) - 1
        return stage_of


def _worst_links(instance: Instance, builder: _Builder) -> None:
    """Charge every cut the slowest link a device of its type may use (the inter-host link on
    multi-host clusters): the relaxation then prices each cut as a host change does."""
    cluster = instance.cluster
    if len(cluster.hosts) < 2 or instance.options.overlap:
        return
    link = cluster.inter_host_link
    for device in cluster.devices:
        t = cluster.type_names.index(device.type)
        builder.latency[t] = max(
            builder.latency[t], link.latency, cluster.hosts[device.host].intra_link.latency
        )
        builder.bandwidth[t] = min(
            builder.bandwidth[t], link.bandwidth, cluster.hosts[device.host].intra_link.bandwidth
        )


def rounded_placement(
    instance: Instance, scorer: Scorer, deadline: float, resplit: Resplit | None = None
) -> tuple[Placement | None, float]:
    """The best rounding found before ``deadline`` (``perf_counter`` time) and the chain bound
    it started from; ``improve`` (boundary moves along an order, on exact scores) refines each."""
    builder = _Builder(instance)
    _share_out(builder, deadline)  # near the deadline, segments of many ideals become cells
    reference = int(np.argmin(builder.times.sum(axis=0)))
    positions, _ = _positions(builder, reference)
    bound = _bisect(_Relaxation(instance, positions), 0.0, None, deadline)
    if bound <= 0:
        return None, bound
    rounder = _Rounder(builder, reference)
    best = rounder.priced(builder, positions)
    _worst_links(instance, builder)
    worst = rounder.priced(builder, _positions(builder, reference)[0])
    runs = _Runs(instance, best, worst)
    found: list = [(np.inf, np.inf), None]
    _bisect_primal(instance, scorer, runs, rounder, bound, deadline, resplit, found)
    return found[1], bound


def _bisect_primal(
    instance: Instance,
    scorer: Scorer,
    runs: _Runs,
    rounder: _Rounder,
    bound: float,
    deadline: float,
    resplit: Resplit | None,
    best: list,
) -> None:
    """Round at values of B from ``bound`` up (module docstring); ``best`` = [key, placement]."""

    def attempt(value: float) -> float:
        traced = _trace(runs, value)
        if traced is None:
            return np.inf
        hosts = [[list(devices) for devices in h] for h in runs.hosts]
        ends, devices = [], []
        for t, run_ends in traced:
            stages = [e for e in run_ends if e > (ends[-1] if ends else 0)]
            stages = [e for i, e in enumerate(stages) if i == 0 or e > stages[i - 1]]
            fitting = [h for h in hosts[t] if len(h) >= len(stages)]
            if not fitting:  # hosts of one type may differ in size; the DP assumed the largest
                return np.inf
            host = min(fitting, key=len)  # best fit keeps large hosts for long runs
            hosts[t].remove(host)
            ends.extend(stages)
            devices.extend(host[: len(stages)])
        stage_of = rounder.stage_of(ends)
        used = np.unique(stage_of)
        stage_of = np.searchsorted(used, stage_of)
        devices = [devices[s] for s in used.tolist()]
        if instance.options.exact_stages and len(devices) != instance.options.stages:
            return np.inf
        placement = Placement(tuple(stage_of.tolist()), tuple(devices))
        candidates = [placement]
        if resplit is not None and time.perf_counter() < deadline:
            candidates.append(resplit(np.lexsort((np.arange(len(stage_of)), stage_of)), placement))
        value = np.inf
        for candidate in candidates:
            if candidate is None:
                continue
            score = scorer.score(np.asarray(candidate.stage_of), np.asarray(candidate.devices))
            if score[2] and score[:2] < best[0]:
                best[0], best[1] = score[:2], candidate
            value = min(value, score[0] if score[2] else np.inf)
        return value

    failing = bound  # the largest B tried whose rounding was not within B
    for step in _STEPS:
        value = bound * step
        if time.perf_counter() >= deadline or value >= best[0][0]:
            break
        if attempt(value) <= value:
            break
        failing = value
    for _ in range(_REFINE):
        if (
            time.perf_counter() >= deadline
            or not np.isfinite(best[0][0])
            or best[0][0] <= failing * (1 + 1e-4)
        ):
            break
        value = (failing + best[0][0]) / 2
        if attempt(value) > value:
            failing = value
