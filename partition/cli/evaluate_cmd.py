"""``partition evaluate``: re-check a placement with the independent evaluator."""

from __future__ import annotations

import argparse
import sys

from ..errors import InputError
from ..placement import Result, Status
from ..report import result_json, stage_table
from ._common import add_output, add_problem, add_quiet, emit, load_placement


def register(verbs: argparse._SubParsersAction) -> None:
    parser = verbs.add_parser("evaluate", help="validate a placement and recompute its figures")
    add_problem(parser, stages_required=False)
    parser.add_argument("placement", metavar="PLACEMENT.json")
    add_output(parser, "re-evaluated placement JSON")
    add_quiet(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    instance, placement, evaluation, document = load_placement(args)
    bound = float(document.get("lower_bound_s") or 0.0)
    result = Result(
        instance.name,
        Status(document.get("status", "feasible")),
        str(document.get("solver", {}).get("name", "unknown")),
        {},
        0.0,
        bound,
        placement,
        evaluation,
        ("re-evaluated by the independent evaluator",),
    )
    if not args.quiet:
        print(stage_table(instance, result), file=sys.stderr)
    if args.output:
        emit(result_json(instance, result), args.output, args.force)
    recorded_bottleneck = document.get("bottleneck_s")
    if isinstance(recorded_bottleneck, int | float) and abs(
        recorded_bottleneck - evaluation.bottleneck
    ) > 1e-9 * max(1.0, abs(evaluation.bottleneck)):
        raise InputError(
            f"{args.placement}: recorded bottleneck {recorded_bottleneck:.6g} s differs from"
            f" the evaluator's {evaluation.bottleneck:.6g} s"
        )
    print(f"valid: {placement.num_stages} stages, bottleneck {evaluation.bottleneck:.6g} s")
    return 0
