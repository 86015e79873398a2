"""Fork-join branches: the parallel arms of a block that meet at one join op.

An MoE layer's experts and an Inception block's towers are such arms. An arm is a predecessor
``s`` of the join and the ops whose every path to the join's predecessors leads to ``s``, so
arms are disjoint and each reaches the join only through its own ``s``. Two modules use them:
the chain bound (:mod:`partition.chain_bound`) charges a cut through a block at least one
tensor per arm it touches, and the anytime search (:mod:`partition.solvers.branch_order`)
orders the arms so that a stage boundary can cross each where it is narrow.
"""

from __future__ import annotations

import numpy as np


def branch_labels(predecessors: list[list[int]], join: int) -> np.ndarray:
    """Per op (indices in topological order, ``predecessors`` each op's predecessors among
    them), the predecessor ``s`` of ``join`` whose arm holds it, or -1 (in no arm: it reaches
    several of the join's predecessors, or none)."""
    size = len(predecessors)
    successors: list[list[int]] = [[] for _ in range(size)]
    for v, inputs in enumerate(predecessors):
        if v != join:
            for u in inputs:
                successors[u].append(v)
    label = np.full(size, -1, dtype=np.int64)  # the one predecessor of the join reached, -2: several
    feeding = sorted(set(predecessors[join]))
    label[feeding] = feeding
    for u in range(size - 1, -1, -1):
        reached = {int(label[v]) for v in successors[u]} - {-1}
        if label[u] >= 0:
            reached.add(int(label[u]))
        label[u] = -2 if -2 in reached or len(reached) > 1 else (reached.pop() if reached else -1)
    return np.where(label >= 0, label, -1)
