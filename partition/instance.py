"""Instances: an op graph, a cluster, the cost table joining them, and the options of a solve.

An instance file (schema ``partition.instance``, version 1) holds all of it, so a solve can be
rerun anywhere without the model or the catalog that produced it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from .cluster import Cluster, parse_cluster
from .costs import CostTable, Provenance, roofline_costs
from .errors import InfeasibleError, InputError
from .graph import Op, OpClass, OpGraph, Tensor
from .jsonio import read_json

INSTANCE_SCHEMA = "partition.instance"
INSTANCE_VERSION = 1
_MIXED = "mixed"


class CommMode(Enum):
    """How a tensor sent to several later stages is charged (see FORMULATION.md)."""

    PER_DESTINATION = "per-destination"
    ONCE = "once"


@dataclass(frozen=True)
class Options:
    """What the user asks of a solve: at most (or exactly) ``stages`` stages, and how to cost."""

    stages: int
    exact_stages: bool = False
    comm_mode: CommMode = CommMode.PER_DESTINATION
    overlap: bool = False
    colocate: tuple[tuple[str, ...], ...] = ()
    mode: str = "inference"

    def __post_init__(self) -> None:
        if isinstance(self.stages, bool) or not isinstance(self.stages, int) or self.stages < 1:
            raise InputError(f"the number of stages must be a whole number ≥ 1, got {self.stages!r}")
        if self.mode != "inference":
            raise InputError(f"mode {self.mode!r} is not supported yet (only 'inference')")
        for group in self.colocate:
            if not group or not all(isinstance(op_id, str) for op_id in group):
                raise InputError(f"colocation group {list(group)!r} must be a non-empty list of op ids")


@dataclass(frozen=True, eq=False)
class Instance:
    name: str
    graph: OpGraph
    cluster: Cluster
    costs: CostTable
    options: Options
    source: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.costs.times.shape != (len(self.graph.ops), len(self.cluster.type_names)):
            raise InputError(
                f"instance {self.name!r}: cost table is {self.costs.times.shape}, expected"
                f" {len(self.graph.ops)} ops × {len(self.cluster.type_names)} device types"
            )
        if self.costs.type_names != self.cluster.type_names:
            raise InputError(f"instance {self.name!r}: cost table device types do not match the cluster")
        bad = np.argwhere(np.isnan(self.costs.times) | (self.costs.times < 0))
        if len(bad):
            v, t = bad[0]
            raise InputError(
                f"instance {self.name!r}: op {self.graph.ops[v].id!r} has invalid time"
                f" {self.costs.times[v, t]} on {self.costs.type_names[t]}"
            )
        if self.options.stages > len(self.cluster.devices):
            raise InfeasibleError(
                f"{self.options.stages} stages requested but cluster {self.cluster.name!r} has only"
                f" {len(self.cluster.devices)} devices"
            )
        for group in self.options.colocate:
            for op_id in group:
                if op_id not in self.graph.index:
                    raise InputError(f"colocation group names unknown op {op_id!r}")

    def with_options(self, **changes: Any) -> Instance:
        return replace(self, options=replace(self.options, **changes))

    def transfer_time(self, sender: int, receiver: int, size: float) -> float:
        """Seconds to move ``size`` bytes from device ``sender`` to device ``receiver``."""
        link = self.cluster.link(sender, receiver)
        return link.latency + size / link.bandwidth

    def to_json(self) -> dict[str, Any]:
        graph = self.graph
        return {
            "schema": INSTANCE_SCHEMA,
            "version": INSTANCE_VERSION,
            "name": self.name,
            "source": dict(self.source),
            "graph": {
                "name": graph.name,
                "ops": [_op_json(op) for op in graph.ops],
                "tensors": [
                    {"name": t.name, "bytes": t.bytes, "producer": t.producer, "consumers": list(t.consumers)}
                    for t in graph.tensors
                ],
                "weights": dict(graph.weights),
            },
            "cluster": self.cluster.to_json(),
            "costs": {
                "device_types": list(self.costs.type_names),
                **_provenance_json(self.costs),
                "times": {
                    name: [float(x) for x in self.costs.times[:, t]]
                    for t, name in enumerate(self.costs.type_names)
                },
            },
            "options": {
                "stages": self.options.stages,
                "exact_stages": self.options.exact_stages,
                "comm_mode": self.options.comm_mode.value,
                "overlap": self.options.overlap,
                "colocate": [list(g) for g in self.options.colocate],
                "mode": self.options.mode,
            },
        }


def _provenance_json(costs: CostTable) -> dict[str, Any]:
    """Per-type provenance (``"mixed"`` where a column mixes), per-op lists for mixed types.

    Version-1 readers that predate per-op provenance read uniform columns unchanged.
    """
    shared = {name: costs.column_provenance(name) for name in costs.type_names}
    document: dict[str, Any] = {
        "provenance": [_MIXED if p is None else p.value for p in shared.values()],
    }
    mixed = {
        name: [p.value for p in costs.provenance[:, t]]
        for t, name in enumerate(costs.type_names)
        if shared[name] is None
    }
    if mixed:
        document["op_provenance"] = mixed
    return document


def _provenance_grid(
    c: Mapping[str, Any], type_names: tuple[str, ...], num_ops: int, where: str
) -> np.ndarray:
    listed = dict(zip(c["device_types"], c.get("provenance", ()), strict=False))
    per_op = c.get("op_provenance", {})
    grid = np.empty((num_ops, len(type_names)), dtype=object)
    for t, name in enumerate(type_names):
        if name in per_op:
            if len(per_op[name]) != num_ops:
                raise InputError(
                    f"{where}: {len(per_op[name])} provenance entries for {name!r}, expected {num_ops}"
                )
            grid[:, t] = [Provenance(p) for p in per_op[name]]
        elif listed.get(name, "roofline") == _MIXED:
            raise InputError(f"{where}: provenance of {name!r} is 'mixed' but op_provenance lacks it")
        else:
            grid[:, t] = Provenance(listed.get(name, "roofline"))
    return grid


def _op_json(op: Op) -> dict[str, Any]:
    return {
        "id": op.id,
        "op_type": op.op_type,
        "name": op.name,
        "module": op.module,
        "class": op.op_class.value,
        "flops": op.flops,
        "bytes_read": op.bytes_read,
        "bytes_written": op.bytes_written,
        "dtype": op.dtype,
        "inputs": list(op.inputs),
        "outputs": list(op.outputs),
        "weights": list(op.weights),
    }


def build_instance(
    graph: OpGraph,
    cluster: Cluster,
    options: Options,
    *,
    costs: CostTable | None = None,
    name: str | None = None,
    source: Mapping[str, Any] | None = None,
) -> Instance:
    """Join a graph and a cluster; costs default to the roofline model."""
    return Instance(
        name=name or graph.name,
        graph=graph,
        cluster=cluster,
        costs=costs if costs is not None else roofline_costs(graph, cluster),
        options=options,
        source=dict(source or {}),
    )


_INSTANCE_KEYS = {"schema", "version", "name", "source", "graph", "cluster", "costs", "options"}


def _number(value: Any, what: str) -> float:
    if value == "inf":
        return math.inf
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{what}: expected a number, got {value!r}")
    return float(value)


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list) or not all(isinstance(item, list) for item in value):
        raise InputError(f"{what}: expected a list of lists, got {value!r}")
    return value


def parse_instance(document: Any, *, where: str = "instance") -> Instance:
    """Build an instance from its JSON document; every problem is one :class:`InputError`."""
    if not isinstance(document, Mapping):
        raise InputError(f"{where}: expected a JSON object")
    if document.get("schema") != INSTANCE_SCHEMA:
        raise InputError(f"{where}: not a partition instance (schema {document.get('schema')!r})")
    if document.get("version") != INSTANCE_VERSION:
        raise InputError(
            f"{where}: unsupported instance version {document.get('version')!r}"
            f" (this build reads version {INSTANCE_VERSION})"
        )
    unknown = sorted(set(document) - _INSTANCE_KEYS)
    if unknown:
        raise InputError(f"{where}: unknown field {unknown[0]!r}")
    try:
        g = document["graph"]
        ops = tuple(
            Op(
                id=str(o["id"]),
                op_type=str(o["op_type"]),
                name=str(o.get("name", "")),
                module=str(o.get("module", "")),
                op_class=OpClass(o.get("class", "other")),
                flops=_number(o.get("flops", 0), f"op {o['id']!r} flops"),
                bytes_read=_number(o.get("bytes_read", 0), f"op {o['id']!r} bytes_read"),
                bytes_written=_number(o.get("bytes_written", 0), f"op {o['id']!r} bytes_written"),
                dtype=str(o.get("dtype", "fp32")),
                inputs=tuple(o.get("inputs", ())),
                outputs=tuple(o.get("outputs", ())),
                weights=tuple(o.get("weights", ())),
            )
            for o in g["ops"]
        )
        tensors = tuple(
            Tensor(
                str(t["name"]),
                _number(t["bytes"], f"tensor {t['name']!r} bytes"),
                t.get("producer"),
                tuple(t.get("consumers", ())),
            )
            for t in g["tensors"]
        )
        weights = {str(k): _number(v, f"weight {k!r}") for k, v in g.get("weights", {}).items()}
        graph = OpGraph(str(g.get("name", document.get("name", "graph"))), ops, tensors, weights)
        cluster = parse_cluster(document["cluster"], where=f"{where}: cluster")
        c = document["costs"]
        missing = [t for t in cluster.type_names if t not in c["times"]]
        if missing:
            raise InputError(f"{where}: no costs for device type {missing[0]!r}")
        columns = []
        for t in cluster.type_names:
            column = c["times"][t]
            if len(column) != len(ops):
                raise InputError(f"{where}: {len(column)} costs for {t!r}, expected {len(ops)}")
            columns.append([_number(x, f"cost of op {ops[i].id!r} on {t!r}") for i, x in enumerate(column)])
        costs = CostTable(
            cluster.type_names,
            np.array(columns, dtype=float).T.reshape(len(ops), len(cluster.type_names)),
            _provenance_grid(c, cluster.type_names, len(ops), where),
        )
        o = document["options"]
        options = Options(
            stages=o["stages"],
            exact_stages=bool(o.get("exact_stages", False)),
            comm_mode=CommMode(o.get("comm_mode", "per-destination")),
            overlap=bool(o.get("overlap", False)),
            colocate=tuple(tuple(group) for group in _list(o.get("colocate", []), "options.colocate")),
            mode=str(o.get("mode", "inference")),
        )
        return Instance(
            str(document.get("name", graph.name)),
            graph,
            cluster,
            costs,
            options,
            dict(document.get("source") or {}),
        )
    except KeyError as error:
        raise InputError(f"{where}: missing field {error.args[0]!r}") from None
    except (TypeError, ValueError, AttributeError) as error:
        raise InputError(f"{where}: malformed instance ({error})") from None


def load_instance(path: str | Path) -> Instance:
    return parse_instance(read_json(path, "instance"), where=str(path))
