"""A lower bound for heterogeneous clusters: work over aggregate speed, with communication.

Take any valid placement with ``s`` stages, stage ``j`` on a device of type ``τ_j``, and
bottleneck ``B ≥ time(j) ≥ compute(j) + comm(j)`` (or ``≥ max(compute(j), comm(j))`` with
overlap). For any weights ``λ_τ ≥ 0``:

    B · Σ_j λ_{τ_j}  ≥  Σ_j λ_{τ_j} compute(j) + Σ_j λ_{τ_j} comm(j)
                     ≥  Σ_v min_τ λ_τ t_v(τ)  +  min_τ λ_τ · C(s)

since each op runs on one type it can run on, and ``Σ_j comm(j) ≥ C(s)`` below. The stages
use ``s`` distinct devices, so ``Σ_j λ_{τ_j} ≤ Λ_s(λ)``, the sum of the ``s`` largest device
weights. Hence ``B ≥ g_s(λ) = (Σ_v min_τ λ_τ t_v(τ) + min_τ λ_τ C(s)) / Λ_s(λ)`` for *every*
``λ`` — weak LP duality for the fractional assignment of work to device types — and the bound
is ``min_s max_λ g_s(λ)`` over the stage counts the options allow. Any ``λ`` is valid, so the
maximisation can be approximate (a pattern search over ``log λ``) without losing validity.

``C(s)``, communication every ``s``-stage placement pays: a stage whose topologically first op
is not a graph source receives *all* of that op's input tensors, so at most ``z`` stages (``z``
= number of source ops) receive nothing; the first stage (in pipeline order) on each host
other than the first stage's host receives only from other hosts. With ``H(s)`` the fewest
hosts holding ``s`` devices and ``r_link`` the cheapest full input set of a non-source op over
a link, ``C(s) = m · ((H(s) - z)⁺ r_inter + (s - z - (H(s) - z)⁺)⁺ r_any)``, where ``m = 2`` in
per-destination mode (the sender pays what each receiver pays) and ``m = 1`` in ``once`` mode.
Memory is ignored (a relaxation), so the bound holds with or without it.
"""

from __future__ import annotations

import numpy as np

from .instance import CommMode, Instance

_STEPS = (1.0, 0.5, 0.25, 0.1, 0.05, 0.02, 0.01, 0.003)


def _inputs_received(instance: Instance) -> tuple[np.ndarray, np.ndarray]:
    """Per op: bytes and number of the distinct op-produced tensors it reads."""
    graph = instance.graph
    pairs = {
        (t.name, graph.index[c], t.bytes)
        for t in graph.tensors
        if t.producer is not None
        for c in t.consumers
    }
    consumers = np.fromiter((c for _, c, _ in pairs), dtype=np.int64, count=len(pairs))
    sizes = np.fromiter((b for _, _, b in pairs), dtype=float, count=len(pairs))
    n = len(graph.ops)
    return np.bincount(consumers, sizes, minlength=n), np.bincount(consumers, minlength=n).astype(float)


def _cheapest_input_set(received: tuple[np.ndarray, np.ndarray], latency: float, bandwidth: float) -> float:
    """Smallest time to receive every input tensor of a non-source op over one link."""
    sizes, counts = received
    has = counts > 0
    return float((counts[has] * latency + sizes[has] / bandwidth).min()) if has.any() else 0.0


def _communication_floors(instance: Instance, counts: range) -> dict[int, float]:
    """``C(s)`` of the module docstring for each ``s`` in ``counts``."""
    cluster = instance.cluster
    links = [h.intra_link for h in cluster.hosts] + [cluster.inter_host_link]
    received = _inputs_received(instance)
    r_any = _cheapest_input_set(
        received, min(link.latency for link in links), max(link.bandwidth for link in links)
    )
    inter = cluster.inter_host_link
    r_inter = _cheapest_input_set(received, inter.latency, inter.bandwidth)
    sources = int((received[1] == 0).sum())
    per_host = np.bincount(cluster.host_of, minlength=len(cluster.hosts))
    filled = np.cumsum(np.sort(per_host)[::-1])
    factor = 1.0 if instance.options.comm_mode is CommMode.ONCE else 2.0
    floors = {}
    for s in counts:
        hosts = int(np.searchsorted(filled, s) + 1)
        first_on_host = max(0, hosts - sources)
        others = max(0, s - sources - first_on_host)
        floors[s] = factor * (first_on_host * r_inter + others * r_any) if s >= 2 else 0.0
    return floors


class _Dual:
    """``g_s(λ)`` for one instance, over ops grouped by identical time rows."""

    def __init__(self, instance: Instance) -> None:
        rows, counts = np.unique(instance.costs.times, axis=0, return_counts=True)
        self.rows, self.counts = rows, counts.astype(float)
        self.type_of_device = np.asarray(instance.cluster.type_index)
        self.overlap = instance.options.overlap

    def work(self, weights: np.ndarray) -> float:
        weighted = np.where(np.isfinite(self.rows), self.rows * weights[None, :], np.inf)
        return float(self.counts @ weighted.min(axis=1))

    def value(self, weights: np.ndarray, stages: int, comm: float) -> float:
        capacity = np.sort(weights[self.type_of_device])[::-1][:stages].sum()
        work, paid = self.work(weights), float(weights.min()) * comm
        return (max(work, paid) if self.overlap else work + paid) / capacity


def _maximise(dual: _Dual, stages: int, comm: float, start: np.ndarray) -> tuple[float, np.ndarray]:
    """Pattern search over ``log λ`` (the first type's weight fixed at 1)."""
    theta = np.log(start / start[0])
    best = dual.value(np.exp(theta), stages, comm)
    for step in _STEPS:
        improved = True
        while improved:
            improved = False
            for t in range(1, len(theta)):
                for sign in (1.0, -1.0):
                    trial = theta.copy()
                    trial[t] += sign * step
                    value = dual.value(np.exp(trial), stages, comm)
                    if value > best * (1 + 1e-12):
                        best, theta, improved = value, trial, True
    return best, np.exp(theta)


def aggregate_lower_bound(instance: Instance) -> float:
    """``min_s max_λ g_s(λ)`` (module docstring), at least the largest op's fastest time."""
    times = instance.costs.times
    fastest = times.min(axis=1)
    if not np.all(np.isfinite(fastest)):
        return float("inf")
    k = min(instance.options.stages, len(instance.cluster.devices))
    counts = range(k, k + 1) if instance.options.exact_stages else range(1, k + 1)
    dual = _Dual(instance)
    comm = _communication_floors(instance, counts)
    # Start from λ_τ ∝ 1 / (type τ's total time): each type weighted by its speed on this model.
    totals = np.array([np.where(np.isfinite(c), c, 0.0).sum() for c in times.T])
    weights = 1.0 / np.maximum(totals, 1e-300)
    best = {s: 0.0 for s in counts}
    for _ in range(3):  # re-optimise λ where the minimum over s currently sits
        values = {s: dual.value(weights, s, comm[s]) for s in counts}
        for s in counts:
            best[s] = max(best[s], values[s])
        weakest = min(best, key=best.__getitem__)
        value, weights = _maximise(dual, weakest, comm[weakest], weights)
        if value <= best[weakest] * (1 + 1e-9):
            break
        best[weakest] = value
    return float(max(fastest.max(), min(best.values())))
