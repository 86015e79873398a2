"""Fit the roofline model's efficiency factors and launch overhead to measured op times.

Model: ``t̂(v) = launch + max(flops / (peak · e_c), bytes / (bandwidth · e_m))`` with a compute
and a memory efficiency ``(e_c, e_m)`` per op class. The fit minimises, in log space,

    mean_v (log t̂(v) − log t(v))²  +  Σ_v w(v) (log t̂(v) − log t(v))² / Σ_v w(v)

over the log of every factor that some measured op depends on (a class without FLOPs has no
compute factor to fit). Log space makes a 2× error cost the same on a 10 µs op as on a 10 ms
one; the second term, weighted by ``w(v)`` = the op's share of its model's measured time,
keeps the few large ops, which make up most of the whole-model time, from being traded away
for the many small ones, and gives every model the same weight. (A separate whole-model term would let
a class with one op per model, such as the final Gemm, absorb the whole-model error.) The
objective is not smooth (the ``max``), so the solver is coordinate descent: a coarse log-grid
scan then a golden-section refinement per factor, a few sweeps — plain numpy, and fast at
thousands of ops.

Per-op kernel times leave out what the runtime spends between kernels (scheduling the next
node, allocating its output), which a stage pays once per op. That *dispatch overhead* is
estimated from the same profiles: per table, (whole-run mean − Σ per-op means) / ops — means,
because they add up where medians do not — and the median over tables (robust to one noisy
session), floored at zero. On this CPU it is ~10–20 µs per op with profiling on, 1–3% of a
zoo model's time and up to ~8% of a small one's. Per-op errors compare kernel times
(without it); whole-run errors compare the full stage cost (with it).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from .costs import Provenance, RooflineModel
from .devices import DeviceType, parse_device_type
from .errors import InputError
from .graph import OpClass, OpGraph
from .instance import Instance
from .jsonio import read_json
from .measured import MeasuredTable, check_matches

CALIBRATED_SCHEMA = "partition.roofline"
CALIBRATED_VERSION = 1

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
    """Per measured op: FLOPs over peak, bytes over bandwidth, measured seconds, class, type."""

    compute: np.ndarray
    traffic: np.ndarray
    measured: np.ndarray
    op_class: np.ndarray  # index into _CLASSES
    op_type: tuple[str, ...]
    share: np.ndarray  # the op's share of its model's measured time: each model weighs the same


_CLASSES = tuple(OpClass)
_MIN_OPS_PER_TYPE = 2  # an op type gets its own factors only with this many measured ops


def _data(pairs: Sequence[tuple[OpGraph, MeasuredTable]], device: DeviceType) -> _Data:
    rows, types = [], []
    for graph, table in pairs:
        times = table.times(graph)
        total = float(np.nansum(times))
        for op, t in zip(graph.ops, times, strict=True):
            if np.isfinite(t) and t > 0:
                compute = op.flops / device.peak(op.dtype)
                traffic = (op.bytes_read + op.bytes_written) / device.memory_bandwidth
                rows.append((compute, traffic, t, _CLASSES.index(op.op_class), t / total))
                types.append(op.op_type)
    array = np.array(rows, dtype=float).reshape(-1, 5)
    return _Data(array[:, 0], array[:, 1], array[:, 2], array[:, 3].astype(int), tuple(types), array[:, 4])


def _loss(data: _Data, group: np.ndarray, theta: np.ndarray) -> float:
    """``theta`` = log e_c per group, log e_m per group, log launch; ``group`` per op."""
    n = (len(theta) - 1) // 2
    compute = data.compute / np.exp(theta[:n])[group]
    traffic = data.traffic / np.exp(theta[n : 2 * n])[group]
    squared = (np.log(math.exp(theta[-1]) + np.maximum(compute, traffic)) - np.log(data.measured)) ** 2
    return float(np.mean(squared) + np.average(squared, weights=data.share))


def _line_search(
    loss: Callable[[np.ndarray], float], theta: np.ndarray, index: int, bounds: tuple[float, float]
) -> None:
    """Set ``theta[index]`` to the best value of a grid scan refined by golden section."""

    def value(x: float) -> float:
        theta[index] = x
        return loss(theta)

    current = theta[index]
    grid = np.linspace(*bounds, _GRID)
    best = int(np.argmin([value(x) for x in grid]))
    low, high = grid[max(best - 1, 0)], grid[min(best + 1, _GRID - 1)]
    for _ in range(30):
        a, b = high - _GOLDEN * (high - low), low + _GOLDEN * (high - low)
        if value(a) < value(b):
            high = b
        else:
            low = a
    theta[index] = min((value(x), x) for x in (current, grid[best], (low + high) / 2))[1]


def _descend(data: _Data, group: np.ndarray, theta: np.ndarray, groups: list[int]) -> None:
    """Coordinate descent over the factors of ``groups`` (those their ops depend on) and launch."""
    n = (len(theta) - 1) // 2
    free = [g for g in groups if np.any(data.compute[group == g] > 0)]  # no FLOPs: no compute factor
    free += [n + g for g in groups if np.any(group == g)]
    for _ in range(_SWEEPS):
        for index in free:
            _line_search(lambda t: _loss(data, group, t), theta, index, _EFFICIENCY_RANGE)
        _line_search(lambda t: _loss(data, group, t), theta, 2 * n, _LAUNCH_RANGE)


def fit(pairs: Sequence[tuple[OpGraph, MeasuredTable]], device: DeviceType) -> RooflineModel:
    """The roofline model of ``device`` that best explains the measured tables.

    First the class factors (from every op of the class), then, with those fixed, factors of
    each op type with at least two measured ops, starting from its class's. Every table is
    modelled with the same ``device`` figures (each profile records its own bandwidth estimate,
    which varies between sessions; the factors absorb the scale).
    """
    data = _data(pairs, device)
    default = RooflineModel()
    classes = len(_CLASSES)
    compute, memory = zip(*(default.efficiency[c] for c in _CLASSES), strict=True)
    theta = np.log([*compute, *memory, default.launch_overhead])
    _descend(data, data.op_class, theta, list(range(classes)))

    counts = Counter(data.op_type)
    refined = sorted(t for t, n in counts.items() if n >= _MIN_OPS_PER_TYPE)
    index = {t: classes + i for i, t in enumerate(refined)}
    group = np.array([index.get(t, c) for t, c in zip(data.op_type, data.op_class, strict=True)])
    owner = {t: data.op_class[data.op_type.index(t)] for t in refined}
    total = classes + len(refined)
    wide = np.empty(2 * total + 1)
    for g in range(total):
        source = g if g < classes else owner[refined[g - classes]]
        wide[g], wide[total + g] = theta[source], theta[classes + source]
    wide[-1] = theta[-1]
    _descend(data, group, wide, list(range(classes, total)))

    return RooflineModel(
        efficiency={c: (math.exp(wide[i]), math.exp(wide[total + i])) for i, c in enumerate(_CLASSES)},
        launch_overhead=math.exp(wide[-1]),
        type_efficiency={t: (math.exp(wide[index[t]]), math.exp(wide[total + index[t]])) for t in refined},
        dispatch_overhead=_dispatch_overhead(pairs),
    )


def _dispatch_overhead(pairs: Sequence[tuple[OpGraph, MeasuredTable]]) -> float:
    """Seconds per op between kernels (module docstring); 0 when no table has the means."""
    gaps = []
    for _, table in pairs:
        whole, means = table.whole_model, [t.mean for t in table.ops.values()]
        if whole is not None and whole.mean is not None and means and None not in means:
            gaps.append(max(0.0, (whole.mean - sum(means)) / len(means)))  # type: ignore[arg-type]
    return float(np.median(gaps)) if gaps else 0.0


def errors(graph: OpGraph, table: MeasuredTable, model: RooflineModel, device: DeviceType) -> Errors:
    """Per-op and whole-model error of ``model`` on ``device`` against one measured table."""
    check_matches(table, graph)
    measured = table.times(graph)
    predicted = np.array([model.kernel_time(op, device) for op in graph.ops])
    keep = np.isfinite(measured) & (measured > 0)
    relative = np.abs(predicted[keep] - measured[keep]) / measured[keep]
    total = float(predicted[keep].sum())
    run = table.whole_model.median if table.whole_model is not None else None
    stage = float(predicted.sum()) + model.dispatch_overhead * len(graph.ops)  # = Σ op_time
    return Errors(
        median=float(np.median(relative)),
        p90=float(np.percentile(relative, 90)),
        whole_model=total / float(measured[keep].sum()) - 1,
        whole_run=None if not run else stage / run - 1,
    )


@dataclass(frozen=True)
class Calibrated:
    """A fitted roofline model with the device figures it was fitted against."""

    device: DeviceType
    model: RooflineModel


def calibrated_json(calibrated: Calibrated, report: dict[str, Any]) -> dict[str, Any]:
    device, model = calibrated.device, calibrated.model
    return {
        "schema": CALIBRATED_SCHEMA,
        "version": CALIBRATED_VERSION,
        "device_type": device.name,
        "device": {
            "peak_flops": dict(device.peak_flops),
            "memory_bandwidth": device.memory_bandwidth,
            "memory": device.memory,
        },
        "launch_overhead": model.launch_overhead,
        "dispatch_overhead": model.dispatch_overhead,
        "efficiency": {c.value: list(e) for c, e in model.efficiency.items()},
        "type_efficiency": {t: list(e) for t, e in model.type_efficiency.items()},
        "errors": report,
    }


def _factors(value: Any, what: str) -> tuple[float, float]:
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise InputError(f"{what}: expected [compute efficiency, memory efficiency]")
    compute, memory = value
    for x in (compute, memory):
        if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x) or x <= 0:
            raise InputError(f"{what}: efficiency {x!r} is not a positive number")
    return float(compute), float(memory)


def load_calibrated(path: str | Path) -> Calibrated:
    """Read a ``partition calibrate -o`` file; every problem is one :class:`InputError`."""
    where = str(path)
    document = read_json(path, "calibrated roofline")
    if not isinstance(document, dict) or document.get("schema") != CALIBRATED_SCHEMA:
        raise InputError(f"{where}: not a calibrated roofline file (schema {CALIBRATED_SCHEMA!r})")
    if document.get("version") != CALIBRATED_VERSION:
        raise InputError(f"{where}: unsupported calibrated-roofline version {document.get('version')!r}")
    try:
        device = parse_device_type(str(document["device_type"]), document["device"])
        efficiency = {c: _factors(document["efficiency"][c.value], f"{where}: {c.value}") for c in _CLASSES}
        types = {str(t): _factors(e, f"{where}: {t}") for t, e in document.get("type_efficiency", {}).items()}
        launch = float(document["launch_overhead"])
        dispatch = float(document.get("dispatch_overhead", 0.0))
    except KeyError as error:
        raise InputError(f"{where}: missing field {error.args[0]!r}") from None
    except (TypeError, ValueError, AttributeError) as error:
        raise InputError(f"{where}: malformed calibrated roofline ({error})") from None
    for name, value in (("launch", launch), ("dispatch", dispatch)):
        if not math.isfinite(value) or value < 0:
            raise InputError(f"{where}: {name} overhead {value!r} is not a non-negative number")
    return Calibrated(device, RooflineModel(efficiency, launch, types, dispatch))


def apply_calibrated(
    instance: Instance, calibrated: Calibrated, *, where: str = "calibrated roofline"
) -> Instance:
    """``instance`` with its column of the calibrated device type modelled by the fitted factors."""
    name = calibrated.device.name
    if name not in instance.costs.type_names:
        raise InputError(
            f"{where}: cluster {instance.cluster.name!r} has no device type {name!r}"
            f" (it has {', '.join(instance.costs.type_names)}); add it to the cluster file"
        )
    times = np.array([calibrated.model.op_time(op, calibrated.device) for op in instance.graph.ops])
    provenance = np.full(len(times), Provenance.ROOFLINE, dtype=object)
    source = {**instance.source, "calibrated": {**instance.source.get("calibrated", {}), name: where}}
    return replace(instance, costs=instance.costs.with_column(name, times, provenance), source=source)
