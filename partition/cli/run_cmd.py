"""``partition run``: run exported stages as a pipeline, check outputs, optionally compare."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..api import usable_cores
from ..errors import InputError
from ..jsonio import read_json
from ..placement import PLACEMENT_SCHEMA
from ._common import add_output, add_quiet, emit, progress_printer

if TYPE_CHECKING:
    from ..run import RunReport


def register(verbs: argparse._SubParsersAction) -> None:
    parser = verbs.add_parser(
        "run", help="run exported stages, one process per stage, and check them against the model"
    )
    parser.add_argument("stages", metavar="DIR", help="a directory written by `partition export`")
    parser.add_argument("--microbatches", "-m", type=int, default=8, metavar="M", help="default 8")
    parser.add_argument(
        "--compare",
        metavar="PLACEMENT.json",
        help="predict these stages on this machine (measured op times and link) and show the errors",
    )
    parser.add_argument(
        "--repeats", type=int, default=10, metavar="R", help="profiling runs per op (--compare)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument("--no-pin", action="store_true", help="do not pin each stage process to a core")
    add_output(parser, "run report JSON")
    add_quiet(parser)
    parser.set_defaults(run=run)


def _check_placement(path: str, directory: str) -> dict:
    """The placement file, refused unless its stages hold exactly the exported stages' ops."""
    from ..export import load_pipeline

    document = read_json(path, "placement")
    if not isinstance(document, dict) or document.get("schema") != PLACEMENT_SCHEMA:
        raise InputError(f"{path}: not a partition placement file")
    pipeline = load_pipeline(directory)
    rows = document.get("stages") or []
    if len(rows) != len(pipeline.stages) or any(
        set(row.get("ops", [])) != set(stage.ops) for row, stage in zip(rows, pipeline.stages, strict=False)
    ):
        raise InputError(f"{path}: its stages are not the ones exported to {directory}")
    return document


def _table(report: RunReport) -> str:
    from ..run import ATOL, RTOL

    lines = [f"{'stage':6}{'core':>5}{'compute ms':>12}{'(cpu ms)':>10}{'send ms':>9}{'time ms':>9}"]
    for t in report.stages:
        core = "-" if t.core is None else str(t.core)
        lines.append(
            f"{t.stage:<6}{core:>5}{t.compute_s * 1e3:12.4g}"
            f"{t.compute_cpu_s * 1e3:10.4g}{t.send_s * 1e3:9.3g}{t.busy_s * 1e3:9.4g}"
        )
    lines.append(
        f"throughput {report.throughput_per_s:.4g}/s  latency {report.latency_s * 1e3:.4g} ms"
        f"  ({report.microbatches} micro-batches, one thread per stage)"
    )
    cores = usable_cores()
    if report.load_average > cores:
        lines.append(
            f"note: load average {report.load_average:.1f} on {cores} cores: wall times include time"
            " preempted by other work; the cpu figures do not"
        )
    worst = max(report.max_abs_diff.values(), default=0.0)
    verdict = "match" if report.outputs_match else f"DIFFER ({', '.join(report.mismatched)})"
    lines.append(f"outputs {verdict}: max |pipeline - whole model| = {worst:.3g} (rtol {RTOL}, atol {ATOL})")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    # these need onnx and onnxruntime: imported here (the package's docstring)
    from ..export import load_pipeline
    from ..reality import compare
    from ..run import run_pipeline

    if args.repeats < 1:
        raise InputError("--repeats must be at least 1")
    placement = _check_placement(args.compare, args.stages) if args.compare else None
    say = progress_printer(args.quiet)
    report = run_pipeline(
        Path(args.stages), args.microbatches, seed=args.seed, pin=not args.no_pin, progress=say
    )
    document = report.to_json()
    if not args.quiet:
        print(_table(report), file=sys.stderr)
    if placement is not None:
        if say:
            say("measuring op times and the inter-process link for the prediction")
        comparison = compare(load_pipeline(args.stages), report, repeats=args.repeats)
        document["comparison"] = comparison.to_json()
        document["comparison"]["placement_bottleneck_s"] = placement.get("bottleneck_s")
        if not args.quiet:
            print(comparison.table(), file=sys.stderr)
            recorded = placement.get("bottleneck_s")
            if isinstance(recorded, int | float) and recorded > 0:
                cluster = placement.get("instance", {}).get("cluster")
                print(
                    f"the placement file predicts {1 / recorded:.4g}/s (its own costs, cluster {cluster!r})",
                    file=sys.stderr,
                )
    emit(document, args.output, args.force)
    if not report.outputs_match:
        print(
            f"partition: error: outputs differ from the whole model: {', '.join(report.mismatched)}",
            file=sys.stderr,
        )
        return 1
    return 0
