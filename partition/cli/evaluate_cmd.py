"""``partition evaluate``: re-check a placement with the independent evaluator."""

from __future__ import annotations

import argparse
import sys

from ..errors import InputError
from ..jsonio import read_json
from ..placement_view import reevaluate
from ..report import result_json, stage_table
from ._common import add_output, add_problem, add_quiet, emit, load_problem
from ._placements import adopt_recorded_options


def register(verbs: argparse._SubParsersAction) -> None:
    parser = verbs.add_parser("evaluate", help="validate a placement and recompute its figures")
    add_problem(parser, stages_required=False)
    parser.add_argument("placement", metavar="PLACEMENT.json")
    add_output(parser, "re-evaluated placement JSON")
    add_quiet(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    document = read_json(args.placement, "placement")
    adopt_recorded_options(args, document)
    instance = load_problem(args, default_stages=1)
    result = reevaluate(instance, document, args.placement)
    evaluation = result.evaluation
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
    print(f"valid: {result.placement.num_stages} stages, bottleneck {evaluation.bottleneck:.6g} s")
    return 0
