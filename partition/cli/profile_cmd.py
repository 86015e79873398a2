"""``partition profile``: measure per-op times of a model on this CPU into a cost table."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ._common import add_output, add_quiet, dims_from_args, emit, progress_printer

if TYPE_CHECKING:
    from ..profiler import Profile


def register(verbs: argparse._SubParsersAction) -> None:
    parser = verbs.add_parser(
        "profile",
        help="measure per-op times with onnxruntime on this CPU (a cost table for --costs)",
        description="Graph optimisations off, random inputs and weights, warm-up runs dropped;"
        " each op's median and spread over the runs, and the whole-model time of the same session.",
    )
    parser.add_argument("model", metavar="MODEL.onnx")
    parser.add_argument("--runs", type=int, default=20, help="measured runs (default 20)")
    parser.add_argument("--warmup", type=int, default=3, help="runs dropped first (default 3)")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads (default 1)")
    parser.add_argument("--device-type", metavar="NAME", help="name of the device type (default cpu-<model>)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs and weights")
    parser.add_argument(
        "--dim", action="append", default=[], metavar="NAME=N", help="pin a symbolic input dimension"
    )
    add_output(parser, "cost table JSON")
    add_quiet(parser)
    parser.set_defaults(run=run)


def summary(profile: Profile) -> str:
    table = profile.table
    whole = table.whole_model
    assert whole is not None and whole.mean is not None
    medians, means = profile.op_sum * 1e3, profile.op_mean_sum * 1e3
    return (
        f"{table.model} on {table.device_type} ({table.settings['threads']} thread(s), {whole.runs} runs):"
        f" {len(table.ops)}/{table.num_ops} ops measured;"
        f" sum of per-op medians {medians:.3f} ms vs whole-model median {whole.median * 1e3:.3f} ms"
        f" ({profile.op_sum / whole.median - 1:+.1%});"
        f" sum of per-op means {means:.3f} ms vs whole-model mean {whole.mean * 1e3:.3f} ms"
        f" ({profile.op_mean_sum / whole.mean - 1:+.1%}); unmapped kernels {profile.unmapped * 1e3:.3f} ms"
    )


def run(args: argparse.Namespace) -> int:
    from ..profiler import profile_model  # needs onnx: imported here (the package's docstring)

    profile = profile_model(
        args.model,
        runs=args.runs,
        warmup=args.warmup,
        threads=args.threads,
        dims=dims_from_args(args.dim),
        seed=args.seed,
        device_type=args.device_type,
        progress=progress_printer(args.quiet),
    )
    emit(profile.table.to_json(), args.output, args.force)
    if profile.missing:
        print(
            f"partition: warning: {len(profile.missing)} ops never ran, e.g. {profile.missing[0]!r}",
            file=sys.stderr,
        )
    if not args.quiet or args.output:
        print(summary(profile), file=sys.stdout if args.output else sys.stderr)
    return 0
