"""Fit the roofline model's efficiency factors and launch overhead to measured op times.

Model: ``t̂(v) = launch + max(flops / (peak · e_c), bytes / (bandwidth · e_m))`` with a compute
and a memory efficiency ``(e_c, e_m)`` per op class. The fit minimises, in log space,

    mean_v (log t̂(v) − log t(v))²  +  Σ_v t(v) (log t̂(v) − log t(v))² / Σ_v t(v)

over the log of every factor that some measured op depends on (a class without FLOPs has no
compute factor to fit). Log space makes a 2× error cost the same on a 10 µs op as on a 10 ms
one; the time-weighted term keeps the few large ops, which make up most of the whole-model
time, from being traded away for the many small ones. (A separate whole-model term would let
a class with one op per model, such as the final Gemm, absorb the whole-model error.) The
objective is not smooth (the ``max``), so the solver is coordinate descent: a coarse log-grid
scan then a golden-section refinement per factor, a few sweeps — plain numpy, and fast at
thousands of ops.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .costs import RooflineModel
from .devices import DeviceType
from .graph import OpClass, OpGraph
from .measured import MeasuredTable, check_matches

_EFFICIENCY_RANGE = (math.log(1e-4), math.log(10.0))  # >1 allowed: nominal CPU peaks are rough
_LAUNCH_RANGE = (math.log(1e-8), math.log(1e-2))
_GRID = 41
_SWEEPS = 5
_GOLDEN = (math.sqrt(5) - 1) / 2


@dataclass(frozen=True)
class Errors:
    """How far predicted op times are from measured ones."""

    median: float  # median absolute relative error per op
    p90: float  # 90th percentile of the same
    whole_model: float  # (Σ predicted − Σ measured) / Σ measured, over the model's ops
    whole_run: float | None  # the same against the measured whole-model run (median)


@dataclass(frozen=True, eq=False)
class _Data:
    """Per measured op: class index, FLOPs over peak, bytes over bandwidth, measured seconds."""

    op_class: np.ndarray
    compute: np.ndarray
    traffic: np.ndarray
    measured: np.ndarray


_CLASSES = tuple(OpClass)


def _data(pairs: Sequence[tuple[OpGraph, MeasuredTable]], device: DeviceType) -> _Data:
    rows = []
    for graph, table in pairs:
        times = table.times(graph)
        for op, t in zip(graph.ops, times, strict=True):
            if np.isfinite(t) and t > 0:
                compute = op.flops / device.peak(op.dtype)
                traffic = (op.bytes_read + op.bytes_written) / device.memory_bandwidth
                rows.append((_CLASSES.index(op.op_class), compute, traffic, t))
    array = np.array(rows, dtype=float).reshape(-1, 4)
    return _Data(array[:, 0].astype(int), array[:, 1], array[:, 2], array[:, 3])


def _predict(data: _Data, theta: np.ndarray) -> np.ndarray:
    """``theta`` = log e_c per class, log e_m per class, log launch."""
    n = len(_CLASSES)
    compute_eff, memory_eff = np.exp(theta[:n]), np.exp(theta[n : 2 * n])
    compute = data.compute / compute_eff[data.op_class]
    traffic = data.traffic / memory_eff[data.op_class]
    return math.exp(theta[-1]) + np.maximum(compute, traffic)


def _loss(data: _Data, theta: np.ndarray) -> float:
    squared = (np.log(_predict(data, theta)) - np.log(data.measured)) ** 2
    return float(np.mean(squared) + np.average(squared, weights=data.measured))


def _theta(model: RooflineModel) -> np.ndarray:
    compute = [math.log(model.efficiency[c][0]) for c in _CLASSES]
    memory = [math.log(model.efficiency[c][1]) for c in _CLASSES]
    return np.array([*compute, *memory, math.log(model.launch_overhead)])


def _model(theta: np.ndarray) -> RooflineModel:
    n = len(_CLASSES)
    efficiency = {c: (math.exp(theta[i]), math.exp(theta[n + i])) for i, c in enumerate(_CLASSES)}
    return RooflineModel(efficiency=efficiency, launch_overhead=math.exp(theta[-1]))


def _line_search(data: _Data, theta: np.ndarray, index: int, bounds: tuple[float, float]) -> None:
    """Set ``theta[index]`` to the best value of a grid scan refined by golden section."""

    def value(x: float) -> float:
        theta[index] = x
        return _loss(data, theta)

    current = theta[index]
    grid = np.linspace(*bounds, _GRID)
    losses = [value(x) for x in grid]
    best = int(np.argmin(losses))
    low, high = grid[max(best - 1, 0)], grid[min(best + 1, _GRID - 1)]
    for _ in range(30):
        a, b = high - _GOLDEN * (high - low), low + _GOLDEN * (high - low)
        if value(a) < value(b):
            high = b
        else:
            low = a
    candidates = [(value(x), x) for x in (current, grid[best], (low + high) / 2)]
    theta[index] = min(candidates)[1]


def fit(
    pairs: Sequence[tuple[OpGraph, MeasuredTable]], device: DeviceType, start: RooflineModel | None = None
) -> RooflineModel:
    """The roofline model of ``device`` that best explains the measured tables.

    Every table is modelled with the same ``device`` figures (each profile records its own
    bandwidth estimate, which varies between sessions; the factors absorb the scale).
    """
    data = _data(pairs, device)
    theta = _theta(start or RooflineModel())
    n = len(_CLASSES)
    present = set(data.op_class.tolist())
    has_flops = {c for c in present if np.any(data.compute[data.op_class == c] > 0)}
    free = sorted(has_flops) + [n + c for c in sorted(present)]
    for _ in range(_SWEEPS):
        for index in free:
            _line_search(data, theta, index, _EFFICIENCY_RANGE)
        _line_search(data, theta, 2 * n, _LAUNCH_RANGE)
    return _model(theta)


def errors(graph: OpGraph, table: MeasuredTable, model: RooflineModel, device: DeviceType) -> Errors:
    """Per-op and whole-model error of ``model`` on ``device`` against one measured table."""
    check_matches(table, graph)
    measured = table.times(graph)
    predicted = np.array([model.op_time(op, device) for op in graph.ops])
    keep = np.isfinite(measured) & (measured > 0)
    relative = np.abs(predicted[keep] - measured[keep]) / measured[keep]
    total = float(predicted[keep].sum())
    run = table.whole_model.median if table.whole_model is not None else None
    return Errors(
        median=float(np.median(relative)),
        p90=float(np.percentile(relative, 90)),
        whole_model=total / float(measured[keep].sum()) - 1,
        whole_run=None if not run else float(predicted.sum()) / run - 1,
    )
