"""``partition bench``: tables with the right columns, hand-checked means, failures as rows."""

from __future__ import annotations

import csv
import json
import math
import multiprocessing
import os
import resource
import signal
import time
from pathlib import Path

import pytest
from conftest import random_dag_instance

import partition
from partition import bench
from partition.cli import bench_cmd, main
from partition.jsonio import dumps, write_atomic
from partition.placement import Status
from partition.solvers import _REGISTRY, Capabilities, Outcome, Scope, Settings, Solver

HOSTS = [{"devices": {"A100-80GB": 2, "L4": 1}, "intra_link": "pcie4"}]
COLUMNS = [
    "instance",
    "num_ops",
    "cluster",
    "device_types",
    "stages",
    "solver",
    "status",
    "bottleneck_s",
    "lower_bound_s",
    "solve_time_s",
    "peak_rss_mb",
    "best_found_s",
    "best_bound_s",
    "ratio_to_best",
    "gap_to_best_bound",
    "error",
]


def _write_instances(folder: Path) -> list[partition.Instance]:
    folder.mkdir()
    instances = [random_dag_instance(seed, 7, hosts=HOSTS, stages=2) for seed in (1, 2)]
    write_atomic(folder / "a.json", dumps(instances[0].to_json()))
    write_atomic(folder / "b.json.gz", dumps(instances[1].to_json()))
    return instances


def test_bench_writes_csv_json_and_summary(tmp_path: Path, capsys) -> None:
    instances = _write_instances(tmp_path / "inst")
    out = tmp_path / "out"
    assert main(["bench", str(tmp_path / "inst"), "--time-limit", "10", "-j", "2", "-o", str(out), "-q"]) == 0
    solvers = partition.solver_names()
    with (out / "results.csv").open() as stream:
        reader = csv.DictReader(stream)
        assert reader.fieldnames == COLUMNS
        rows = list(reader)
    assert len(rows) == 2 * len(solvers)
    assert {(r["instance"], r["solver"]) for r in rows} == {(i.name, s) for i in instances for s in solvers}
    for instance in instances:
        direct = partition.solve(instance, "order-dp")
        row = next(r for r in rows if r["instance"] == instance.name and r["solver"] == "order-dp")
        assert row["status"] == direct.status.value
        assert float(row["bottleneck_s"]) == pytest.approx(direct.bottleneck, rel=1e-5)
        assert float(row["best_bound_s"]) >= direct.lower_bound * (1 - 1e-5)
        assert float(row["peak_rss_mb"]) > 1
    document = json.loads((out / "results.json").read_text())
    assert document["schema"] == "partition.bench" and len(document["rows"]) == len(rows)
    assert {s["solver"] for s in document["solvers"]} == set(solvers)
    summary = (out / "summary.md").read_text()
    assert "## Per solver" in summary and "## Per instance" in summary
    assert all(f"| `{s}` |" in summary for s in solvers)
    # results are never overwritten silently, and the refusal comes before any solving
    capsys.readouterr()
    assert main(["bench", str(tmp_path / "inst"), "-o", str(out), "-q"]) == 2
    assert "file exists" in capsys.readouterr().err


def _row(instance: str, solver: str, status: str, bottleneck: float | None, bound: float | None) -> bench.Row:
    return bench.Row(instance, 10, "c", 1, 2, solver, status, bottleneck, bound, 0.5, 50.0)


def test_geometric_means_hand_checked() -> None:
    rows = [
        _row("i1", "order-dp", "optimal", 1.0, 1.0),
        _row("i1", "uniform", "feasible", 2.0, 0.5),
        _row("i2", "order-dp", "feasible", 3.0, 1.0),
        _row("i2", "uniform", "feasible", 2.0, 1.9),
        _row("i3", "order-dp", "feasible", 4.0, 4.0),
        _row("i3", "uniform", "error", None, None),
    ]
    results = bench.score(rows)
    by = {s.solver: s for s in results.solvers}
    # best found: i1 1, i2 2, i3 4; best bound: i1 1, i2 1.9, i3 4
    assert by["order-dp"].geomean_ratio_to_best == pytest.approx((1.0 * 1.5 * 1.0) ** (1 / 3))
    assert by["uniform"].geomean_ratio_to_best == pytest.approx(math.sqrt(2.0 * 1.0))
    ratio, count = by["order-dp"].vs_baselines["uniform"]
    assert count == 2 and ratio == pytest.approx(math.sqrt(0.5 * 1.5))
    assert by["uniform"].vs_baselines["uniform"] == (pytest.approx(1.0), 2)
    assert (by["order-dp"].optimal, by["order-dp"].within_1pct, by["order-dp"].within_5pct) == (1, 2, 2)
    assert (by["uniform"].within_1pct, by["uniform"].within_5pct, by["uniform"].errors) == (0, 0, 1)
    assert by["uniform"].solved == 2 and by["order-dp"].solved == 3
    gaps = {(s.row.instance, s.row.solver): s.gap_to_best_bound for s in results.scored}
    assert gaps[("i2", "uniform")] == pytest.approx(2.0 / 1.9 - 1)
    summary = bench.summary_markdown(results)
    assert "vs uniform" in summary and "2 instances closed" in summary
    assert not results.warnings


def test_placements_proven_within_the_gap_limit_are_counted_and_marked() -> None:
    rows = [
        _row("i1", "order-dp", "optimal", 1.0, 1.0),
        _row("i1", "uniform", "feasible", 1.2, 0.5),
        _row("i2", "order-dp", "feasible", 1.04, 1.0),  # its own bound proves 4% ≤ 5%
        _row("i2", "uniform", "error", None, None),
        _row("i3", "order-dp", "feasible", 1.06, 1.0),  # the run's best bound would, not its own
        _row("i3", "uniform", "feasible", 1.06, 1.03),
    ]
    within = bench.score(rows, settings={"gap_limit": 0.05})
    assert {s.solver: s.proven_within_gap_limit for s in within.solvers} == {"order-dp": 2, "uniform": 1}
    summary = bench.summary_markdown(within)
    assert "gap limit 5%" in summary and "| proven within 5% |" in summary
    assert "| 1000* | 1200 |" in summary and "| 1040~ | —! |" in summary and "| 1060 | 1060~ |" in summary
    plain = bench.summary_markdown(bench.score(rows, settings={"gap_limit": 0.0}))
    assert "proven within" not in plain and "~" not in plain


def test_a_bound_above_a_placement_is_flagged() -> None:
    results = bench.score([_row("i", "a", "feasible", 1.0, 0.5), _row("i", "b", "feasible", 2.0, 1.5)])
    assert len(results.warnings) == 1 and "'b'" in results.warnings[0]


class _Failing(Solver):
    name = "failing"
    capabilities = Capabilities(scope=Scope.HEURISTIC)
    behaviour = "raise"

    def solve(self, instance, settings) -> Outcome:
        if self.behaviour == "raise":
            raise ValueError("solver bug")
        if self.behaviour == "crash":
            os.kill(os.getpid(), signal.SIGKILL)  # as a segfault would, without its core dump
        if self.behaviour == "hang":
            time.sleep(30)
        return Outcome(None, Status.NO_SOLUTION)


@pytest.mark.parametrize(
    ("behaviour", "status", "message"),
    [("raise", "error", "ValueError: solver bug"), ("hang", "timeout", "hard limit")],
)
def test_a_raising_or_hanging_solver_is_a_row(monkeypatch, behaviour: str, status: str, message: str) -> None:
    monkeypatch.setitem(_REGISTRY, "failing", _Failing)
    monkeypatch.setattr(_Failing, "behaviour", behaviour)
    monkeypatch.setattr(bench, "hard_limit", lambda limit: 0.5)
    row = bench.run_job(random_dag_instance(1, 5, hosts=HOSTS, stages=2), "failing", 0.1)
    assert row.status == status and message in row.error and row.bottleneck_s is None


class _Recording(_Failing):
    """Records the settings each job hands it."""

    name = "recording"
    seen: list[Settings] = []

    def solve(self, instance, settings) -> Outcome:
        self.seen.append(settings)
        return Outcome(None, Status.NO_SOLUTION)


def test_a_jobs_threads_reach_its_solver_and_its_cpu_limit(monkeypatch, tmp_path: Path, capsys) -> None:
    # two threads spend the job's CPU time twice as fast: its CPU-time limit is twice as far
    monkeypatch.setitem(_REGISTRY, "recording", _Recording)
    monkeypatch.setattr(_Recording, "seen", [])  # the class's list, fresh for each run
    limits: list[int] = []
    monkeypatch.setattr(bench.resource, "setrlimit", lambda kind, pair: limits.append(pair[0]))
    instance = random_dag_instance(1, 5, hosts=HOSTS, stages=2)
    for threads in (1, 2):
        bench.run_job(instance, "recording", 10.0, threads)
    assert [settings.threads for settings in _Recording.seen] == [1, 2]
    spent = bench.hard_limit(10.0)
    assert limits[2] - limits[0] == pytest.approx(spent, abs=2)  # each job sets it, then restores it
    _write_instances(tmp_path / "inst")
    assert main(["bench", str(tmp_path / "inst"), "--threads", "0", "-o", str(tmp_path / "o")]) == 2
    assert "--threads must be at least 1, got 0" in capsys.readouterr().err


def test_a_gap_limit_reaches_every_job_and_the_results(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setitem(_REGISTRY, "recording", _Recording)
    monkeypatch.setattr(_Recording, "seen", [])
    bench.run_job(random_dag_instance(1, 5, hosts=HOSTS, stages=2), "recording", 10.0, 1, 0.05)
    assert [settings.gap_limit for settings in _Recording.seen] == [0.05]
    _write_instances(tmp_path / "inst")
    out = tmp_path / "o"
    command = ["bench", str(tmp_path / "inst"), "--solvers", "uniform", "--gap-limit", "5%", "-o", str(out)]
    assert main([*command, "-q"]) == 0
    settings = json.loads((out / "results.json").read_text())["settings"]
    assert settings["gap_limit"] == 0.05 and settings["command"].endswith("--gap-limit 0.05")


@pytest.mark.parametrize(("cores", "jobs", "threads"), [(2, 2, 1), (2, 1, 2), (8, 3, 2), (1, 4, 1)])
def test_a_jobs_threads_share_the_usable_cores_unless_told(
    monkeypatch, tmp_path: Path, cores: int, jobs: int, threads: int
) -> None:
    monkeypatch.setattr(bench_cmd, "usable_cores", lambda: cores)
    _write_instances(tmp_path / "inst")
    out = tmp_path / "o"
    command = ["bench", str(tmp_path / "inst"), "--solvers", "uniform", "--jobs", str(jobs), "-o", str(out)]
    assert main([*command, "-q"]) == 0
    assert json.loads((out / "results.json").read_text())["settings"]["threads"] == threads


def test_auto_is_benchmarked_as_users_run_it() -> None:
    assert bench.check_solvers(["auto", "order-dp"]) == ["auto", "order-dp"]
    row = bench.run_job(random_dag_instance(1, 5, hosts=HOSTS, stages=2), "auto", 5.0)
    assert row.status in ("optimal", "feasible") and row.bottleneck_s > 0 and row.solver == "auto"


def test_a_crashing_solver_is_a_row_not_a_crash(monkeypatch) -> None:
    monkeypatch.setitem(_REGISTRY, "failing", _Failing)
    monkeypatch.setattr(_Failing, "behaviour", "crash")
    fork = multiprocessing.get_context("fork")  # the child sees the patched registry
    row = bench._isolated(fork, random_dag_instance(1, 5, hosts=HOSTS, stages=2), "failing", 5.0, 1)
    assert row.status == "error" and "worker process died" in row.error


def test_bad_arguments_are_one_clear_line(tmp_path: Path, capsys) -> None:
    _write_instances(tmp_path / "inst")
    assert (
        main(["bench", str(tmp_path / "inst"), "--solvers", "order-dp,magic", "-o", str(tmp_path / "o")]) == 2
    )
    error = capsys.readouterr().err
    assert "unknown solver 'magic'" in error and "order-dp" in error
    assert main(["bench", str(tmp_path / "nothing" / "*.json.gz"), "-o", str(tmp_path / "o")]) == 2
    assert "no file matches" in capsys.readouterr().err
    write_atomic(tmp_path / "inst" / "copy.json", (tmp_path / "inst" / "a.json").read_text())
    assert main(["bench", str(tmp_path / "inst"), "-o", str(tmp_path / "o")]) == 2
    assert "two instances are named" in capsys.readouterr().err


class _Tiny(_Failing):
    name = "tiny"
    capabilities = Capabilities(scope=Scope.HEURISTIC, max_ops=2)


def test_a_solver_outside_its_scope_refuses(monkeypatch) -> None:
    monkeypatch.setitem(_REGISTRY, "tiny", _Tiny)
    row = bench.run_job(random_dag_instance(1, 5, hosts=HOSTS, stages=2), "tiny", 1.0)
    assert row.status == "refused" and "at most 2 ops" in row.error
    summary = bench.summary_markdown(bench.score([row]))
    assert "`tiny` refused 1 instances" in summary


def test_run_job_leaves_the_calling_process_as_it_found_it() -> None:
    limits, handler = resource.getrlimit(resource.RLIMIT_CPU), signal.getsignal(signal.SIGALRM)
    row = bench.run_job(random_dag_instance(1, 5, hosts=HOSTS, stages=2), "order-dp", 1.0)
    assert row.status in ("optimal", "feasible") and row.bottleneck_s > 0
    assert resource.getrlimit(resource.RLIMIT_CPU) == limits and signal.getsignal(signal.SIGALRM) is handler
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_peer_profiles_are_imported_at_run_time(tmp_path: Path) -> None:
    shared = Path(__file__).resolve().parents[1].parent / "shared"
    profile = shared / "peers/pipedream/profiler/image_classification/profiles/alexnet/graph.txt"
    if not profile.is_file():
        pytest.skip("../shared/peers is absent")
    entries = bench.collect([f"pipedream:{profile}@homo-4a100:2,k3"])
    assert [e.label for e in entries] == [
        "pipedream-alexnet.homo-4a100.k2",
        "pipedream-alexnet.homo-4a100.k3",
    ]
    assert [e.instance.options.stages for e in entries] == [2, 3]
    assert entries[0].instance.source["format"] == "pipedream"
    out = tmp_path / "out"
    assert (
        main(["bench", f"pipedream:{profile}@homo-4a100:2", "--solvers", "order-dp", "-o", str(out), "-q"])
        == 0
    )
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert [r["instance"] for r in rows] == ["pipedream-alexnet.homo-4a100.k2"] and rows[0][
        "bottleneck_s"
    ] > 0
    with pytest.raises(partition.PartitionError, match="FORMAT:PROFILE@CLUSTER"):
        bench.collect([f"pipedream:{profile}"])
