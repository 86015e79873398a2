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
    """Efficiency factors per op class and a fixed per-op launch overhead (seconds).

    ``type_efficiency`` overrides the class factors for single op types, where calibration
    found a kernel far from its class (e.g. onnxruntime's CPU ``LRN``). ``dispatch_overhead``
    is the runtime's time between kernels per op (scheduling, allocation), which a whole run
    pays on top of its kernels; ``launch_overhead`` is part of the kernel time itself.
    """

    efficiency: Mapping[OpClass, tuple[float, float]] = field(
        default_factory=lambda: dict(_DEFAULT_EFFICIENCY)
    )
    launch_overhead: float = 4e-6
    type_efficiency: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    dispatch_overhead: float = 0.0

    def op_time(self, op: Op, device: DeviceType) -> float:
        """The op's cost in a stage: its kernel time plus the dispatch overhead."""
        return self.kernel_time(op, device) + self.dispatch_overhead

    def kernel_time(self, op: Op, device: DeviceType) -> float:
        if op.op_type in device.unsupported_op_types:
            return float("inf")
        compute_eff, memory_eff = self.type_efficiency.get(op.op_type) or self.efficiency[op.op_class]
        compute = op.flops / (device.peak(op.dtype) * compute_eff)
        traffic = (op.bytes_read + op.bytes_written) / (device.memory_bandwidth * memory_eff)
        return self.launch_overhead + max(compute, traffic)


@dataclass(frozen=True, eq=False)
class CostTable:
    """``times[v, τ]``: seconds of op ``v`` on device type ``type_names[τ]``.

    ``provenance[v, τ]`` says where each time came from, so an instance can mix a measured or
    imported table for some device types (or some ops) with modelled costs elsewhere.
    """

    type_names: tuple[str, ...]
    times: np.ndarray
    provenance: np.ndarray  # Provenance per (op, device type), dtype object; or one per type

    def __post_init__(self) -> None:
        if isinstance(self.provenance, tuple | list):  # one per device type, as before per-op provenance
            grid = np.empty(self.times.shape, dtype=object)
            grid[:, :] = np.array(self.provenance, dtype=object)[None, :]
            object.__setattr__(self, "provenance", grid)
        if self.provenance.shape != self.times.shape:
            raise ValueError(f"provenance is {self.provenance.shape}, times are {self.times.shape}")
        self.times.setflags(write=False)
        self.provenance.setflags(write=False)

    def column(self, type_name: str) -> np.ndarray:
        return self.times[:, self.type_names.index(type_name)]

    def finite_times(self) -> np.ndarray:
        """``times`` with 0 where a type cannot run the op, so that sums over ops stay finite."""
        return np.where(np.isfinite(self.times), self.times, 0.0)

    def column_provenance(self, type_name: str) -> Provenance | None:
        """The provenance shared by every op on ``type_name``; ``None`` when the column mixes."""
        values = set(self.provenance[:, self.type_names.index(type_name)])
        return values.pop() if len(values) == 1 else None

    def with_column(self, type_name: str, times: np.ndarray, provenance: np.ndarray) -> CostTable:
        """This table with type ``type_name``'s times and provenance replaced."""
        t = self.type_names.index(type_name)
        new_times, new_provenance = self.times.copy(), self.provenance.copy()
        new_times[:, t] = times
        new_provenance[:, t] = provenance
        return CostTable(self.type_names, new_times, new_provenance)


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
