"""The evaluator catches every kind of invalid placement and computes the formulation's figures."""

from __future__ import annotations

import pytest
from conftest import random_dag_instance

import partition

HOSTS = [
    {"name": "h0", "devices": {"A100-80GB": 2}, "intra_link": "nvlink3"},
    {"name": "h1", "devices": {"A100-80GB": 2}, "intra_link": "nvlink3"},
]


@pytest.fixture
def instance() -> partition.Instance:
    return random_dag_instance(1, 4, hosts=HOSTS, stages=3, edge_probability=1.0)


def test_valid_placement_figures_by_hand(instance: partition.Instance) -> None:
    placement = partition.Placement((0, 0, 1, 2), (0, 2, 3))
    evaluation = partition.evaluate(instance, placement)
    assert evaluation.valid
    times = instance.costs.times[:, list(instance.cluster.type_index)]  # per device
    assert evaluation.stages[0].compute == pytest.approx(times[0, 0] + times[1, 0])
    # every tensor is an edge; edges (0|1 -> 2) cross host 0 -> host 1, (0|1|2 -> 3) also reach stage 2
    link_between_hosts = instance.cluster.inter_host_link
    sent = [t for t in instance.graph.tensors if t.producer in ("op0", "op1") and t.consumers != ("op1",)]
    expected_send = sum(link_between_hosts.latency + t.bytes / link_between_hosts.bandwidth for t in sent)
    assert evaluation.stages[0].send == pytest.approx(expected_send)
    assert evaluation.bottleneck == max(s.time for s in evaluation.stages)


@pytest.mark.parametrize(
    ("placement", "message"),
    [
        (partition.Placement((1, 0, 1, 1), (0, 1)), "back to stage"),
        (partition.Placement((0, 0, 1, 1), (0, 0)), "share a device"),
        (partition.Placement((0, 0, 2, 2), (0, 1, 2)), "has no ops"),
        (partition.Placement((0, 1, 2, 3), (0, 1, 2, 3)), "at most 3"),
        (partition.Placement((0, 0, 0), (0,)), "assigns 3 ops"),
    ],
)
def test_invalid_placements_are_reported(instance, placement, message) -> None:
    evaluation = partition.evaluate(instance, placement)
    assert not evaluation.valid
    assert any(message in v for v in evaluation.violations)


def test_colocation_and_memory_violations(instance: partition.Instance) -> None:
    grouped = instance.with_options(colocate=(("op1", "op2"),))
    assert any(
        "colocation" in v
        for v in partition.evaluate(grouped, partition.Placement((0, 0, 1, 1), (0, 1))).violations
    )
    total = instance.graph.total_weight_bytes
    assert total > 0


def test_once_mode_charges_sender_once() -> None:
    ops = tuple(partition.Op(id=name, op_type="Relu", flops=1e9) for name in "abc")
    tensors = (partition.Tensor("x", 1e9, "a", ("b", "c")),)
    cluster = partition.parse_cluster({"hosts": HOSTS})
    instance = partition.make_instance(partition.OpGraph("fan-out", ops, tensors), cluster, 3)
    placement = partition.Placement((0, 1, 2), (0, 1, 2))
    per_destination = partition.evaluate(instance, placement)
    once = partition.evaluate(instance.with_options(comm_mode=partition.CommMode.ONCE), placement)
    intra, inter = (instance.transfer_time(0, d, 1e9) for d in (1, 2))
    assert per_destination.stages[0].send == pytest.approx(intra + inter)
    assert once.stages[0].send == pytest.approx(max(intra, inter))
    assert once.stages[2].recv == pytest.approx(per_destination.stages[2].recv) == pytest.approx(inter)
