"""Exhaustive search over every valid placement: the ground truth for tests on tiny graphs.

A placement is a chain of ideals (downsets) ``∅ = I_0 ⊂ I_1 ⊂ … ⊂ I_m = V`` with ``m ≤ k``
(``= k`` with exact stages), stage ``s`` being ``I_{s+1} \\ I_s``, and a sequence of ``m``
distinct devices. Every chain whose ideals keep colocation groups whole is enumerated, and for
each every device sequence up to swapping interchangeable devices (same type and host, see
:mod:`._devices`). Each candidate is scored by :func:`partition.evaluate` itself, so the optimum
is the formulation's, not a model of it. The one shortcut is exact: candidates are evaluated in
increasing order of their largest stage compute time, a floor on their bottleneck
(communication only adds to a stage's time), and the search stops once the floor exceeds the
incumbent's bottleneck.

The optimum is the smallest bottleneck, ties broken by the smaller sum of stage times, then by
fewer stages. Refuses graphs above :data:`MAX_OPS` ops (the chain count grows like ``k^n``).
A time limit stops the search: during the enumeration of candidates with no placement, during
their evaluation with the incumbent and the floor of the first candidate not evaluated as bound.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import numpy as np

from ..evaluator import evaluate
from ..instance import Instance
from ..placement import Placement, Status
from ._devices import device_sequences
from .base import Capabilities, Outcome, Scope, Settings, Solver

MAX_OPS = 10


def _ideals(instance: Instance) -> list[int]:
    """Bitmasks of the downsets that do not split a colocation group, by size."""
    graph = instance.graph
    n = len(graph.ops)
    preds = [0] * n
    for u, v in graph.edges:
        preds[v] |= 1 << u
    groups = [sum(1 << graph.index[op_id] for op_id in group) for group in instance.options.colocate]
    ideals = [
        mask
        for mask in range(1 << n)
        if all(preds[v] & ~mask == 0 for v in range(n) if mask >> v & 1)
        and all(mask & g in (0, g) for g in groups)
    ]
    return sorted(ideals, key=int.bit_count)


def _chains(ideals: list[int], full: int, stages: range) -> Iterator[list[int]]:
    """Strictly increasing chains of ideals from ∅ to ``full`` with a length in ``stages``."""
    chain = [0]

    def extend() -> Iterator[list[int]]:
        last = chain[-1]
        if last == full:
            if len(chain) - 1 in stages:
                yield chain
            return
        if len(chain) - 1 >= stages.stop - 1:
            return
        for ideal in ideals:
            if ideal != last and ideal & last == last:
                chain.append(ideal)
                yield from extend()
                chain.pop()

    yield from extend()


class BruteForce(Solver):
    name = "brute-force"
    capabilities = Capabilities(scope=Scope.GLOBAL, time_limit=True, max_ops=MAX_OPS)

    def solve(self, instance: Instance, settings: Settings) -> Outcome:
        limit = settings.time_limit
        deadline = time.perf_counter() + limit if limit is not None else math.inf
        graph, cluster, options = instance.graph, instance.cluster, instance.options
        n = len(graph.ops)
        k = min(options.stages, n, len(cluster.devices))
        stages = range(options.stages, options.stages + 1) if options.exact_stages else range(1, k + 1)
        classes = cluster.classes
        sequences = {m: list(device_sequences(classes, [range(len(classes))] * m)) for m in stages if m <= k}
        type_of = np.array(cluster.type_index)
        chains = []
        for chain in _chains(_ideals(instance), (1 << n) - 1, stages):
            if time.perf_counter() > deadline:
                return Outcome(
                    None, Status.NO_SOLUTION, 0.0, ("brute-force: time limit reached while enumerating",)
                )
            chains.append(
                tuple(next(s for s in range(len(chain) - 1) if chain[s + 1] >> v & 1) for v in range(n))
            )
        # Best first: evaluate candidates by increasing largest stage compute time (a floor on
        # the bottleneck) and stop once the floor exceeds the incumbent.
        floors, keys = [], []
        for c, stage_of in enumerate(chains):
            if time.perf_counter() > deadline:
                return Outcome(
                    None, Status.NO_SOLUTION, 0.0, ("brute-force: time limit reached while enumerating",)
                )
            m = max(stage_of) + 1
            if m not in sequences:
                continue
            compute = np.zeros((m, len(cluster.type_names)))
            np.add.at(compute, np.array(stage_of), instance.costs.times)
            stage_types = type_of[np.array(sequences[m])]
            floors.append(compute[np.arange(m), stage_types].max(axis=1))
            keys.extend((c, i) for i in range(len(sequences[m])))
        order = np.argsort(np.concatenate(floors), kind="stable") if floors else []
        floor_values = np.concatenate(floors) if floors else np.empty(0)
        best: tuple[float, float, int] | None = None
        best_placement: Placement | None = None
        candidates = 0
        stopped_at = None  # the floor of the first candidate left unevaluated by the time limit
        for position in order:
            if best is not None and floor_values[position] > best[0]:
                break
            if time.perf_counter() > deadline:
                stopped_at = float(floor_values[position])
                break
            c, i = keys[position]
            stage_of = chains[c]
            placement = Placement(stage_of, sequences[max(stage_of) + 1][i])
            candidates += 1
            evaluation = evaluate(instance, placement)
            if not evaluation.valid:
                continue
            score = (evaluation.bottleneck, evaluation.latency, placement.num_stages)
            if best is None or score < best:
                best, best_placement = score, placement
        settings.report(f"brute-force: evaluated {candidates} placements")
        if stopped_at is not None:
            note = f"brute-force: time limit reached after {candidates} of {len(order)} candidates"
            if best is None:
                return Outcome(None, Status.NO_SOLUTION, stopped_at, (note,))
            return Outcome(best_placement, Status.FEASIBLE, min(best[0], stopped_at), (note,))
        if best is None:
            return Outcome(None, Status.INFEASIBLE, np.inf, ("brute-force: no valid placement exists",))
        return Outcome(
            best_placement,
            Status.OPTIMAL,
            best[0],
            (f"brute-force: best of {candidates} evaluated placements (every placement considered)",),
        )
