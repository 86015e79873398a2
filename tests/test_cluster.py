"""A cluster's links per group of devices are those of its pairs of devices, checked pair by pair."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from partition.cluster import load_cluster

CLUSTERS = [
    "instances/clusters/hetero-a100-l4-t4.json",
    "instances/clusters/hetero-h200-h100-a100-v100.json",
    "instances/clusters/2x8a100.json",
    "instances/clusters/homo-4a100.json",
]


@pytest.mark.parametrize("path", CLUSTERS)
@pytest.mark.parametrize("slowest", [False, True])
def test_a_groups_link_is_the_fastest_or_slowest_of_its_pairs(path: str, slowest: bool) -> None:
    # group_links counts the groups' devices per host instead of visiting every pair (a
    # fuzzed cluster of tens of thousands of devices took over half an hour pair by pair); it
    # must give what the pairs give, NaN where two groups have no pair (a group of one device
    # with itself, a group with no device)
    cluster = load_cluster(path)
    rng = np.random.default_rng(0)
    devices = len(cluster.devices)
    pick_latency, pick_bandwidth = (max, min) if slowest else (min, max)
    for groups in (1, 2, 3, devices + 2):
        for _ in range(10):
            group_of = rng.integers(0, groups, devices)
            if groups > devices:  # one device a group, some groups empty
                group_of = rng.permutation(groups)[:devices]
            latency, bandwidth = cluster.group_links(group_of.tolist(), slowest=slowest)
            count = int(group_of.max()) + 1
            expected = np.full((2, count, count), np.nan)
            for a, b in itertools.permutations(range(devices), 2):
                link, (g, h) = cluster.link(a, b), (group_of[a], group_of[b])
                seen = not np.isnan(expected[0, g, h])
                expected[0, g, h] = pick_latency(expected[0, g, h], link.latency) if seen else link.latency
                expected[1, g, h] = (
                    pick_bandwidth(expected[1, g, h], link.bandwidth) if seen else link.bandwidth
                )
            np.testing.assert_array_equal(latency, expected[0])
            np.testing.assert_array_equal(bandwidth, expected[1])
