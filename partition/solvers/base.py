"""The interface every solver implements, and what it hands back.

A solver receives an :class:`~partition.instance.Instance` and :class:`Settings`, and returns
an :class:`Outcome`: a placement (or none), the lower bound it proved, its status and notes.
It does not evaluate its own placement: :func:`partition.solve` does that with the
independent evaluator and combines bounds from every source.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import ClassVar

from ..instance import Instance
from ..placement import Placement, Status

# A placement within this (relative) of a proven bound is optimal: the status solve reports, the
# gap limit's test, and where a search may stop; bounds and bottlenecks are sums of float terms
# computed along different paths, which differ in the last digits.
OPTIMALITY_TOLERANCE = 1e-6


class Scope(Enum):
    """Over which placements a solver's optimum is exact."""

    GLOBAL = "global"  # every valid placement (contiguous stages of the DAG, any devices)
    ORDER = "order"  # contiguous splits of one topological order over device subsequences
    HEURISTIC = "heuristic"  # no optimality claim


@dataclass(frozen=True)
class Capabilities:
    scope: Scope
    time_limit: bool = False
    max_ops: int | None = None  # beyond this the solver refuses the instance
    warm_start: bool = False  # starts its search from Settings.warm_start when given one
    gap_limit: bool = False  # stops once its placement is proven within Settings.gap_limit


@dataclass(frozen=True)
class Settings:
    time_limit: float | None = None
    seed: int = 0
    threads: int = 1
    # Stop once the placement is proven within this relative gap (bottleneck / bound - 1) of the
    # optimum, as MIP solvers' relative gap limits do: 0 searches to the time limit or a proof.
    gap_limit: float = 0.0
    progress: Callable[[str], None] | None = field(default=None, compare=False)
    # A valid placement found before (by another solver): solvers with the ``warm_start``
    # capability search from it and never return worse; the others ignore it.
    warm_start: Placement | None = field(default=None, compare=False)
    # A lower bound on the optimum proven before (by another relaxation): CP-SAT and the anytime
    # search, whose own bounds start below it, measure their gap against it, so that a gap
    # limit it proves ends their search at their first placement within it.
    known_bound: float = 0.0

    def close_enough(self, bottleneck: float, bound: float, tolerance: float) -> bool:
        """Whether a placement of ``bottleneck`` is proven within the gap limit by ``bound``, up
        to ``tolerance`` (relative: the caller's test of optimality, which a bound proving the
        limit exactly, less its rounding margin, still meets)."""
        return bottleneck <= bound * (1 + self.gap_limit) * (1 + tolerance)

    def target(self, bound: float) -> float:
        """The bottleneck at which a search may stop, given ``bound``: within the gap limit of
        it (0 without a limit, which no placement reaches)."""
        return bound * (1 + self.gap_limit) if self.gap_limit > 0 else 0.0

    @property
    def relative_gap(self) -> float:
        """The gap limit as MIP solvers measure it, ``(objective - bound) / objective``: the
        fraction that keeps ``bottleneck / bound - 1`` within :attr:`gap_limit`."""
        return self.gap_limit / (1 + self.gap_limit)

    def report(self, message: str) -> None:
        if self.progress is not None:
            self.progress(message)


@dataclass(frozen=True)
class Outcome:
    placement: Placement | None
    status: Status
    lower_bound: float = 0.0
    notes: tuple[str, ...] = ()


class Solver(ABC):
    name: ClassVar[str]
    capabilities: ClassVar[Capabilities]

    @abstractmethod
    def solve(self, instance: Instance, settings: Settings) -> Outcome:
        """Find a placement of ``instance``; never raise for an infeasible instance."""
