"""``partition import``: an instance from another project's measured per-layer profile."""

from __future__ import annotations

import argparse
import sys

from ..api import load_graph
from ..importers import FORMATS, import_instance
from ..importers.piper import TIME_UNITS
from ..instance import CommMode, Options
from ._common import add_output, add_quiet, dims_from_args, emit


def register(verbs: argparse._SubParsersAction) -> None:
    parser = verbs.add_parser(
        "import",
        help="build an instance from a PipeDream, Sailor or Piper profile (measured layer costs)",
        description="Each layer becomes one op with its measured time (forward time where the file"
        " separates it; Piper's training time as is). Sailor GPU types without a catalog entry"
        " (V100-16GB, GH200-96GB, RTX-2080, RTX-3090, TITAN-RTX) may be used in the cluster file.",
    )
    parser.add_argument("format", choices=FORMATS)
    parser.add_argument("path", metavar="PROFILE")
    parser.add_argument(
        "--cluster", required=True, metavar="C.json|NAME", help="cluster file or bundled name"
    )
    parser.add_argument(
        "--stages", "-k", type=int, default=1, metavar="K", help="at most K stages (default 1)"
    )
    parser.add_argument("--exact-stages", action="store_true", help="use exactly K stages")
    parser.add_argument(
        "--comm-mode", choices=[m.value for m in CommMode], default=CommMode.PER_DESTINATION.value
    )
    parser.add_argument("--overlap", action="store_true", help="stage time = max(compute, communication)")
    parser.add_argument(
        "--gpu",
        metavar="TYPE",
        help="pipedream/piper: the device type the file was measured on (default: the cluster's only type)",
    )
    parser.add_argument("--model", help="sailor: which model of a multi-model profile")
    parser.add_argument("--microbatch", type=int, help="sailor (default 1), piper wrapper: microbatch size")
    parser.add_argument("--tp", type=int, default=1, help="sailor/piper: tensor-parallel degree (default 1)")
    parser.add_argument("--layer-info", metavar="llm_info.json", help="sailor: per-layer sizes file")
    parser.add_argument(
        "--time-unit",
        choices=sorted(TIME_UNITS),
        default="s",
        help="piper: unit of timePerSample (gnmt/resnet inputs: ms; bert32a100: s)",
    )
    parser.add_argument(
        "--onnx",
        metavar="MODEL.onnx",
        help="map the layers onto the ops of this ONNX model with the same transformer blocks",
    )
    parser.add_argument(
        "--dim", action="append", default=[], metavar="NAME=N", help="--onnx: pin a symbolic input dimension"
    )
    add_output(parser, "instance JSON")
    add_quiet(parser)
    parser.set_defaults(run=run)


def _format_options(args: argparse.Namespace) -> dict:
    if args.format == "sailor":
        return {
            "model": args.model,
            "microbatch": args.microbatch or 1,
            "tp": args.tp,
            "layer_info": args.layer_info,
        }
    if args.format == "piper":
        return {
            "device_type": args.gpu,
            "tp": args.tp,
            "time_unit": args.time_unit,
            "microbatch": args.microbatch,
        }
    return {"device_type": args.gpu}


def run(args: argparse.Namespace) -> int:
    options = Options(
        stages=args.stages,
        exact_stages=args.exact_stages,
        comm_mode=CommMode(args.comm_mode),
        overlap=args.overlap,
    )
    onto = None if args.onnx is None else (load_graph(args.onnx, dims=dims_from_args(args.dim)), args.onnx)
    instance = import_instance(
        args.format, args.path, args.cluster, options, onto=onto, **_format_options(args)
    )
    if not args.quiet:
        covered = ", ".join(instance.cluster.type_names)
        what = "layers" if onto is None else f"ops of {args.onnx} ({instance.source['blocks']} blocks)"
        print(
            f"partition: {args.format}: {len(instance.graph.ops)} {what}, measured times on {covered}",
            file=sys.stderr,
        )
    emit(instance.to_json(), args.output, args.force)
    return 0
