"""The anytime solver, its aggregate bound and the synthetic generators it is measured on."""

from __future__ import annotations

import time

import pytest
from conftest import random_dag_instance
from exhaustive import exhaustive_optimum

import partition
import partition.api
import partition.solvers
from partition import synthetic
from partition.aggregate_bound import aggregate_lower_bound
from partition.placement import Status
from partition.solvers import Outcome, Solver, get_solver

TWO_HOSTS = [
    {"name": "h0", "devices": {"H100-SXM": 1, "L4": 1}, "intra_link": "pcie5"},
    {"name": "h1", "devices": {"A100-40GB": 2}, "intra_link": "nvlink3"},
]


def test_generators_build_graphs_of_the_requested_size() -> None:
    assert (
        len(synthetic.decoder_graph(layers=4, hidden=256, intermediate=512, vocab=100, seq=8).ops)
        == 16 * 4 + 3
    )
    moe = synthetic.moe_graph(layers=3, experts=16, top_k=2, hidden=256, expert_intermediate=64, seq=8)
    assert len(moe.ops) == 3 * (14 + 7 * 16 + 5) + 3
    assert len(synthetic.layered_dag(7, 5, seed=1).ops) == 7 * 5 + 2
    cluster = synthetic.hetero_cluster()
    assert len(cluster.devices) == 64 and len(cluster.type_names) == 3
    sources = [op for op in moe.ops if all(moe.index.get(t.split(":")[0]) is None for t in op.inputs)]
    assert [op.id for op in sources] == ["embed"]


def test_generator_arguments_are_checked() -> None:
    with pytest.raises(partition.InputError, match="top_k"):
        synthetic.moe_graph(layers=1, experts=4, top_k=8)
    with pytest.raises(partition.InputError, match="layers"):
        synthetic.decoder_graph(layers=0)


@pytest.mark.parametrize("seed", range(8))
def test_aggregate_bound_never_exceeds_the_optimum(seed: int) -> None:
    mode = "once" if seed % 2 else "per-destination"
    instance = random_dag_instance(
        200 + seed, 6, hosts=TWO_HOSTS, stages=3, comm_mode=mode, overlap=seed % 4 == 3
    )
    optimum = exhaustive_optimum(instance)
    assert aggregate_lower_bound(instance) <= optimum * (1 + 1e-9)


@pytest.mark.parametrize("seed", range(6))
def test_anytime_is_valid_and_brackets_the_exact_optimum(seed: int) -> None:
    instance = random_dag_instance(300 + seed, 6, hosts=TWO_HOSTS, stages=3, edge_probability=0.5)
    result = partition.solve(instance, "anytime", time_limit=2)
    optimum = exhaustive_optimum(instance)
    assert result.placement is not None and result.evaluation.valid
    assert result.lower_bound <= optimum * (1 + 1e-9) <= result.bottleneck * (1 + 2e-9)
    # the gap the solver reports covers how far coarsening and search left it from the optimum
    assert result.bottleneck / optimum - 1 <= result.gap + 1e-9


def test_anytime_keeps_colocated_ops_together() -> None:
    instance = random_dag_instance(5, 8, hosts=TWO_HOSTS, stages=4, edge_probability=0.2)
    instance = instance.with_options(colocate=(("op1", "op6"),))
    result = partition.solve(instance, "anytime", time_limit=2)
    assert result.evaluation is not None and result.evaluation.valid
    assert result.placement.stage_of[1] == result.placement.stage_of[6]


def test_anytime_respects_the_time_limit_and_reports_progress() -> None:
    graph = synthetic.moe_graph(layers=4, experts=32, top_k=4, hidden=1024, expert_intermediate=512, seq=512)
    instance = partition.build_instance(graph, synthetic.hetero_cluster(3, 4), partition.Options(stages=12))
    messages: list[str] = []
    started = time.perf_counter()
    result = partition.solve(instance, "anytime", time_limit=3.0, progress=messages.append)
    assert time.perf_counter() - started <= 3.0 * 1.1
    assert result.evaluation is not None and result.evaluation.valid
    assert result.lower_bound > 0 and result.gap is not None
    assert any("bound" in m and "best" in m for m in messages)


def test_anytime_is_deterministic_for_a_seed_when_it_converges() -> None:
    instance = partition.build_instance(
        synthetic.decoder_graph(layers=2, hidden=512, intermediate=1024, vocab=1000, seq=128),
        synthetic.hetero_cluster(2, 2),
        partition.Options(stages=4),
    )
    first = partition.solve(instance, "anytime", time_limit=20, seed=7)
    second = partition.solve(instance, "anytime", time_limit=20, seed=7)
    assert first.wall_time < 15  # converged, not stopped by the clock
    assert first.placement == second.placement


def test_anytime_from_the_cli(tmp_path) -> None:
    from partition.cli import main

    instance = partition.build_instance(
        synthetic.decoder_graph(layers=2, hidden=256, intermediate=512, vocab=1000, seq=64),
        synthetic.hetero_cluster(1, 3),
        partition.Options(stages=3),
    )
    path = tmp_path / "inst.json"
    path.write_text(partition.jsonio.dumps(instance.to_json()))
    out = tmp_path / "placement.json"
    assert (
        main(["solve", str(path), "--solver", "anytime", "--time-limit", "2", "-o", str(out), "--quiet"]) == 0
    )
    document = partition.jsonio.read_json(out, "placement")
    assert document["solver"]["name"] == "anytime" and document["lower_bound_s"] > 0


def test_anytime_respects_device_memory() -> None:
    # each op holds up to 4 GB of weights: 12 GB devices force a split into several stages
    instance = random_dag_instance(
        7, 6, hosts=[{"devices": {"small": 4}, "intra_link": "pcie4"}], stages=4, memory=12e9
    )
    result = partition.solve(instance, "anytime", time_limit=2)
    assert result.evaluation is not None and result.evaluation.valid
    assert all(s.memory <= 12e9 for s in result.evaluation.stages)
    assert result.bottleneck >= exhaustive_optimum(instance) * (1 - 1e-9)


def test_stops_when_the_chain_bound_meets_the_first_splits() -> None:
    # A small decoder over an MI300X and an H100 host: the first splits are optimal, the
    # dominator-chain bound (tried before the order search on small graphs) proves it, and
    # neither the genetic search nor the polish runs.
    instance = partition.build_instance(
        synthetic.decoder_graph(layers=4), synthetic.hetero_cluster(2, 2), partition.Options(stages=4)
    )
    messages: list[str] = []
    result = partition.solve(instance, "anytime", time_limit=20, progress=messages.append)
    assert result.status is partition.Status.OPTIMAL
    assert any("structural bound met" in m for m in messages)
    assert not any("generation" in m or m.startswith("lns:") for m in messages)
    assert any(note.endswith("bound = dominator-chain relaxation") for note in result.notes)


def test_the_chain_bound_gets_the_time_an_early_search_left(monkeypatch) -> None:
    # Nothing but the evaluation follows anytime, so when its search ends early the bound may
    # use most of the limit that is left (for finer cells), not only its 10% share.
    instance = partition.build_instance(
        synthetic.decoder_graph(layers=2, hidden=256, intermediate=512, vocab=100, seq=64),
        synthetic.hetero_cluster(2, 2),
        partition.Options(stages=4),
    )

    class _Quick(Solver):
        name = "anytime"
        capabilities = get_solver("anytime").capabilities

        def solve(self, instance, settings):
            placement = get_solver("uniform").solve(instance, settings).placement
            return Outcome(placement, Status.FEASIBLE, 0.0, ())

    budgets: list[float] = []

    def recording(instance, upper, *, floor, deadline):
        budgets.append(deadline - time.perf_counter())
        return floor, ""

    monkeypatch.setitem(partition.solvers._REGISTRY, "anytime", _Quick)
    monkeypatch.setattr(partition.api, "structural_lower_bound", recording)
    partition.solve(instance, "anytime", time_limit=20.0)
    partition.solve(instance, "uniform", time_limit=20.0)
    assert len(budgets) == 2
    assert budgets[0] > 0.7 * 20.0  # 80% of the ~20 s left
    assert budgets[1] <= 0.1 * 20.0 + 1e-6  # any other solver keeps the 10% share
