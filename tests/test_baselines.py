"""The framework baselines: valid placements, the splits they promise, never better than optimal."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from conftest import LIGHT, random_dag_instance
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import partition
from partition.cli import main
from partition.solvers.baselines import balanced_split

BASELINES = ["uniform", "balanced-params", "balanced-time", "single-device"]
HOSTS = [
    {"name": "h0", "devices": {"H100-SXM": 1, "L4": 2}, "intra_link": "pcie4"},
    {"name": "h1", "devices": {"A100-80GB": 2}, "intra_link": "nvlink3"},
]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0, 100), min_size=1, max_size=9), st.integers(1, 9))
def test_balanced_split_minimises_the_largest_part(weights: list[float], parts: int) -> None:
    parts = min(parts, len(weights))
    bounds = balanced_split(np.array(weights), parts)
    assert len(bounds) == parts + 1 and bounds[0] == 0 and bounds[-1] == len(weights)
    assert all(a < b for a, b in itertools.pairwise(bounds))
    largest = max(sum(weights[a:b]) for a, b in itertools.pairwise(bounds))
    best = min(
        max(sum(weights[a:b]) for a, b in itertools.pairwise((0, *cuts, len(weights))))
        for cuts in itertools.combinations(range(1, len(weights)), parts - 1)
    )
    assert largest <= best * (1 + 1e-9) + 1e-9


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.integers(2, 8), st.integers(1, 4), st.booleans())
def test_baselines_are_valid_and_never_beat_the_optimum(seed: int, n: int, k: int, overlap: bool) -> None:
    instance = random_dag_instance(seed, n, hosts=HOSTS, stages=k, overlap=overlap)
    optimum = partition.solve(instance, "brute-force")
    parts = min(k, n)
    for name in BASELINES:
        result = partition.solve(instance, name)  # an invalid placement would raise SolverError
        if result.placement is None:
            assert result.status is partition.Status.NO_SOLUTION and result.notes[0].startswith(name)
            continue
        assert result.evaluation.valid
        assert optimum.bottleneck <= result.bottleneck * (1 + 1e-9)
        stage_of = result.placement.stage_of
        assert list(stage_of) == sorted(stage_of)  # contiguous along the topological order
        sizes = np.bincount(stage_of)
        if name == "single-device":
            assert result.placement.num_stages == 1
            continue
        assert result.placement.num_stages == parts
        if name == "uniform":
            assert sizes.max() - sizes.min() <= 1
        if name == "balanced-params":
            params = [instance.graph.param_bytes[np.array(stage_of) == s].sum() for s in range(parts)]
            even = balanced_split(instance.graph.param_bytes, parts)
            assert max(params) == pytest.approx(
                max(instance.graph.param_bytes[a:b].sum() for a, b in itertools.pairwise(even))
            )


def test_single_device_picks_the_fastest_device_that_fits() -> None:
    instance = random_dag_instance(2, 6, hosts=HOSTS, stages=3)
    result = partition.solve(instance, "single-device")
    assert instance.cluster.devices[result.placement.devices[0]].type == "H100-SXM"
    exact = partition.solve(instance.with_options(exact_stages=True), "single-device")
    assert exact.status is partition.Status.NO_SOLUTION


@pytest.mark.parametrize("solver", BASELINES)
def test_cli_on_a_real_model(solver: str, tmp_path, capsys) -> None:
    output = tmp_path / "placement.json"
    source = str(LIGHT / "light_squeezenet.onnx")
    argv = ["solve", source, "--cluster", "hetero-2h100-4a100-2l4", "--stages", "4", "--solver", solver]
    assert main([*argv, "-o", str(output), "-q"]) == 0
    capsys.readouterr()
    assert main(["evaluate", source, "--cluster", "hetero-2h100-4a100-2l4", str(output), "-q"]) == 0
    assert "valid:" in capsys.readouterr().out
