"""Lower bounds on the optimal bottleneck that hold for every valid placement.

- *Largest op*: some stage holds op ``v``, so the bottleneck is at least ``v``'s time on the
  fastest device type that can run it.
- *Work over devices*: the stages run every op once on at most ``min(k, |devices|)`` devices,
  so the bottleneck is at least the total of each op's fastest time divided by that count.
Communication only adds to stage times, so both hold with or without it.
"""

from __future__ import annotations

import numpy as np

from .instance import Instance


def fastest_times(instance: Instance) -> np.ndarray:
    """Each op's time on the fastest device type of the cluster that can run it."""
    return instance.costs.times.min(axis=1)


def trivial_lower_bound(instance: Instance) -> float:
    fastest = fastest_times(instance)
    if not np.all(np.isfinite(fastest)):
        return float("inf")
    devices = min(instance.options.stages, len(instance.cluster.devices))
    return float(max(fastest.max(), fastest.sum() / devices))
