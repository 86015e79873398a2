"""Placements (what a solver decides) and results (what a solve reports).

A :class:`Placement` is only the decision: the stage of every op and the device of every
stage. Every figure written out — stage times, memory, bottleneck, gap — comes from the
independent evaluator, never from the solver that produced the placement.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

PLACEMENT_SCHEMA = "partition.placement"
PLACEMENT_VERSION = 1


class Status(Enum):
    """Termination status, as in OR-Tools MathOpt: what is *proven* about the placement."""

    OPTIMAL = "optimal"  # bottleneck equals a proven lower bound (within tolerance)
    FEASIBLE = "feasible"  # a valid placement; optimality not proven (see bound and gap)
    INFEASIBLE = "infeasible"  # proven that no valid placement exists
    NO_SOLUTION = "no solution"  # nothing found, nothing proven (e.g. time limit)


@dataclass(frozen=True)
class Placement:
    """``stage_of[v]``: 0-based stage of op ``v``; ``devices[s]``: device index of stage ``s``."""

    stage_of: tuple[int, ...]
    devices: tuple[int, ...]

    @property
    def num_stages(self) -> int:
        return len(self.devices)


@dataclass(frozen=True)
class StageFigures:
    """Everything the evaluator computes for one stage (seconds and bytes)."""

    compute: float
    send: float
    recv: float
    time: float
    param_bytes: float
    activation_bytes: float
    memory_capacity: float

    @property
    def memory(self) -> float:
        return self.param_bytes + self.activation_bytes


@dataclass(frozen=True)
class Evaluation:
    """The evaluator's verdict: per-stage figures and every constraint the placement breaks."""

    stages: tuple[StageFigures, ...]
    violations: tuple[str, ...]

    @property
    def valid(self) -> bool:
        return not self.violations

    @property
    def bottleneck(self) -> float:
        return max(s.time for s in self.stages) if self.stages else float("inf")

    @property
    def latency(self) -> float:
        return sum(s.time for s in self.stages)


@dataclass(frozen=True)
class Result:
    """A solve's outcome: the placement, its evaluation, the best proven bound and the status."""

    instance_name: str
    status: Status
    solver: str
    settings: dict[str, Any]
    wall_time: float
    lower_bound: float
    placement: Placement | None = None
    evaluation: Evaluation | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def bottleneck(self) -> float | None:
        return self.evaluation.bottleneck if self.evaluation else None

    @property
    def gap(self) -> float | None:
        if self.bottleneck is None or self.lower_bound <= 0:
            return None
        return self.bottleneck / self.lower_bound - 1.0
