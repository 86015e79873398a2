"""A placement file as typed per-stage figures, for the verbs that read results back.

``show`` and ``compare`` work from placement JSON, which holds every figure they draw. When
the instance is at hand they do not trust the file: :func:`reevaluate` recomputes the figures
with the independent evaluator and the view is built from that, so a picture or a comparison
never shows numbers the evaluator would not sign.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .bounds import trivial_lower_bound
from .errors import InputError
from .evaluator import evaluate
from .instance import Instance
from .placement import Result, Status
from .report import placement_from_json

# The fields of a placement's instance header that identify the problem it solves.
IDENTITY_FIELDS = ("name", "num_ops", "cluster", "stages", "exact_stages", "comm_mode", "overlap")


@dataclass(frozen=True)
class StageView:
    stage: int
    device: str
    device_type: str
    ops: tuple[str, ...]
    compute_s: float
    send_s: float
    recv_s: float
    time_s: float
    memory_bytes: float
    memory_capacity_bytes: float


@dataclass(frozen=True)
class PlacementView:
    """What a placement file says: the problem it solves, its figures and its stages."""

    where: str
    instance: Mapping[str, Any]
    solver: str
    status: str
    bottleneck_s: float
    lower_bound_s: float
    latency_s: float
    stages: tuple[StageView, ...]

    @property
    def overlap(self) -> bool:
        return bool(self.instance.get("overlap"))

    @property
    def identity(self) -> tuple[Any, ...]:
        return tuple(self.instance.get(f) for f in IDENTITY_FIELDS)

    @property
    def stage_of(self) -> dict[str, int]:
        return {op: s.stage for s in self.stages for op in s.ops}


def _float(row: Mapping[str, Any], key: str, where: str) -> float:
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{where}: field {key!r} is missing or not a number")
    return float(value)


def view_of(document: Any, where: str) -> PlacementView:
    """Parse a placement document; a file without a placement is one clear error."""
    if not isinstance(document, Mapping) or document.get("schema") != "partition.placement":
        raise InputError(f"{where}: not a partition placement file")
    rows = document.get("stages")
    if not isinstance(rows, list) or not rows:
        raise InputError(f"{where}: the file holds no placement (status {document.get('status')!r})")
    stages = tuple(
        StageView(
            stage=int(row.get("stage", s)),
            device=str(row.get("device")),
            device_type=str(row.get("device_type")),
            ops=tuple(str(op) for op in row.get("ops", ())),
            compute_s=_float(row, "compute_s", f"{where}: stage {s}"),
            send_s=_float(row, "send_s", f"{where}: stage {s}"),
            recv_s=_float(row, "recv_s", f"{where}: stage {s}"),
            time_s=_float(row, "time_s", f"{where}: stage {s}"),
            memory_bytes=_float(row, "memory_bytes", f"{where}: stage {s}"),
            memory_capacity_bytes=_float(row, "memory_capacity_bytes", f"{where}: stage {s}"),
        )
        for s, row in enumerate(rows)
    )
    bound = document.get("lower_bound_s")
    return PlacementView(
        where=where,
        instance=dict(document.get("instance") or {}),
        solver=str((document.get("solver") or {}).get("name", "unknown")),
        status=str(document.get("status", "feasible")),
        bottleneck_s=_float(document, "bottleneck_s", where),
        lower_bound_s=float(bound) if isinstance(bound, int | float) else 0.0,
        latency_s=_float(document, "latency_s", where),
        stages=stages,
    )


def reevaluate(instance: Instance, document: Any, where: str) -> Result:
    """The placement in ``document`` evaluated on ``instance``; an invalid one is an error."""
    placement = placement_from_json(instance, document, where=where)
    evaluation = evaluate(instance, placement)
    if not evaluation.valid:
        more = len(evaluation.violations) - 1
        raise InputError(
            f"{where}: invalid placement: {evaluation.violations[0]}"
            + (f" (and {more} more)" if more else "")
        )
    recorded = document.get("lower_bound_s")
    bound = max(float(recorded) if isinstance(recorded, int | float) else 0.0, trivial_lower_bound(instance))
    return Result(
        instance.name,
        Status(document.get("status", "feasible")),
        str(document.get("solver", {}).get("name", "unknown")),
        dict(document.get("solver", {}).get("settings", {})),
        float(document.get("wall_time_s") or 0.0),
        bound,
        placement,
        evaluation,
        ("re-evaluated by the independent evaluator",),
    )
