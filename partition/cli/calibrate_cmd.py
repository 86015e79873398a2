"""``partition calibrate``: fit the roofline model to measured cost tables and report its error."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..api import load_graph
from ..calibrate import Calibrated, Errors, calibrated_json, errors, fit
from ..costs import RooflineModel
from ..errors import InputError
from ..measured import MeasuredTable, check_matches, load_cost_table
from ._common import add_output, dims_from_args, emit


def register(verbs: argparse._SubParsersAction) -> None:
    parser = verbs.add_parser(
        "calibrate",
        help="fit roofline efficiency factors and launch overhead to measured cost tables",
        description="Give one or more COSTS.json MODEL.onnx pairs measured on one device type."
        " Reports per-op median and 90th-percentile absolute relative error and whole-model"
        " error, before (default factors) and after calibration.",
    )
    parser.add_argument("inputs", nargs="+", metavar="COSTS.json MODEL.onnx")
    parser.add_argument("--device-type", metavar="NAME", help="check every table is of this device type")
    parser.add_argument(
        "--holdout",
        action="store_true",
        help="also report each model's error when the fit uses only the other models",
    )
    parser.add_argument(
        "--dim", action="append", default=[], metavar="NAME=N", help="pin a symbolic input dimension"
    )
    add_output(parser, "calibrated roofline model JSON")
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


def run(args: argparse.Namespace) -> int:
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
    print(f"launch overhead {fitted.launch_overhead * 1e6:.3g} µs; efficiency (compute, memory) per class:")
    print("  " + ", ".join(f"{c.value} ({e[0]:.3g}, {e[1]:.3g})" for c, e in fitted.efficiency.items()))
    types = fitted.type_efficiency.items()
    print("per op type: " + ", ".join(f"{t} ({e[0]:.3g}, {e[1]:.3g})" for t, e in types))
    if args.output:
        emit(calibrated_json(Calibrated(device, fitted), report), args.output, args.force)
    return 0
