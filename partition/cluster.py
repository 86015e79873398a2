"""Clusters: hosts of devices and the links between them.

The topology is hierarchical, as in real deployments: every pair of devices in one host talks
over that host's intra-host link (NVLink, PCIe), every pair in different hosts over the
inter-host network. Devices are listed host by host, so consecutive devices are never farther
apart than non-consecutive ones — the order-based DP relies on this.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from .devices import Catalog, DeviceType, LinkType, bundled_catalog, parse_device_type, parse_link_type
from .errors import ClusterError
from .jsonio import read_json

CLUSTER_SCHEMA = "partition.cluster"
CLUSTER_VERSION = 1


@dataclass(frozen=True)
class Device:
    id: str
    type: str
    host: int


@dataclass(frozen=True)
class Host:
    name: str
    intra_link: LinkType


@dataclass(frozen=True, eq=False)
class Cluster:
    """Devices (host-ordered), the device types they use, and the link of every pair."""

    name: str
    devices: tuple[Device, ...]
    device_types: Mapping[str, DeviceType]
    hosts: tuple[Host, ...]
    inter_host_link: LinkType

    def __post_init__(self) -> None:
        if not self.devices:
            raise ClusterError(f"cluster {self.name!r} has no devices")

    @cached_property
    def type_names(self) -> tuple[str, ...]:
        """Device types in order of first appearance: the column order of cost tables."""
        return tuple(dict.fromkeys(d.type for d in self.devices))

    @cached_property
    def type_index(self) -> tuple[int, ...]:
        """Column of each device's type in :attr:`type_names`."""
        column = {name: i for i, name in enumerate(self.type_names)}
        return tuple(column[d.type] for d in self.devices)

    @cached_property
    def host_of(self) -> np.ndarray:
        """Each device's host (read-only): the links of a cluster of many devices are found per
        host, not pair by pair."""
        hosts = np.array([d.host for d in self.devices], dtype=np.int64)
        hosts.flags.writeable = False
        return hosts

    @cached_property
    def type_counts(self) -> tuple[int, ...]:
        return tuple(self.type_index.count(t) for t in range(len(self.type_names)))

    @cached_property
    def classes(self) -> tuple[tuple[int, ...], ...]:
        """Device indices grouped by (type, host), in order of first appearance: devices of one
        class have the same op times, memory and links, so solvers need only one of them."""
        groups: dict[tuple[str, int], list[int]] = {}
        for d, device in enumerate(self.devices):
            groups.setdefault((device.type, device.host), []).append(d)
        return tuple(tuple(members) for members in groups.values())

    def link(self, a: int, b: int) -> LinkType:
        """The link between devices ``a`` and ``b`` (indices into :attr:`devices`)."""
        host = self.devices[a].host
        return self.hosts[host].intra_link if host == self.devices[b].host else self.inter_host_link

    def group_links(self, group_of: Sequence[int], *, slowest: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """``(latency[g, h], bandwidth[g, h])``: the fastest (or slowest) link from a device of
        group ``g`` to another device of group ``h`` (``group_of[d]`` for each device), NaN where
        there is no such pair. Solvers' lower estimates price links group by group."""
        count = max(group_of) + 1
        pick_latency, pick_bandwidth = (np.fmax, np.fmin) if slowest else (np.fmin, np.fmax)
        latency, bandwidth = np.full((count, count), np.nan), np.full((count, count), np.nan)
        # counted per group and host, not pair by pair: a cluster may hold tens of thousands of
        # devices (``make fuzz`` drew one whose pairs took over half an hour)
        on = np.zeros((count, len(self.hosts)), dtype=np.int64)
        np.add.at(on, (np.asarray(group_of), self.host_of), 1)
        present = on > 0

        def link(pairs: np.ndarray, kind: LinkType) -> None:
            latency[pairs] = pick_latency(latency[pairs], kind.latency)
            bandwidth[pairs] = pick_bandwidth(bandwidth[pairs], kind.bandwidth)

        for host in np.flatnonzero(present.any(axis=0)):  # two devices on one host
            pairs = present[:, host, None] & present[None, :, host]
            pairs[np.diag_indices(count)] = on[:, host] >= 2  # within a group: two of its own
            link(pairs, self.hosts[host].intra_link)
        # on two hosts: unless both groups lie on one and the same host
        used, alone = present.any(axis=1), present.sum(axis=1) == 1
        only = np.where(alone, present.argmax(axis=1), -1)
        together = alone[:, None] & alone[None, :] & (only[:, None] == only[None, :])
        link(used[:, None] & used[None, :] & ~together, self.inter_host_link)
        return latency, bandwidth

    def memory(self, device: int) -> float:
        return self.device_types[self.devices[device].type].memory

    def to_json(self) -> dict[str, Any]:
        """The cluster as a self-contained JSON document (device and link types inlined)."""
        hosts = []
        for h, host in enumerate(self.hosts):
            counts: dict[str, int] = {}
            for device in self.devices:
                if device.host == h:
                    counts[device.type] = counts.get(device.type, 0) + 1
            hosts.append({"name": host.name, "devices": counts, "intra_link": host.intra_link.name})
        links = {h.intra_link.name: h.intra_link for h in self.hosts}
        links[self.inter_host_link.name] = self.inter_host_link
        return {
            "schema": CLUSTER_SCHEMA,
            "version": CLUSTER_VERSION,
            "name": self.name,
            "hosts": hosts,
            "inter_host_link": self.inter_host_link.name,
            "device_types": {
                t.name: {
                    "peak_flops": dict(t.peak_flops),
                    "memory_bandwidth": t.memory_bandwidth,
                    "memory": t.memory,
                    "unsupported_op_types": sorted(t.unsupported_op_types),
                }
                for t in self.device_types.values()
            },
            "link_types": {
                name: {"bandwidth": link.bandwidth, "latency": link.latency} for name, link in links.items()
            },
        }


_CLUSTER_KEYS = {
    "schema",
    "version",
    "name",
    "description",
    "hosts",
    "inter_host_link",
    "device_types",
    "link_types",
}
_HOST_KEYS = {"name", "devices", "intra_link"}
# every device is an object and solvers index them: a count of 10¹² (found by `make fuzz`) would
# fill the memory before any check, while real pipelines use tens to thousands
_MAX_DEVICES = 65_536


def _lookup(table: Mapping[str, Any], name: Any, what: str, where: str) -> Any:
    if not isinstance(name, str) or name not in table:
        known = ", ".join(sorted(table))
        raise ClusterError(f"{where}: unknown {what} {name!r} (known: {known})")
    return table[name]


def _mapping(document: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = document.get(key) or {}
    if not isinstance(value, Mapping):
        raise ClusterError(f"{where}: {key!r} must map names to specifications")
    return value


def parse_cluster(document: Any, *, where: str = "cluster", catalog: Catalog | None = None) -> Cluster:
    """Build a cluster from its JSON document; every problem is one :class:`ClusterError`."""
    if not isinstance(document, Mapping):
        raise ClusterError(f"{where}: expected a JSON object")
    if document.get("schema", CLUSTER_SCHEMA) != CLUSTER_SCHEMA:
        raise ClusterError(f"{where}: schema {document.get('schema')!r} is not {CLUSTER_SCHEMA!r}")
    if document.get("version", CLUSTER_VERSION) != CLUSTER_VERSION:
        raise ClusterError(f"{where}: unsupported cluster version {document.get('version')!r}")
    unknown = sorted(set(document) - _CLUSTER_KEYS)
    if unknown:
        raise ClusterError(f"{where}: unknown field {unknown[0]!r}")
    base = catalog or bundled_catalog()
    device_types = dict(base.device_types)
    for name, spec in _mapping(document, "device_types", where).items():
        device_types[name] = parse_device_type(name, spec)
    link_types = dict(base.link_types)
    for name, spec in _mapping(document, "link_types", where).items():
        link_types[name] = parse_link_type(name, spec)

    hosts_spec = document.get("hosts")
    if not isinstance(hosts_spec, list) or not hosts_spec:
        raise ClusterError(f"{where}: 'hosts' must be a non-empty list")
    hosts: list[Host] = []
    devices: list[Device] = []
    for h, spec in enumerate(hosts_spec):
        if not isinstance(spec, Mapping):
            raise ClusterError(f"{where}: host {h} must be an object")
        unknown = sorted(set(spec) - _HOST_KEYS)
        if unknown:
            raise ClusterError(f"{where}: host {h}: unknown field {unknown[0]!r}")
        name = str(spec.get("name", f"host{h}"))
        counts = spec.get("devices")
        if not isinstance(counts, Mapping) or not counts:
            raise ClusterError(f"{where}: host {name!r}: 'devices' must map device types to counts")
        link = _lookup(link_types, spec.get("intra_link", "pcie4"), "link type", f"{where}: host {name!r}")
        hosts.append(Host(name, link))
        for type_name, count in counts.items():
            _lookup(device_types, type_name, "device type", f"{where}: host {name!r}")
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ClusterError(
                    f"{where}: host {name!r}: count of {type_name!r} must be a whole number ≥ 0"
                )
            if len(devices) + count > _MAX_DEVICES:
                raise ClusterError(
                    f"{where}: host {name!r}: {count} of {type_name!r} make more than the"
                    f" {_MAX_DEVICES} devices a cluster may have"
                )
            devices.extend(Device(f"{name}/{type_name}:{i}", type_name, h) for i in range(count))
    if not devices:
        raise ClusterError(f"{where}: the cluster has no devices (every count is 0)")
    inter = _lookup(link_types, document.get("inter_host_link", "eth-100g"), "link type", where)
    used = {d.type for d in devices}
    return Cluster(
        name=str(document.get("name", "cluster")),
        devices=tuple(devices),
        device_types={t: device_types[t] for t in device_types if t in used},
        hosts=tuple(hosts),
        inter_host_link=inter,
    )


def bundled_cluster_names() -> list[str]:
    folder = resources.files("partition").joinpath("data/clusters")
    return sorted(p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json"))


def load_cluster(source: str | Path, *, catalog: Catalog | None = None) -> Cluster:
    """Load a cluster from a JSON path, or by the name of a bundled example cluster.

    ``catalog`` replaces the bundled one, e.g. to add device types an imported profile defines.
    """
    path = Path(source)
    if not path.exists() and str(source) in bundled_cluster_names():
        text = resources.files("partition").joinpath(f"data/clusters/{source}.json").read_text()
        return parse_cluster(json.loads(text), where=str(source), catalog=catalog)
    if not path.exists():
        raise ClusterError(
            f"{source}: cluster file not found (bundled clusters: {', '.join(bundled_cluster_names())})"
        )
    return parse_cluster(read_json(path, "cluster"), where=str(path), catalog=catalog)
