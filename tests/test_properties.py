"""Property tests over every registered solver on generated instances.

For every solver: the placement passes the evaluator, the written figures equal a fresh
evaluation, the reported bound never exceeds the best bottleneck any solver found, and a
solver claiming ``optimal`` matches exhaustive search (when the brute-force solver exists).
"""

from __future__ import annotations

import os

import pytest
from generated import small_instances
from hypothesis import HealthCheck, given, settings

import partition
from partition.placement import Status
from partition.solvers import Scope, get_solver, solver_names

TOLERANCE = 1e-6
EXHAUSTIVE = "brute-force"


def _runnable(instance: partition.Instance) -> list[str]:
    names = []
    for name in solver_names():
        limit = get_solver(name).capabilities.max_ops
        if limit is None or len(instance.graph.ops) <= limit:
            names.append(name)
    return names


@settings(
    max_examples=int(os.environ.get("PARTITION_PROPERTY_EXAMPLES", "80")),  # make fuzz: 2000
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(small_instances())
def test_every_solver_is_valid_consistent_and_bounded(instance: partition.Instance) -> None:
    results = {
        name: partition.solve(instance, name, time_limit=10.0, threads=1) for name in _runnable(instance)
    }
    found = [r.bottleneck for r in results.values() if r.bottleneck is not None]
    best = min(found, default=None)
    for name, result in results.items():
        if result.placement is None:
            assert result.status in (Status.INFEASIBLE, Status.NO_SOLUTION), name
            continue
        fresh = partition.evaluate(instance, result.placement)
        assert fresh.valid, (name, fresh.violations)
        document = partition.result_json(instance, result)
        assert document["bottleneck_s"] == pytest.approx(fresh.bottleneck, rel=1e-12)
        for row, stage in zip(document["stages"], fresh.stages, strict=True):
            assert row["time_s"] == pytest.approx(stage.time, rel=1e-12)
            assert row["memory_bytes"] == pytest.approx(stage.memory, rel=1e-12)
        assert result.lower_bound <= best * (1 + TOLERANCE), (name, result.lower_bound, best)
    if EXHAUSTIVE in results:
        truth = results[EXHAUSTIVE]
        for name, result in results.items():
            if truth.status is Status.INFEASIBLE and get_solver(name).capabilities.scope is Scope.GLOBAL:
                assert result.placement is None, name
            if result.status is Status.OPTIMAL:
                assert truth.bottleneck is not None
                assert result.bottleneck == pytest.approx(truth.bottleneck, rel=TOLERANCE), name
