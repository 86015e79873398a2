"""The MILP global solver (pulp + CBC) against complete enumeration; honest statuses and bounds."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import LIGHT
from global_cases import larger_instance, packing_infeasible_instance

import partition
from partition.cli import main


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
