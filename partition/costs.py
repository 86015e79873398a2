"""Per-op, per-device-type times: the analytic roofline model and the cost table it fills.

Roofline: ``t = launch + max(flops / (peak[dtype] * eff_compute), bytes / (bandwidth *
eff_memory))``. Peaks are vendor figures that real kernels do not reach, so each op class has
efficiency factors; the defaults below are typical achieved fractions on large GPU kernels
(cuBLAS GEMMs reach ~70% of tensor peak, convolutions ~60%, bandwidth-bound kernels ~80% of
HBM bandwidth) and are meant to be replaced by calibrated ones. An op type a device type
cannot run costs ``inf`` there, which every solver must respect.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from .cluster import Cluster
from .devices import DeviceType
from .graph import Op, OpClass, OpGraph


class Provenance(Enum):
    """Where a time came from."""

    ROOFLINE = "roofline"
    MEASURED = "measured"
    IMPORTED = "imported"


_DEFAULT_EFFICIENCY: dict[OpClass, tuple[float, float]] = {
    # (fraction of peak FLOP/s, fraction of memory bandwidth)
    OpClass.MATMUL: (0.70, 0.80),
    OpClass.CONV: (0.60, 0.80),
    OpClass.ELEMENTWISE: (0.50, 0.80),
    OpClass.REDUCTION: (0.50, 0.70),
    OpClass.DATA_MOVEMENT: (1.00, 0.70),
    OpClass.OTHER: (0.30, 0.50),
}


@dataclass(frozen=True)
class RooflineModel:
    """Efficiency factors per op class and a fixed per-op launch overhead (seconds)."""

    efficiency: Mapping[OpClass, tuple[float, float]] = field(
        default_factory=lambda: dict(_DEFAULT_EFFICIENCY)
    )
    launch_overhead: float = 4e-6

    def op_time(self, op: Op, device: DeviceType) -> float:
        if op.op_type in device.unsupported_op_types:
            return float("inf")
        compute_eff, memory_eff = self.efficiency[op.op_class]
        compute = op.flops / (device.peak(op.dtype) * compute_eff)
        traffic = (op.bytes_read + op.bytes_written) / (device.memory_bandwidth * memory_eff)
        return self.launch_overhead + max(compute, traffic)


@dataclass(frozen=True, eq=False)
class CostTable:
    """``times[v, τ]``: seconds of op ``v`` on device type ``type_names[τ]``, with provenance."""

    type_names: tuple[str, ...]
    times: np.ndarray
    provenance: tuple[Provenance, ...]

    def __post_init__(self) -> None:
        self.times.setflags(write=False)

    def column(self, type_name: str) -> np.ndarray:
        return self.times[:, self.type_names.index(type_name)]


def roofline_costs(graph: OpGraph, cluster: Cluster, model: RooflineModel | None = None) -> CostTable:
    """Model every op on every device type of ``cluster``."""
    model = model or RooflineModel()
    types = [cluster.device_types[name] for name in cluster.type_names]
    times = np.array([[model.op_time(op, t) for t in types] for op in graph.ops], dtype=float)
    return CostTable(
        cluster.type_names,
        times.reshape(len(graph.ops), len(types)),
        tuple(Provenance.ROOFLINE for _ in types),
    )
