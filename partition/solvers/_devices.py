"""Choosing concrete devices for stages, up to the devices that are exactly interchangeable.

Two devices of the same type on the same host are indistinguishable to the formulation: they
have the same op times and memory, and every link depends only on the two hosts involved. So
a search over device sequences only needs one representative per sequence of *(type, host)
classes* (:attr:`partition.cluster.Cluster.classes`); each class hands out its devices in
cluster order.

The heuristics search device sequences as *host orders*: hosts visited one after another, each
lending its devices fastest type first, so consecutive stages share a host's fast link and only
host changes cross the slow one.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from ..instance import Instance


def device_sequences(
    classes: Sequence[Sequence[int]], allowed: Sequence[Sequence[int]]
) -> Iterator[tuple[int, ...]]:
    """Every distinct-device sequence giving stage ``s`` a device of a class in ``allowed[s]``.

    One sequence per sequence of classes (the rest are the same placement up to renaming).
    """
    used = [0] * len(classes)
    chosen: list[int] = []

    def extend(stage: int) -> Iterator[tuple[int, ...]]:
        if stage == len(allowed):
            yield tuple(chosen)
            return
        for c in allowed[stage]:
            if used[c] < len(classes[c]):
                chosen.append(classes[c][used[c]])
                used[c] += 1
                yield from extend(stage + 1)
                used[c] -= 1
                chosen.pop()

    yield from extend(0)


def host_ranking(instance: Instance) -> list[list[int]]:
    """Hosts (as device lists, fastest type first), fastest host first, for this model."""
    cluster = instance.cluster
    totals = instance.costs.finite_times().sum(axis=0)
    hosts: list[list[int]] = [[] for _ in cluster.hosts]
    for d, device in enumerate(cluster.devices):
        hosts[device.host].append(d)
    for devices in hosts:
        devices.sort(key=lambda d: (totals[cluster.type_index[d]], d))
    hosts = [h for h in hosts if h]
    return sorted(hosts, key=lambda h: (totals[cluster.type_index[h[0]]], h[0]))


def host_sequence(hosts: list[list[int]], k: int) -> list[int]:
    """The first ``k`` devices of the hosts in order."""
    return [d for host in hosts for d in host][:k]


def used_hosts(hosts: list[list[int]], k: int) -> int:
    """How many of ``hosts`` (in order) the first ``k`` devices span."""
    return int(np.searchsorted(np.cumsum([len(h) for h in hosts]), k) + 1) if k > 0 else 0


def host_orders(hosts: list[list[int]], k: int) -> list[list[list[int]]]:
    """Starting host orders: the used hosts fastest first, slowest first, fastest last, interleaved."""
    used = min(used_hosts(hosts, k), len(hosts))
    chosen, rest = hosts[:used], hosts[used:]
    variants = [chosen, chosen[::-1], chosen[1:] + chosen[:1], chosen[::2] + chosen[1::2]]
    unique = []
    for variant in variants:
        if variant not in unique:
            unique.append(variant)
    return [variant + rest for variant in unique]


def neighbour_hosts(hosts: list[list[int]], used: int, rng: np.random.Generator) -> list[list[int]]:
    """Swap two used hosts, or a used host with an unused one."""
    hosts = list(hosts)
    a, b = (int(x) for x in rng.choice(len(hosts), size=2, replace=False))
    if a >= used and b >= used:
        a = int(rng.integers(used))
    hosts[a], hosts[b] = hosts[b], hosts[a]
    return hosts
