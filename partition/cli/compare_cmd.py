"""``partition compare``: two placements of the same instance side by side."""

from __future__ import annotations

import argparse

from ..compare import check_same_instance, comparison
from ._placements import add_instance_source, load_view


def register(verbs: argparse._SubParsersAction) -> None:
    parser = verbs.add_parser("compare", help="two placements of one instance side by side")
    parser.add_argument("a", metavar="A.json")
    parser.add_argument("b", metavar="B.json")
    add_instance_source(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    a, _ = load_view(args.a, args.instance, args.cluster)
    b, _ = load_view(args.b, args.instance, args.cluster)
    check_same_instance(a, b)
    print(comparison(a, b))
    return 0
