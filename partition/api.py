"""The library's entry points: build an instance from any source, solve it, report it.

:func:`solve` is where solver output meets the independent evaluator: the solver proposes, the
evaluator checks and measures, and the result carries the best lower bound from every source.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from .aggregate_bound import aggregate_lower_bound
from .bounds import trivial_lower_bound
from .chain_bound import reuse, rules_out
from .cluster import Cluster, load_cluster
from .errors import InfeasibleError, InputError, PartitionError, SolverError
from .evaluator import evaluate
from .graph import Op, OpGraph, Tensor
from .instance import CommMode, Instance, Options, build_instance, load_instance
from .placement import Placement, Result, Status
from .solvers import Outcome, Scope, Settings, get_solver
from .solvers.base import OPTIMALITY_TOLERANCE
from .solvers.ideal_dp import ideal_count, incumbents
from .tower_bound import structural_lower_bound

# ideal-dp takes ~15 s at 2 700 ideals and grows about quadratically; bert_legacy's 3 203 ideals:
# 8-25 s, and a proven bound far above CP-SAT's (bench/towers.md)
_AUTO_IDEAL_LIMIT = 4_000
_AUTO_ANYTIME_OPS = 2_000  # beyond this the CP-SAT model (ops × stages booleans) is too slow to help
_ORDER_DP_OPS = 4_000  # the order DP's dense (n+1)² tables
AUTO_TIME_LIMIT = 60.0  # seconds ``auto`` spends when the user gives no limit
_MIN_POLISH_SECONDS = 1.0  # below this CP-SAT rarely gets past building its model
# Above this many ops CP-SAT's whole model rarely improves its warm start in a minute (CLIP, T5:
# bench/lns_measurements.md): ``auto`` runs anytime there (it ends with the large-neighbourhood
# polish) instead of CP-SAT, unless the model's stage indices (ops × stages) stay this few: at
# k ≤ 4, CP-SAT proves CLIP and T5 optimal at k = 2 in seconds and T5 at k = 4 (bench/towers.md).
_AUTO_CP_SAT_OPS = 500
_AUTO_CP_SAT_CELLS = 4_000
# Below that many ops, CP-SAT still only walks its warm start on Inception-v2 at k = 8 and 16
# (371 ops, 7 392 ideals per block: 0.1711 ms at 60 s on 16 × V100 at k = 16 against anytime's
# 0.1575), where the best heuristic placement is at most 11% above the dominator-chain bound, so the
# placement search is what is left; on Mixtral across device types the heuristic is 37-54% above
# that bound and CP-SAT's search proves the optimum (4.5 s alone since it runs without the LP;
# 28-51 s before). So from this many stage indices,
# auto runs anytime when the chain bound rules out every bottleneck this far below the heuristic's.
_AUTO_CHAIN_CELLS = 2_000
_AUTO_CHAIN_CLOSE = 1.2
# Under auto, ideal-dp gets a share of the solver's time, CP-SAT (started from ideal-dp's
# placement) a share of the rest, and the large-neighbourhood polish what is left, up to the
# time limit. Where CP-SAT's whole model is small (ops x stages at most _AUTO_CP_SAT_CELLS), CP-SAT
# from that start often proves the optimum in seconds, which no level of ideal-dp can where links
# differ (BERT at k = 8 on mixed types: 1.5-12.5 s), so there ideal-dp gets less and CP-SAT most of
# the rest (bench/scoreboard.md: bert_legacy on H100/A100 2.15% -> optimal). Since CP-SAT's search
# runs without its LP, ideal-dp's richer levels there mostly delay that proof: its share 40% ->
# 25% took the 15 ideal-dp instances of the zoo on mixed types at k = 8 from 342 to 262 s to
# their proofs at 60 s (bench/scoreboard.md, *ideal-dp's share*). Above it, of the 18
# ideal-dp instances of the zoo at k = 8 and 16 only BERT on 2 x 8 A100 at k = 16 is not proven
# optimal in seconds; there CP-SAT never improved ideal-dp's placement and the polish does, given
# time (bert_legacy: 0.28462 -> 0.27548 ms after 18 s, or from the compute-balanced split, see
# _polish_with_lns, in 5 s), while ideal-dp's bound levels end by about 30 s: so ideal-dp gets
# 55% and the polish the rest (bert_base 3.41% -> 1.99%). See _ideal_dp_seconds for short limits.
_AUTO_IDEAL_DP_SHARE = 0.55
_AUTO_CP_SAT_SHARE = 0.0
_AUTO_SMALL_IDEAL_DP_SHARE = 0.25
_AUTO_SMALL_CP_SAT_SHARE = 0.8
# Where auto runs CP-SAT on the whole model, CP-SAT gets this share of the solver's time and, unless
# it proved the optimum, anytime the rest. Of the 51 zoo instances auto sends there, the 46 proofs
# come within 26.4 s of a minute's 54 (Inception-v2 over H100/A100 at k = 4; most within 10), and
# where none comes CP-SAT creeps down its objective while anytime's search and polish from the
# two-tower witness do better: CLIP at k = 4 over H100/A100 1.82% -> 1.04%, over A100/L4/T4
# 1.33% -> 0.81%, T5 over the bundled hetero-2h100-4a100-2l4 3.42% -> 1.89% (bench/scoreboard.md,
# *CP-SAT's share where it runs alone*).
_AUTO_CP_SAT_ROUTE_SHARE = 0.6
_AUTO_IDEAL_DP_LEAVES = 3 * _MIN_POLISH_SECONDS  # for CP-SAT, the polish and the bound ...
_AUTO_IDEAL_DP_FLOOR = 0.5  # ... unless that leaves ideal-dp less than this share
_STRUCTURAL_BOUND_SHARE = 0.1  # of the time limit (4 s without one) for the chain or two-tower bound
_UNUSED_SHARE = 0.9  # of the time anytime left, for those bounds (the rest: the evaluation)
# The anytime search proves those bounds itself on the graphs it bounds (up to 5 000 ops), the
# second time with the time its polish leaves. On graphs of two towers another turn after it, in
# the last tenth of the limit, raised none of the 16 CLIP and T5 bounds at k = 8 and 16 under
# auto at 60 s (their relaxations had converged, or a probe of 5-7 s was stopped at the limit)
# and left up to 6 s unused. There the search gets the limit but for the evaluation: same
# bounds, three placements better (CLIP on 8 H100 at k = 8 1.80% -> 1.64%). The chain bound's
# finer passes may not fit the search's turn, and a turn after it, below the polished placement,
# finishes them (Inception-v2 over H100/A100 at k = 8 under 10 s: 0.22006 -> 0.23740 ms, the
# optimum): kept there. After the search, the bound gets a turn only when it left at least this
# share of the limit (its polish ran out of windows).
_BOUNDED_BY_THE_SEARCH = _STRUCTURAL_BOUND_SHARE
# The polish under auto also starts from these baselines' splits (see _polish_with_lns), where
# they are at most this much slower than the solver's placement: on BERT over 2 x 8 A100 at k = 16
# balanced-time's is 5-7% slower and polishes better; over A100/L4/T4 at k = 8 it is 31% slower
# (it ignores that devices differ) and its polish stays 19% above the solver's.
_AUTO_POLISH_STARTS = ("balanced-time",)
_AUTO_POLISH_START_SLACK = 1.1
_EVALUATION_SHARE = 0.02  # of the time limit, kept after the polish for the final evaluation
# solve's threads by default: the cores this process may use, at most this many (a polish per
# start, and anytime's rounded witnesses beyond the first few seldom end better)
_MAX_DEFAULT_THREADS = 8


def graph_from_networkx(graph: nx.DiGraph, name: str = "graph") -> OpGraph:
    """An op graph from a networkx DAG.

    Node attributes (all optional): ``op_type``, ``flops``, ``bytes_read``, ``bytes_written``,
    ``param_bytes``; edge attribute ``bytes`` (the tensor sent along the edge). Each edge is
    its own tensor.
    """
    if not nx.is_directed_acyclic_graph(graph):
        raise InputError(f"graph {name!r} is not a directed acyclic graph")
    order = list(nx.lexicographical_topological_sort(graph, key=str))
    ids = {node: str(node) for node in order}
    weights = {f"{ids[n]}.weight": float(graph.nodes[n].get("param_bytes", 0.0)) for n in order}
    ops = tuple(
        Op(
            id=ids[n],
            op_type=str(graph.nodes[n].get("op_type", "Op")),
            name=ids[n],
            flops=float(graph.nodes[n].get("flops", 0.0)),
            bytes_read=float(graph.nodes[n].get("bytes_read", 0.0)),
            bytes_written=float(graph.nodes[n].get("bytes_written", 0.0)),
            weights=(f"{ids[n]}.weight",) if weights[f"{ids[n]}.weight"] > 0 else (),
        )
        for n in order
    )
    tensors = tuple(
        Tensor(f"{ids[u]}->{ids[v]}", float(data.get("bytes", 0.0)), ids[u], (ids[v],))
        for u, v, data in graph.edges(data=True)
    )
    return OpGraph(name, ops, tensors, {w: b for w, b in weights.items() if b > 0})


def load_graph(model: Any, *, dims: dict[str, int] | None = None) -> OpGraph:
    """An op graph from an ONNX path or ``ModelProto``, or a networkx DAG."""
    if isinstance(model, OpGraph):
        return model
    if isinstance(model, nx.DiGraph):
        return graph_from_networkx(model)
    from .onnx_import import import_onnx

    return import_onnx(model, dims=dims)


def make_instance(
    model: Any,
    cluster: Cluster | str | Path,
    stages: int,
    *,
    comm_mode: CommMode | str = CommMode.PER_DESTINATION,
    overlap: bool = False,
    exact_stages: bool = False,
    colocate: tuple[tuple[str, ...], ...] = (),
    dims: dict[str, int] | None = None,
) -> Instance:
    """An instance from a model (ONNX path/proto, networkx DAG, op graph) and a cluster."""
    graph = load_graph(model, dims=dims)
    if not isinstance(cluster, Cluster):
        cluster = load_cluster(cluster)
    options = Options(
        stages=stages,
        exact_stages=exact_stages,
        comm_mode=CommMode(comm_mode),
        overlap=overlap,
        colocate=colocate,
    )
    source = {
        "model": str(model) if isinstance(model, str | Path) else graph.name,
        "costs": "roofline model with default efficiency factors",
    }
    return build_instance(graph, cluster, options, source=source)


def open_instance(path: str | Path) -> Instance:
    return load_instance(path)


def infeasibility_reason(instance: Instance) -> str | None:
    """A specific reason no placement can exist, when a quick check finds one."""
    graph, cluster = instance.graph, instance.cluster
    runnable = np.isfinite(instance.costs.times)
    for v in np.flatnonzero(~runnable.any(axis=1)):
        return f"op {graph.ops[v].id!r} ({graph.ops[v].op_type}) cannot run on any device type of the cluster"
    largest = max(cluster.memory(d) for d in range(len(cluster.devices)))
    needs = graph.param_bytes + graph.working_set
    worst = int(np.argmax(needs))
    if needs[worst] > largest:
        return (
            f"op {graph.ops[worst].id!r} alone needs {needs[worst] / 1e9:.3f} GB, more than the"
            f" largest device ({largest / 1e9:.3f} GB)"
        )
    capacities = sorted((cluster.memory(d) for d in range(len(cluster.devices))), reverse=True)
    room = sum(capacities[: instance.options.stages])
    if graph.total_weight_bytes > room:
        return (
            f"the model's {graph.total_weight_bytes / 1e9:.3f} GB of weights exceed the"
            f" {room / 1e9:.3f} GB of the {instance.options.stages} largest devices"
        )
    return None


def _choose_solver(instance: Instance, time_limit: float = AUTO_TIME_LIMIT) -> tuple[str, str]:
    """The solver ``auto`` runs, and why: the anytime search on large graphs (whose CP-SAT model
    grows with ops × stages) and where one probe of the dominator-chain bound (within a tenth of
    ``time_limit``) shows the best heuristic placement close to the optimum, the exact ideal DP
    when the graph has few enough ideals, else CP-SAT (which warm-starts from the order DP)."""
    ops = len(instance.graph.ops)
    if ops > _AUTO_ANYTIME_OPS:
        return "anytime", f"auto: anytime ({ops} ops, more than {_AUTO_ANYTIME_OPS})"
    count = ideal_count(instance, _AUTO_IDEAL_LIMIT)
    if count is not None:
        return "ideal-dp", f"auto: ideal-dp ({count} ideals)"
    stages = min(instance.options.stages, len(instance.cluster.devices))
    if ops > _AUTO_CP_SAT_OPS and ops * stages > _AUTO_CP_SAT_CELLS:
        return "anytime", (
            f"auto: anytime (more than {_AUTO_IDEAL_LIMIT} ideals and {ops} ops × {stages} stages, more than"
            f" {_AUTO_CP_SAT_CELLS} for cp-sat's whole model)"
        )
    if ops * stages > _AUTO_CHAIN_CELLS:
        # without the chain rounding: with it the bound looks within 20% on Mixtral over
        # H100/A100 at k = 8, and anytime would prove that optimum in 6.1 s of a 10-s limit
        # where CP-SAT does in 3.0 s
        found = incumbents(instance, Settings(), rounded=False)
        heuristic = min((placed[2].bottleneck for placed in found), default=math.inf)
        deadline = time.perf_counter() + _STRUCTURAL_BOUND_SHARE * time_limit
        if math.isfinite(heuristic) and rules_out(instance, heuristic / _AUTO_CHAIN_CLOSE, deadline=deadline):
            return "anytime", (
                f"auto: anytime (more than {_AUTO_IDEAL_LIMIT} ideals; the dominator-chain bound is within"
                f" {_AUTO_CHAIN_CLOSE - 1:.0%} of the best heuristic placement, so the search for"
                " placements is what is left)"
            )
    return "cp-sat", f"auto: cp-sat (more than {_AUTO_IDEAL_LIMIT} ideals, too many for ideal-dp)"


def _run_solver(instance: Instance, name: str, settings: Settings, auto: bool) -> tuple[str, Outcome, tuple]:
    """Run ``name``; under ``auto`` a solver that crashes is reported and the order DP (or the
    anytime search on graphs too large for it) takes over, so a launch script still gets a
    placement."""
    try:
        return name, get_solver(name).solve(instance, settings), ()
    except PartitionError:
        raise
    except Exception as error:  # a solver bug must not cost the user their placement
        if not auto:
            raise
        fallback = "order-dp" if len(instance.graph.ops) <= _ORDER_DP_OPS else "anytime"
        if fallback == name:
            raise
        note = f"auto: {name} failed ({type(error).__name__}: {error}); fell back to {fallback}"
        settings.report(note)
        return fallback, get_solver(fallback).solve(instance, settings), (note,)


def _auto_shares(instance: Instance) -> tuple[float, float]:
    """(ideal-dp's share of the solver's time, CP-SAT's share of what ideal-dp leaves) under
    ``auto``: see :data:`_AUTO_IDEAL_DP_SHARE`."""
    stages = min(instance.options.stages, len(instance.cluster.devices))
    if len(instance.graph.ops) * stages <= _AUTO_CP_SAT_CELLS:
        return _AUTO_SMALL_IDEAL_DP_SHARE, _AUTO_SMALL_CP_SAT_SHARE
    return _AUTO_IDEAL_DP_SHARE, _AUTO_CP_SAT_SHARE


def _ideal_dp_seconds(limit: float, share: float = _AUTO_IDEAL_DP_SHARE) -> float:
    """ideal-dp's time under ``auto`` when the solver has ``limit`` seconds: its ``share``, but
    with the seconds CP-SAT and the polish need after it kept under a short limit (a 5-s
    ``auto`` on a 32-layer decoder ended without the polish), and never less than half of it
    (or than the share, if smaller)."""
    seconds = min(share * limit, limit - _AUTO_IDEAL_DP_LEAVES)
    return max(min(_AUTO_IDEAL_DP_FLOOR, share) * limit, seconds)


def _polish_with_cp_sat(
    instance: Instance, first: Outcome, bound: float, settings: Settings, started: float, share: float
) -> tuple[str, Outcome, tuple[str, ...]]:
    """Under ``auto``, spend (``share`` of) the time ideal-dp left on CP-SAT, from ideal-dp's
    placement, when ideal-dp did not close its gap (its communication estimate is a lower one
    where links differ)."""
    if first.placement is None:
        return "ideal-dp", first, ()
    remaining = share * ((settings.time_limit or AUTO_TIME_LIMIT) - (time.perf_counter() - started))
    return _then_run(instance, "ideal-dp", first, "cp-sat", bound, settings, remaining)


def _then_run(
    instance: Instance, kept: str, first: Outcome, then: str, bound: float, settings: Settings, seconds: float
) -> tuple[str, Outcome, tuple[str, ...]]:
    """Under ``auto``, solver ``then`` for ``seconds`` (from ``first``'s placement, if it can start
    from one) after solver ``kept`` left the gap open: the better placement of the two and the
    larger bound, both solvers' bounds being valid. A crash of ``then`` loses nothing, and when
    ``then`` proves an optimum no better than ``first``'s placement, that placement is optimal."""
    if seconds < _MIN_POLISH_SECONDS:
        return kept, first, ()
    if first.placement is not None and settings.close_enough(
        evaluate(instance, first.placement).bottleneck, max(bound, first.lower_bound), OPTIMALITY_TOLERANCE
    ):
        return kept, first, ()
    settings.report(f"auto: {kept} left the gap open; {then} for {seconds:.1f} s")
    solver = get_solver(then)
    start = first.placement if solver.capabilities.warm_start else None
    try:
        known = max(bound, first.lower_bound)  # a gap limit it proves ends the second search at once
        second = solver.solve(
            instance, replace(settings, time_limit=seconds, warm_start=start, known_bound=known)
        )
    except Exception as error:  # the placement found stands; a second solver must not lose it
        return kept, first, (f"auto: {then} after {kept} failed ({type(error).__name__}: {error})",)
    lower = max(first.lower_bound, second.lower_bound if math.isfinite(second.lower_bound) else 0.0)
    notes = (*first.notes, *second.notes)
    if second.placement is not None and (
        first.placement is None or _ranking(instance, second.placement) < _ranking(instance, first.placement)
    ):
        return then, replace(second, lower_bound=lower, notes=notes), (f"auto: {then} improved on {kept}",)
    if second.status is Status.OPTIMAL and first.placement is not None:
        return (
            kept,
            replace(first, status=Status.OPTIMAL, lower_bound=lower, notes=notes),
            (f"auto: {then} proved it optimal",),
        )
    return kept, replace(first, lower_bound=lower, notes=notes), (f"auto: {then} did not improve on {kept}",)


def _polish_with_lns(
    instance: Instance, first: Outcome, bound: float, settings: Settings, deadline: float
) -> tuple[Outcome, tuple[str, ...]]:
    """Under ``auto``, spend the time left until ``deadline`` on the large-neighbourhood polish
    (:mod:`.solvers.lns`) when the gap is still open, from the solver's placement and from
    :data:`_AUTO_POLISH_STARTS`' splits in turn, each given an equal share of the time still
    left (those within :data:`_AUTO_POLISH_START_SLACK` of the solver's placement; when the
    time left would give each less than :data:`_MIN_POLISH_SECONDS`, only the best-ranked that
    fit), and keep the best: never worse than the solver's placement.

    The polish is a local search, and where it ends depends on where it starts more than on
    how good the start is: on BERT over 2 x 8 A100 at k = 16, ideal-dp's placements settle at
    0.27897 and 0.25429 ms, the compute-balanced split at 0.27548 and 0.25080 (bert_legacy,
    bert_base), each within 8 s (bench/scoreboard.md)."""
    from .solvers.lns import Start, good_enough, polish, polish_together  # loads CP-SAT: not at start-up

    if first.placement is None or deadline - time.perf_counter() < _MIN_POLISH_SECONDS:
        return first, ()
    best, best_key, kept = first.placement, _ranking(instance, first.placement), "the solver's placement"
    bound = max(bound, first.lower_bound)
    if settings.close_enough(best_key[0], bound, OPTIMALITY_TOLERANCE):
        return first, ()
    starts, notes = [(kept, best)], []
    for name in _AUTO_POLISH_STARTS:
        start = _baseline(instance, name)
        if start is not None and _ranking(instance, start)[0] <= _AUTO_POLISH_START_SLACK * best_key[0]:
            starts.append((name, start))
    # under a short limit the shares would each fall below the minimum and nothing would be
    # polished (BERT over 2 x 8 A100 at k = 16 in 3 s returned the uniform split, 18% above its
    # bound, after 1.7 s): the best-ranked starts that fit take the time. With several threads
    # the starts are polished at once, each until the deadline (.solvers.lns.polish_together)
    fitting = max(1, int((deadline - time.perf_counter()) * max(settings.threads, 1) / _MIN_POLISH_SECONDS))
    if len(starts) > fitting:
        starts = sorted(starts, key=lambda named: _ranking(instance, named[1]))[:fitting]
    target = settings.target(bound)
    if settings.threads >= 2:
        polished = polish_together(
            instance, [Start(start) for _, start in starts], settings, deadline, target=target
        )
        reports = [report for _, report in polished]
    else:
        reports, enough = [], good_enough(target)
        for turn, (_, start) in enumerate(starts):
            share = (deadline - time.perf_counter()) / (len(starts) - turn)
            if share < _MIN_POLISH_SECONDS or (enough is not None and enough(math.inf)):
                break
            reports.append(polish(instance, start, settings, time.perf_counter() + share, enough=enough))
    for (name, _), report in zip(starts, reports, strict=False):  # the turns may stop early
        notes.append(f"{report.notes[0]} (from {name})" if report.notes else f"lns: nothing from {name}")
        key = _ranking(instance, report.placement)
        if key < best_key:
            best, best_key, kept = report.placement, key, name
    if len(notes) > 1:
        notes.append(f"lns: kept the polish of {kept}")
    return replace(first, placement=best), tuple(f"auto: {note}" for note in notes)


def _baseline(instance: Instance, name: str) -> Placement | None:
    """The baseline ``name``'s placement, ``None`` when the evaluator rejects its split."""
    return get_solver(name).solve(instance, Settings()).placement


def _ranking(instance: Instance, placement: Placement) -> tuple[float, float]:
    """(bottleneck, latency), infinite for an invalid placement: how placements are ranked."""
    evaluation = evaluate(instance, placement)
    if not evaluation.valid:
        return math.inf, math.inf
    return evaluation.bottleneck, evaluation.latency


def _proven(solver: str, outcome: Outcome) -> bool:
    """Whether ``solver`` proved its placement optimal over every placement."""
    return outcome.status is Status.OPTIMAL and get_solver(solver).capabilities.scope is Scope.GLOBAL


def _with_structural_bound(
    instance: Instance, upper: float, bound: float, budget: float, last: bool, settings: Settings
) -> tuple[float, tuple[str, ...]]:
    """``bound`` raised to the dominator-chain or two-tower bound (:mod:`.chain_bound`,
    :mod:`.tower_bound`) when that is higher, with a note saying which. The relaxations are
    bisected below ``upper``, a placement's bottleneck and their only use of it, so they are
    computed once, within ``budget`` seconds. With ``last``, a probe still running at the end of
    ``budget`` gives up: in the last step before the time limit (CLIP on four types at k = 8
    ended 1.3–4 s past 60 s), and before CP-SAT, which waits for the bound; otherwise it
    finishes, taking the time from the polish after it. Nothing else runs meanwhile, so its
    probes use the solver's threads; a bound proving ``upper`` within the settings' gap limit
    is enough."""
    if not math.isfinite(upper) or settings.close_enough(upper, bound, OPTIMALITY_TOLERANCE):
        return bound, ()
    deadline = time.perf_counter() + budget
    value, name = structural_lower_bound(
        instance,
        upper,
        floor=bound,
        deadline=deadline,
        give_up=deadline if last else None,
        workers=settings.threads,
        gap_limit=settings.gap_limit,
    )
    if value <= bound:
        return bound, ()
    return value, (f"bound: {name}, {value * 1e3:.6g} ms",)


def _bound_before_cp_sat(
    instance: Instance, bound: float, settings: Settings, budget: float
) -> tuple[float, tuple[str, ...]]:
    """With a gap limit, :func:`_with_structural_bound` below the best heuristic placement,
    before CP-SAT runs (chosen by ``auto`` or by the caller): CP-SAT's own bound starts at the
    LP's, far below, so under ``auto`` it spent its whole share on a gap limit that this bound
    proves for its first placements (CLIP over H100/A100 at k = 4 with 2%: 33.2 s, ended by the
    bound in the search after it; 3.5 s with this bound first)."""
    found = incumbents(instance, settings, rounded=False)  # the order DP where the limit leaves time
    upper = min((placed[2].bottleneck for placed in found), default=math.inf)
    started = time.perf_counter()
    raised = _with_structural_bound(instance, upper, bound, budget, True, settings)
    settings.report(
        f"bound before cp-sat {raised[0]:.6g} s in {time.perf_counter() - started:.1f} s,"
        f" best heuristic placement {upper:.6g} s"
    )
    return raised


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, which containers and ``taskset``
    narrow, where ``os.cpu_count()`` counts the machine's."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def default_threads() -> int:
    """The solver threads :func:`solve` uses unless told: every usable core, at most
    :data:`_MAX_DEFAULT_THREADS`. The zoo's targets are set on two cores, and with two threads
    ``auto`` polishes its starts at once instead of in turn (CLIP on A100/L4/T4 at k = 8 in 60 s:
    1.80% against 2.93% with one; bench/scoreboard.md)."""
    return min(usable_cores(), _MAX_DEFAULT_THREADS)


def solve(
    instance: Instance,
    solver: str = "auto",
    *,
    time_limit: float | None = None,
    seed: int = 0,
    threads: int | None = None,
    gap_limit: float = 0.0,
    progress=None,
) -> Result:
    """Solve ``instance`` and return an evaluated :class:`Result`.

    ``threads`` defaults to :func:`default_threads`; with one thread and a time limit no search
    reaches, the same input gives the same placement. ``gap_limit`` (relative, in ``[0, 1)``):
    stop once the placement is proven within it of the optimum (``auto`` and the solvers with
    that capability: the anytime search, ideal-dp, cp-sat, milp), as a MIP solver's relative
    gap limit does; the status then stays ``feasible`` unless the bound meets the placement.

    The placement is re-checked by the independent evaluator; an invalid one is a solver bug
    and raises :class:`SolverError`. The reported bound is the best of the solver's own and
    the trivial, aggregate and dominator-chain bounds, and the status is ``optimal`` only when the
    bottleneck meets it.
    """
    if time_limit is not None and not time_limit > 0:
        raise InputError(f"time limit must be positive, got {time_limit:g} s")
    if threads is None:
        threads = default_threads()
    if threads < 1:
        raise InputError(f"threads must be at least 1, got {threads}")
    if not 0 <= gap_limit < 1:
        raise InputError(f"gap limit must be at least 0 and below 1 (100%), got {gap_limit:g}")
    settings = Settings(seed=seed, threads=threads, gap_limit=gap_limit, progress=progress)
    with reuse():  # auto's choice, the solver and the end share the bounds' builds and the order split
        return _solve(instance, solver, time_limit, settings)


def _bounded_by_the_search(instance: Instance) -> bool:
    """Whether the anytime search proves the two-tower bound itself (its module, which imports
    CP-SAT's, is loaded here on first use)."""
    from .solvers.anytime import bounded_towers

    return bounded_towers(instance) is not None


def _solve(instance: Instance, solver: str, time_limit: float | None, settings: Settings) -> Result:
    started = time.perf_counter()
    auto = solver == "auto"
    if auto and time_limit is None:
        time_limit = AUTO_TIME_LIMIT
    name, why = _choose_solver(instance, time_limit) if auto else (solver, None)
    implementation = get_solver(name)
    # the solver leaves the chain or two-tower bound its share of the time limit (and auto's
    # choice, which may probe the chain bound, counts against it), unless it is the anytime
    # search on a graph of two towers it bounds itself (see _BOUNDED_BY_THE_SEARCH)
    bounded_by_search = name == "anytime" and _bounded_by_the_search(instance)
    reserve = _EVALUATION_SHARE if bounded_by_search else _STRUCTURAL_BOUND_SHARE
    solver_limit = None
    if time_limit is not None:
        solver_limit = max(0.0, time_limit * (1 - reserve) - (time.perf_counter() - started))
    settings = replace(settings, time_limit=solver_limit)
    limit = implementation.capabilities.max_ops
    if limit is not None and len(instance.graph.ops) > limit:
        raise SolverError(
            f"solver {name!r} handles at most {limit} ops; the graph has {len(instance.graph.ops)}"
        )
    reason = infeasibility_reason(instance)
    # Both cheap (array arithmetic), valid for every placement, so every solver's result gets them.
    bound = max(trivial_lower_bound(instance), aggregate_lower_bound(instance))
    recorded = {
        "time_limit": time_limit,
        "seed": settings.seed,
        "threads": settings.threads,
        "requested": solver,
        "gap_limit": settings.gap_limit,
    }
    if reason is not None:
        return Result(
            instance.name,
            Status.INFEASIBLE,
            name,
            recorded,
            time.perf_counter() - started,
            math.inf,
            notes=(reason,),
        )
    bound_notes: tuple[str, ...] = ()
    if name == "cp-sat" and settings.gap_limit > 0:  # chosen by auto or by the caller
        began = time.perf_counter()
        budget = _STRUCTURAL_BOUND_SHARE * (time_limit or AUTO_TIME_LIMIT)
        bound, bound_notes = _bound_before_cp_sat(instance, bound, settings, budget)
        if settings.time_limit is not None:
            spent = time.perf_counter() - began
            settings = replace(settings, time_limit=max(settings.time_limit - spent, 0.0))
    # ideal-dp's richer levels can take all the time; auto keeps some for CP-SAT and the polish
    first = replace(settings, known_bound=bound) if name == "cp-sat" else settings
    ideal_dp_share, cp_sat_share = _auto_shares(instance)
    if auto and name == "ideal-dp" and settings.time_limit is not None:
        first = replace(first, time_limit=_ideal_dp_seconds(settings.time_limit, ideal_dp_share))
    if auto and name == "cp-sat" and settings.time_limit is not None:
        first = replace(first, time_limit=_AUTO_CP_SAT_ROUTE_SHARE * settings.time_limit)
    name, outcome, fallback_notes = _run_solver(instance, name, first, auto)
    unproven = outcome.status in (Status.FEASIBLE, Status.NO_SOLUTION)
    if auto and name == "cp-sat" and settings.time_limit is not None and unproven:
        solver_deadline = started + time_limit * (1 - _STRUCTURAL_BOUND_SHARE)
        name, outcome, search_notes = _then_run(  # see _AUTO_CP_SAT_ROUTE_SHARE
            instance, "cp-sat", outcome, "anytime", bound, settings, solver_deadline - time.perf_counter()
        )
        fallback_notes = (*fallback_notes, *search_notes)
    # Before any polish, so that a bound meeting the incumbent ends ``auto`` at once.
    if outcome.lower_bound > bound:  # the solver proved more than a bound computed before it
        bound_notes = ()
    bound = max(bound, outcome.lower_bound)
    bound_budget = _STRUCTURAL_BOUND_SHARE * (time_limit or 40.0)
    last = time_limit is not None and name == "anytime"
    search_used_the_time = False
    if last:
        # it ends with its own polish, so nothing but the evaluation follows: the bound may use
        # most of the time the search left (converged early), to refine its cells
        left = started + time_limit - time.perf_counter()
        bound_budget = _UNUSED_SHARE * left
        search_used_the_time = bounded_by_search and left < _BOUNDED_BY_THE_SEARCH * time_limit
    # A global solver's proof ends the solve, though its bound may sit a little further below
    # the placement than the tolerance: CP-SAT's model rounds every term down (CLIP over
    # H100/A100 at k = 2, proven in 1.1 s, was polished and bounded for 58 s more).
    if not _proven(name, outcome) and not search_used_the_time:
        upper = math.inf if outcome.placement is None else evaluate(instance, outcome.placement).bottleneck
        bound, raised = _with_structural_bound(instance, upper, bound, bound_budget, last, settings)
        bound_notes = raised or bound_notes
    if auto and name == "ideal-dp" and not _proven(name, outcome):
        name, outcome, polish_notes = _polish_with_cp_sat(
            instance, outcome, bound, settings, started, cp_sat_share
        )
        fallback_notes = (*fallback_notes, *polish_notes)
    # the anytime search ends with the same polish
    if auto and name != "anytime" and not _proven(name, outcome):
        # the structural bound is done: the polish may use the time limit but for the evaluation
        deadline = started + (time_limit or AUTO_TIME_LIMIT) * (1 - _EVALUATION_SHARE)
        outcome, polish_notes = _polish_with_lns(instance, outcome, bound, settings, deadline)
        fallback_notes = (*fallback_notes, *polish_notes)
    implementation = get_solver(name)
    notes = (*((why,) if why else ()), *fallback_notes, *outcome.notes, *bound_notes)
    wall = time.perf_counter() - started
    bound = max(bound, outcome.lower_bound)
    if outcome.placement is None:
        return Result(instance.name, outcome.status, name, recorded, wall, bound, notes=notes)
    evaluation = evaluate(instance, outcome.placement)
    if not evaluation.valid:
        raise SolverError(f"solver {name!r} returned an invalid placement: {evaluation.violations[0]}")
    status = outcome.status
    if evaluation.bottleneck <= bound * (1 + OPTIMALITY_TOLERANCE):
        status = Status.OPTIMAL
    elif status is Status.OPTIMAL and implementation.capabilities.scope is not Scope.GLOBAL:
        status = Status.FEASIBLE
    if settings.gap_limit > 0 and settings.close_enough(evaluation.bottleneck, bound, OPTIMALITY_TOLERANCE):
        notes = (*notes, f"gap limit {settings.gap_limit:.2%} met")
    return Result(instance.name, status, name, recorded, wall, bound, outcome.placement, evaluation, notes)


def require_solution(result: Result) -> Result:
    """``result`` if it has a placement, else an :class:`InfeasibleError` with the reason."""
    if result.placement is None:
        raise InfeasibleError(f"{result.status.value}: {'; '.join(result.notes) or 'no placement found'}")
    return result
