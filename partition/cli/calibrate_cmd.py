"""``partition calibrate``: fit the roofline model to measured cost tables and report its error."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..api import load_graph
from ..calibrate import Calibrated, Errors, calibrated_json, errors, fit
from ..cluster import load_cluster
from ..costs import RooflineModel
from ..errors import InputError
from ..link_calibration import LinkScope, fit_link, parse_transfer, with_link
from ..measured import MeasuredTable, check_matches, load_cost_table
from ._common import add_output, dims_from_args, emit


def register(verbs: argparse._SubParsersAction) -> None:
    parser = verbs.add_parser(
        "calibrate",
        help="fit roofline efficiency factors and launch overhead to measured cost tables",
        description="Give one or more COSTS.json MODEL.onnx pairs measured on one device type."
        " Reports per-op median and 90th-percentile absolute relative error and whole-model"
        " error, before (default factors) and after calibration. Or calibrate a link: --link"
        " intra|inter BYTES:SECONDS BYTES:SECONDS... --cluster C -o cluster.json fits latency and"
        " bandwidth to transfers measured at two or more sizes and writes C with that link.",
    )
    parser.add_argument("inputs", nargs="*", metavar="COSTS.json MODEL.onnx")
    parser.add_argument("--device-type", metavar="NAME", help="check every table is of this device type")
    parser.add_argument(
        "--holdout",
        action="store_true",
        help="also report each model's error when the fit uses only the other models",
    )
    parser.add_argument(
        "--dim", action="append", default=[], metavar="NAME=N", help="pin a symbolic input dimension"
    )
    parser.add_argument(
        "--link",
        nargs="+",
        metavar="SCOPE|BYTES:SECONDS",
        help="calibrate a link instead: intra or inter, then measured BYTES:SECONDS transfers",
    )
    parser.add_argument("--cluster", metavar="C.json|NAME", help="--link: the cluster to give the link")
    parser.add_argument(
        "--link-name", metavar="NAME", help="--link: name of the link type (default measured-SCOPE)"
    )
    add_output(parser, "calibrated roofline model JSON, or with --link the cluster JSON")
    parser.set_defaults(run=run)


def _pairs(args: argparse.Namespace) -> list[tuple[str, object, MeasuredTable]]:
    if len(args.inputs) % 2:
        raise InputError("calibrate takes COSTS.json MODEL.onnx pairs (an even number of files)")
    dims = dims_from_args(args.dim)
    pairs = []
    for costs, model in zip(args.inputs[::2], args.inputs[1::2], strict=True):
        if Path(costs).suffix != ".json" or Path(model).suffix != ".onnx":
            raise InputError(f"expected COSTS.json MODEL.onnx, got {costs} {model}")
        table = load_cost_table(costs)
        graph = load_graph(model, dims=dims)
        check_matches(table, graph, where=costs)
        pairs.append((Path(model).stem, graph, table))
    types = {table.device_type for _, _, table in pairs}
    wanted = args.device_type or next(iter(types))
    wrong = next(((name, t) for name, _, t in pairs if t.device_type != wanted), None)
    if wrong is not None:
        raise InputError(f"{wrong[0]}: its table is of device type {wrong[1].device_type!r}, not {wanted!r}")
    return pairs


def _row(name: str, label: str, e: Errors) -> str:
    run = "" if e.whole_run is None else f" {e.whole_run:+9.1%}"
    return f"{name:<24} {label:<9} {e.median:9.1%} {e.p90:9.1%} {e.whole_model:+9.1%}{run}"


def _json(e: Errors) -> dict:
    return {"median": e.median, "p90": e.p90, "whole_model": e.whole_model, "whole_run": e.whole_run}


def _calibrate_link(args: argparse.Namespace) -> int:
    scope_name, *measurements = args.link
    scopes = [s.value for s in LinkScope]
    if scope_name not in scopes:
        raise InputError(
            f"--link: the first value is the link to calibrate ({' or '.join(scopes)}), not {scope_name!r}"
        )
    if args.inputs or args.cluster is None:
        raise InputError("--link takes measured transfers and --cluster C, no cost tables")
    scope = LinkScope(scope_name)
    link = fit_link([parse_transfer(m) for m in measurements], args.link_name or f"measured-{scope.value}")
    cluster = with_link(load_cluster(args.cluster), scope, link)
    print(
        f"{scope.value}-host link {link.name!r}: latency {link.latency * 1e6:.3g} µs,"
        f" bandwidth {link.bandwidth / 1e9:.4g} GB/s",
        file=sys.stderr if args.output is None else sys.stdout,
    )
    emit(cluster.to_json(), args.output, args.force)
    return 0


def run(args: argparse.Namespace) -> int:
    if args.link:
        return _calibrate_link(args)
    if not args.inputs:
        raise InputError("calibrate takes COSTS.json MODEL.onnx pairs, or --link")
    pairs = _pairs(args)
    device = pairs[0][2].device
    fitted = fit([(g, t) for _, g, t in pairs], device)
    default = RooflineModel()
    print(f"{'model':<24} {'':<9} {'op med':>9} {'op p90':>9} {'Σ ops':>9} {'vs run':>9}")
    report = {}
    for name, graph, table in pairs:
        before, after = errors(graph, table, default, device), errors(graph, table, fitted, device)
        print(_row(name, "before", before))
        print(_row(name, "after", after))
        report[name] = {"before": _json(before), "after": _json(after)}
        if args.holdout and len(pairs) > 1:
            others = fit([(g, t) for n, g, t in pairs if n != name], device)
            held = errors(graph, table, others, device)
            print(_row(name, "held-out", held))
            report[name]["held_out"] = _json(held)
    print(
        f"launch overhead {fitted.launch_overhead * 1e6:.3g} µs, dispatch overhead"
        f" {fitted.dispatch_overhead * 1e6:.3g} µs per op; efficiency (compute, memory) per class:"
    )
    print("  " + ", ".join(f"{c.value} ({e[0]:.3g}, {e[1]:.3g})" for c, e in fitted.efficiency.items()))
    types = fitted.type_efficiency.items()
    print("per op type: " + ", ".join(f"{t} ({e[0]:.3g}, {e[1]:.3g})" for t, e in types))
    if args.output:
        emit(calibrated_json(Calibrated(device, fitted), report), args.output, args.force)
    return 0
