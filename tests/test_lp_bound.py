"""The LP lower bound: never above the optimum, never below the trivial bound, fast on real models."""

from __future__ import annotations

import time

import networkx as nx
import pytest
from conftest import LIGHT
from exhaustive import exhaustive_optimum
from global_cases import small_instances
from hypothesis import given, settings

import partition
from partition.bounds import trivial_lower_bound
from partition.solvers.lp_bound import lp_lower_bound


@settings(max_examples=30, deadline=None, derandomize=True)
@given(instance=small_instances(max_ops=6))
def test_lp_bound_is_valid_and_at_least_trivial(instance: partition.Instance) -> None:
    bound = lp_lower_bound(instance)
    assert bound <= exhaustive_optimum(instance) * (1 + 1e-9)
    assert bound >= trivial_lower_bound(instance) * (1 - 1e-9)


def test_memory_and_device_mix_make_the_bound_stronger() -> None:
    # A fast 6 GB device and a 10x slower 100 GB one; four ops of 5 GB weights each: most of
    # the work must run on the slow device, which the trivial bound (fastest times) ignores.
    dag = nx.DiGraph()
    for v in range(4):
        dag.add_node(f"op{v}", flops=1e12, bytes_read=1e6, bytes_written=1e6, param_bytes=5e9)
        if v:
            dag.add_edge(f"op{v - 1}", f"op{v}", bytes=1e6)
    cluster = partition.parse_cluster(
        {
            "name": "fast-small-slow-big",
            "hosts": [{"devices": {"fast": 1, "slow": 1}, "intra_link": "pcie4"}],
            "device_types": {
                "fast": {"peak_flops": {"fp32": 10e12}, "memory_bandwidth": 1e12, "memory": 6e9},
                "slow": {"peak_flops": {"fp32": 1e12}, "memory_bandwidth": 1e12, "memory": 100e9},
            },
        }
    )
    instance = partition.make_instance(partition.graph_from_networkx(dag, "mix"), cluster, 2)
    bound = lp_lower_bound(instance)
    assert bound > 2 * trivial_lower_bound(instance)
    assert bound <= exhaustive_optimum(instance) * (1 + 1e-9)


@pytest.mark.parametrize("model", ["light_resnet50", "light_inception_v1"])
def test_fast_on_real_models_with_eight_stages(model: str) -> None:
    instance = partition.make_instance(LIGHT / f"{model}.onnx", "hetero-2h100-4a100-2l4", 8)
    started = time.perf_counter()
    bound = lp_lower_bound(instance)
    assert time.perf_counter() - started < 10
    assert trivial_lower_bound(instance) <= bound * (1 + 1e-9)
    assert bound <= partition.solve(instance, "order-dp").bottleneck
