"""Orders that cut each arm of a fork-join block where it is narrow (partition.solvers.branch_order)."""

from __future__ import annotations

import networkx as nx
import numpy as np
from conftest import RandomOps
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import partition
from partition import synthetic
from partition.solvers._devices import host_sequence
from partition.solvers.anytime import _best_split, _Search, _Splitter
from partition.solvers.base import Settings
from partition.solvers.branch_order import branch_split
from partition.solvers.order_dp import split_order


def _is_topological(instance: partition.Instance, order: np.ndarray) -> bool:
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    edges = np.asarray(instance.graph.edges, dtype=np.int64).reshape(-1, 2)
    return sorted(order.tolist()) == list(range(len(order))) and bool(
        (position[edges[:, 0]] < position[edges[:, 1]]).all()
    )


def test_experts_are_cut_after_their_gated_product() -> None:
    # An expert's product (4 tokens × 16) is a quarter of its output (4 × 64): its down
    # projection and scale wait for every expert's product; the shared expert's down too.
    graph = synthetic.moe_graph(
        layers=2, experts=4, top_k=2, hidden=64, expert_intermediate=16, vocab=100, seq=8
    )
    instance = partition.build_instance(graph, synthetic.hetero_cluster(3, 1), partition.Options(stages=3))
    split = branch_split(instance)
    assert split is not None
    delayed = {instance.graph.ops[i].name for i in split.delayed}
    experts = {f"l{layer}.moe.e{e}.{op}" for layer in range(2) for e in range(4) for op in ("down", "scale")}
    assert delayed == experts | {"l0.moe.shared0.down", "l1.moe.shared0.down"}
    order = split.apply(np.arange(len(graph.ops)))
    assert _is_topological(instance, order)
    names = [instance.graph.ops[i].name for i in order]
    for layer in range(2):
        combine = names.index(f"l{layer}.moe.combine")
        waiting = names[combine - 9 : combine]  # four experts' down and scale, the shared expert's down
        assert set(waiting) <= delayed and all(name.startswith(f"l{layer}.") for name in waiting)
        products = [
            p for p, name in enumerate(names) if name.startswith(f"l{layer}.") and name.endswith(".mul")
        ]
        assert max(products) < combine - 9


def test_no_split_where_no_arm_narrows() -> None:
    graph = synthetic.decoder_graph(layers=2, hidden=64, intermediate=128, vocab=100, seq=8)
    instance = partition.build_instance(graph, synthetic.hetero_cluster(2, 1), partition.Options(stages=2))
    assert branch_split(instance) is None  # q, k and v into attention: no arm narrower inside


def _fan(seed: int) -> partition.Instance:
    """A source, three to five arms (chains of one to four ops, some also reading the source)
    into a join, maybe a tail reading the source too; random tensor sizes."""
    ops = RandomOps(seed)
    rng, node, edge = ops.rng, ops.node, ops.edge
    node("src")
    node("join")
    for arm in range(int(rng.integers(3, 6))):
        previous = "src"
        for i in range(int(rng.integers(1, 5))):
            node(f"a{arm}_{i}")
            edge(previous, f"a{arm}_{i}")
            if i and rng.random() < 0.3:
                edge("src", f"a{arm}_{i}")
            previous = f"a{arm}_{i}"
        edge(previous, "join")
    if rng.random() < 0.5:
        node("tail")
        edge("join", "tail")
        if rng.random() < 0.5:
            edge("src", "tail")
    return ops.instance("fan")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 100_000))
def test_each_arm_waits_from_its_narrowest_prefix_on(seed: int) -> None:
    instance = _fan(seed)
    graph = instance.graph
    split = branch_split(instance)
    delayed = set() if split is None else {graph.ops[i].id for i in split.delayed}
    arms: dict[str, list[str]] = {}
    for op in graph.ops:
        if op.id.startswith("a"):
            arms.setdefault(op.id.split("_")[0], []).append(op.id)
    expected = set()
    for chain in arms.values():
        chain.sort(key=lambda name: int(name.split("_")[1]))

        def crossing(prefix: set[str]) -> float:
            return sum(t.bytes for t in graph.tensors if t.producer in prefix and set(t.consumers) - prefix)

        sizes = [crossing(set(chain[:i])) for i in range(1, len(chain) + 1)]
        if len(chain) > 1 and min(sizes[:-1]) < sizes[-1]:
            best = max(i for i in range(len(chain) - 1) if sizes[i] == min(sizes[:-1]))
            expected |= set(chain[best + 1 :])
    assert delayed == expected
    if split is not None:  # any topological order stays one
        rng = np.random.default_rng(seed)
        dag = nx.DiGraph(list(graph.edges))
        dag.add_nodes_from(range(len(graph.ops)))
        keys = rng.random(len(graph.ops))
        order = np.array(list(nx.lexicographical_topological_sort(dag, key=lambda v: keys[v])))
        assert _is_topological(instance, split.apply(order))


def test_refinement_tries_the_arms_cut_where_narrow() -> None:
    # Experts whose product is a sixteenth of their output: the split of the order with the arms
    # cut is 17% shorter than that of the order the search level gives (whole experts).
    graph = synthetic.moe_graph(
        layers=1, experts=32, top_k=4, hidden=2048, expert_intermediate=64, vocab=1000, seq=512
    )
    instance = partition.build_instance(graph, synthetic.hetero_cluster(3, 1), partition.Options(stages=3))
    search = _Search(instance, Settings(time_limit=10))
    coarse_order = np.arange(len(search.coarse.instance.graph.ops))
    expanded = search.coarse.expand_order(coarse_order)
    sequence = host_sequence(search.best_hosts, search.k)
    fine = search.fine.instance
    whole = [
        _best_split(_Splitter(fine, expanded, search.fine_tensors), sequence, search.bound, 1e9),
        split_order(fine, expanded)[0],  # the exact split of that order, over every device subsequence
    ]
    scores = [search.fine_scorer.score(np.asarray(p.stage_of), np.asarray(p.devices))[0] for p in whole]
    search.refine(coarse_order, search.best_hosts)
    assert search.best[0] < 0.9 * min(scores)
