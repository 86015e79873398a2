"""``partition solve``: place a model or instance and write the placement JSON."""

from __future__ import annotations

import argparse
import sys

from ..api import require_solution, solve
from ..report import result_json, stage_table
from ..solvers import solver_names
from ._common import add_gap_limit, add_output, add_problem, add_quiet, emit, load_problem, progress_printer


def register(verbs: argparse._SubParsersAction) -> None:
    parser = verbs.add_parser("solve", help="find the placement with the smallest bottleneck stage")
    add_problem(parser)
    parser.add_argument(
        "--solver",
        default="auto",
        metavar="NAME",
        help=f"auto (default) or one of: {', '.join(solver_names())}",
    )
    parser.add_argument("--time-limit", type=float, metavar="S", help="seconds for the solver")
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the randomised searches: with --threads 1 and a time limit no search reaches,"
        " the same input gives byte-identical output",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="solver threads: the polish of several starts at once and its CP-SAT windows' workers,"
        " and the two-tower bound's probes at once; CP-SAT's whole model runs on one"
        " (default: the usable cores, at most 8)",
    )
    add_gap_limit(parser)
    add_output(parser, "placement JSON")
    add_quiet(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    instance = load_problem(args)
    result = solve(
        instance,
        args.solver,
        time_limit=args.time_limit,
        seed=args.seed,
        threads=args.threads,
        gap_limit=args.gap_limit,
        progress=progress_printer(args.quiet),
    )
    if not args.quiet:
        print(stage_table(instance, result), file=sys.stderr)
    require_solution(result)
    emit(result_json(instance, result), args.output, args.force)
    return 0
