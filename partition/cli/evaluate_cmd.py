"""``partition evaluate``: re-check a placement with the independent evaluator."""

from __future__ import annotations

import argparse
import sys

from ..errors import InputError
from ..evaluate import evaluate
from ..jsonio import read_json
from ..placement import Result, Status
from ..report import placement_from_json, result_json, stage_table
from ._common import add_output, add_problem, add_quiet, emit, load_problem


def register(verbs: argparse._SubParsersAction) -> None:
    parser = verbs.add_parser("evaluate", help="validate a placement and recompute its figures")
    add_problem(parser, stages_required=False)
    parser.add_argument("placement", metavar="PLACEMENT.json")
    add_output(parser, "re-evaluated placement JSON")
    add_quiet(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    document = read_json(args.placement, "placement")
    recorded = document.get("instance", {}) if isinstance(document, dict) else {}
    if args.stages is None and isinstance(recorded.get("stages"), int):
        args.stages = recorded["stages"]
    if args.comm_mode is None and recorded.get("comm_mode"):
        args.comm_mode = recorded["comm_mode"]
    args.overlap = args.overlap or bool(recorded.get("overlap"))
    instance = load_problem(args, default_stages=1)
    placement = placement_from_json(instance, document, where=args.placement)
    evaluation = evaluate(instance, placement)
    if not evaluation.valid:
        raise InputError(
            f"{args.placement}: invalid placement: {evaluation.violations[0]}"
            + (f" (and {len(evaluation.violations) - 1} more)" if len(evaluation.violations) > 1 else "")
        )
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
