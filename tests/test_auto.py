"""``auto``: which solver it picks, and that it spends time ideal-dp leaves on CP-SAT."""

from __future__ import annotations

import re
import threading
import time

import pytest
from conftest import LIGHT, TWO_HOSTS, random_dag_instance

import partition
from partition.api import _auto_shares, _choose_solver, _ideal_dp_seconds, _polish_with_lns
from partition.evaluator import evaluate
from partition.instance import Instance
from partition.placement import Placement
from partition.solvers import Outcome, Settings, get_solver
from partition.solvers.anytime import Anytime
from partition.solvers.cp_sat import CpSat
from partition.solvers.lns import PolishReport


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


def test_auto_runs_cp_sat_on_t5_at_few_stages_and_anytime_at_many() -> None:
    # T5-small (600 ops, too many ideals for ideal-dp): CP-SAT's stage indices, ops × stages,
    # stay few at k = 4 (it proves the optimum there), not at k = 8.
    few = partition.load_instance("instances/v1/t5_small.hetero-a100-l4-t4.k4.json.gz")
    many = partition.load_instance("instances/v1/t5_small.hetero-a100-l4-t4.k8.json.gz")
    assert _choose_solver(few)[0] == "cp-sat"
    assert _choose_solver(many)[0] == "anytime"


def test_a_proof_of_cp_sat_ends_auto_though_its_bound_sits_past_the_tolerance() -> None:
    # T5 over four device types at k = 2: CP-SAT proves the optimum in under a second, but its
    # model rounds every term down and the bound lies 1.6e-6 below the placement; the polish and
    # the two-tower bound then took the rest of the limit for nothing.
    instance = partition.load_instance("instances/v1/t5_small.hetero-h200-h100-a100-v100.k2.json.gz")
    result = partition.solve(instance, time_limit=20)
    assert result.solver == "cp-sat" and result.status is partition.Status.OPTIMAL
    assert result.bottleneck > result.lower_bound * (1 + 1e-6)
    assert not any(note.startswith(("auto: lns", "bound:")) for note in result.notes)


def test_cp_sat_proving_ideal_dp_s_placement_optimal_ends_auto(monkeypatch) -> None:
    # ideal-dp stops above its bound on this DAG (mixed links); CP-SAT, from its placement,
    # proves that placement optimal with a bound rounded a little further down than the
    # tolerance: the result is optimal, and nothing is polished after the proof.
    instance = random_dag_instance(1, 9, hosts=TWO_HOSTS, stages=3, shared_outputs=True)

    def proves_its_start(self, instance, settings):
        bottleneck = evaluate(instance, settings.warm_start).bottleneck
        return Outcome(settings.warm_start, partition.Status.OPTIMAL, bottleneck / (1 + 2e-6))

    monkeypatch.setattr(CpSat, "solve", proves_its_start)
    result = partition.solve(instance, time_limit=30)
    assert result.solver == "ideal-dp" and result.status is partition.Status.OPTIMAL
    assert "auto: cp-sat proved it optimal" in result.notes
    assert not any(note.startswith("auto: lns") for note in result.notes)


def _cp_sat_route(monkeypatch, outcome_of) -> tuple[Instance, Placement]:
    """A small DAG that ``auto`` sends to CP-SAT, whose solve returns ``outcome_of(the instance,
    its uniform split, the settings it is given)``; the instance and that split."""
    instance = random_dag_instance(3, 14, hosts=TWO_HOSTS, stages=3, shared_outputs=True)
    uniform = get_solver("uniform").solve(instance, Settings()).placement
    monkeypatch.setattr(
        CpSat, "solve", lambda self, instance, settings: outcome_of(instance, uniform, settings)
    )
    monkeypatch.setattr("partition.api._choose_solver", lambda instance, limit: ("cp-sat", "auto: cp-sat"))
    return instance, uniform


def test_cp_sat_that_proves_nothing_in_its_share_leaves_the_rest_to_anytime(monkeypatch) -> None:
    # CP-SAT (here returning its start unproven at once) gets 60% of the solver's time; the
    # anytime search gets the rest, and the better placement and the larger bound are kept.
    limits = []

    def unproven(instance, uniform, settings):
        limits.append(settings.time_limit)
        return Outcome(uniform, partition.Status.FEASIBLE, 0.0, ("cp-sat: FEASIBLE",))

    instance, uniform = _cp_sat_route(monkeypatch, unproven)
    result = partition.solve(instance, time_limit=5)
    alone = partition.solve(instance, "anytime", time_limit=5)
    assert limits == [pytest.approx(0.6 * 0.9 * 5, rel=0.05)]
    assert result.solver == "anytime" and "auto: anytime improved on cp-sat" in result.notes
    assert "cp-sat: FEASIBLE" in result.notes
    assert result.bottleneck <= evaluate(instance, uniform).bottleneck
    assert result.bottleneck == pytest.approx(alone.bottleneck)
    assert result.lower_bound >= alone.lower_bound * (1 - 1e-9)


def test_a_crash_of_the_search_after_cp_sat_keeps_cp_sat_s_placement(monkeypatch) -> None:
    def crash(self, instance, settings):
        raise RuntimeError("boom")

    instance, uniform = _cp_sat_route(
        monkeypatch, lambda _, uniform, __: Outcome(uniform, partition.Status.FEASIBLE)
    )
    monkeypatch.setattr(Anytime, "solve", crash)
    result = partition.solve(instance, time_limit=5)
    assert result.solver == "cp-sat"  # its placement, then polished by the time left
    assert result.bottleneck <= evaluate(instance, uniform).bottleneck
    assert "auto: anytime after cp-sat failed (RuntimeError: boom)" in result.notes


def test_cp_sat_within_the_gap_limit_is_not_followed_by_anytime(monkeypatch) -> None:
    def within_the_limit(instance, uniform, settings):
        bottleneck = evaluate(instance, uniform).bottleneck
        return Outcome(uniform, partition.Status.FEASIBLE, bottleneck / 1.01, ("cp-sat: OPTIMAL",))

    instance, uniform = _cp_sat_route(monkeypatch, within_the_limit)
    bottleneck = evaluate(instance, uniform).bottleneck
    result = partition.solve(instance, time_limit=5, gap_limit=0.02)
    assert result.solver == "cp-sat" and result.bottleneck == bottleneck
    assert not any("anytime" in note for note in result.notes)


def test_under_a_gap_limit_cp_sat_starts_from_the_structural_bound(monkeypatch) -> None:
    # the chain or two-tower bound, computed first, is the bound CP-SAT's gap limit counts from:
    # a limit it proves for CP-SAT's first placements ends CP-SAT there, and nothing runs after
    events: list[tuple[str, float]] = []

    def honouring(instance, uniform, settings):
        events.append(("cp-sat", settings.known_bound))
        return Outcome(uniform, partition.Status.FEASIBLE, settings.known_bound, ("cp-sat: FEASIBLE",))

    instance, uniform = _cp_sat_route(monkeypatch, honouring)
    proven = evaluate(instance, uniform).bottleneck / 1.015

    def structural(instance, upper, **options):
        events.append(("bound", upper))
        return proven, "two-tower relaxation"

    monkeypatch.setattr("partition.api.structural_lower_bound", structural)
    result = partition.solve(instance, time_limit=5, gap_limit=0.02)
    assert [what for what, _ in events] == ["bound", "cp-sat"] and events[1][1] == proven
    assert result.solver == "cp-sat" and result.lower_bound == proven
    assert f"bound: two-tower relaxation, {proven * 1e3:.6g} ms" in result.notes
    assert not any("anytime" in note for note in result.notes)
    # without a gap limit CP-SAT searches first, from the cheap bounds
    events.clear()
    partition.solve(instance, time_limit=5)
    assert events[0][0] == "cp-sat" and events[0][1] < proven
    # CP-SAT chosen by the caller gets the bound first as well
    events.clear()
    chosen = partition.solve(instance, "cp-sat", time_limit=5, gap_limit=0.02)
    assert [what for what, _ in events] == ["bound", "cp-sat"] and events[1][1] == proven
    assert chosen.lower_bound == proven


def test_the_anytime_search_that_bounds_two_towers_itself_gets_the_limit(monkeypatch) -> None:
    # On a graph of two towers it bounds itself (up to 5 000 ops) the anytime search leaves no
    # tenth of the limit for another turn of the structural bound after it, which proved nothing
    # there; that turn comes only when the search ends early, in the time it left. Elsewhere (the
    # chain bound's finer passes may need it) the tenth stays.
    instance = random_dag_instance(3, 14, hosts=TWO_HOSTS, stages=3, shared_outputs=True)
    uniform = get_solver("uniform").solve(instance, Settings()).placement
    limits, bounds, spend, two = [], [], [True], [True]

    def searching(self, instance, settings):
        limits.append(settings.time_limit)
        if spend[0]:
            time.sleep(settings.time_limit)
        return Outcome(uniform, partition.Status.FEASIBLE, 0.0, ("anytime: stub",))

    def structural(instance, upper, **options):
        bounds.append(upper)
        return 0.0, ""

    monkeypatch.setattr(Anytime, "solve", searching)
    monkeypatch.setattr("partition.api.structural_lower_bound", structural)
    monkeypatch.setattr(
        "partition.solvers.anytime.bounded_towers", lambda instance: object() if two[0] else None
    )
    limit, upper = 1.0, evaluate(instance, uniform).bottleneck
    result = partition.solve(instance, "anytime", time_limit=limit)
    assert 0.9 * limit < limits[-1] <= 0.98 * limit and not bounds
    assert result.placement == uniform
    two[0] = False  # one tower: the bound's tenth stays, and its turn after the search
    partition.solve(instance, "anytime", time_limit=limit)
    assert limits[-1] <= 0.9 * limit and bounds == [upper]
    spend[0], two[0] = False, True  # the search ends at once: the bound gets the time it left
    bounds.clear()
    partition.solve(instance, "anytime", time_limit=limit)
    assert bounds == [upper]


def test_auto_runs_anytime_where_the_chain_bound_is_close_and_cp_sat_where_it_is_not() -> None:
    # Below 500 ops and past ideal-dp's ideal limit: on Inception-v2 at k = 16 the chain bound
    # is within 11% of the best heuristic placement and CP-SAT only walks its warm start; on
    # Mixtral across four device types the heuristic is 54% above the bound and CP-SAT proves
    # the optimum. The probe leaves out the chain rounding, which on Mixtral over H100/A100
    # lies within 20% of the bound and would send it to anytime (its proof 6.1 s at a 10-s
    # limit against CP-SAT's 3.0 s).
    close = partition.load_instance("instances/v1/light-inception_v2.homo-16v100.k16.json.gz")
    far = partition.load_instance("instances/v1/mixtral_moe.hetero-h200-h100-a100-v100.k8.json.gz")
    rounded_close = partition.load_instance("instances/v1/mixtral_moe.hetero-h100-a100.k8.json.gz")
    name, why = _choose_solver(close)
    assert name == "anytime" and "dominator-chain bound" in why
    assert _choose_solver(far)[0] == "cp-sat"
    assert _choose_solver(rounded_close)[0] == "cp-sat"


def test_ideal_dp_gets_most_of_a_minute_and_leaves_the_polish_seconds_under_a_short_limit() -> None:
    assert _ideal_dp_seconds(54.0) == 0.55 * 54.0  # a minute's solver time: the share
    assert _ideal_dp_seconds(6.5) == 3.5  # three seconds kept for CP-SAT, the polish, the bound
    assert _ideal_dp_seconds(4.5) == 2.25  # never less than half
    assert _ideal_dp_seconds(54.0, 0.25) == 0.25 * 54.0
    assert _ideal_dp_seconds(4.5, 0.25) == 0.25 * 4.5  # nor less than a smaller share


def test_cp_sat_gets_most_of_the_time_where_its_model_is_small() -> None:
    # BERT at k = 8: 3 392 stage indices, where CP-SAT proves the optimum from ideal-dp's
    # placement in seconds; at k = 16 CP-SAT never improved it, and the polish gets what
    # ideal-dp leaves.
    small = partition.load_instance("instances/v1/bert_legacy.hetero-h100-a100.k8.json.gz")
    large = partition.load_instance("instances/v1/bert_legacy.2x8a100.k16.json.gz")
    assert _auto_shares(small) == (0.25, 0.8)
    assert _auto_shares(large) == (0.55, 0.0)


def test_cp_sat_after_ideal_dp_starts_from_its_placement(monkeypatch) -> None:
    instance = random_dag_instance(1, 9, hosts=TWO_HOSTS, stages=3, shared_outputs=True)
    starts = []
    solve = CpSat.solve

    def recorded(self, instance, settings):
        starts.append(settings.warm_start)
        return solve(self, instance, settings)

    monkeypatch.setattr(CpSat, "solve", recorded)
    auto = partition.solve(instance, time_limit=30)
    alone = partition.solve(instance, "ideal-dp")
    assert starts and starts[0] == alone.placement
    assert auto.status is partition.Status.OPTIMAL


def test_the_polish_also_starts_from_the_compute_balanced_split() -> None:
    # Where the polish ends depends on where it starts: on bert_legacy over 2 x 8 A100 at k = 16
    # the order DP's split (0.3328 ms) settled at 0.2844 ms, the compute-balanced one (0.3128)
    # at 0.27548 ms within 5 s; auto keeps the better of the two. With the faster window models
    # (session 38) the order DP's start may reach 0.27548 too in its 8 s, with a lower latency.
    instance = partition.load_instance("instances/v1/bert_legacy.2x8a100.k16.json.gz")
    start = get_solver("order-dp").solve(instance, Settings()).placement
    first = Outcome(start, partition.Status.FEASIBLE, 0.0)
    outcome, notes = _polish_with_lns(instance, first, 0.0, Settings(), time.perf_counter() + 16)
    # within 0.5%: on a loaded machine the 16 s end a little short of it (0.27565, 0.27669 ms
    # seen), while the order DP's start alone settles 3% above
    assert evaluate(instance, outcome.placement).bottleneck <= 0.27548e-3 * 1.005
    ends = {}
    for note in notes:
        found = re.search(r"→ (\S+) s \(latency \S+ s → (\S+) s\) \(from (.+)\)$", note)
        if found:
            ends[found[3]] = (float(found[1]), float(found[2]))
    assert set(ends) == {"the solver's placement", "balanced-time"}
    assert notes[-1] == f"auto: lns: kept the polish of {min(ends, key=ends.__getitem__)}"


def test_with_two_threads_every_start_is_polished_at_once_until_the_deadline(monkeypatch) -> None:
    # in turn each start gets a share of the time; with a second thread they share the cores
    # instead, each polished to the end (the barrier breaks unless both run together)
    instance = partition.load_instance("instances/v1/bert_legacy.2x8a100.k16.json.gz")
    start = get_solver("order-dp").solve(instance, Settings()).placement
    first = Outcome(start, partition.Status.FEASIBLE, 0.0)
    together, left = threading.Barrier(2, timeout=10.0), []

    def recording(instance, start, settings, deadline, *args, **kwargs):
        together.wait()
        left.append(deadline - time.perf_counter())
        return PolishReport(start, False, 1, ("lns: recorded",))

    monkeypatch.setattr("partition.solvers.lns.polish", recording)
    _, notes = _polish_with_lns(instance, first, 0.0, Settings(threads=2), time.perf_counter() + 16)
    assert len(left) == 2 and all(seconds == pytest.approx(16, abs=1) for seconds in left)
    assert notes[:2] == (
        "auto: lns: recorded (from the solver's placement)",
        "auto: lns: recorded (from balanced-time)",
    )


def test_a_short_polish_goes_to_the_best_ranked_start_rather_than_to_none() -> None:
    # Under 2 s no start would get its 1-s share, and auto used to return the solver's split
    # unpolished (BERT over 2 x 8 A100 at k = 16 in 3 s: the uniform split, 18% above its bound,
    # after 1.7 s); the compute-balanced split (0.3128 ms, better than the order DP's 0.3328)
    # takes the whole time instead.
    instance = partition.load_instance("instances/v1/bert_legacy.2x8a100.k16.json.gz")
    start = get_solver("order-dp").solve(instance, Settings()).placement
    first = Outcome(start, partition.Status.FEASIBLE, 0.0)
    outcome, notes = _polish_with_lns(instance, first, 0.0, Settings(), time.perf_counter() + 1.9)
    assert len(notes) == 1 and notes[0].endswith("(from balanced-time)")
    assert evaluate(instance, outcome.placement).bottleneck < 0.3127e-3
