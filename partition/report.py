"""Results as the versioned placement JSON and as a readable per-stage table, and back.

Placement JSON (schema ``partition.placement``, version 1) is documented in the README. Every
figure in it comes from the evaluator.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from typing import Any

from .errors import InputError
from .instance import Instance
from .placement import PLACEMENT_SCHEMA, PLACEMENT_VERSION, Evaluation, Placement, Result


def _stage_rows(instance: Instance, placement: Placement, evaluation: Evaluation) -> list[dict[str, Any]]:
    members: list[list[str]] = [[] for _ in placement.devices]
    for v, s in enumerate(placement.stage_of):
        members[s].append(instance.graph.ops[v].id)
    rows = []
    for s, (device, figures) in enumerate(zip(placement.devices, evaluation.stages, strict=True)):
        rows.append(
            {
                "stage": s,
                "device": instance.cluster.devices[device].id,
                "device_type": instance.cluster.devices[device].type,
                "num_ops": len(members[s]),
                "ops": members[s],
                "cost_provenance": _provenance_counts(instance, placement, s, device),
                "compute_s": figures.compute,
                "send_s": figures.send,
                "recv_s": figures.recv,
                "time_s": figures.time,
                "param_bytes": figures.param_bytes,
                "activation_bytes": figures.activation_bytes,
                "memory_bytes": figures.memory,
                "memory_capacity_bytes": figures.memory_capacity,
            }
        )
    return rows


def _provenance_counts(instance: Instance, placement: Placement, stage: int, device: int) -> dict[str, int]:
    """How many of the stage's op times on its device type were measured, imported or modelled."""
    column = instance.costs.provenance[:, instance.cluster.type_index[device]]
    ops = [v for v, s in enumerate(placement.stage_of) if s == stage]
    return dict(Counter(column[v].value for v in ops))


def result_json(instance: Instance, result: Result) -> dict[str, Any]:
    options = instance.options
    document: dict[str, Any] = {
        "schema": PLACEMENT_SCHEMA,
        "version": PLACEMENT_VERSION,
        "instance": {
            "name": instance.name,
            "num_ops": len(instance.graph.ops),
            "cluster": instance.cluster.name,
            "stages": options.stages,
            "exact_stages": options.exact_stages,
            "comm_mode": options.comm_mode.value,
            "overlap": options.overlap,
        },
        "solver": {"name": result.solver, "settings": result.settings},
        "status": result.status.value,
        "lower_bound_s": result.lower_bound,
        "wall_time_s": result.wall_time,
        "notes": list(result.notes),
        "bottleneck_s": None,
        "throughput_per_s": None,
        "latency_s": None,
        "gap": None,
        "stages": [],
    }
    if result.placement is not None and result.evaluation is not None:
        evaluation = result.evaluation
        document.update(
            {
                "bottleneck_s": evaluation.bottleneck,
                "throughput_per_s": 1.0 / evaluation.bottleneck if evaluation.bottleneck > 0 else None,
                "latency_s": evaluation.latency,
                "gap": result.gap,
                "stages": _stage_rows(instance, result.placement, evaluation),
            }
        )
    return document


def placement_from_json(instance: Instance, document: Any, *, where: str = "placement") -> Placement:
    """Read the decision (ops per stage, device per stage) back from placement JSON."""
    if not isinstance(document, Mapping) or document.get("schema") != PLACEMENT_SCHEMA:
        raise InputError(f"{where}: not a partition placement file")
    if document.get("version") != PLACEMENT_VERSION:
        raise InputError(f"{where}: unsupported placement version {document.get('version')!r}")
    stages = document.get("stages")
    if not isinstance(stages, list) or not stages:
        raise InputError(f"{where}: the placement has no stages (status {document.get('status')!r})")
    device_index = {d.id: i for i, d in enumerate(instance.cluster.devices)}
    stage_of: dict[int, int] = {}
    devices = []
    for s, row in enumerate(stages):
        if not isinstance(row, Mapping) or row.get("device") not in device_index:
            raise InputError(
                f"{where}: stage {s} names unknown device {row.get('device')!r}"
                f" (not in cluster {instance.cluster.name!r})"
            )
        devices.append(device_index[row["device"]])
        for op_id in row.get("ops", []):
            if op_id not in instance.graph.index:
                raise InputError(f"{where}: stage {s} names unknown op {op_id!r}")
            v = instance.graph.index[op_id]
            if v in stage_of:
                raise InputError(f"{where}: op {op_id!r} is placed twice (stages {stage_of[v]} and {s})")
            stage_of[v] = s
    missing = [op.id for v, op in enumerate(instance.graph.ops) if v not in stage_of]
    if missing:
        raise InputError(f"{where}: op {missing[0]!r} is not placed ({len(missing)} ops missing)")
    return Placement(tuple(stage_of[v] for v in range(len(instance.graph.ops))), tuple(devices))


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.4g}"


def stage_table(instance: Instance, result: Result) -> str:
    """A per-stage table and a summary, for a human on stderr."""
    lines = []
    if result.placement is not None and result.evaluation is not None:
        bottleneck = result.evaluation.bottleneck
        header = ("stage", "device", "ops", "compute ms", "send ms", "recv ms", "time ms", "memory GB")
        rows = [header]
        for row in _stage_rows(instance, result.placement, result.evaluation):
            mark = " *" if math.isclose(row["time_s"], bottleneck, rel_tol=1e-9) else ""
            rows.append(
                (
                    str(row["stage"]),
                    row["device"],
                    str(row["num_ops"]),
                    _ms(row["compute_s"]),
                    _ms(row["send_s"]),
                    _ms(row["recv_s"]),
                    _ms(row["time_s"]) + mark,
                    f"{row['memory_bytes'] / 1e9:.3g}/{row['memory_capacity_bytes'] / 1e9:.3g}",
                )
            )
        widths = [max(len(r[c]) for r in rows) for c in range(len(header))]
        for r in rows:
            lines.append(
                "  ".join(
                    cell.rjust(w) if c >= 2 else cell.ljust(w)
                    for c, (cell, w) in enumerate(zip(r, widths, strict=True))
                )
            )
        gap = f"{result.gap * 100:.2f}%" if result.gap is not None else "n/a"
        lines.append(
            f"bottleneck {_ms(bottleneck)} ms (* marks it)  throughput {1 / bottleneck:.4g}/s"
            f"  lower bound {_ms(result.lower_bound)} ms  gap {gap}"
        )
    lines.append(f"status {result.status.value}  solver {result.solver}  wall time {result.wall_time:.3f} s")
    lines.extend(f"note: {note}" for note in result.notes)
    return "\n".join(lines)
