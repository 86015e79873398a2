"""``partition instance``: write a self-contained instance file from a model and a cluster."""

from __future__ import annotations

import argparse

from ._common import add_output, add_problem, add_quiet, emit, load_problem


def register(verbs: argparse._SubParsersAction) -> None:
    parser = verbs.add_parser("instance", help="write an instance file (graph, costs, cluster, options)")
    add_problem(parser, stages_required=False)
    add_output(parser, "instance JSON")
    add_quiet(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    instance = load_problem(args, default_stages=1)
    emit(instance.to_json(), args.output, args.force)
    return 0
