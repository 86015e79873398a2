"""The best split of the ideal lattice over one device sequence: a primal for chain-like graphs.

For a sequence ``d_1, …, d_m`` of distinct devices, stage ``s`` runs on ``d_s`` and is
``J \\ I`` for nested ideals ``I ⊂ J`` (every placement is such a chain, see
:mod:`.ideal_dp`):

    F_s(J) = min_{I ⊂ J} max( F_{s-1}(I), cost_s(I, J) ),   F_0(∅) = 0,

with ``cost_s(I, J)`` the compute of ``J \\ I`` on ``d_s``'s type plus the tensors it receives
over the link ``d_{s-1} → d_s`` and sends over ``d_s → d_{s+1}``; the result is the best
``F_s(V)`` (``s = m`` with exact stages). That is the formulation's cost whenever every tensor
goes from one stage to the next — chains, and chain-like graphs cut where nothing skips a
stage — and otherwise an estimate: each placement is re-scored by the evaluator.

Unlike a split of one topological order (:mod:`.order_dp`, the anytime search's splitters), the
cuts range over every ideal, so a stage may end after ``q``, ``k`` and ``v`` in whichever order
they are computed. Unlike :mod:`.ideal_dp`, which counts devices per group to bound every
sequence at once, the links of each stage are the ones it really uses: a host change is paid
over the inter-host link by the two stages on either side of it. On GPT-2 over four one-type
hosts at k = 8 the order DP's best split is 0.7213 ms and this one 0.4947 ms, the optimum.

The candidate stages (``I``, ``J``, their compute per type and traffic) are those of
:class:`.ideal_dp._DP` whose compute fits the incumbent's bottleneck on some type, scored
once; a sequence then costs array work linear in their number per stage, so
:func:`search_sequences` tries many host orders (swap two used hosts, or a used host for an
unused one; :mod:`._devices`). Heuristic: the bound stays the caller's.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from ..evaluator import evaluate
from ..placement import Evaluation, Placement
from ._devices import host_orders, host_ranking, host_sequence, neighbour_hosts, used_hosts

if TYPE_CHECKING:  # ideal_dp runs this module; it only hands over its tables
    from .ideal_dp import _DP

_TOLERANCE = 1e-9


class IdealSplitter:
    """Candidate stages of an ideal DP under ``cap``, flattened and sorted by their end ideal."""

    def __init__(self, dp: _DP, cap: float, deadline: float) -> None:
        self.dp = dp
        self.instance = instance = dp.instance
        self.cluster = instance.cluster
        starts, ends, computes, traffics = [], [], [], []
        rest = np.full(dp.tables.work.shape[1], np.inf)
        self.complete = True  # every ideal's candidates scored before the deadline
        for ideal in range(dp.full):
            if time.perf_counter() > deadline:
                self.complete = False
                break
            js = dp.candidates(ideal, cap, rest)
            if not len(js):
                continue
            compute, traffic = dp.stage_parts(ideal, js)
            fits = (compute <= cap * (1 + _TOLERANCE)).any(axis=1)
            starts.append(np.full(int(fits.sum()), ideal))
            ends.append(js[fits])
            computes.append(compute[fits])
            traffics.append(traffic[fits, :4])
        join = lambda parts, shape: np.concatenate(parts) if parts else np.zeros(shape)  # noqa: E731
        end = join(ends, 0).astype(np.int64)
        order = np.argsort(end, kind="stable")
        self.end = end[order]
        self.start = join(starts, 0).astype(np.int64)[order]
        self.compute = join(computes, (0, len(dp.groups.type_of)))[order]
        self.traffic = join(traffics, (0, 4))[order]
        self.group_start = np.flatnonzero(np.r_[True, self.end[1:] != self.end[:-1]]) if len(end) else end
        self.group_end = self.end[self.group_start]
        self.group_size = np.diff(np.r_[self.group_start, len(self.end)])
        self.type_of_group = {int(t): g for g, t in enumerate(dp.groups.type_of)}

    def split(self, sequence: list[int]) -> tuple[Placement | None, float]:
        """The best placement over ``sequence`` (a prefix of it without exact stages) and its
        DP value; ``(None, inf)`` when no split fits."""
        if not len(self.end):
            return None, np.inf
        cluster, count = self.cluster, self.dp.full + 1
        overlap = self.instance.options.overlap
        value = np.full(count, np.inf)
        value[0] = 0.0
        choices, finals = [], []
        for s, device in enumerate(sequence):
            compute = self.compute[:, self.type_of_group[cluster.type_index[device]]]
            comm = np.zeros(len(compute))
            if s > 0:
                link = cluster.link(sequence[s - 1], device)
                comm += self.traffic[:, 0] * link.latency + self.traffic[:, 1] / link.bandwidth
            if s + 1 < len(sequence):
                link = cluster.link(device, sequence[s + 1])
                comm += self.traffic[:, 2] * link.latency + self.traffic[:, 3] / link.bandwidth
            cost = np.maximum(compute, comm) if overlap else compute + comm
            candidate = np.maximum(value[self.start], cost)
            best = np.minimum.reduceat(candidate, self.group_start)
            hits = np.flatnonzero(candidate <= np.repeat(best, self.group_size))
            group = np.searchsorted(self.group_start, hits, side="right") - 1
            _, first = np.unique(group, return_index=True)
            choice = np.full(count, -1, dtype=np.int64)
            choice[self.group_end] = hits[first]
            value = np.full(count, np.inf)
            value[self.group_end] = best
            choices.append(choice)
            finals.append(value[self.dp.full])
        allowed = [len(sequence) - 1] if self.instance.options.exact_stages else range(len(sequence))
        last = min(allowed, key=lambda s: (finals[s], s))
        if not np.isfinite(finals[last]):
            return None, np.inf
        stage_of = np.zeros(len(self.instance.graph.ops), dtype=np.int64)
        rows, ideal = self.dp.tables, self.dp.full
        for s in range(last, -1, -1):
            pair = int(choices[s][ideal])
            before = int(self.start[pair])
            stage_of[rows.row(ideal) & ~rows.row(before)] = s
            ideal = before
        return Placement(tuple(stage_of.tolist()), tuple(sequence[: last + 1])), float(finals[last])


def hosts_in_use(devices: tuple[int, ...], hosts: list[list[int]]) -> list[list[int]]:
    """``hosts`` reordered: those ``devices`` use, in order of first use, then the rest."""
    rank = {d: h for h, members in enumerate(hosts) for d in members}
    first = list(dict.fromkeys(rank[d] for d in devices))
    return [hosts[h] for h in first] + [host for h, host in enumerate(hosts) if h not in first]


def search_sequences(
    splitter: IdealSplitter,
    hosts: list[list[int]],
    k: int,
    deadline: float,
    rng: np.random.Generator,
    sequences: tuple[tuple[int, ...], ...] = (),
) -> tuple[Placement, Evaluation] | None:
    """The best evaluated split over the given device ``sequences``, then over the first ``k``
    devices of the starting host orders of ``hosts`` (:func:`._devices.host_orders`), then
    host-order moves from the best one until ``deadline`` or until four times as many moves as
    there are hosts improve nothing in a row."""
    instance = splitter.instance
    best: tuple[tuple[float, float], Placement, Evaluation, list[list[int]]] | None = None

    def attempt(sequence: list[int], order: list[list[int]]) -> None:
        nonlocal best
        placement, _ = splitter.split(sequence)
        if placement is None:
            return
        evaluation = evaluate(instance, placement)
        score = (evaluation.bottleneck, evaluation.latency)
        if evaluation.valid and (best is None or score < best[0]):
            best = (score, placement, evaluation, order)

    for sequence in sequences:
        attempt(list(sequence), hosts_in_use(sequence, hosts))
    for order in host_orders(hosts, k):
        if time.perf_counter() < deadline:
            attempt(host_sequence(order, k), order)
    stalled = 0
    while best is not None and time.perf_counter() < deadline and stalled < 4 * len(hosts) - 4:
        before = best[0]
        order = neighbour_hosts(best[3], min(used_hosts(best[3], k), len(best[3])), rng)
        attempt(host_sequence(order, k), order)
        stalled = stalled + 1 if best[0] >= before else 0
    return None if best is None else (best[1], best[2])


def sequence_split(
    dp: _DP, cap: float, k: int, deadline: float, seed: int, devices: tuple[int, ...] = ()
) -> tuple[Placement, Evaluation] | None:
    """The best evaluated split of :func:`search_sequences` over the device sequence of an
    incumbent (``devices``) and host orders from the cluster's ranking, its candidate stages
    capped at ``cap`` (the incumbent's bottleneck), by ``deadline``."""
    if not np.isfinite(cap):
        return None
    splitter = IdealSplitter(dp, cap * (1 + _TOLERANCE), deadline)
    if not splitter.complete:
        return None
    rng = np.random.default_rng(seed)
    sequences = (devices,) if devices else ()
    return search_sequences(splitter, host_ranking(dp.instance), k, deadline, rng, sequences)
