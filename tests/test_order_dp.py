"""The order DP against brute force over every contiguous split of the order."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from conftest import random_dag_instance

import partition
from partition.cluster import load_cluster
from partition.solvers import order_dp
from partition.solvers.order_dp import split_order

SINGLE_HOST = [{"name": "h0", "devices": {"H100-SXM": 1, "A100-80GB": 2, "L4": 1}, "intra_link": "pcie4"}]
TWO_HOSTS = [
    {"name": "h0", "devices": {"H100-SXM": 2}, "intra_link": "nvlink4"},
    {"name": "h1", "devices": {"A100-40GB": 1, "T4": 1}, "intra_link": "pcie4"},
]


def brute_force_order(instance: partition.Instance) -> float:
    """Best evaluated bottleneck over all contiguous splits and increasing device sequences."""
    n, k = len(instance.graph.ops), instance.options.stages
    devices = range(len(instance.cluster.devices))
    best = np.inf
    for stages in range(1, k + 1):
        for cuts in itertools.combinations(range(1, n), stages - 1):
            bounds = (0, *cuts, n)
            stage_of = tuple(s for s in range(stages) for _ in range(bounds[s], bounds[s + 1]))
            for chosen in itertools.combinations(devices, stages):
                evaluation = partition.evaluate(instance, partition.Placement(stage_of, chosen))
                if evaluation.valid:
                    best = min(best, evaluation.bottleneck)
    return best


@pytest.mark.parametrize("seed", range(12))
def test_dp_equals_brute_force_when_its_communication_estimate_is_exact(seed: int) -> None:
    # One host (uniform links) and 'once' accounting: the DP's estimate is the true cost.
    instance = random_dag_instance(seed, 7, hosts=SINGLE_HOST, stages=3, comm_mode="once")
    placement, value = split_order(instance, np.arange(7))
    assert placement is not None
    evaluation = partition.evaluate(instance, placement)
    assert evaluation.valid
    assert evaluation.bottleneck == pytest.approx(value, rel=1e-9)
    assert value == pytest.approx(brute_force_order(instance), rel=1e-9)


@pytest.mark.parametrize("seed", range(12))
def test_dp_brackets_the_order_optimum_in_general(seed: int) -> None:
    # Two hosts and per-destination accounting: value ≤ order optimum ≤ returned bottleneck.
    instance = random_dag_instance(100 + seed, 7, hosts=TWO_HOSTS, stages=3)
    placement, value = split_order(instance, np.arange(7))
    assert placement is not None
    true = partition.evaluate(instance, placement).bottleneck
    optimum = brute_force_order(instance)
    assert value <= optimum * (1 + 1e-9)
    assert optimum <= true * (1 + 1e-9)


def test_dp_respects_memory_and_reports_infeasible() -> None:
    # Each op holds up to 4 GB of weights: 6 GB devices force splits; 1 GB devices fit nothing.
    tight = random_dag_instance(
        7, 6, hosts=[{"devices": {"small": 4}, "intra_link": "pcie4"}], stages=4, memory=12e9
    )
    result = partition.solve(tight, "order-dp")
    assert result.evaluation is not None and result.evaluation.valid
    assert all(s.memory <= 12e9 for s in result.evaluation.stages)
    hopeless = random_dag_instance(
        7, 6, hosts=[{"devices": {"small": 4}, "intra_link": "pcie4"}], stages=4, memory=1e9
    )
    result = partition.solve(hopeless, "order-dp")
    assert result.status is partition.Status.INFEASIBLE
    assert "needs" in result.notes[0]


def test_dp_keeps_colocated_ops_together() -> None:
    instance = random_dag_instance(1, 8, hosts=SINGLE_HOST, stages=4, edge_probability=0.1)
    free = partition.solve(instance, "order-dp").placement
    assert free is not None and free.num_stages > 1
    boundary = next(v for v in range(1, 8) if free.stage_of[v] != free.stage_of[v - 1])
    group = (f"op{boundary - 1}", f"op{boundary}")
    colocated = partition.solve(instance.with_options(colocate=(group,)), "order-dp")
    assert colocated.placement is not None
    assert colocated.placement.stage_of[boundary - 1] == colocated.placement.stage_of[boundary]


def test_exact_stages_uses_exactly_k() -> None:
    instance = random_dag_instance(5, 8, hosts=SINGLE_HOST, stages=4).with_options(exact_stages=True)
    result = partition.solve(instance, "order-dp")
    assert result.placement is not None and result.placement.num_stages == 4


@pytest.mark.parametrize(
    "path",
    [
        "instances/clusters/hetero-a100-l4-t4.json",
        "instances/clusters/2x8a100.json",
        "instances/clusters/homo-4a100.json",
    ],
)
def test_a_devices_link_bounds_are_those_of_its_pairs(path: str) -> None:
    # the bounds are found per host, not pair by pair (a fuzzed cluster of 30 000 devices took
    # over half an hour that way): they must be the least latency and the most bandwidth of
    # the device's links to the devices after it (its sends) and before it (its receipts)
    cluster = load_cluster(path)
    for device in range(len(cluster.devices)):
        for others in (range(device + 1, len(cluster.devices)), range(device)):
            links = [cluster.link(device, other) for other in others]
            expected = (
                (min(link.latency for link in links), max(link.bandwidth for link in links))
                if links
                else (0.0, np.inf)
            )
            assert order_dp._link_bounds(cluster, device, others) == expected
