"""The partitioners that pipeline-parallel frameworks ship, as baselines for the exact solvers.

Each cuts the graph's topological order (the op order of the graph) into contiguous stages —
every such split respects the edges — and none looks at communication or memory:

- ``uniform``: the same number of ops per stage (Megatron-LM, DeepSpeed ``partition_method=
  "uniform"``).
- ``balanced-params``: minimise the largest stage's parameter bytes (DeepSpeed
  ``"parameters"``).
- ``balanced-time``: minimise the largest stage's compute time, with times taken on one device
  type as if profiled there (torchgpipe ``balance_by_time``): the fastest type among the
  chosen devices.
- ``single-device``: the whole model on the one device where it runs fastest and fits.

The split baselines use ``min(k, ops)`` stages on the devices where the whole model runs
fastest (ties in cluster order), kept in cluster order so that neighbouring stages share a host
where they can. A split the evaluator rejects (memory, colocation, an op a device cannot run) is
reported as no solution with the reason, as the framework would fail to launch it.
"""

from __future__ import annotations

from abc import abstractmethod

import numpy as np

from ..evaluator import evaluate
from ..instance import Instance
from ..placement import Placement, Status
from .base import Capabilities, Outcome, Scope, Settings, Solver

_BISECTIONS = 100


def _model_time(instance: Instance, device: int) -> float:
    return float(instance.costs.times[:, instance.cluster.type_index[device]].sum())


def _fastest_devices(instance: Instance, count: int) -> tuple[int, ...]:
    """The ``count`` devices on which the whole model runs fastest, in cluster order."""
    ranked = sorted(range(len(instance.cluster.devices)), key=lambda d: (_model_time(instance, d), d))
    return tuple(sorted(ranked[:count]))


def _greedy_parts(weights: np.ndarray, limit: float) -> list[int]:
    """Start index of each part when parts are filled in order up to ``limit`` (with a relative
    slack for rounding, so that the limit ``sum(weights)`` always gives one part)."""
    starts, load = [0], 0.0
    for v, w in enumerate(weights):
        if load + w > limit * (1 + 1e-12) and v > starts[-1]:
            starts.append(v)
            load = 0.0
        load += w
    return starts


def balanced_split(weights: np.ndarray, parts: int) -> list[int]:
    """Boundaries ``0 = b_0 < … < b_parts = n`` of ``parts`` non-empty contiguous parts with
    the smallest largest sum (bisection on the limit with a greedy fill, as DeepSpeed's
    ``partition_balanced``), then split further while too few parts."""
    weights = np.asarray(weights, dtype=float)
    n = len(weights)
    low, high = float(weights.max(initial=0.0)), float(weights.sum())
    for _ in range(_BISECTIONS):
        if high - low <= 1e-12 * max(high, 1e-300):
            break
        middle = (low + high) / 2
        if len(_greedy_parts(weights, middle)) <= parts:
            high = middle
        else:
            low = middle
    starts = _greedy_parts(weights, high)
    bounds = [*starts, n]
    while len(bounds) - 1 < parts:  # splitting a part never raises the largest sum
        widest = max(range(len(bounds) - 1), key=lambda s: bounds[s + 1] - bounds[s])
        bounds.insert(widest + 1, (bounds[widest] + bounds[widest + 1]) // 2)
    return bounds


def _checked(instance: Instance, placement: Placement, what: str) -> Outcome:
    evaluation = evaluate(instance, placement)
    if not evaluation.valid:
        return Outcome(None, Status.NO_SOLUTION, 0.0, (f"{what}: {evaluation.violations[0]}",))
    return Outcome(placement, Status.FEASIBLE, 0.0, (what,))


class _SplitBaseline(Solver):
    """Cut the topological order into ``min(k, ops)`` parts given by :meth:`_bounds`."""

    capabilities = Capabilities(scope=Scope.HEURISTIC)

    @abstractmethod
    def _bounds(self, instance: Instance, devices: tuple[int, ...]) -> list[int]:
        """Part boundaries along the op order, one part per device."""

    def solve(self, instance: Instance, settings: Settings) -> Outcome:
        n = len(instance.graph.ops)
        devices = _fastest_devices(instance, min(instance.options.stages, n))
        bounds = self._bounds(instance, devices)
        stage_of = tuple(s for s in range(len(devices)) for _ in range(bounds[s], bounds[s + 1]))
        names = ", ".join(instance.cluster.devices[d].id for d in devices)
        return _checked(
            instance, Placement(stage_of, devices), f"{self.name}: {len(devices)} stages on {names}"
        )


class Uniform(_SplitBaseline):
    name = "uniform"

    def _bounds(self, instance: Instance, devices: tuple[int, ...]) -> list[int]:
        parts = np.array_split(np.arange(len(instance.graph.ops)), len(devices))
        return [0, *np.cumsum([len(p) for p in parts]).tolist()]


class BalancedParams(_SplitBaseline):
    name = "balanced-params"

    def _bounds(self, instance: Instance, devices: tuple[int, ...]) -> list[int]:
        return balanced_split(instance.graph.param_bytes, len(devices))


class BalancedTime(_SplitBaseline):
    name = "balanced-time"

    def _bounds(self, instance: Instance, devices: tuple[int, ...]) -> list[int]:
        profiled = min(devices, key=lambda d: (_model_time(instance, d), d))
        times = instance.costs.times[:, instance.cluster.type_index[profiled]]
        return balanced_split(np.where(np.isfinite(times), times, 0.0), len(devices))


class SingleDevice(Solver):
    name = "single-device"
    capabilities = Capabilities(scope=Scope.HEURISTIC)

    def solve(self, instance: Instance, settings: Settings) -> Outcome:
        if instance.options.exact_stages and instance.options.stages > 1:
            return Outcome(
                None, Status.NO_SOLUTION, 0.0, ("single-device: exactly one stage is not allowed",)
            )
        stage_of = (0,) * len(instance.graph.ops)
        best: tuple[float, Placement] | None = None
        for members in instance.cluster.classes:  # devices of one class are interchangeable
            placement = Placement(stage_of, (members[0],))
            evaluation = evaluate(instance, placement)
            if evaluation.valid and (best is None or evaluation.bottleneck < best[0]):
                best = (evaluation.bottleneck, placement)
        if best is None:
            return Outcome(
                None, Status.NO_SOLUTION, 0.0, ("single-device: the model fits on no single device",)
            )
        device = instance.cluster.devices[best[1].devices[0]].id
        return Outcome(best[1], Status.FEASIBLE, 0.0, (f"single-device: the whole model on {device}",))
