"""A gap limit: every solver that searches to a time limit stops once its placement is proven
within it, the bounds probe the value that proves it first, and nothing is called optimal
that is only close."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import LIGHT, random_dag_instance

import partition
from partition import chain_bound, tower_bound
from partition.chain_bound import _narrowed, chain_lower_bound
from partition.cli import main
from partition.instance import load_instance
from partition.solvers.lns import good_enough
from partition.tower_bound import structural_lower_bound, tower_lower_bound

T5_MIXED = "instances/v1/t5_small.hetero-a100-l4-t4.k4.json.gz"
T5_H100_A100 = "instances/v1/t5_small.hetero-h100-a100.k8.json.gz"
BERT = "instances/v1/bert_base.2x8a100.k16.json.gz"
TWO_TYPES = [{"name": "a", "devices": {"A100-80GB": 2}}, {"name": "b", "devices": {"L4": 2}}]


def _threshold(value: float, probes: list[float]):
    """A relaxation admitting every bottleneck from ``value`` on, recording its probes."""

    def feasible(bottleneck: float) -> bool:
        probes.append(bottleneck)
        return bottleneck >= value

    return feasible


def test_the_goal_is_probed_first_and_ends_the_bisection_once_rejected() -> None:
    probes: list[float] = []
    assert _narrowed(_threshold(0.7, probes), 0.5, 1.0, None, 1.0, goal=0.65) == 0.65
    assert probes == [0.65]
    # an admitted goal lowers the bracket's upper end and the bisection goes on below it
    probes.clear()
    found = _narrowed(_threshold(0.7, probes), 0.5, 1.0, None, 1.0, goal=0.8)
    assert probes[0] == 0.8 and max(probes[1:]) < 0.8
    assert found == pytest.approx(0.7, rel=1e-3) and found < 0.7
    # in rounds of two, the goal takes the first round's first place, the gallop the other
    rounds: list[list[float]] = []

    def test(values):
        rounds.append(list(values))
        return [value >= 0.7 for value in values]

    assert _narrowed(_threshold(0.7, []), 0.5, 1.0, None, 1.0, many=(2, test), goal=0.6) == 0.6
    assert rounds == [[0.6, 0.5 * (1 + chain_bound._GALLOP)]]


def _counted(monkeypatch, owner, name: str) -> list[float]:
    """Every probe of ``owner.name`` (a relaxation's feasibility test), recorded."""
    probes: list[float] = []
    original = getattr(owner, name)

    def counted(self, bottleneck, *args, **kwargs):
        probes.append(bottleneck)
        return original(self, bottleneck, *args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return probes


def _upper(instance: partition.Instance) -> float:
    return partition.solve(instance, "balanced-time").bottleneck


@pytest.mark.parametrize(
    ("path", "bound", "relaxation"),
    [
        (T5_MIXED, tower_lower_bound, (tower_bound._Product, "feasible")),
        (BERT, chain_lower_bound, (chain_bound._Relaxation, "feasible")),
    ],
)
def test_each_bound_ends_once_it_proves_the_goal(monkeypatch, path: str, bound, relaxation) -> None:
    instance = load_instance(path)
    upper = _upper(instance)
    probes = _counted(monkeypatch, *relaxation)
    goal = 0.99 * bound(instance, upper)
    every = len(probes)
    probes.clear()
    assert goal * (1 - 1e-8) <= bound(instance, upper, gap_limit=upper / goal - 1) <= upper
    assert len(probes) < every


def test_a_floor_that_proves_the_goal_builds_neither_bound(monkeypatch) -> None:
    instance = load_instance(BERT)
    upper = _upper(instance)
    built: list[str] = []
    monkeypatch.setattr(tower_bound, "towers", lambda instance: built.append("towers"))
    monkeypatch.setattr(chain_bound, "_prepared", lambda instance: built.append("chain"))
    floor = upper / 1.05
    assert structural_lower_bound(instance, upper, floor=floor, gap_limit=0.05) == (floor, "")
    assert built == []


def test_auto_returns_once_the_placement_is_within_the_gap_limit() -> None:
    # T5 on H100/A100 at k = 8: 3.6% after the whole minute, within 10% after a few seconds
    instance = load_instance(T5_H100_A100)
    result = partition.solve(instance, time_limit=60, gap_limit=0.10)
    assert result.wall_time < 30
    assert result.bottleneck <= result.lower_bound * 1.10 * (1 + 1e-6)
    assert result.status is partition.Status.FEASIBLE
    assert "gap limit 10.00% met" in result.notes
    assert result.settings["gap_limit"] == 0.10


@pytest.mark.parametrize("solver", ["cp-sat", "milp", "ideal-dp", "auto"])
def test_a_placement_within_the_gap_limit_is_not_called_optimal(solver: str) -> None:
    # a graph where CP-SAT and CBC stop within 50% before they prove the optimum
    instance = random_dag_instance(8, 12, hosts=TWO_TYPES, stages=4)
    exact = partition.solve(instance, solver, time_limit=30, threads=1)
    loose = partition.solve(instance, solver, time_limit=30, threads=1, gap_limit=0.5)
    assert exact.status is partition.Status.OPTIMAL
    assert loose.bottleneck <= loose.lower_bound * 1.5 * (1 + 1e-6)
    assert loose.bottleneck >= exact.bottleneck * (1 - 1e-9)
    proven = loose.bottleneck <= loose.lower_bound * (1 + 1e-6)
    assert (loose.status is partition.Status.OPTIMAL) == proven


def test_gap_limits_outside_zero_to_one_are_refused() -> None:
    instance = random_dag_instance(3, 6, hosts=TWO_TYPES, stages=2)
    for limit in (-0.01, 1.0, 2.0):
        with pytest.raises(partition.InputError, match="gap limit"):
            partition.solve(instance, gap_limit=limit)


def test_polishes_sharing_a_target_stop_together() -> None:
    assert good_enough(0.0) is None
    first, later = good_enough(1.0), good_enough(1.0)
    assert not first(1.5) and first(1.0) and first(2.0)  # once met, met for every polish
    assert not later(1.5)  # another call's polishes share nothing


def test_the_cli_takes_a_gap_limit_as_a_fraction_or_percent(tmp_path: Path, capsys) -> None:
    output = tmp_path / "placement.json"
    source = str(LIGHT / "light_inception_v2.onnx")
    common = ["solve", source, "--cluster", "hetero-2h100-4a100-2l4", "--stages", "4", "--time-limit", "20"]
    assert main([*common, "--gap-limit", "5%", "-o", str(output), "-q"]) == 0
    document = json.loads(output.read_text())
    assert document["solver"]["settings"]["gap_limit"] == 0.05
    assert document["bottleneck_s"] <= document["lower_bound_s"] * 1.05 * (1 + 1e-6)
    assert "gap limit 5.00% met" in document["notes"]
    capsys.readouterr()
    with pytest.raises(SystemExit) as stopped:
        main([*common, "--gap-limit", "150%", "-q"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith("below 100%, got '150%'")


def test_ideal_dp_skips_the_richer_levels_once_within_the_gap_limit() -> None:
    # ResNet-50 on 2 x 8 A100 at k = 16: 3.3% after every level, within 5% after the first
    instance = load_instance("instances/v1/resnet50.2x8a100.k16.json.gz")
    result = partition.solve(instance, "ideal-dp", time_limit=30, threads=1, gap_limit=0.05)
    assert any("ideal-dp: within the gap limit (5.00%) after the level" in note for note in result.notes)
    assert result.bottleneck <= result.lower_bound * 1.05 * (1 + 1e-6)
    assert result.status is partition.Status.FEASIBLE
