"""Graph coarsening: contract groups of ops into one op, and expand placements back.

A *contraction* replaces each group of ops by one coarse op of a new instance: its time on a
type is the sum of its members', its weights the union of theirs, its working set the largest
member's, and only tensors that leave the group remain. The independent evaluator therefore
gives a coarse placement exactly the figures of its expansion on the original graph (same
compute, same crossing tensors, same distinct weights, same largest working set): coarsening
only *restricts* the placements searched. Groups must be convex (no path leaves a group and
comes back), or the coarse graph would have a cycle.

Exact contractions (cannot change the optimum; some optimal placement keeps each group whole):

- **Colocation hulls**: a colocation group and every op on a path between two of its members.
  Stages are monotone along edges, so such ops are forced into the group's stage anyway.
- **Free constant leaves**: an op with zero time on every device type, no weights, no input
  produced by an op (a constant / shape computation) and one consumer op ``w`` whose working
  set is at least its own, merged into ``w``. Moving it to ``w``'s stage adds no compute,
  weights or working set there, and removes the tensor it sent (possibly the stage it sat
  in alone). Not applied with ``exact_stages`` (emptying a stage would change the count).

Why chains of ops with positive time are *not* exact: in any optimal placement that cuts
``u → v`` (``v`` the only successor of ``u`` and ``u`` the only predecessor of ``v``), keeping
them together means moving ``v`` back or ``u`` forward, which adds that op's time to a stage
that may be the bottleneck; no byte condition repairs that. Such merges are heuristic.

Heuristic contractions (restrict the search; the loss is not bounded a priori, so the bound a
solver reports is always computed on the *original* instance, never on a heuristic coarsening):

- **Module blocks**: ops sharing a module path (``layers.3.experts.17``), when the block is
  convex and its time is at most ``grain`` (a fraction of the ideal stage time).
- **Parallel siblings**: coarse ops with identical predecessor and successor sets (the experts
  of an MoE layer) bundled in order until a bundle reaches ``grain``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from .costs import CostTable
from .errors import InputError
from .graph import Op, OpClass, OpGraph, Tensor, keyed_topological_order
from .instance import Instance, Options
from .placement import Placement


@dataclass(frozen=True, eq=False)
class Coarsening:
    """A coarse instance and, for each coarse op, the original op indices it stands for."""

    instance: Instance
    members: tuple[tuple[int, ...], ...]
    exact: bool

    def group_of(self) -> np.ndarray:
        """Coarse op index of each original op."""
        group = np.empty(sum(len(m) for m in self.members), dtype=np.int64)
        for c, members in enumerate(self.members):
            group[list(members)] = c
        return group

    def expand(self, placement: Placement) -> Placement:
        """The same placement on the original ops (every original op gets its group's stage)."""
        stage = np.asarray(placement.stage_of)[self.group_of()]
        return Placement(tuple(int(s) for s in stage), placement.devices)

    def expand_order(self, coarse_order: Iterable[int]) -> np.ndarray:
        """An original-op order from a coarse order (members in their original order)."""
        return np.fromiter((v for c in coarse_order for v in self.members[c]), dtype=np.int64)

    def then(self, finer_groups: Sequence[Sequence[int]], *, exact: bool) -> Coarsening:
        """Contract this coarse instance further; members stay in terms of the original ops."""
        coarser = contract(self.instance, finer_groups, exact=exact)
        members = tuple(tuple(sorted(v for c in group for v in self.members[c])) for group in coarser.members)
        return Coarsening(coarser.instance, members, self.exact and exact)


class _UnionFind:
    def __init__(self, size: int) -> None:
        self.parent = list(range(size))

    def find(self, x: int) -> int:
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: int, b: int) -> None:
        a, b = self.find(a), self.find(b)
        if a != b:
            self.parent[max(a, b)] = min(a, b)

    def groups(self) -> list[list[int]]:
        found: dict[int, list[int]] = defaultdict(list)
        for x in range(len(self.parent)):
            found[self.find(x)].append(x)
        return sorted(found.values(), key=lambda g: g[0])


def _adjacency(graph: OpGraph) -> tuple[list[list[int]], list[list[int]]]:
    preds: list[list[int]] = [[] for _ in graph.ops]
    succs: list[list[int]] = [[] for _ in graph.ops]
    for u, v in graph.edges:
        succs[u].append(v)
        preds[v].append(u)
    return preds, succs


def _reach(start: Iterable[int], step: list[list[int]]) -> set[int]:
    seen, stack = set(start), list(start)
    while stack:
        for w in step[stack.pop()]:
            if w not in seen:
                seen.add(w)
                stack.append(w)
    return seen


def exact_groups(instance: Instance) -> list[list[int]]:
    """Groups of the exact contractions (module docstring): colocation hulls, free constant leaves."""
    graph = instance.graph
    free = (instance.costs.times == 0).all(axis=1) & (not instance.options.exact_stages)
    if not instance.options.colocate and not free.any():
        return [[v] for v in range(len(graph.ops))]
    preds, succs = _adjacency(graph)
    sets = _UnionFind(len(graph.ops))
    for group in instance.options.colocate:
        members = [graph.index[op_id] for op_id in group]
        hull = _reach(members, succs) & _reach(members, preds)
        for v in hull:
            sets.union(members[0], v)
    working = graph.working_set
    for v in np.flatnonzero(free):
        if not graph.ops[v].weights and not preds[v] and len(succs[v]) == 1:
            w = succs[v][0]
            if working[v] <= working[w]:
                sets.union(int(v), w)
    return sets.groups()


def contract(instance: Instance, groups: Sequence[Sequence[int]], *, exact: bool) -> Coarsening:
    """The quotient instance of ``groups`` (a partition of the op indices into convex sets)."""
    graph = instance.graph
    n = len(graph.ops)
    if len(groups) == n:  # nothing to contract: the instance is its own coarsening
        return Coarsening(instance, tuple((v,) for v in range(n)), exact)
    group = np.full(n, -1, dtype=np.int64)
    for g, members in enumerate(groups):
        if len(members) == 0 or (group[list(members)] >= 0).any():
            raise InputError("coarsening groups must be non-empty and disjoint")
        group[list(members)] = g
    if (group < 0).any():
        raise InputError("coarsening groups must cover every op")
    order = _quotient_order(graph, group, len(groups))
    rank = np.empty(len(groups), dtype=np.int64)
    rank[order] = np.arange(len(groups))
    members = [sorted(groups[g]) for g in order]
    coarse_of = rank[group]
    ids = [graph.ops[m[0]].id if len(m) == 1 else f"{graph.ops[m[0]].id}+{len(m) - 1}" for m in members]

    tensors, inputs, outputs = [], defaultdict(list), defaultdict(list)
    for tensor in graph.tensors:
        source = None if tensor.producer is None else int(coarse_of[graph.index[tensor.producer]])
        targets = sorted({int(coarse_of[graph.index[c]]) for c in tensor.consumers} - {source})
        if source is not None and not targets:
            continue  # internal to its group: never crosses a cut
        tensors.append(
            Tensor(
                tensor.name,
                tensor.bytes,
                None if source is None else ids[source],
                tuple(ids[c] for c in targets),
            )
        )
        if source is not None:
            outputs[source].append(tensor.name)
        for c in targets:
            inputs[c].append(tensor.name)
    working = graph.working_set
    ops = []
    for c, m in enumerate(members):
        first = graph.ops[m[0]]
        ops.append(
            Op(
                id=ids[c],
                op_type=first.op_type if len(m) == 1 else "Group",
                name=first.name if len(m) == 1 else ids[c],
                module=_common_module([graph.ops[v].module for v in m]),
                op_class=first.op_class if len(m) == 1 else OpClass.OTHER,
                flops=float(sum(graph.ops[v].flops for v in m)),
                bytes_read=float(working[m].max()),  # the evaluator's working set: largest member's
                bytes_written=0.0,
                dtype=first.dtype,
                inputs=tuple(inputs[c]),
                outputs=tuple(outputs[c]),
                weights=tuple(dict.fromkeys(w for v in m for w in graph.ops[v].weights)),
            )
        )
    flat = np.concatenate([np.asarray(m, dtype=np.int64) for m in members])
    starts = np.cumsum([0] + [len(m) for m in members[:-1]])
    times = np.add.reduceat(instance.costs.times[flat], starts, axis=0)
    coarse_graph = OpGraph(f"{graph.name}~{len(members)}", tuple(ops), tuple(tensors), dict(graph.weights))
    # a coarse op's time is a sum over its members; it keeps its first member's provenance
    costs = CostTable(instance.costs.type_names, times, instance.costs.provenance[flat[starts]])
    coarse = Instance(
        coarse_graph.name,
        coarse_graph,
        instance.cluster,
        costs,
        _without_colocation(instance),
        dict(instance.source),
    )
    return Coarsening(coarse, tuple(tuple(m) for m in members), exact)


def _without_colocation(instance: Instance) -> Options:
    """Options of a coarse instance: colocation is enforced by the groups (hulls are exact)."""
    return replace(instance.options, colocate=())


def _common_module(modules: list[str]) -> str:
    if len(set(modules)) == 1:
        return modules[0]
    parts = [m.split(".") for m in modules]
    common = []
    for pieces in zip(*parts, strict=False):
        if len(set(pieces)) > 1:
            break
        common.append(pieces[0])
    return ".".join(common)


def _quotient_order(graph: OpGraph, group: np.ndarray, count: int) -> list[int]:
    """Topological order of the groups (by smallest member); a cycle means a non-convex group."""
    succs: list[set[int]] = [set() for _ in range(count)]
    indegree = np.zeros(count, dtype=np.int64)
    for u, v in graph.edges:
        a, b = int(group[u]), int(group[v])
        if a != b and b not in succs[a]:
            succs[a].add(b)
            indegree[b] += 1
    first = np.full(count, len(group), dtype=np.int64)
    np.minimum.at(first, group, np.arange(len(group)))
    order = keyed_topological_order(succs, [int(x) for x in indegree], [int(x) for x in first])
    if len(order) != count:
        raise InputError("a coarsening group is not convex (contracting it would create a cycle)")
    return order


def coarsen_exact(instance: Instance) -> Coarsening:
    return contract(instance, exact_groups(instance), exact=True)


def _is_convex(members: set[int], preds: list[list[int]], succs: list[list[int]]) -> bool:
    """No path leaves ``members`` and comes back: descendants outside never reach back in."""
    outside = {w for v in members for w in succs[v] if w not in members}
    if not outside:
        return True
    lowest = min(members)
    highest = max(members)
    seen, stack = set(outside), list(outside)
    while stack:
        x = stack.pop()
        if x > highest:  # topological indices: nothing after the last member leads back
            continue
        for w in succs[x]:
            if w in members:
                return False
            if w not in seen and w >= lowest:
                seen.add(w)
                stack.append(w)
    return True


def module_groups(instance: Instance, grain: float) -> list[list[int]]:
    """Heuristic: ops of one module path as a group when convex and not slower than ``grain`` s."""
    graph = instance.graph
    preds, succs = _adjacency(graph)
    slowest = instance.costs.finite_times().max(axis=1)
    by_module: dict[str, list[int]] = defaultdict(list)
    for v, op in enumerate(graph.ops):
        by_module[op.module].append(v)
    groups: list[list[int]] = []
    for module, members in by_module.items():
        if (
            module
            and len(members) > 1
            and slowest[members].sum() <= grain
            and _is_convex(set(members), preds, succs)
        ):
            groups.append(members)
        else:
            groups.extend([v] for v in members)
    return groups


def sibling_groups(instance: Instance, grain: float) -> list[list[int]]:
    """Heuristic: ops with the same predecessors and successors, bundled up to ``grain`` s each."""
    graph = instance.graph
    preds, succs = _adjacency(graph)
    slowest = instance.costs.finite_times().max(axis=1)
    families: dict[tuple[tuple[int, ...], tuple[int, ...]], list[int]] = defaultdict(list)
    for v in range(len(graph.ops)):
        families[(tuple(sorted(preds[v])), tuple(sorted(succs[v])))].append(v)
    groups: list[list[int]] = []
    for family in families.values():
        bundle: list[int] = []
        load = 0.0
        for v in family:
            if bundle and load + slowest[v] > grain:
                groups.append(bundle)
                bundle, load = [], 0.0
            bundle.append(v)
            load += slowest[v]
        groups.append(bundle)
    return groups
