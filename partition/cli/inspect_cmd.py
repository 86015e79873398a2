"""``partition inspect``: what the importer made of a model."""

from __future__ import annotations

import argparse
from collections import Counter

from ..api import load_graph
from ._common import add_output, dims_from_args, emit


def register(verbs: argparse._SubParsersAction) -> None:
    parser = verbs.add_parser("inspect", help="op count, FLOPs, parameters, op types, longest path")
    parser.add_argument("model", metavar="MODEL.onnx")
    parser.add_argument(
        "--dim",
        action="append",
        default=[],
        metavar="NAME=N",
        help="pin a symbolic input dimension (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON summary instead of text")
    add_output(parser, "JSON summary")
    parser.set_defaults(run=run)


def summary(model: str, dims: dict[str, int]) -> dict:
    graph = load_graph(model, dims=dims)
    length, path = graph.longest_path()
    return {
        "model": model,
        "name": graph.name,
        "ops": len(graph.ops),
        "tensors": len(graph.tensors),
        "gflops": sum(op.flops for op in graph.ops) / 1e9,
        "param_bytes": graph.total_weight_bytes,
        "activation_bytes": sum(t.bytes for t in graph.tensors if t.producer is not None),
        "op_types": dict(Counter(op.op_type for op in graph.ops).most_common()),
        "longest_path_ops": int(length),
        "longest_path": [path[0], path[-1]],
    }


def run(args: argparse.Namespace) -> int:
    info = summary(args.model, dims_from_args(args.dim))
    if args.json or args.output:
        emit(info, args.output, args.force)
        return 0
    print(f"model          {info['model']}")
    print(f"ops            {info['ops']}  (tensors between ops: {info['tensors']})")
    print(f"GFLOPs         {info['gflops']:.4g}")
    print(f"parameters     {info['param_bytes'] / 1e6:.4g} MB")
    print(f"activations    {info['activation_bytes'] / 1e6:.4g} MB")
    first, last = info["longest_path"]
    print(f"longest path   {info['longest_path_ops']} ops ({first} → {last})")
    print("op types       " + ", ".join(f"{t} {n}" for t, n in info["op_types"].items()))
    return 0
