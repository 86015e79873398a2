"""The MILP global solver (pulp + CBC) against complete enumeration; honest statuses and bounds."""

from __future__ import annotations

import json
from pathlib import Path

import pulp
import pytest
from conftest import LIGHT
from global_cases import CBC_TRAPS, cbc_trap_instance, larger_instance, packing_infeasible_instance

import partition
from partition.cli import main
from partition.solvers import milp


def test_a_time_limit_is_not_reported_as_optimal() -> None:
    # pulp says "Optimal" when CBC stops on time with an incumbent: the status must not.
    result = partition.solve(larger_instance(), "milp", time_limit=0.5, threads=1)
    assert result.status is partition.Status.FEASIBLE
    assert result.evaluation is not None and result.evaluation.valid
    assert 0 < result.lower_bound < result.bottleneck
    assert result.gap is not None and result.gap > 0
    assert any("Solution Found" in note or "warm start" in note for note in result.notes)


def test_proven_infeasible_names_memory() -> None:
    result = partition.solve(packing_infeasible_instance(), "milp", threads=1)
    assert result.status is partition.Status.INFEASIBLE and result.placement is None
    assert "memory" in result.notes[0]


def test_cli_on_a_real_model_with_a_time_limit(tmp_path: Path, capsys) -> None:
    output = tmp_path / "placement.json"
    source = str(LIGHT / "light_squeezenet.onnx")
    arguments = ["solve", source, "--cluster", "hetero-2h100-4a100-2l4", "--stages", "3", "-q"]
    assert main([*arguments, "--solver", "milp", "--time-limit", "3", "-o", str(output)]) == 0
    document = json.loads(output.read_text())
    assert document["status"] in ("optimal", "feasible")
    assert 0 < document["lower_bound_s"] <= document["bottleneck_s"] * (1 + 1e-9)
    capsys.readouterr()


def test_a_cbc_that_fails_on_its_own_gives_the_warm_start(tmp_path: Path, monkeypatch) -> None:
    # CBC once exited with an error under a loaded `make bench` (not reproducible): the job must
    # still return a valid placement, and say what happened.
    failing = tmp_path / "cbc"
    failing.write_text("#!/bin/sh\nexit 3\n")
    failing.chmod(0o700)

    class FailingCbc(pulp.PULP_CBC_CMD):
        def __init__(self, *arguments, **keywords) -> None:
            super().__init__(*arguments, **keywords)
            self.path = str(failing)

    monkeypatch.setattr(pulp, "PULP_CBC_CMD", FailingCbc)
    result = partition.solve(larger_instance(), "milp", time_limit=20, threads=1)
    assert result.status is partition.Status.FEASIBLE
    assert result.evaluation is not None and result.evaluation.valid
    assert any("CBC exited with status 3" in note and "warm start" in note for note in result.notes)


@pytest.mark.parametrize("trap", CBC_TRAPS)
def test_cbc_without_a_mip_start_nor_preprocessing_proves_the_optimum(trap: str) -> None:
    # where it once proved a wrong one (tests/global_cases.py)
    instance, optimum = cbc_trap_instance(trap), CBC_TRAPS[trap][-1]
    assert partition.solve(instance, "brute-force").bottleneck == pytest.approx(optimum, rel=1e-12)
    result = partition.solve(instance, "milp", threads=1)
    assert result.status is partition.Status.OPTIMAL
    assert result.bottleneck == pytest.approx(optimum, rel=1e-12)
    assert result.lower_bound <= result.bottleneck


def test_a_proof_the_warm_start_contradicts_is_not_believed(monkeypatch) -> None:
    # with its preprocessing CBC proves 0.06994 s here; a warm start at the optimum disproves it
    instance = cbc_trap_instance("preprocessing")
    optimum = partition.solve(instance, "brute-force").placement
    monkeypatch.setattr(milp, "_CBC_OPTIONS", ())
    monkeypatch.setattr(milp, "graph_order_split", lambda instance: (optimum, 0.0))
    result = partition.solve(instance, "milp", threads=1)
    assert result.status is partition.Status.FEASIBLE and result.placement == optimum
    assert result.lower_bound < result.bottleneck < 0.0636
    assert any("below CBC's bound" in note for note in result.notes)
