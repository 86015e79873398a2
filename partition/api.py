"""The library's entry points: build an instance from any source, solve it, report it.

:func:`solve` is where solver output meets the independent evaluator: the solver proposes, the
evaluator checks and measures, and the result carries the best lower bound from every source.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from .bounds import trivial_lower_bound
from .cluster import Cluster, load_cluster
from .errors import InfeasibleError, InputError, SolverError
from .evaluator import evaluate
from .graph import Op, OpGraph, Tensor
from .instance import CommMode, Instance, Options, build_instance, load_instance
from .placement import Result, Status
from .solvers import Settings, get_solver, solver_names
from .solvers.ideal_dp import ideal_count

_OPTIMALITY_TOLERANCE = 1e-6
_AUTO_IDEAL_LIMIT = 5_000  # ideal-dp takes ~15 s at 2 700 ideals and grows about quadratically


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


def _choose_solver(instance: Instance) -> tuple[str, str]:
    """The solver ``auto`` runs, and why: the exact ideal DP when the graph has few enough
    ideals, else CP-SAT (which warm-starts from the order DP) when installed, else the order DP."""
    count = ideal_count(instance, _AUTO_IDEAL_LIMIT)
    if count is not None:
        return "ideal-dp", f"auto: ideal-dp ({count} ideals)"
    fallback = "cp-sat" if "cp-sat" in solver_names() else "order-dp"
    return fallback, f"auto: {fallback} (more than {_AUTO_IDEAL_LIMIT} ideals, too many for ideal-dp)"


def solve(
    instance: Instance,
    solver: str = "auto",
    *,
    time_limit: float | None = None,
    seed: int = 0,
    threads: int = 1,
    progress=None,
) -> Result:
    """Solve ``instance`` and return an evaluated :class:`Result`.

    The placement is re-checked by the independent evaluator; an invalid one is a solver bug
    and raises :class:`SolverError`. The reported bound is the best of the solver's own and
    the trivial bounds, and the status is ``optimal`` only when the bottleneck meets it.
    """
    name, why = _choose_solver(instance) if solver == "auto" else (solver, None)
    implementation = get_solver(name)
    settings = Settings(time_limit=time_limit, seed=seed, threads=threads, progress=progress)
    limit = implementation.capabilities.max_ops
    if limit is not None and len(instance.graph.ops) > limit:
        raise SolverError(
            f"solver {name!r} handles at most {limit} ops; the graph has {len(instance.graph.ops)}"
        )
    started = time.perf_counter()
    reason = infeasibility_reason(instance)
    bound = trivial_lower_bound(instance)
    recorded = {"time_limit": time_limit, "seed": seed, "threads": threads, "requested": solver}
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
    outcome = implementation.solve(instance, settings)
    notes = (why, *outcome.notes) if why else outcome.notes
    wall = time.perf_counter() - started
    bound = max(bound, outcome.lower_bound)
    if outcome.placement is None:
        return Result(instance.name, outcome.status, name, recorded, wall, bound, notes=notes)
    evaluation = evaluate(instance, outcome.placement)
    if not evaluation.valid:
        raise SolverError(f"solver {name!r} returned an invalid placement: {evaluation.violations[0]}")
    status = outcome.status
    if evaluation.bottleneck <= bound * (1 + _OPTIMALITY_TOLERANCE):
        status = Status.OPTIMAL
    elif status is Status.OPTIMAL and implementation.capabilities.scope.value != "global":
        status = Status.FEASIBLE
    return Result(instance.name, status, name, recorded, wall, bound, outcome.placement, evaluation, notes)


def require_solution(result: Result) -> Result:
    """``result`` if it has a placement, else an :class:`InfeasibleError` with the reason."""
    if result.placement is None:
        raise InfeasibleError(f"{result.status.value}: {'; '.join(result.notes) or 'no placement found'}")
    return result
