"""Device and link types: the bundled catalog of real hardware and user additions.

A device type is what costs depend on (peak FLOP/s per dtype, memory bandwidth, capacity); a
device is one instance of a type in a cluster. The catalog ships public vendor figures so a
user can name ``H100-SXM`` without looking anything up; a cluster file may add its own types.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from .errors import ClusterError

DTYPES = ("fp32", "fp16", "bf16")


@dataclass(frozen=True)
class DeviceType:
    """Peak dense FLOP/s per dtype, memory bandwidth (bytes/s) and memory capacity (bytes)."""

    name: str
    peak_flops: Mapping[str, float]
    memory_bandwidth: float
    memory: float
    unsupported_op_types: frozenset[str] = field(default_factory=frozenset)

    def peak(self, dtype: str) -> float:
        """Peak for ``dtype``, falling back to fp32 where the device has no faster path."""
        return self.peak_flops.get(dtype, self.peak_flops["fp32"])


@dataclass(frozen=True)
class LinkType:
    """A point-to-point link: bandwidth in bytes/s and latency in seconds per message."""

    name: str
    bandwidth: float
    latency: float


def _positive(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ClusterError(f"{what}: expected a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ClusterError(f"{what}: must be a positive finite number, got {value!r}")
    return float(value)


def parse_device_type(name: str, spec: Mapping[str, Any]) -> DeviceType:
    """Build a device type from its catalog/cluster JSON entry, checking every figure."""
    if not isinstance(spec, Mapping):
        raise ClusterError(f"device type {name!r}: expected an object")
    peaks = spec.get("peak_flops")
    if not isinstance(peaks, Mapping) or "fp32" not in peaks:
        raise ClusterError(f"device type {name!r}: 'peak_flops' must give at least 'fp32'")
    unknown = sorted(set(peaks) - set(DTYPES))
    if unknown:
        raise ClusterError(f"device type {name!r}: unknown dtype {unknown[0]!r} in peak_flops")
    unsupported = spec.get("unsupported_op_types", [])
    if not isinstance(unsupported, list) or not all(isinstance(t, str) for t in unsupported):
        raise ClusterError(f"device type {name!r}: 'unsupported_op_types' must list op types")
    return DeviceType(
        name=name,
        peak_flops={d: _positive(v, f"device type {name!r} peak_flops.{d}") for d, v in peaks.items()},
        memory_bandwidth=_positive(spec.get("memory_bandwidth"), f"device type {name!r} memory_bandwidth"),
        memory=_positive(spec.get("memory"), f"device type {name!r} memory"),
        unsupported_op_types=frozenset(unsupported),
    )


def parse_link_type(name: str, spec: Mapping[str, Any]) -> LinkType:
    if not isinstance(spec, Mapping):
        raise ClusterError(f"link type {name!r}: expected an object")
    latency = spec.get("latency", 0.0)
    if isinstance(latency, bool) or not isinstance(latency, int | float) or latency < 0:
        raise ClusterError(f"link type {name!r}: latency must be a non-negative number")
    return LinkType(name, _positive(spec.get("bandwidth"), f"link type {name!r} bandwidth"), float(latency))


@dataclass(frozen=True)
class Catalog:
    device_types: Mapping[str, DeviceType]
    link_types: Mapping[str, LinkType]


@cache
def bundled_catalog() -> Catalog:
    """The device and link types that ship with the package (``partition/data/catalog.json``)."""
    document = json.loads(resources.files("partition").joinpath("data/catalog.json").read_text())
    return Catalog(
        device_types={n: parse_device_type(n, s) for n, s in document["device_types"].items()},
        link_types={n: parse_link_type(n, s) for n, s in document["link_types"].items()},
    )
