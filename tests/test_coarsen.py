"""Coarsening: expansion records, exactness of the exact contractions, heuristic levels."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from conftest import random_dag_instance
from exhaustive import exhaustive_optimum

import partition
from partition import coarsen, synthetic
from partition.costs import CostTable
from partition.solvers.order_dp import split_order

ONE_HOST = [{"name": "h0", "devices": {"H100-SXM": 1, "A100-80GB": 1, "L4": 1}, "intra_link": "pcie4"}]


def _covers_once(coarsening: coarsen.Coarsening, num_ops: int) -> None:
    flat = sorted(v for members in coarsening.members for v in members)
    assert flat == list(range(num_ops))


def _small_moe(stages: int = 4) -> partition.Instance:
    graph = synthetic.moe_graph(layers=2, experts=8, top_k=2, hidden=512, expert_intermediate=256, seq=256)
    return partition.build_instance(graph, synthetic.hetero_cluster(2, 2), partition.Options(stages=stages))


def test_every_level_maps_each_original_op_once_and_expands_to_the_same_figures() -> None:
    instance = _small_moe()
    n = len(instance.graph.ops)
    grain = float(instance.costs.times.min(axis=1).sum()) / 4
    identity = coarsen.coarsen_exact(instance)
    levels = [identity]
    levels.append(identity.then(coarsen.module_groups(identity.instance, grain), exact=False))
    levels.append(levels[-1].then(coarsen.sibling_groups(levels[-1].instance, grain), exact=False))
    sizes = [len(level.members) for level in levels]
    assert sizes[0] == n and sizes[1] < n and sizes[2] < sizes[1]
    for level in levels:
        _covers_once(level, n)
        coarse = level.instance
        placement, _ = split_order(coarse, np.arange(len(coarse.graph.ops)))
        assert placement is not None
        on_coarse = partition.evaluate(coarse, placement)
        on_original = partition.evaluate(instance, level.expand(placement))
        assert on_coarse.valid and on_original.valid
        assert on_original.bottleneck == pytest.approx(on_coarse.bottleneck, rel=1e-12)
        assert [s.memory for s in on_original.stages] == pytest.approx([s.memory for s in on_coarse.stages])


@pytest.mark.parametrize("seed", range(6))
def test_colocation_hulls_do_not_change_the_optimum(seed: int) -> None:
    instance = random_dag_instance(seed, 6, hosts=ONE_HOST, stages=3, edge_probability=0.4)
    group = ("op0", "op4")  # with every op on a path between them: the hull
    instance = instance.with_options(colocate=(group,))
    exact = coarsen.coarsen_exact(instance)
    _covers_once(exact, 6)
    assert exact.exact and len(exact.members) < 6
    assert exhaustive_optimum(exact.instance) == pytest.approx(exhaustive_optimum(instance), rel=1e-12)


def test_free_constant_leaves_merge_into_their_consumer_without_changing_the_optimum() -> None:
    dag = nx.DiGraph()
    for name, flops in (("a", 4e12), ("b", 6e12), ("c", 0.0), ("d", 5e12), ("e", 3e12)):
        dag.add_node(name, flops=flops, bytes_read=1e8, bytes_written=1e8)
    dag.nodes["c"].update(bytes_read=0.0, bytes_written=1e6)  # a constant: no inputs, small output
    for u, v in (("a", "b"), ("b", "d"), ("c", "d"), ("d", "e"), ("a", "e")):
        dag.add_edge(u, v, bytes=2e8)
    cluster = partition.parse_cluster({"hosts": ONE_HOST})
    base = partition.make_instance(partition.graph_from_networkx(dag, "const"), cluster, 3)
    times = base.costs.times.copy()
    times[base.graph.index["c"]] = 0.0
    instance = partition.Instance(
        base.name,
        base.graph,
        cluster,
        CostTable(base.costs.type_names, times, base.costs.provenance),
        base.options,
    )
    exact = coarsen.coarsen_exact(instance)
    merged = [m for m in exact.members if len(m) > 1]
    assert merged == [(instance.graph.index["c"], instance.graph.index["d"])]
    assert exhaustive_optimum(exact.instance) == pytest.approx(exhaustive_optimum(instance), rel=1e-12)
    # with exactly k stages the merge could empty a stage, so it is not applied
    assert len(coarsen.coarsen_exact(instance.with_options(exact_stages=True)).members) == 5


def test_a_group_that_is_not_convex_is_refused() -> None:
    instance = random_dag_instance(3, 5, hosts=ONE_HOST, stages=2, edge_probability=0.0)
    # op0 -> op1 -> op2 is a chain (edge probability 0 keeps only some consecutive edges)
    chain = [(u, v) for u, v in instance.graph.edges]
    u, v = chain[0]
    w = next(b for a, b in chain if a == v)
    with pytest.raises(partition.InputError, match="not convex"):
        coarsen.contract(instance, [[u, w]] + [[x] for x in range(5) if x not in (u, w)], exact=False)
