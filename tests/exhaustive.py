"""Ground truth for the global solvers' tests: the best placement by complete enumeration.

Every stage assignment that respects the edges and uses stages ``0..m-1`` is combined with every
ordered choice of ``m`` distinct devices and scored by the independent evaluator. It shares no
code with the solvers (no device classes, no symmetry breaking), so it is slow: ≤ 8 ops.
"""

from __future__ import annotations

import itertools
import math

import partition


def exhaustive_optimum(instance: partition.Instance) -> float:
    """The smallest evaluated bottleneck over all valid placements (``inf`` if none)."""
    n, k = len(instance.graph.ops), instance.options.stages
    edges = instance.graph.edges
    devices = range(len(instance.cluster.devices))
    best = math.inf
    for stage_of in itertools.product(range(k), repeat=n):
        stages = max(stage_of) + 1
        if len(set(stage_of)) != stages or any(stage_of[u] > stage_of[v] for u, v in edges):
            continue
        if instance.options.exact_stages and stages != k:
            continue
        for chosen in itertools.permutations(devices, stages):
            evaluation = partition.evaluate(instance, partition.Placement(stage_of, chosen))
            if evaluation.valid:
                best = min(best, evaluation.bottleneck)
    return best
