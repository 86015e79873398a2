"""The dominator-chain bound never exceeds the exhaustive optimum, and is exact on chains."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from conftest import TWO_HOSTS, random_dag_instance
from generated import small_instances
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import partition
from partition import chain_bound, synthetic
from partition.chain_bound import chain_lower_bound, dominators
from partition.solvers import get_solver
from partition.solvers.base import Settings

cases = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# exact ideals, every segment relaxed to cells, and very coarse cells
MODES = ({}, {"_EXACT_OPS": 0}, {"_EXACT_OPS": 0, "_CELLS": 2})


def _optimum(instance: partition.Instance) -> float | None:
    exact = partition.solve(instance, "brute-force")
    return exact.bottleneck if exact.placement is not None else None


def _bounds(instance: partition.Instance) -> list[float]:
    values = []
    for mode in MODES:
        with pytest.MonkeyPatch.context() as patch:
            for name, value in mode.items():
                patch.setattr(chain_bound, name, value)
            values.append(chain_lower_bound(instance))
    return values


def _chain(rng: np.random.Generator, n: int, edge_bytes) -> nx.DiGraph:
    """A chain of ``n`` ops of random FLOPs, each edge ``edge_bytes(rng)`` bytes."""
    dag = nx.DiGraph()
    for v in range(n):
        dag.add_node(v, flops=float(rng.uniform(1e11, 5e12)), bytes_read=1e6, bytes_written=1e6)
    dag.add_edges_from((v, v + 1, {"bytes": edge_bytes(rng)}) for v in range(n - 1))
    return dag


@cases
@given(small_instances())
def test_never_above_the_optimum(instance: partition.Instance) -> None:
    optimum = _optimum(instance)
    if optimum is not None:
        assert max(_bounds(instance)) <= optimum * (1 + 1e-9)


@cases
@given(st.integers(0, 10_000), st.integers(2, 9), st.integers(1, 4), st.sampled_from([0.05, 0.3, 0.6]))
def test_never_above_the_optimum_with_shared_outputs_on_two_hosts(seed, n, k, p) -> None:
    instance = random_dag_instance(
        seed, n, hosts=TWO_HOSTS, stages=k, edge_probability=p, shared_outputs=True
    )
    optimum = _optimum(instance)
    if optimum is not None:
        assert max(_bounds(instance)) <= optimum * (1 + 1e-9)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 9), st.integers(1, 4))
def test_equals_the_optimum_on_a_chain(seed, n, k) -> None:
    # One host (uniform links), equal small tensors: every op is a dominator and the chain DP
    # over boundaries with exact compute and communication is the problem itself.
    dag = _chain(np.random.default_rng(seed), n, lambda rng: 1e6)
    hosts = [{"name": "h0", "devices": {"H100-SXM": 2, "A100-80GB": 2}, "intra_link": "nvlink3"}]
    cluster = partition.parse_cluster({"name": "one-host", "hosts": hosts, "inter_host_link": "ib-hdr"})
    instance = partition.make_instance(dag, cluster, k)
    assert dominators(instance).all()
    assert chain_lower_bound(instance) == pytest.approx(_optimum(instance), rel=1e-4)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 7), st.integers(2, 4), st.booleans())
def test_equals_the_optimum_on_a_chain_across_hosts(seed, n, k, one_type) -> None:
    # Links of three speeds: each cut's tensor is handed from the stage before it to the stage
    # after it, and the states' last and next device classes price its link. With one type on
    # two hosts, devices are counted per host: a run of stages must change host after two.
    dag = _chain(np.random.default_rng(seed), n, lambda rng: float(rng.uniform(1e7, 1e9)))
    hosts = [
        {"name": "h0", "devices": {"H100-SXM": 2}, "intra_link": "nvlink4"},
        {"name": "h1", "devices": {"A100-80GB": 1}, "intra_link": "pcie4"},
        {"name": "h2", "devices": {"L4": 1}, "intra_link": "pcie4"},
    ]
    if one_type:
        hosts = [{"name": f"h{h}", "devices": {"H100-SXM": 2}, "intra_link": "nvlink4"} for h in range(2)]
    cluster = partition.parse_cluster({"name": "three", "hosts": hosts, "inter_host_link": "ib-hdr"})
    instance = partition.make_instance(dag, cluster, k)
    assert chain_lower_bound(instance) == pytest.approx(_optimum(instance), rel=1e-4)


def test_prices_every_tensor_between_full_stages_across_hosts() -> None:
    # An MI300X host beside an H100 host: between two stages that each reach past a segment
    # boundary, every tensor crossing the cut goes over InfiniBand, not only the handed one.
    # The bound meets CP-SAT's own proven optimum (handed tensors alone gave 0.1968 ms).
    graph = synthetic.decoder_graph(layers=3, hidden=1024, intermediate=2816, vocab=1000, seq=2048)
    instance = partition.build_instance(graph, synthetic.hetero_cluster(2, 2), partition.Options(stages=4))
    exact = get_solver("cp-sat").solve(instance, Settings(time_limit=60.0))
    assert exact.status is partition.Status.OPTIMAL
    optimum = partition.evaluate(instance, exact.placement).bottleneck
    assert chain_lower_bound(instance) == pytest.approx(optimum, rel=2e-5)


def test_cuts_inside_an_moe_layer_pay_for_the_experts_they_touch(monkeypatch) -> None:
    # Cells of an MoE layer: a cut holding work x has started at least the experts that work
    # takes, each sending a tensor to the combine or on within the expert.
    graph = synthetic.moe_graph(
        layers=1, experts=8, hidden=1024, expert_intermediate=1024, top_k=2, vocab=1000, seq=2048
    )
    instance = partition.build_instance(graph, synthetic.hetero_cluster(2, 2), partition.Options(stages=4))
    monkeypatch.setattr(chain_bound, "_EXACT_OPS", 0)
    with_branches = chain_lower_bound(instance)
    counts = chain_bound._Builder.touched_branches
    monkeypatch.setattr(
        chain_bound._Builder,
        "touched_branches",
        lambda self, b, lo, hi, work, cuts: 0 * counts(self, b, lo, hi, work, cuts),
    )
    assert with_branches > 1.05 * chain_lower_bound(instance)
    assert with_branches <= partition.solve(instance, "cp-sat", time_limit=10).bottleneck


def test_a_broadcast_tensor_is_relaxed_away(monkeypatch) -> None:
    # A mask made by a source op and read along the chain jumps over every op in between, so
    # none is a dominator; reading it at its first reader only (a relaxation) restores them.
    dag = _chain(np.random.default_rng(5), 8, lambda rng: float(rng.uniform(1e7, 1e9)))
    dag.add_node("mask", flops=1e6, bytes_read=1e3, bytes_written=1e3)
    dag.add_edges_from(("mask", v, {"bytes": 1e4}) for v in (2, 4, 6))
    instance = partition.make_instance(dag, "homo-4a100", 4)
    graph = instance.graph
    mask = next(t for t in graph.tensors if t.producer == "mask")
    shared = partition.Tensor("mask.out", mask.bytes, "mask", ("2", "4", "6"))
    tensors = (*[t for t in graph.tensors if t.producer != "mask"], shared)
    instance = partition.build_instance(
        partition.OpGraph(graph.name, graph.ops, tensors, graph.weights), instance.cluster, instance.options
    )
    relaxed = chain_bound._without_broadcasts(instance)
    assert dominators(relaxed).sum() > dominators(instance).sum()
    bound = chain_lower_bound(instance)
    monkeypatch.setattr(chain_bound, "_without_broadcasts", lambda instance: instance)
    assert chain_lower_bound(instance) < bound <= _optimum(instance) * (1 + 1e-9)


def test_dominators_of_a_decoder_are_its_residual_adds() -> None:
    graph = synthetic.decoder_graph(layers=2, hidden=64, intermediate=128, vocab=100, seq=16)
    instance = partition.build_instance(graph, synthetic.hetero_cluster(1, 2), partition.Options(stages=2))
    found = [op.id for op, is_dominator in zip(graph.ops, dominators(instance), strict=True) if is_dominator]
    assert found == [
        "embed",
        "l0.attn.residual",
        "l0.mlp.residual",
        "l1.attn.residual",
        "l1.mlp.residual",
        "final_norm",
        "lm_head",
    ]


def test_beats_the_aggregate_bound_on_a_decoder_and_respects_the_deadline() -> None:
    graph = synthetic.decoder_graph(layers=8)
    instance = partition.build_instance(graph, synthetic.hetero_cluster(2, 4), partition.Options(stages=8))
    aggregate = partition.aggregate_bound.aggregate_lower_bound(instance)
    found = partition.solve(instance, "order-dp").bottleneck
    bound = chain_lower_bound(instance, found)
    assert aggregate < bound <= found * (1 + 1e-9)
    assert chain_lower_bound(instance, found, deadline=0.0) == 0.0


@settings(max_examples=10, deadline=None)
@given(st.sampled_from(["decoder", "moe"]), st.integers(2, 4), st.integers(0, 2), st.booleans())
def test_never_above_a_proven_optimum_on_small_transformers(model, stages, hosts, cells) -> None:
    # Multi-op segments with residual skips (cells forced or exact ideals), on 1–3 one-type hosts.
    graph = (
        synthetic.decoder_graph(layers=2, hidden=1024, intermediate=2816, vocab=1000, seq=2048)
        if model == "decoder"
        else synthetic.moe_graph(
            layers=1, experts=4, hidden=1024, expert_intermediate=1024, top_k=2, vocab=1000, seq=2048
        )
    )
    cluster = synthetic.hetero_cluster(hosts + 1, 2)
    instance = partition.build_instance(graph, cluster, partition.Options(stages=min(stages, 2 * hosts + 2)))
    exact = partition.solve(instance, "ideal-dp", time_limit=3.0)
    if exact.status is not partition.Status.OPTIMAL:
        return
    with pytest.MonkeyPatch.context() as patch:
        if cells:
            patch.setattr(chain_bound, "_EXACT_OPS", 0)
        assert chain_lower_bound(instance) <= exact.bottleneck * (1 + 1e-9)
