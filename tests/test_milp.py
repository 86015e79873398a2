"""The MILP global solver (pulp + CBC) against complete enumeration; honest statuses and bounds."""

from __future__ import annotations

import math

import pytest
from exhaustive import exhaustive_optimum
from global_cases import larger_instance, packing_infeasible_instance, small_instances
from hypothesis import given, settings

import partition


@settings(max_examples=15, deadline=None, derandomize=True)
@given(instance=small_instances(max_ops=7))
def test_milp_reaches_the_exhaustive_optimum(instance: partition.Instance) -> None:
    optimum = exhaustive_optimum(instance)
    result = partition.solve(instance, "milp", threads=1)
    if math.isinf(optimum):
        assert result.status is partition.Status.INFEASIBLE and result.placement is None
        return
    assert result.evaluation is not None and result.evaluation.valid
    assert result.bottleneck == pytest.approx(optimum, rel=1e-6)
    assert result.status is partition.Status.OPTIMAL
    assert result.lower_bound <= optimum * (1 + 1e-9)


def test_a_time_limit_is_not_reported_as_optimal() -> None:
    # pulp says "Optimal" when CBC stops on time with an incumbent: the status must not.
    result = partition.solve(larger_instance(), "milp", time_limit=0.5, threads=1)
    assert result.status is partition.Status.FEASIBLE
    assert result.evaluation is not None and result.evaluation.valid
    assert 0 < result.lower_bound < result.bottleneck
    assert result.gap is not None and result.gap > 0
    assert any("Solution Found" in note or "warm start" in note for note in result.notes)


def test_proven_infeasible_names_memory() -> None:
    result = partition.solve(packing_infeasible_instance(), "milp", threads=1)
    assert result.status is partition.Status.INFEASIBLE and result.placement is None
    assert "memory" in result.notes[0]
