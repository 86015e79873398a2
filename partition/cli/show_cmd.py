"""``partition show``: pictures of a placement (PNG), its op graph (DOT) and a Chrome trace."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import InputError
from ..jsonio import dumps, read_json, write_atomic
from ..pictures import op_graph_dot, render_png
from ..report import placement_from_json
from ..schedule import chrome_trace, simulate
from ._common import add_quiet
from ._placements import add_instance_source, load_view


def register(verbs: argparse._SubParsersAction) -> None:
    parser = verbs.add_parser("show", help="draw a placement: stage bars, memory, pipeline timeline")
    parser.add_argument("placement", metavar="PLACEMENT.json")
    add_instance_source(parser)
    parser.add_argument("-o", "--output", metavar="FIG.png", help="PNG to write (default: PLACEMENT.png)")
    parser.add_argument(
        "--dot", metavar="GRAPH.dot", help="also write the op graph coloured by stage (needs --instance)"
    )
    parser.add_argument(
        "--trace", metavar="TRACE.json", help="also write a Chrome trace of the simulated pipeline"
    )
    parser.add_argument(
        "--micro-batches", type=int, default=4, metavar="N", help="micro-batches drawn (default 4)"
    )
    parser.add_argument("--force", action="store_true", help="overwrite existing output files")
    add_quiet(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.micro_batches <= 64:
        raise InputError(f"--micro-batches must be between 1 and 64, got {args.micro_batches}")
    if args.dot and not args.instance:
        raise InputError("--dot needs --instance: the placement file does not hold the op graph")
    output = args.output or str(Path(args.placement).with_suffix(".png"))
    for path in (output, args.dot, args.trace):
        if path and Path(path).exists() and not args.force:
            raise InputError(f"{path}: file exists (use --force to overwrite)")
    view, instance = load_view(args.placement, args.instance, args.cluster)
    written = []
    write_atomic(output, render_png(view, micro_batches=args.micro_batches), overwrite=args.force)
    written.append(output)
    if args.dot and instance is not None:
        placement = placement_from_json(
            instance, read_json(args.placement, "placement"), where=args.placement
        )
        write_atomic(args.dot, op_graph_dot(instance, placement), overwrite=args.force)
        written.append(args.dot)
    if args.trace:
        trace = chrome_trace(view, simulate(view, args.micro_batches))
        write_atomic(args.trace, dumps(trace), overwrite=args.force)
        written.append(args.trace)
    if not args.quiet:
        print("wrote " + ", ".join(written))
    return 0
