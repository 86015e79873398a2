"""``partition export``: write one ONNX model per stage of a placement and a ``pipeline.json``."""

from __future__ import annotations

import argparse
import sys

from ..errors import InputError
from ._common import add_problem, add_quiet, dims_from_args, load_placement


def register(verbs: argparse._SubParsersAction) -> None:
    parser = verbs.add_parser("export", help="cut the model into runnable per-stage ONNX models")
    add_problem(parser, stages_required=False)
    parser.add_argument("placement", metavar="PLACEMENT.json", help="as written by `partition solve`")
    parser.add_argument("-o", "--output", required=True, metavar="DIR", help="directory for the stages")
    parser.add_argument("--force", action="store_true", help="overwrite an exported pipeline in DIR")
    add_quiet(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if not args.source.endswith(".onnx"):
        raise InputError(f"{args.source}: export needs the ONNX model the placement was solved for")
    from ..export import export_stages  # needs onnx: imported here (the package's docstring)

    instance, placement, _, _ = load_placement(args)
    pipeline = export_stages(
        args.source, instance, placement, args.output, dims=dims_from_args(args.dim), force=args.force
    )
    if not args.quiet:
        for stage in pipeline.stages:
            sent = sum(len(targets) for targets in stage.sends.values())
            print(
                f"partition: stage {stage.index} on {stage.device}: {len(stage.ops)} ops,"
                f" {len(stage.inputs)} inputs, {sent} tensors sent → {args.output}/{stage.model_file}",
                file=sys.stderr,
            )
    print(f"exported {len(pipeline.stages)} stages to {args.output}")
    return 0
