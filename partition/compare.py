"""Two placements of one instance, side by side.

Comparing placements of different problems (another model, cluster, stage limit or cost
accounting) would be meaningless, so :func:`check_same_instance` refuses it and names the
first field that differs. The gap of each side is measured against the better of the two
lower bounds, since both bound the same optimum.
"""

from __future__ import annotations

import math

from .errors import InputError
from .placement_view import IDENTITY_FIELDS, PlacementView


def check_same_instance(a: PlacementView, b: PlacementView) -> None:
    for field, left, right in zip(IDENTITY_FIELDS, a.identity, b.identity, strict=True):
        if left != right:
            raise InputError(
                f"{a.where} and {b.where} are placements of different instances"
                f" ({field}: {left!r} vs {right!r})"
            )


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.4g}"


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def comparison(a: PlacementView, b: PlacementView) -> str:
    """A readable side-by-side report; the caller has checked both solve the same instance."""
    bound = max(a.lower_bound_s, b.lower_bound_s)

    def gap(view: PlacementView) -> str:
        return f"{view.bottleneck_s / bound - 1:.2%}" if bound > 0 else "n/a"

    name = a.instance.get("name", "?")
    lines = [
        f"instance {name} on {a.instance.get('cluster', '?')}, at most {a.instance.get('stages')} stages",
        "",
    ]
    lines += _table(
        [
            ("", "A", "B"),
            ("file", a.where, b.where),
            ("solver", a.solver, b.solver),
            ("status", a.status, b.status),
            ("stages", str(len(a.stages)), str(len(b.stages))),
            ("bottleneck ms", _ms(a.bottleneck_s), _ms(b.bottleneck_s)),
            ("throughput /s", f"{1 / a.bottleneck_s:.4g}", f"{1 / b.bottleneck_s:.4g}"),
            ("latency ms", _ms(a.latency_s), _ms(b.latency_s)),
            ("lower bound ms", _ms(a.lower_bound_s), _ms(b.lower_bound_s)),
            (f"gap to {_ms(bound)} ms", gap(a), gap(b)),
        ]
    )
    ratio = b.bottleneck_s / a.bottleneck_s
    verdict = (
        "the same bottleneck"
        if math.isclose(ratio, 1.0, rel_tol=1e-9)
        else (f"B's bottleneck is {ratio:.4f}× A's ({'better' if ratio < 1 else 'worse'})")
    )
    lines += ["", verdict, ""]
    rows = [("stage", "A device", "A ops", "A time ms", "|", "B device", "B ops", "B time ms")]
    for s in range(max(len(a.stages), len(b.stages))):
        cells: list[str] = [str(s)]
        for side, view in enumerate((a, b)):
            if side:
                cells.append("|")
            if s < len(view.stages):
                stage = view.stages[s]
                mark = " *" if math.isclose(stage.time_s, view.bottleneck_s, rel_tol=1e-9) else ""
                cells += [stage.device, str(len(stage.ops)), _ms(stage.time_s) + mark]
            else:
                cells += ["", "", ""]
        rows.append(tuple(cells))
    lines += _table(rows)
    where_a, where_b = a.stage_of, b.stage_of
    moved = sum(where_a[op] != where_b.get(op) for op in where_a)
    lines += ["", f"* marks each bottleneck stage; {moved} of {len(where_a)} ops are in a different stage"]
    return "\n".join(lines)
