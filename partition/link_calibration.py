"""A link's latency and bandwidth from measured transfers, and a cluster that uses it.

The communication model charges a message of ``b`` bytes ``latency + b / bandwidth`` seconds on
a link (FORMULATION.md). Given measured ``(bytes, seconds)`` transfers of at least two sizes,
the two figures are the least-squares line through them, constrained to a non-negative latency
(when the unconstrained intercept is negative, the best line through the origin: all the time
is bandwidth). Two points give the line through both. Measurements that cannot come from such a
link are refused: fewer than two sizes, non-positive or non-finite numbers, and a larger
message that did not take longer (times must increase with size).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum

import numpy as np

from .cluster import Cluster
from .devices import LinkType
from .errors import InputError


class LinkScope(Enum):
    """Which links of a cluster a measurement stands for."""

    INTRA = "intra"  # between devices of one host (every host's intra-host link)
    INTER = "inter"  # between hosts


@dataclass(frozen=True)
class Transfer:
    """One measured transfer: message size and seconds it took."""

    bytes: float
    seconds: float


def parse_transfer(text: str) -> Transfer:
    """``BYTES:SECONDS`` (e.g. ``4096:2.1e-5``) as a transfer; anything else is one InputError."""
    size, sep, seconds = text.partition(":")
    try:
        if not sep:
            raise ValueError
        transfer = Transfer(float(size), float(seconds))
    except ValueError:
        raise InputError(f"link measurement {text!r}: expected BYTES:SECONDS, e.g. 4096:2.1e-5") from None
    for value, what in ((transfer.bytes, "size"), (transfer.seconds, "time")):
        if not math.isfinite(value) or value <= 0:
            raise InputError(f"link measurement {text!r}: {what} must be a positive finite number")
    return transfer


def fit_link(transfers: Sequence[Transfer], name: str) -> LinkType:
    """The link ``name`` whose ``latency + bytes / bandwidth`` best fits ``transfers``."""
    points = sorted(transfers, key=lambda t: t.bytes)
    if len({t.bytes for t in points}) < 2:
        raise InputError("link calibration needs transfers of at least two different sizes")
    for smaller, larger in itertools.pairwise(points):
        if larger.bytes == smaller.bytes:
            raise InputError(f"link calibration: size {smaller.bytes:.0f} B is given twice")
        if larger.seconds <= smaller.seconds:
            raise InputError(
                f"link calibration: {larger.bytes:.0f} B took {larger.seconds:g} s, not longer than"
                f" {smaller.bytes:.0f} B ({smaller.seconds:g} s); times must increase with size"
            )
    sizes = np.array([t.bytes for t in points])
    seconds = np.array([t.seconds for t in points])
    slope, latency = np.polyfit(sizes, seconds, 1)
    if latency < 0:  # constrained to latency ≥ 0: the best line through the origin
        slope, latency = float(sizes @ seconds / (sizes @ sizes)), 0.0
    return LinkType(name, float(1.0 / slope), float(latency))


def with_link(cluster: Cluster, scope: LinkScope, link: LinkType) -> Cluster:
    """``cluster`` with every intra-host link, or its inter-host link, replaced by ``link``."""
    if scope is LinkScope.INTER:
        return replace(cluster, inter_host_link=link)
    return replace(cluster, hosts=tuple(replace(host, intra_link=link) for host in cluster.hosts))
