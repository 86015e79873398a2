"""Measured cost tables: per-op seconds of one model on one device type, as a versioned file.

A cost table (schema ``partition.costs``, version 1) is what ``partition profile`` writes and
``--costs`` reads. It names the device type it was measured on (with the figures the roofline
model needs, so a cluster file may use the type and calibration can fit it), the model it
belongs to (name, op count and a fingerprint of op ids and types), and per op id the median
time and its spread. Applying it replaces that device type's column of an instance; ops it
does not list keep their modelled time, and their provenance says so.

A table is rejected, naming the first bad entry, when a time is negative, NaN or not a number,
when it names an op the model does not have, or when it was measured on another model.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from .costs import Provenance
from .devices import Catalog, DeviceType, bundled_catalog, parse_device_type
from .errors import InputError
from .graph import OpGraph
from .instance import Instance
from .jsonio import read_json

log = logging.getLogger("partition")

COSTS_SCHEMA = "partition.costs"
COSTS_VERSION = 1


def graph_fingerprint(graph: OpGraph) -> str:
    """A digest of the op ids and types, in order: equal for the same model, whatever its weights."""
    digest = hashlib.sha256()
    for op in graph.ops:
        digest.update(f"{op.id}\t{op.op_type}\n".encode())
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class OpTiming:
    """Seconds of one op over the measured runs: median, spread and mean.

    The median is the op's cost (robust to a run that another process interrupted); the mean
    is kept because means add up: the per-op means sum to the whole run's mean.
    """

    median: float
    low: float  # 10th percentile
    high: float  # 90th percentile
    runs: int
    mean: float | None = None


@dataclass(frozen=True, eq=False)
class MeasuredTable:
    """One model's per-op times on one device type, with where and how they were measured."""

    device: DeviceType
    model: str
    num_ops: int
    fingerprint: str
    ops: Mapping[str, OpTiming]
    whole_model: OpTiming | None = None
    provenance: Provenance = Provenance.MEASURED
    settings: Mapping[str, Any] = field(default_factory=dict)
    notes: Mapping[str, Any] = field(default_factory=dict)

    @property
    def device_type(self) -> str:
        return self.device.name

    def times(self, graph: OpGraph) -> np.ndarray:
        """Median seconds per op of ``graph`` (``nan`` where the table has no entry)."""
        return np.array([self.ops[op.id].median if op.id in self.ops else math.nan for op in graph.ops])

    def to_json(self) -> dict[str, Any]:
        device = self.device
        return {
            "schema": COSTS_SCHEMA,
            "version": COSTS_VERSION,
            "device_type": device.name,
            "device": {
                "peak_flops": dict(device.peak_flops),
                "memory_bandwidth": device.memory_bandwidth,
                "memory": device.memory,
            },
            "provenance": self.provenance.value,
            "model": {"name": self.model, "num_ops": self.num_ops, "fingerprint": self.fingerprint},
            "settings": dict(self.settings),
            "notes": dict(self.notes),
            "whole_model": None if self.whole_model is None else _timing_json(self.whole_model),
            "ops": {op_id: _timing_json(t) for op_id, t in self.ops.items()},
        }


def _timing_json(timing: OpTiming) -> dict[str, Any]:
    document = {"median_s": timing.median, "p10_s": timing.low, "p90_s": timing.high, "runs": timing.runs}
    return document if timing.mean is None else {**document, "mean_s": timing.mean}


def _seconds(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{what}: time {value!r} is not a number")
    if math.isnan(value):
        raise InputError(f"{what}: time is NaN")
    if value < 0 or math.isinf(value):
        raise InputError(f"{what}: time {value!r} is not a non-negative finite number")
    return float(value)


def _timing(entry: Any, what: str) -> OpTiming:
    if isinstance(entry, int | float | str):  # a bare number (bool is rejected by _seconds)
        median = _seconds(entry, what)
        return OpTiming(median, median, median, 1)
    if not isinstance(entry, Mapping) or "median_s" not in entry:
        raise InputError(f"{what}: expected a number of seconds or an object with 'median_s'")
    median = _seconds(entry["median_s"], what)
    return OpTiming(
        median,
        _seconds(entry.get("p10_s", median), f"{what} p10_s"),
        _seconds(entry.get("p90_s", median), f"{what} p90_s"),
        int(entry.get("runs", 1)),
        _seconds(entry["mean_s"], f"{what} mean_s") if "mean_s" in entry else None,
    )


def parse_cost_table(document: Any, *, where: str = "cost table") -> MeasuredTable:
    """Check and build a cost table; every problem is one :class:`InputError` naming the entry."""
    if not isinstance(document, Mapping):
        raise InputError(f"{where}: expected a JSON object")
    if document.get("schema") != COSTS_SCHEMA:
        raise InputError(f"{where}: not a partition cost table (schema {document.get('schema')!r})")
    if document.get("version") != COSTS_VERSION:
        raise InputError(f"{where}: unsupported cost-table version {document.get('version')!r}")
    name = document.get("device_type")
    if not isinstance(name, str) or not name:
        raise InputError(f"{where}: 'device_type' must name the device type the times belong to")
    if "device" in document:
        device = parse_device_type(name, document["device"])
    elif name in bundled_catalog().device_types:
        device = bundled_catalog().device_types[name]
    else:
        raise InputError(f"{where}: device type {name!r} is not in the catalog; give its figures in 'device'")
    model = document.get("model")
    if not isinstance(model, Mapping) or not isinstance(model.get("fingerprint"), str):
        raise InputError(f"{where}: 'model' must give the model's name, num_ops and fingerprint")
    ops = document.get("ops")
    if not isinstance(ops, Mapping) or not ops:
        raise InputError(f"{where}: 'ops' must map op ids to times")
    try:
        provenance = Provenance(document.get("provenance", "measured"))
    except ValueError:
        raise InputError(f"{where}: unknown provenance {document.get('provenance')!r}") from None
    whole = document.get("whole_model")
    return MeasuredTable(
        device=device,
        model=str(model.get("name", "")),
        num_ops=int(model.get("num_ops", len(ops))),
        fingerprint=model["fingerprint"],
        ops={str(k): _timing(v, f"{where}: op {k!r}") for k, v in ops.items()},
        whole_model=None if whole is None else _timing(whole, f"{where}: whole_model"),
        provenance=provenance,
        settings=dict(document.get("settings") or {}),
        notes=dict(document.get("notes") or {}),
    )


def load_cost_table(path: str | Path) -> MeasuredTable:
    return parse_cost_table(read_json(path, "cost table"), where=str(path))


def check_matches(table: MeasuredTable, graph: OpGraph, *, where: str = "cost table") -> None:
    """Refuse a table measured on another model, or naming ops ``graph`` does not have."""
    fingerprint = graph_fingerprint(graph)
    if table.fingerprint != fingerprint:
        raise InputError(
            f"{where}: measured on another model ({table.model!r}, {table.num_ops} ops, fingerprint"
            f" {table.fingerprint}) than {graph.name!r} ({len(graph.ops)} ops, fingerprint {fingerprint})"
        )
    unknown = next((op_id for op_id in table.ops if op_id not in graph.index), None)
    if unknown is not None:
        raise InputError(f"{where}: op {unknown!r} is not an op of model {graph.name!r}")


def with_device_types(devices: Iterable[DeviceType], base: Catalog | None = None) -> Catalog:
    """The catalog plus ``devices`` (e.g. the device types cost tables were measured on)."""
    base = base or bundled_catalog()
    return Catalog({**base.device_types, **{d.name: d for d in devices}}, base.link_types)


def apply_measured(instance: Instance, table: MeasuredTable, *, where: str = "cost table") -> Instance:
    """``instance`` with its column of ``table.device_type`` taken from the table.

    Ops the table does not list keep their current (modelled) time and provenance.
    """
    check_matches(table, instance.graph, where=where)
    costs = instance.costs
    if table.device_type not in costs.type_names:
        raise InputError(
            f"{where}: cluster {instance.cluster.name!r} has no device type {table.device_type!r}"
            f" (it has {', '.join(costs.type_names)}); add it to the cluster file"
        )
    t = costs.type_names.index(table.device_type)
    measured = table.times(instance.graph)
    covered = ~np.isnan(measured)
    if not covered.all():
        log.warning(
            "%s: %d of %d ops have no measured time on %s; they keep modelled times",
            where,
            int((~covered).sum()),
            len(measured),
            table.device_type,
        )
    times = np.where(covered, measured, costs.times[:, t])
    provenance = costs.provenance[:, t].copy()
    provenance[covered] = table.provenance
    source = dict(instance.source)
    source["measured"] = {**source.get("measured", {}), table.device_type: {"file": where, **table.settings}}
    return replace(instance, costs=costs.with_column(table.device_type, times, provenance), source=source)
