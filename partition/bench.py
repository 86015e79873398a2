"""Benchmark: every solver over every instance, in parallel processes, summarised for a reader.

Why it is built this way:

- **One process per job.** Each (instance, solver) pair runs in its own single-worker
  :class:`~concurrent.futures.ProcessPoolExecutor` (``forkserver`` context, the package
  preloaded), driven by ``--jobs`` threads. A solver that segfaults in a native library breaks
  only its own pool and becomes an error row; the worker's peak resident memory
  (``getrusage().ru_maxrss``) is that job's alone (it includes the interpreter and libraries).
- **Every job has its own time limit.** The solver receives it; a solver that ignores it is
  stopped by ``SIGALRM`` at a hard limit (twice the limit plus a grace) and, if stuck in native
  code, by a CPU-time ``rlimit`` shortly after: a ``timeout`` or crash row, never a hung run.
- **Figures are relative to the run.** For each instance the *best found* is the smallest
  bottleneck over all solvers and the *best bound* the largest proven lower bound; every row's
  ratio and gap are measured against them. Per solver, ratios are summarised by geometric
  means (ratios compose multiplicatively; the arithmetic mean would favour a solver that is
  bad on a few instances and good on many), over the instances both sides solved, with the
  count shown.
- **Inputs are paths, directories, globs, peer profiles or ready instances**, so importers
  (e.g. of peer data) can hand :class:`~partition.instance.Instance` objects straight to
  :func:`collect`, and a peer profile is named on the command line as
  ``FORMAT:PROFILE@CLUSTER:K[,K...]`` and imported at run time (the measured peer data stays
  outside the repository; see :func:`peer_instances`).
"""

from __future__ import annotations

import csv
import glob
import io
import math
import multiprocessing
import os
import platform
import resource
import signal
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .api import solve
from .errors import InputError, PartitionError, SolverError
from .importers import FORMATS, import_instance
from .instance import Instance, Options, load_instance
from .jsonio import dumps, require_file, write_atomic
from .solvers import solver_names
from .solvers.base import OPTIMALITY_TOLERANCE

BENCH_SCHEMA = "partition.bench"
BENCH_VERSION = 1
BASELINE_PREFIXES = ("uniform", "balanced", "single")
ERROR = "error"
TIMEOUT = "timeout"
REFUSED = "refused"  # the solver declined the instance (outside its scope, e.g. too many ops)
OUTPUT_FILES = ("results.csv", "results.json", "summary.md")
_INSTANCE_SUFFIXES = (".json", ".json.gz")


@dataclass(frozen=True)
class Entry:
    """One instance to benchmark: a unique label and where it came from."""

    label: str
    instance: Instance
    origin: str


@dataclass(frozen=True)
class Row:
    """What one solver did on one instance, as measured in its worker."""

    instance: str
    num_ops: int
    cluster: str
    device_types: int
    stages: int
    solver: str
    status: str  # a Status value, "timeout", "refused" or "error"
    bottleneck_s: float | None
    lower_bound_s: float | None
    solve_time_s: float
    peak_rss_mb: float | None
    error: str = ""


@dataclass(frozen=True)
class ScoredRow:
    """A row with the figures that need the whole run: best found, best bound, ratio, gap."""

    row: Row
    best_found_s: float | None
    best_bound_s: float | None
    ratio_to_best: float | None
    gap_to_best_bound: float | None


@dataclass(frozen=True)
class SolverSummary:
    solver: str
    instances: int
    solved: int
    optimal: int
    # Placements the solver's own bound proves within the run's gap limit (its optimal ones
    # included): where it stopped early, by design, rather than for want of time.
    proven_within_gap_limit: int
    within_1pct: int
    within_5pct: int
    errors: int
    refused: int
    geomean_ratio_to_best: float | None
    vs_baselines: dict[str, tuple[float | None, int]]  # baseline -> (geomean ratio, instances)
    mean_solve_time_s: float
    max_peak_rss_mb: float | None

    def share(self, count: int) -> float:
        return count / self.instances if self.instances else 0.0


@dataclass(frozen=True)
class BenchResults:
    settings: dict[str, Any]
    machine: dict[str, Any]
    scored: tuple[ScoredRow, ...]
    solvers: tuple[SolverSummary, ...]
    warnings: tuple[str, ...]


# ---------------------------------------------------------------- collecting instances


def _expand(source: str | Path) -> list[Path]:
    text = str(source)
    path = Path(text)
    if path.is_dir():
        found = [p for p in path.rglob("*") if p.is_file() and p.name.endswith(_INSTANCE_SUFFIXES)]
        if not found:
            raise InputError(f"{path}: no instance files (*.json, *.json.gz) in this directory")
        return sorted(found)
    if any(c in text for c in "*?["):
        found = [Path(p) for p in sorted(glob.glob(text, recursive=True)) if Path(p).is_file()]
        if not found:
            raise InputError(f"{text}: no file matches this pattern")
        return found
    require_file(path, "instance")
    return [path]


def _is_peer_spec(text: str) -> bool:
    return text.split(":", 1)[0] in FORMATS and ":" in text and not Path(text).exists()


def peer_instances(spec: str) -> list[Instance]:
    """Instances from ``FORMAT:PROFILE@CLUSTER:K[,K...]``: a peer profile imported on a cluster
    (file or bundled name) at each K (at most K stages), named ``<graph>.<cluster>.k<K>`` like the
    files of ``instances/v1``. The format's default options apply (a single-type profile takes
    the cluster's only device type)."""
    fmt, _, rest = spec.partition(":")
    profile, at, target = rest.rpartition("@")
    cluster, colon, ks = target.rpartition(":")
    try:
        stages = [int(k.strip().removeprefix("k")) for k in ks.split(",")] if colon else []
    except ValueError:
        stages = []
    if not (at and profile and cluster and stages):
        raise InputError(
            f"{spec}: a peer profile is FORMAT:PROFILE@CLUSTER:K[,K...]"
            ", e.g. pipedream:graph.txt@homo-4a100:4"
        )
    instances = []
    for k in stages:
        instance = import_instance(fmt, profile, cluster, Options(stages=k))
        name = f"{instance.graph.name}.{instance.cluster.name}.k{k}"
        instances.append(
            Instance(
                name, instance.graph, instance.cluster, instance.costs, instance.options, instance.source
            )
        )
    return instances


def collect(sources: Iterable[str | Path | Instance]) -> list[Entry]:
    """Instances from files, directories (searched recursively), glob patterns or objects.

    Labels are instance names; two different instances with one name are refused, because
    every figure in the results is keyed by it.
    """
    entries: list[Entry] = []
    seen: dict[str, str] = {}
    for source in sources:
        if isinstance(source, Instance):
            loaded = [(source, f"<object {source.name}>")]
        elif isinstance(source, str) and _is_peer_spec(source):
            loaded = [
                (instance, f"{source} (k={instance.options.stages})") for instance in peer_instances(source)
            ]
        else:
            loaded = [(load_instance(p), str(p)) for p in _expand(source)]
        for instance, origin in loaded:
            if instance.name in seen:
                if seen[instance.name] == origin:
                    continue
                raise InputError(
                    f"two instances are named {instance.name!r} ({seen[instance.name]} and {origin});"
                    " benchmark labels must be unique"
                )
            seen[instance.name] = origin
            entries.append(Entry(instance.name, instance, origin))
    if not entries:
        raise InputError("no instances to benchmark")
    return entries


def check_solvers(names: Sequence[str]) -> list[str]:
    """``names`` if all are registered or ``auto`` (in order, without repeats), else a clear
    error; ``auto`` is benchmarked as users run it (its choice, polish and fallbacks)."""
    valid = [*solver_names(), "auto"]
    unknown = [n for n in names if n not in valid]
    if unknown:
        raise SolverError(f"unknown solver {unknown[0]!r} (registered: {', '.join(valid)})")
    if not names:
        raise SolverError(f"no solvers given (registered: {', '.join(valid)})")
    return list(dict.fromkeys(names))


# ---------------------------------------------------------------- running one job


class _HardTimeout(BaseException):
    """Raised by the alarm; a BaseException so that a solver's ``except Exception`` cannot swallow it."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise _HardTimeout


def hard_limit(time_limit: float) -> float:
    """Wall seconds after which a job is stopped whatever its solver does with the limit."""
    return 2.0 * time_limit + 10.0


def _peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024.0 * 1024.0) if sys.platform == "darwin" else peak / 1024.0


def run_job(
    instance: Instance, solver: str, time_limit: float, threads: int = 1, gap_limit: float = 0.0
) -> Row:
    """Solve in this process with a hard stop; every failure becomes a row, not an exception."""
    limit = hard_limit(time_limit)
    used = resource.getrusage(resource.RUSAGE_SELF)
    # the limit counts the process's CPU time, which its threads spend together
    cpu = math.ceil(used.ru_utime + used.ru_stime + limit * threads) + 5
    cpu_limits = resource.getrlimit(resource.RLIMIT_CPU)
    hard_cpu = cpu_limits[1]
    resource.setrlimit(
        resource.RLIMIT_CPU, (cpu if hard_cpu == resource.RLIM_INFINITY else min(cpu, hard_cpu), hard_cpu)
    )
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    started = time.perf_counter()
    status, bottleneck, bound, error = ERROR, None, None, ""
    try:
        result = solve(instance, solver, time_limit=time_limit, threads=threads, gap_limit=gap_limit)
        status, bottleneck, bound = result.status.value, result.bottleneck, result.lower_bound
        elapsed = result.wall_time
    except _HardTimeout:
        status, error = TIMEOUT, f"stopped at the hard limit of {limit:.0f} s"
    except SolverError as failure:
        status, error = REFUSED, str(failure)
    except PartitionError as failure:
        error = str(failure)
    except Exception as failure:  # a solver bug must not stop the benchmark
        error = f"{type(failure).__name__}: {failure}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        resource.setrlimit(resource.RLIMIT_CPU, cpu_limits)
    if status in (ERROR, TIMEOUT, REFUSED):
        elapsed = time.perf_counter() - started
    return _row(instance, solver, status, bottleneck, bound, elapsed, _peak_rss_mb(), error)


def _row(
    instance: Instance,
    solver: str,
    status: str,
    bottleneck: float | None,
    bound: float | None,
    elapsed: float,
    peak: float | None,
    error: str,
) -> Row:
    return Row(
        instance=instance.name,
        num_ops=len(instance.graph.ops),
        cluster=instance.cluster.name,
        device_types=len(instance.cluster.type_names),
        stages=instance.options.stages,
        solver=solver,
        status=status,
        bottleneck_s=bottleneck,
        lower_bound_s=bound if bound is not None and math.isfinite(bound) else None,
        solve_time_s=elapsed,
        peak_rss_mb=peak,
        error=error,
    )


def _context() -> multiprocessing.context.BaseContext:
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["partition.bench"])
        return context
    return multiprocessing.get_context("spawn")


def _isolated(
    context, instance: Instance, solver: str, time_limit: float, threads: int, gap_limit: float = 0.0
) -> Row:
    """``run_job`` in a fresh process of its own; a dead worker becomes an error row."""
    started = time.perf_counter()
    try:
        with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
            return pool.submit(run_job, instance, solver, time_limit, threads, gap_limit).result()
    except BrokenProcessPool:
        error = "worker process died (crash in native code, or killed at the CPU-time limit)"
    except Exception as failure:  # e.g. the instance cannot be sent to the worker
        error = f"{type(failure).__name__}: {failure}"
    return _row(instance, solver, ERROR, None, None, time.perf_counter() - started, None, error)


class Progress:
    """A one-line progress bar on stderr (a line per job when stderr is not a terminal)."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.done, self.enabled = total, 0, enabled
        self.started = time.perf_counter()
        self._lock = threading.Lock()
        self._tty = sys.stderr.isatty()

    def advance(self, row: Row) -> None:
        with self._lock:
            self.done += 1
            if not self.enabled:
                return
            elapsed = time.perf_counter() - self.started
            what = f"{row.instance} × {row.solver}: {row.status}"
            if self._tty:
                filled = round(30 * self.done / self.total)
                bar = "#" * filled + "." * (30 - filled)
                sys.stderr.write(f"\r[{bar}] {self.done}/{self.total} {elapsed:5.0f}s {what[:60]:<60}")
                if self.done == self.total:
                    sys.stderr.write("\n")
            else:
                sys.stderr.write(f"partition: bench {self.done}/{self.total} ({elapsed:.0f} s) {what}\n")
            sys.stderr.flush()


def run(
    entries: Sequence[Entry],
    solvers: Sequence[str],
    *,
    time_limit: float,
    jobs: int,
    threads: int = 1,
    gap_limit: float = 0.0,
    progress: bool = True,
    command: str = "",
) -> BenchResults:
    """Run every solver on every instance, ``jobs`` at a time with ``threads`` solver threads
    each, each job stopping once proven within ``gap_limit`` (:func:`partition.solve`), and
    score the rows."""
    if time_limit <= 0:
        raise InputError(f"--time-limit must be positive, got {time_limit}")
    if jobs < 1:
        raise InputError(f"--jobs must be at least 1, got {jobs}")
    if threads < 1:
        raise InputError(f"--threads must be at least 1, got {threads}")
    if not 0 <= gap_limit < 1:
        raise InputError(f"--gap-limit must be at least 0 and below 100%, got {gap_limit:g}")
    solvers = check_solvers(solvers)
    pairs = [(e, s) for e in entries for s in solvers]
    bar = Progress(len(pairs), progress)
    context = _context()
    started = time.perf_counter()
    rows: dict[tuple[str, str], Row] = {}
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [
            pool.submit(_isolated, context, e.instance, s, time_limit, threads, gap_limit) for e, s in pairs
        ]
        for future in as_completed(futures):
            row = future.result()
            rows[(row.instance, row.solver)] = row
            bar.advance(row)
    ordered = [rows[(e.label, s)] for e, s in pairs]
    settings = {
        "command": command,
        "solvers": list(solvers),
        "instances": [{"name": e.label, "origin": e.origin} for e in entries],
        "time_limit_s": time_limit,
        "hard_limit_s": hard_limit(time_limit),
        "jobs": jobs,
        "threads": threads,
        "gap_limit": gap_limit,
        "started_utc": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "wall_time_s": time.perf_counter() - started,
    }
    return score(ordered, settings=settings, machine=machine())


# ---------------------------------------------------------------- scoring


def _geomean(values: Sequence[float]) -> float | None:
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _solved(row: Row) -> bool:
    return row.bottleneck_s is not None and math.isfinite(row.bottleneck_s) and row.bottleneck_s > 0


def _proven_within(row: Row, gap_limit: float) -> bool:
    """Whether the row's own bound proves its placement optimal or within ``gap_limit``."""
    if row.status == "optimal":
        return True
    return (
        gap_limit > 0
        and _solved(row)
        and row.lower_bound_s is not None
        and row.bottleneck_s <= row.lower_bound_s * (1 + gap_limit) * (1 + OPTIMALITY_TOLERANCE)
    )


def score(
    rows: Sequence[Row], *, settings: dict[str, Any] | None = None, machine: dict[str, Any] | None = None
) -> BenchResults:
    """Best found and best bound per instance, each row's ratio and gap, per-solver summaries."""
    gap_limit = (settings or {}).get("gap_limit", 0.0)
    instances = list(dict.fromkeys(r.instance for r in rows))
    solvers = list(dict.fromkeys(r.solver for r in rows))
    best_found: dict[str, float | None] = {}
    best_bound: dict[str, float | None] = {}
    warnings = []
    for name in instances:
        mine = [r for r in rows if r.instance == name]
        found = [r.bottleneck_s for r in mine if _solved(r)]
        bounds = [r.lower_bound_s for r in mine if r.lower_bound_s is not None and r.status != ERROR]
        best_found[name] = min(found) if found else None
        best_bound[name] = max(bounds) if bounds else None
        if found and bounds and max(bounds) > min(found) * (1 + OPTIMALITY_TOLERANCE):
            culprit = max((r for r in mine if r.lower_bound_s is not None), key=lambda r: r.lower_bound_s)
            warnings.append(
                f"{name}: solver {culprit.solver!r} claims a lower bound {max(bounds):.6g} s above"
                f" the best placement found ({min(found):.6g} s): a bound is wrong"
            )
    scored = []
    for r in rows:
        found, bound = best_found[r.instance], best_bound[r.instance]
        ok = _solved(r)
        scored.append(
            ScoredRow(
                r,
                found,
                bound,
                r.bottleneck_s / found if ok and found else None,
                r.bottleneck_s / bound - 1.0 if ok and bound else None,
            )
        )
    by_key = {(s.row.instance, s.row.solver): s for s in scored}
    baselines = [s for s in solvers if s.startswith(BASELINE_PREFIXES)]
    summaries = []
    for solver in solvers:
        mine = [s for s in scored if s.row.solver == solver]
        solved = [s for s in mine if _solved(s.row)]
        versus: dict[str, tuple[float | None, int]] = {}
        for baseline in baselines:
            ratios = [
                s.row.bottleneck_s / other.row.bottleneck_s
                for s in solved
                if _solved((other := by_key[(s.row.instance, baseline)]).row)
            ]
            versus[baseline] = (_geomean(ratios), len(ratios))
        peaks = [s.row.peak_rss_mb for s in mine if s.row.peak_rss_mb is not None]
        summaries.append(
            SolverSummary(
                solver=solver,
                instances=len(mine),
                solved=len(solved),
                optimal=sum(s.row.status == "optimal" for s in mine),
                proven_within_gap_limit=sum(_proven_within(s.row, gap_limit) for s in mine),
                within_1pct=sum(
                    s.gap_to_best_bound is not None and s.gap_to_best_bound <= 0.01 for s in mine
                ),
                within_5pct=sum(
                    s.gap_to_best_bound is not None and s.gap_to_best_bound <= 0.05 for s in mine
                ),
                errors=sum(s.row.status in (ERROR, TIMEOUT) for s in mine),
                refused=sum(s.row.status == REFUSED for s in mine),
                geomean_ratio_to_best=_geomean([s.ratio_to_best for s in solved if s.ratio_to_best]),
                vs_baselines=versus,
                mean_solve_time_s=sum(s.row.solve_time_s for s in mine) / len(mine) if mine else 0.0,
                max_peak_rss_mb=max(peaks) if peaks else None,
            )
        )
    return BenchResults(settings or {}, machine or {}, tuple(scored), tuple(summaries), tuple(warnings))


def machine() -> dict[str, Any]:
    """What the figures were measured on, for the summary's header."""
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


# ---------------------------------------------------------------- writing


CSV_COLUMNS = (
    *(f.name for f in fields(Row) if f.name != "error"),
    "best_found_s",
    "best_bound_s",
    "ratio_to_best",
    "gap_to_best_bound",
    "error",
)


def _flat(s: ScoredRow) -> dict[str, Any]:
    flat = asdict(s.row)
    flat.update(
        best_found_s=s.best_found_s,
        best_bound_s=s.best_bound_s,
        ratio_to_best=s.ratio_to_best,
        gap_to_best_bound=s.gap_to_best_bound,
    )
    return {column: flat[column] for column in CSV_COLUMNS}


def results_csv(results: BenchResults) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for s in results.scored:
        writer.writerow(
            {k: "" if v is None else (f"{v:.6g}" if isinstance(v, float) else v) for k, v in _flat(s).items()}
        )
    return buffer.getvalue()


def results_json(results: BenchResults) -> dict[str, Any]:
    return {
        "schema": BENCH_SCHEMA,
        "version": BENCH_VERSION,
        "settings": results.settings,
        "machine": results.machine,
        "baselines": [b for b in (results.solvers[0].vs_baselines if results.solvers else {})],
        "rows": [_flat(s) for s in results.scored],
        "solvers": [
            {
                **{k: v for k, v in asdict(summary).items() if k != "vs_baselines"},
                "vs_baselines": {
                    b: {"geomean_ratio": ratio, "instances": n}
                    for b, (ratio, n) in summary.vs_baselines.items()
                },
            }
            for summary in results.solvers
        ],
        "warnings": list(results.warnings),
    }


def _pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.0f}% ({part}/{whole})" if whole else "n/a"


def _ratio(value: float | None, count: int | None = None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3f}" + (f" (n={count})" if count is not None else "")


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value * 1e3:.4g}"


def _mark(row: Row, gap_limit: float) -> str:
    """The per-instance table's mark: proven optimal, failed, or proven within the gap limit."""
    if row.status == "optimal":
        return "*"
    if row.status in (ERROR, TIMEOUT):
        return "!"
    return "~" if _proven_within(row, gap_limit) else ""


def summary_markdown(results: BenchResults) -> str:
    """The human summary: setup, one row per solver, then one row per instance."""
    settings, host = results.settings, results.machine
    gap_limit = settings.get("gap_limit", 0.0)
    within_limit = f"proven within {100 * gap_limit:g}%"
    baselines = list(results.solvers[0].vs_baselines) if results.solvers else []
    out = ["# Benchmark results", ""]
    if settings:
        out += [
            f"- Run: {settings.get('started_utc', '?')}, wall time {settings.get('wall_time_s', 0):.0f} s,"
            f" `{settings.get('command', '')}`",
            f"- Time limit {settings.get('time_limit_s')} s per job (hard stop"
            f" {settings.get('hard_limit_s')} s), {settings.get('jobs')} parallel jobs,"
            f" {settings.get('threads', 1)} solver thread(s) each"
            + (
                f", gap limit {100 * gap_limit:g}% (a job stops once its own bound proves it)"
                if gap_limit
                else ""
            ),
        ]
    if host:
        out.append(
            f"- Machine: {host['cpu']}, {host['cores']} cores, {host['platform']}, Python {host['python']}"
        )
    firsts = list({s.row.instance: s for s in results.scored}.values())
    closed = sum(
        s.best_found_s is not None
        and s.best_bound_s is not None
        and s.best_found_s <= s.best_bound_s * (1 + OPTIMALITY_TOLERANCE)
        for s in firsts
    )
    out += [
        f"- {len(firsts)} instances × {len(results.solvers)} solvers; {closed} instances closed"
        " (best placement found = best lower bound proved, by any solvers)",
        "",
        "## Per solver",
        "",
        "*Ratio to best*: geometric mean over solved instances of bottleneck / best found by any solver."
        " *vs X*: geometric mean of bottleneck / X's bottleneck over instances both solved (below 1"
        " is better than X). *Within p%*: bottleneck ≤ (1 + p%) × best lower bound of the run."
        " *Optimal*: proven by the solver itself."
        + (
            f" *{within_limit.capitalize()}*: optimal, or within the gap limit by the solver's own bound."
            if gap_limit
            else ""
        )
        + " *Peak MB*: largest resident memory of the"
        " solver's worker process (the interpreter and libraries included).",
        "",
    ]
    header = [
        "solver",
        "solved",
        "optimal",
        *([within_limit] if gap_limit else []),
        "within 1%",
        "within 5%",
        "ratio to best",
        *(f"vs {b}" for b in baselines),
        "mean time s",
        "peak MB",
        "refused",
        "errors",
    ]
    out += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for s in results.solvers:
        cells = [
            f"`{s.solver}`",
            _pct(s.solved, s.instances),
            _pct(s.optimal, s.instances),
            *([_pct(s.proven_within_gap_limit, s.instances)] if gap_limit else []),
            _pct(s.within_1pct, s.instances),
            _pct(s.within_5pct, s.instances),
            _ratio(s.geomean_ratio_to_best, s.solved),
            *(_ratio(*s.vs_baselines[b]) for b in baselines),
            f"{s.mean_solve_time_s:.2f}",
            "—" if s.max_peak_rss_mb is None else f"{s.max_peak_rss_mb:.0f}",
            str(s.refused),
            str(s.errors),
        ]
        out.append("| " + " | ".join(cells) + " |")
    solvers = [s.solver for s in results.solvers]
    by_key = {(s.row.instance, s.row.solver): s for s in results.scored}
    out += [
        "",
        "## Per instance",
        "",
        "Bottleneck in ms; `*` proven optimal,"
        + (" `~` proven within the gap limit," if gap_limit else "")
        + " `!` timeout or error, `—` no placement (`refused`:"
        " outside the solver's scope). Best bound:"
        " the largest lower bound any solver proved.",
        "",
        "| instance | ops | k | best bound ms | " + " | ".join(f"`{s}`" for s in solvers) + " |",
        "|" + "---|" * (4 + len(solvers)),
    ]
    for name in dict.fromkeys(s.row.instance for s in results.scored):
        first = by_key[(name, solvers[0])]
        cells = [name, str(first.row.num_ops), str(first.row.stages), _ms(first.best_bound_s)]
        for solver in solvers:
            r = by_key[(name, solver)].row
            cells.append(_ms(r.bottleneck_s) + _mark(r, gap_limit))
        out.append("| " + " | ".join(cells) + " |")
    problems = [s.row for s in results.scored if s.row.error and s.row.status != REFUSED]
    refusals = [s for s in results.solvers if s.refused]
    if problems or refusals or results.warnings:
        out += ["", "## Errors and warnings", ""]
        out += [f"- {w}" for w in results.warnings]
        out += [f"- `{r.solver}` on {r.instance}: {r.status}: {r.error}" for r in problems]
        for summary in refusals:
            first = next(
                s.row for s in results.scored if s.row.solver == summary.solver and s.row.status == REFUSED
            )
            out.append(
                f"- `{summary.solver}` refused {summary.refused} instances,"
                f" e.g. {first.instance}: {first.error}"
            )
    return "\n".join(out) + "\n"


def check_outputs(directory: str | Path, force: bool) -> Path:
    """The output directory, created if needed; refuse early (before any solving) to overwrite."""
    target = Path(directory)
    if target.exists() and not target.is_dir():
        raise InputError(f"{target}: not a directory")
    if not force:
        for name in OUTPUT_FILES:
            if (target / name).exists():
                raise InputError(f"{target / name}: file exists (use --force to overwrite)")
    target.mkdir(parents=True, exist_ok=True)
    return target


def write(results: BenchResults, directory: str | Path, *, force: bool = False) -> list[Path]:
    """Write ``results.csv``, ``results.json`` and ``summary.md`` atomically into ``directory``."""
    target = check_outputs(directory, force)
    texts = (results_csv(results), dumps(results_json(results)), summary_markdown(results))
    paths = []
    for name, text in zip(OUTPUT_FILES, texts, strict=True):
        write_atomic(target / name, text, overwrite=force)
        paths.append(target / name)
    return paths
