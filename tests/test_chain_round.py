"""The chain-DP rounding (partition/solvers/chain_round.py): valid placements, close to the bound."""

from __future__ import annotations

import time

import pytest
from conftest import random_dag_instance
from global_cases import TIGHT_MEMORY, TWO_TYPES

import partition
from partition import synthetic
from partition.evaluator import evaluate
from partition.solvers._scoring import Scorer, TensorArrays
from partition.solvers.chain_round import rounded_placement


def _round(instance: partition.Instance) -> tuple[partition.Placement | None, float]:
    scorer = Scorer(instance, TensorArrays.of(instance))
    return rounded_placement(instance, scorer, time.perf_counter() + 20)


# (graph, hosts × devices of hetero_cluster, k, largest gap to the chain bound measured + slack;
# the bound is bisected to 1e-5)
@pytest.mark.parametrize(
    ("graph", "hosts", "per_host", "stages", "gap"),
    [
        (lambda: synthetic.decoder_graph(layers=8), 3, 4, 8, 0.12),  # ideal-dp's best: 3.7092 ms
        (lambda: synthetic.decoder_graph(layers=6), 3, 8, 12, 0.06),  # ideal-dp's best: 2.1410 ms
        (lambda: synthetic.moe_graph(layers=3, experts=16), 3, 4, 8, 2e-5),
        (lambda: synthetic.moe_graph(layers=4, experts=32), 6, 4, 16, 2e-5),
    ],
)
def test_rounding_is_valid_and_near_the_bound(graph, hosts, per_host, stages, gap) -> None:
    instance = partition.build_instance(
        graph(), synthetic.hetero_cluster(hosts, per_host), partition.Options(stages=stages)
    )
    placement, bound = _round(instance)
    assert placement is not None and bound > 0
    evaluation = evaluate(instance, placement)
    assert evaluation.valid, evaluation.violations
    assert placement.num_stages <= stages
    assert bound * (1 - 1e-9) <= evaluation.bottleneck <= bound * (1 + gap)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(
    ("hosts", "memory", "comm_mode"), [(TWO_TYPES, None, "per-destination"), (TIGHT_MEMORY, 9e9, "once")]
)
def test_rounding_never_returns_an_invalid_placement(
    seed: int, hosts: list[dict], memory, comm_mode: str
) -> None:
    instance = random_dag_instance(
        seed,
        30,
        hosts=hosts,
        stages=3,
        edge_probability=0.1,
        shared_outputs=True,
        memory=memory,
        comm_mode=comm_mode,
    )
    placement, bound = _round(instance)
    assert placement is not None or memory is not None  # without memory limits a split always exists
    if placement is not None:
        evaluation = evaluate(instance, placement)
        assert evaluation.valid, evaluation.violations
        assert evaluation.bottleneck >= bound * (1 - 1e-9)


def test_exact_stage_count_is_respected() -> None:
    instance = partition.build_instance(
        synthetic.decoder_graph(layers=4),
        synthetic.hetero_cluster(3, 4),
        partition.Options(stages=6, exact_stages=True),
    )
    placement, _ = _round(instance)
    assert placement is None or (placement.num_stages == 6 and evaluate(instance, placement).valid)


def test_anytime_uses_the_rounding_from_the_cli_solver(capsys) -> None:
    instance = partition.build_instance(
        synthetic.decoder_graph(layers=6), synthetic.hetero_cluster(3, 8), partition.Options(stages=12)
    )
    messages: list[str] = []
    result = partition.solve(instance, "anytime", time_limit=8, progress=messages.append)
    assert any("chain rounding" in m for m in messages)
    assert result.placement is not None and result.bottleneck <= 2.1410e-3 * (1 + 1e-6)
