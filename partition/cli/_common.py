"""Arguments and loading shared by the verbs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..api import make_instance
from ..calibrate import apply_calibrated, load_calibrated
from ..cluster import load_cluster
from ..devices import DeviceType
from ..errors import InputError
from ..evaluator import evaluate
from ..instance import CommMode, Instance, load_instance
from ..jsonio import dumps, read_json, write_atomic
from ..measured import apply_measured, load_cost_table, with_device_types
from ..placement import Evaluation, Placement
from ..report import placement_from_json


def add_output(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("-o", "--output", metavar="FILE", help=f"write the {what} here (default: stdout)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing output file")


def gap_fraction(text: str) -> float:
    """A relative gap from the command line: ``0.02`` or ``2%``."""
    value = text.strip()
    try:
        fraction = float(value[:-1]) / 100 if value.endswith("%") else float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a gap: {text!r} (write 0.02 or 2%)") from None
    if not 0 <= fraction < 1:
        raise argparse.ArgumentTypeError(f"a gap limit is at least 0 and below 100%, got {text!r}")
    return fraction


# the solvers with the ``gap_limit`` capability, named here so that building the parser imports
# none of them (tested against their flags)
GAP_LIMITED_SOLVERS = ("anytime", "cp-sat", "ideal-dp", "milp")


def add_gap_limit(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--gap-limit",
        type=gap_fraction,
        default=0.0,
        metavar="G",
        help="stop once the placement is proven within this gap of the optimum (bottleneck / bound"
        f" - 1), as 0.02 or 2%%: auto, {', '.join(GAP_LIMITED_SOLVERS)} stop early; the others end first"
        " anyway (default 0: search to the time limit or a proof)",
    )


def add_quiet(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress or tables on stderr")


def add_problem(parser: argparse.ArgumentParser, *, stages_required: bool = True) -> None:
    parser.add_argument(
        "source",
        metavar="MODEL.onnx|INSTANCE.json",
        help="an ONNX model (needs --cluster) or an instance file",
    )
    parser.add_argument("--cluster", metavar="C.json|NAME", help="cluster file or bundled cluster name")
    parser.add_argument(
        "--stages",
        "-k",
        type=int,
        metavar="K",
        help="at most K pipeline stages" + ("" if stages_required else " (default 1)"),
    )
    parser.add_argument("--exact-stages", action="store_true", help="use exactly K stages")
    parser.add_argument(
        "--comm-mode",
        choices=[m.value for m in CommMode],
        help="how a tensor sent to several stages is charged (default per-destination)",
    )
    parser.add_argument("--overlap", action="store_true", help="stage time = max(compute, communication)")
    parser.add_argument(
        "--dim",
        action="append",
        default=[],
        metavar="NAME=N",
        help="pin a symbolic input dimension (repeatable)",
    )
    parser.add_argument(
        "--costs",
        action="append",
        default=[],
        metavar="COSTS.json",
        help="measured cost table (partition profile) for its device type; others stay modelled",
    )
    parser.add_argument(
        "--roofline",
        action="append",
        default=[],
        metavar="CALIBRATED.json",
        help="calibrated roofline (partition calibrate -o) to model its device type with",
    )


def dims_from_args(pairs: list[str]) -> dict[str, int]:
    dims = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        if not name or not value.isdigit() or int(value) <= 0:
            raise InputError(f"--dim {pair!r}: expected NAME=N with N a positive whole number")
        dims[name] = int(value)
    return dims


def load_problem(args: argparse.Namespace, *, default_stages: int | None = None) -> Instance:
    """An instance from ``args.source``: an instance file, or an ONNX model with ``--cluster``."""
    tables = [(path, load_cost_table(path)) for path in args.costs]
    calibrated = [(path, load_calibrated(path)) for path in args.roofline]
    devices = [c.device for _, c in calibrated] + [t.device for _, t in tables]
    instance = _load_problem(args, default_stages, devices)
    for path, model in calibrated:
        instance = apply_calibrated(instance, model, where=path)
    for path, table in tables:  # measured times override modelled ones
        instance = apply_measured(instance, table, where=path)
    return instance


def _load_problem(
    args: argparse.Namespace, default_stages: int | None, devices: list[DeviceType]
) -> Instance:
    source = Path(args.source)
    stages = args.stages if args.stages is not None else default_stages
    if is_instance_file(source):
        if args.cluster:
            raise InputError("--cluster applies to ONNX models; an instance file holds its own cluster")
        instance = load_instance(source)
        changes = {}
        if stages is not None:
            changes["stages"] = stages
        if args.exact_stages:
            changes["exact_stages"] = True
        if args.comm_mode:
            changes["comm_mode"] = CommMode(args.comm_mode)
        if args.overlap:
            changes["overlap"] = True
        return instance.with_options(**changes) if changes else instance
    if not args.cluster:
        raise InputError(f"{source}: an ONNX model needs --cluster (a cluster file or bundled name)")
    if stages is None:
        raise InputError("--stages K is required with an ONNX model")
    return make_instance(
        source,
        load_cluster(args.cluster, catalog=with_device_types(devices)),
        stages,
        comm_mode=args.comm_mode or "per-destination",
        overlap=args.overlap,
        exact_stages=args.exact_stages,
        dims=dims_from_args(args.dim),
    )


def is_instance_file(path: Path) -> bool:
    """Instance files are JSON (optionally gzipped); anything else is taken for an ONNX model."""
    return path.name.endswith((".json", ".json.gz"))


def adopt_recorded_options(args: argparse.Namespace, document: Any) -> None:
    """Fill unset problem flags from the options a placement file recorded."""
    recorded = document.get("instance", {}) if isinstance(document, dict) else {}
    if args.stages is None and isinstance(recorded.get("stages"), int):
        args.stages = recorded["stages"]
    if args.comm_mode is None and recorded.get("comm_mode"):
        args.comm_mode = recorded["comm_mode"]
    args.overlap = args.overlap or bool(recorded.get("overlap"))
    if args.cluster is None and not is_instance_file(Path(args.source)) and recorded.get("cluster"):
        args.cluster = recorded["cluster"]  # its name: enough for a bundled cluster


def load_placement(args: argparse.Namespace) -> tuple[Instance, Placement, Evaluation, dict]:
    """The instance a placement file was solved for (options it recorded fill unset flags),
    the placement and its evaluation; an invalid placement is refused with its first violation."""
    document = read_json(args.placement, "placement")
    adopt_recorded_options(args, document)
    instance = load_problem(args, default_stages=1)
    placement = placement_from_json(instance, document, where=args.placement)
    evaluation = evaluate(instance, placement)
    if not evaluation.valid:
        raise InputError(
            f"{args.placement}: invalid placement: {evaluation.violations[0]}"
            + (f" (and {len(evaluation.violations) - 1} more)" if len(evaluation.violations) > 1 else "")
        )
    return instance, placement, evaluation, document


def emit(document: object, output: str | None, force: bool) -> None:
    """Write a JSON document to ``output`` atomically, or to stdout."""
    text = dumps(document)
    if output:
        write_atomic(output, text, overwrite=force)
    else:
        sys.stdout.write(text)


def progress_printer(quiet: bool):
    if quiet:
        return None
    return lambda message: print(f"partition: {message}", file=sys.stderr, flush=True)
