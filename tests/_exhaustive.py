"""Exhaustive search over every valid placement of a tiny instance (the tests' ground truth)."""

from __future__ import annotations

import itertools

import partition


def exhaustive_optimum(instance: partition.Instance) -> float:
    """Smallest evaluated bottleneck over all monotone stage assignments and device choices."""
    graph, k = instance.graph, instance.options.stages
    edges = graph.edges
    devices = range(len(instance.cluster.devices))
    best = float("inf")
    for stage_of in itertools.product(range(k), repeat=len(graph.ops)):
        used = max(stage_of) + 1
        if len(set(stage_of)) != used or any(stage_of[u] > stage_of[v] for u, v in edges):
            continue
        if instance.options.exact_stages and used != k:
            continue
        for chosen in itertools.permutations(devices, used):
            evaluation = partition.evaluate(instance, partition.Placement(stage_of, chosen))
            if evaluation.valid:
                best = min(best, evaluation.bottleneck)
    return best
