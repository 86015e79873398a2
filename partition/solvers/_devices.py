"""Choosing concrete devices for stages, up to the devices that are exactly interchangeable.

Two devices of the same type on the same host are indistinguishable to the formulation: they
have the same op times and memory, and every link depends only on the two hosts involved. So
a search over device sequences only needs one representative per sequence of *(type, host)
classes*; each class hands out its devices in cluster order.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from ..cluster import Cluster


def device_classes(cluster: Cluster) -> tuple[tuple[int, ...], ...]:
    """Device indices grouped by (type, host), in order of first appearance."""
    groups: dict[tuple[str, int], list[int]] = {}
    for d, device in enumerate(cluster.devices):
        groups.setdefault((device.type, device.host), []).append(d)
    return tuple(tuple(members) for members in groups.values())


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
