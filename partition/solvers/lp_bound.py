"""A lower bound on the optimal bottleneck from a small LP per device-type mix.

Any placement uses at most ``k' = min(k, |devices|)`` devices, ``n_τ ≤ count(τ)`` of type
``τ``; adding devices never hurts the relaxation below, so only mixes with ``Σ n_τ = k'``
(exactly ``k`` with ``exact_stages``) need checking, and the bound is the *smallest* over them.
For one mix ``n``, communication is dropped (it only adds to stage times, with or without
overlap) and ops are split fractionally across the mix's types (``a[v,τ] ≥ 0``,
``Σ_τ a[v,τ] = 1``):

    min B  s.t.  Σ_v t_τ(v) a[v,τ] ≤ n_τ B          (the n_τ stages of type τ share its work)
                 Σ_v p(v) a[v,τ]   ≤ n_τ M_τ         (weights fit; p(v) = Σ_w W_w / |users(w)|)

with ``a[v,τ] = 0`` where ``t_τ(v) = inf`` or ``v``'s own weights and working set exceed
``M_τ``. To be valid despite LP tolerances, the bound is not the LP's objective but the
Lagrangian value at the LP's duals ``y_τ, z_τ ≥ 0`` (normalised so ``Σ_τ n_τ y_τ = 1``):

    B ≥ Σ_v min_τ (y_τ t_τ(v) + z_τ p(v)) − Σ_τ z_τ n_τ M_τ,

which holds for *any* such ``y, z`` (sum the constraints with those weights). Each mix also
gets the largest-item bound: some stage holds op ``v`` (or a whole colocation group) on a type
of the mix. With many device types the number of mixes explodes; past ``_MAX_MIXES`` the bound
falls back to the trivial one.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
from ortools.linear_solver import pywraplp

from ..bounds import trivial_lower_bound
from ..instance import Instance
from ._stage_model import MEMORY_TOLERANCE

_MAX_MIXES = 256


def _mixes(counts: tuple[int, ...], total: int) -> Iterator[tuple[int, ...]]:
    """Every ``n`` with ``0 ≤ n_τ ≤ counts[τ]`` and ``Σ n_τ = total``."""
    if not counts:
        if total == 0:
            yield ()
        return
    rest = sum(counts[1:])
    for first in range(max(0, total - rest), min(counts[0], total) + 1):
        for tail in _mixes(counts[1:], total - first):
            yield (first, *tail)


def _items(instance: Instance) -> np.ndarray:
    """Times of the indivisible items: single ops, with each colocation group merged into one."""
    times = instance.costs.times
    graph = instance.graph
    grouped = np.zeros(len(graph.ops), dtype=bool)
    rows = []
    for group in instance.options.colocate:
        members = [graph.index[op_id] for op_id in group]
        grouped[members] = True
        rows.append(times[members].sum(axis=0))
    rows.extend(times[~grouped])
    return np.array(rows)


def _mix_bound(times: np.ndarray, shares: np.ndarray, capacity: np.ndarray, mix: np.ndarray) -> float:
    """The Lagrangian bound of one mix (types with ``mix[τ] > 0`` only)."""
    solver = pywraplp.Solver.CreateSolver("GLOP")
    present = np.flatnonzero(mix > 0)
    bottleneck = solver.NumVar(0.0, solver.infinity(), "B")
    loads = [solver.Constraint(-solver.infinity(), 0.0) for _ in present]
    memory = [solver.Constraint(-solver.infinity(), float(mix[t] * capacity[t])) for t in present]
    for row, t in enumerate(present):
        loads[row].SetCoefficient(bottleneck, -float(mix[t]))
    allowed = np.isfinite(times[:, present])
    for v in range(times.shape[0]):
        assign = solver.Constraint(1.0, 1.0)
        for row, t in enumerate(present):
            if allowed[v, row]:
                a = solver.NumVar(0.0, 1.0, "")
                assign.SetCoefficient(a, 1.0)
                loads[row].SetCoefficient(a, float(times[v, t]))
                memory[row].SetCoefficient(a, float(shares[v]))
    solver.Minimize(bottleneck)
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        return 0.0  # no duals to certify anything; the largest-item bound still applies
    y = np.array([max(0.0, -c.dual_value()) for c in loads])
    z = np.array([max(0.0, -c.dual_value()) for c in memory])
    scale = float((mix[present] * y).sum())
    if scale <= 0:
        return 0.0
    y, z = y / scale, z / scale
    finite_times = np.where(allowed, times[:, present], 0.0)
    prices = np.where(allowed, y[None, :] * finite_times + z[None, :] * shares[:, None], np.inf)
    return float(prices.min(axis=1).sum() - (z * mix[present] * capacity[present]).sum())


def lp_lower_bound(instance: Instance) -> float:
    """A valid lower bound on the optimal bottleneck (seconds); ``inf`` if no mix can run every op."""
    graph, cluster = instance.graph, instance.cluster
    counts = cluster.type_counts
    total = min(instance.options.stages, len(cluster.devices))
    mixes = list(_mixes(counts, total))
    if len(mixes) > _MAX_MIXES:
        return trivial_lower_bound(instance)
    capacity = np.array([cluster.device_types[name].memory for name in cluster.type_names])
    users: dict[str, int] = {}
    for op in graph.ops:
        for w in op.weights:
            users[w] = users.get(w, 0) + 1
    shares = np.array([sum(graph.weights[w] / users[w] for w in op.weights) for op in graph.ops])
    alone = graph.param_bytes + graph.working_set
    times = np.where(
        alone[:, None] > capacity[None, :] * (1 + MEMORY_TOLERANCE), np.inf, instance.costs.times
    )
    items = _items(instance)
    best = math.inf
    for mix in map(np.array, mixes):
        present = mix > 0
        fastest = np.where(present[None, :], times, np.inf).min(axis=1)
        if not np.all(np.isfinite(fastest)):
            continue  # some op fits no type of this mix: no placement uses it (or a sub-mix)
        largest = float(np.where(present[None, :], items, np.inf).min(axis=1).max())
        best = min(best, max(largest, _mix_bound(times, shares, capacity, mix)))
    return best
