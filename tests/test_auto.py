"""``auto``: which solver it picks, and that it spends time ideal-dp leaves on CP-SAT."""

from __future__ import annotations

from conftest import LIGHT, TWO_HOSTS, random_dag_instance

import partition


def test_auto_closes_the_gap_ideal_dp_leaves_with_cp_sat() -> None:
    # Tensors read in several stages over mixed links: ideal-dp's communication estimate is a
    # lower one, and on this DAG it stops 11% above its bound; CP-SAT proves the optimum in the
    # time left.
    instance = random_dag_instance(1, 9, hosts=TWO_HOSTS, stages=3, shared_outputs=True)
    alone = partition.solve(instance, "ideal-dp")
    auto = partition.solve(instance, time_limit=30)
    assert alone.status is partition.Status.FEASIBLE
    assert auto.notes[0].startswith("auto: ideal-dp")
    assert any("cp-sat" in note for note in auto.notes)
    assert auto.status is partition.Status.OPTIMAL
    assert auto.bottleneck <= alone.bottleneck
    assert auto.lower_bound >= alone.lower_bound


def test_auto_keeps_ideal_dp_when_it_is_already_optimal() -> None:
    instance = partition.make_instance(str(LIGHT / "light_resnet50.onnx"), "hetero-2h100-4a100-2l4", 4)
    result = partition.solve(instance, time_limit=30)
    assert result.solver == "ideal-dp" and result.status is partition.Status.OPTIMAL
    assert not any("cp-sat" in note for note in result.notes)
