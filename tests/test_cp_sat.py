"""The CP-SAT global solver against complete enumeration, and its honest statuses and bounds."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
from conftest import LIGHT, TWO_HOSTS, random_dag_instance
from exhaustive import exhaustive_optimum
from global_cases import larger_instance, medium_instance, packing_infeasible_instance, small_instances
from hypothesis import given, settings
from hypothesis import strategies as st
from ortools.sat.python import cp_model

import partition
from partition.cli import main
from partition.evaluator import evaluate
from partition.solvers import Settings, get_solver
from partition.solvers._stage_model import stage_model_data
from partition.solvers.cp_sat import StageModel, model_unit
from partition.solvers.lns import polish
from partition.solvers.lp_bound import lp_lower_bound


@pytest.mark.parametrize("solver", ["cp-sat", "milp"])
@settings(max_examples=30, deadline=None, derandomize=True)
@given(instance=small_instances())
def test_global_solvers_reach_the_exhaustive_optimum(solver: str, instance: partition.Instance) -> None:
    optimum = exhaustive_optimum(instance)
    result = partition.solve(instance, solver, threads=1)
    if math.isinf(optimum):
        assert result.status is partition.Status.INFEASIBLE and result.placement is None
        return
    assert result.evaluation is not None and result.evaluation.valid
    assert result.bottleneck == pytest.approx(optimum, rel=1e-6)
    assert result.status is partition.Status.OPTIMAL
    # the proof is the bound: within CP-SAT's objective step (and rounding) of the optimum, and
    # CBC's tolerances
    slack = 1e-6 if solver == "cp-sat" else 1e-5
    assert optimum * (1 - slack) <= result.lower_bound <= optimum * (1 + 1e-9)
    assert lp_lower_bound(instance) <= optimum * (1 + 1e-9)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(instance=small_instances(max_ops=7), draws=st.data())
def test_a_model_of_the_stages_each_op_may_take_equals_the_whole_model_with_the_rest_forbidden(
    instance: partition.Instance, draws: st.DataObject
) -> None:
    # the polish's windows pin most ops to one stage: their model has literals and tensors only
    # for the stages the ops may take, and must have the optimum of the whole model with every
    # other stage forbidden
    data = stage_model_data(instance)
    k = data.num_stages
    allowed = [
        sorted(draws.draw(st.sets(st.integers(0, k - 1), min_size=1, max_size=k), label=f"op {v}"))
        for v in range(data.num_ops)
    ]
    unit = model_unit(data, lp_lower_bound(instance))

    def optimum(model: StageModel) -> tuple[str, float | None]:
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        solver.parameters.presolve_inclusion_work_limit = 0
        status = solver.Solve(model.model)
        assert status in (cp_model.OPTIMAL, cp_model.INFEASIBLE)
        return solver.StatusName(status), solver.ObjectiveValue() if status == cp_model.OPTIMAL else None

    restricted = StageModel(data, unit, 0, 2**40, data.memory_can_bind, allowed=allowed)
    whole = StageModel(data, unit, 0, 2**40, data.memory_can_bind)
    for group in data.colocate:  # colocated ops take the stages all of them may take
        shared = set.intersection(*(set(allowed[v]) for v in group))
        for v in group:
            allowed[v] = sorted(shared)
    for v, stages in enumerate(allowed):
        for s in set(range(k)) - set(stages):
            whole.model.add(whole.x[v][s] == 0)
    assert all(set(restricted.x[v]) == set(stages) for v, stages in enumerate(allowed))
    assert optimum(restricted) == optimum(whole)


def test_a_short_time_limit_gives_a_feasible_placement_with_a_bound_and_a_gap() -> None:
    instance = larger_instance()
    result = partition.solve(instance, "cp-sat", time_limit=0.5, threads=1)
    assert result.status is partition.Status.FEASIBLE
    assert result.evaluation is not None and result.evaluation.valid
    assert 0 < result.lower_bound < result.bottleneck
    assert result.gap is not None and result.gap > 0
    assert result.wall_time < 10


def test_a_warm_start_is_where_the_search_starts_and_never_worse_than_what_it_returns() -> None:
    # No time to search: CP-SAT returns its start, the best of its heuristics and the warm start.
    instance = random_dag_instance(0, 8, hosts=TWO_HOSTS, stages=3, shared_outputs=True)
    optimum = partition.solve(instance, "brute-force")
    cp_sat = get_solver("cp-sat")
    assert cp_sat.capabilities.warm_start
    cold = cp_sat.solve(instance, Settings(time_limit=0.0))
    warm = cp_sat.solve(instance, Settings(time_limit=0.0, warm_start=optimum.placement))
    assert evaluate(instance, cold.placement).bottleneck > 1.5 * optimum.bottleneck
    assert warm.placement == optimum.placement
    searched = cp_sat.solve(instance, Settings(time_limit=30.0, warm_start=optimum.placement))
    assert searched.status is partition.Status.OPTIMAL
    assert evaluate(instance, searched.placement).bottleneck == pytest.approx(optimum.bottleneck, rel=1e-9)


def test_a_bound_proven_before_is_reported_and_counts_for_the_gap_limit() -> None:
    # auto proves the chain or two-tower bound first under a gap limit: CP-SAT's gap counts from it
    instance = random_dag_instance(0, 8, hosts=TWO_HOSTS, stages=3, shared_outputs=True)
    optimum = partition.solve(instance, "brute-force").bottleneck
    cp_sat = get_solver("cp-sat")
    cheap = cp_sat.solve(instance, Settings(time_limit=0.0)).lower_bound
    assert cheap < 0.9 * optimum
    known = cp_sat.solve(instance, Settings(time_limit=0.0, known_bound=optimum)).lower_bound
    assert known == optimum
    # searched, with a gap limit the known bound already proves for the optimum
    found = cp_sat.solve(instance, Settings(time_limit=30.0, gap_limit=0.02, known_bound=optimum / 1.01))
    assert found.lower_bound >= optimum / 1.01
    assert evaluate(instance, found.placement).bottleneck <= optimum / 1.01 * 1.02 * (1 + 1e-6)


def test_proven_infeasible_names_memory() -> None:
    instance = packing_infeasible_instance()
    assert partition.api.infeasibility_reason(instance) is None  # the quick checks pass
    result = partition.solve(instance, "cp-sat", threads=1)
    assert result.status is partition.Status.INFEASIBLE and result.placement is None
    assert "memory" in result.notes[0]


def test_same_answer_with_fixed_seed_and_one_thread() -> None:
    instance = medium_instance()
    first = partition.solve(instance, "cp-sat", time_limit=30, seed=3, threads=1)
    second = partition.solve(instance, "cp-sat", time_limit=30, seed=3, threads=1)
    assert first.status is partition.Status.OPTIMAL
    assert first.placement == second.placement


def test_the_whole_model_is_searched_on_one_worker_and_the_polish_windows_on_every_thread(
    monkeypatch,
) -> None:
    # without its LP one worker proves sooner than CP-SAT's portfolio of two (bert_legacy on
    # A100/L4/T4 at k = 8: 14.8 s against not in 60 s); the windows keep the LP and the threads
    workers = []
    solve = cp_model.CpSolver.Solve

    def recorded(self, model, *args, **kwargs):
        workers.append((self.parameters.num_workers, self.parameters.linearization_level))
        return solve(self, model, *args, **kwargs)

    monkeypatch.setattr(cp_model.CpSolver, "Solve", recorded)
    instance = random_dag_instance(1, 9, hosts=TWO_HOSTS, stages=3, shared_outputs=True)
    result = partition.solve(instance, "cp-sat", time_limit=30, threads=2)
    assert result.status is partition.Status.OPTIMAL and workers and set(workers) == {(1, 0)}
    workers.clear()
    start = get_solver("order-dp").solve(instance, Settings()).placement
    polish(instance, start, Settings(threads=2), time.perf_counter() + 5)
    assert workers and set(workers) == {(2, 1)}


def test_cli_proves_the_optimum_of_a_real_model(tmp_path: Path, capsys) -> None:
    output = tmp_path / "placement.json"
    source = str(LIGHT / "light_squeezenet.onnx")
    arguments = ["solve", source, "--cluster", "hetero-2h100-4a100-2l4", "--stages", "4", "-q"]
    assert main([*arguments, "--solver", "cp-sat", "--time-limit", "60", "-o", str(output)]) == 0
    document = json.loads(output.read_text())
    assert document["status"] == "optimal"
    assert document["bottleneck_s"] == pytest.approx(document["lower_bound_s"], rel=1e-6)
    heuristic = partition.solve(
        partition.make_instance(source, "hetero-2h100-4a100-2l4", 4), "order-dp"
    ).bottleneck
    assert document["bottleneck_s"] <= heuristic * (1 + 1e-9)
    capsys.readouterr()
