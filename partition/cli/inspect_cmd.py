"""``partition inspect``: what the importer made of a model, by layer, checked against the zoo.

Layers are read off module paths: an op's layer is its path up to the first indexed module
(``/model/transformer/h.3`` for ``/model/transformer/h.3/attn``), or its whole path when no part
is indexed. When the model sits next to a ``manifest.json`` (the ``models/`` zoo) that lists it,
the parameter bytes and the matmul/conv FLOPs are compared with what torch counted at export.
An instance file is inspected too: its graph as above, plus its cluster, stages and what the
whole model costs on one device of each type, the figures its solves start from.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path

from ..api import load_graph
from ..errors import InputError
from ..graph import OpClass, OpGraph
from ..instance import Instance, load_instance
from ..jsonio import write_atomic
from ._common import add_output, dims_from_args, emit, is_instance_file

_INDEXED = re.compile(r"\.\d+$")
_TOP = "(no module)"


def register(verbs: argparse._SubParsersAction) -> None:
    parser = verbs.add_parser(
        "inspect", help="ops, FLOPs, parameters and op types, per layer; Graphviz export"
    )
    parser.add_argument("model", metavar="MODEL.onnx|INSTANCE.json")
    parser.add_argument(
        "--dim",
        action="append",
        default=[],
        metavar="NAME=N",
        help="pin a symbolic input dimension (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON summary instead of text")
    parser.add_argument("--dot", metavar="FILE", help="write the op graph as Graphviz DOT to FILE")
    add_output(parser, "JSON summary")
    parser.set_defaults(run=run)


_LAYER_WIDTH = 48


def _shortened(layer: str) -> str:
    """``layer`` within the table's column: its last modules, which name it, after an ellipsis
    that says the path goes on (a bare cut looked like a path of another form)."""
    if len(layer) <= _LAYER_WIDTH:
        return layer
    tail = layer[-(_LAYER_WIDTH - 1) :]
    return "…" + tail[tail.find("/") :] if "/" in tail else "…" + tail


def layer_of(module: str) -> str:
    """The module path up to its first indexed part (a repeated block), else the whole path."""
    if not module:
        return _TOP
    parts = module.strip("/").split("/")
    for depth, part in enumerate(parts):
        if _INDEXED.search(part) or part.isdigit():
            return "/" + "/".join(parts[: depth + 1])
    return module


def _layers(graph: OpGraph) -> list[dict]:
    """Per-layer op count, GFLOPs and weight bytes, in order of first appearance."""
    rows: dict[str, dict] = {}
    weights_seen: dict[str, set[str]] = {}
    for op in graph.ops:
        layer = layer_of(op.module)
        row = rows.setdefault(layer, {"layer": layer, "ops": 0, "gflops": 0.0, "param_bytes": 0.0})
        row["ops"] += 1
        row["gflops"] += op.flops / 1e9
        seen = weights_seen.setdefault(layer, set())
        for weight in op.weights:
            if weight not in seen:
                seen.add(weight)
                row["param_bytes"] += graph.weights[weight]
    return list(rows.values())


def _manifest_entry(model: str) -> dict | None:
    manifest = Path(model).resolve().parent / "manifest.json"
    if not manifest.is_file():
        return None
    try:
        entries = json.loads(manifest.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return next(
        (e for e in entries.values() if isinstance(e, dict) and e.get("file") == Path(model).name), None
    )


def _relative(measured: float, expected: float) -> float:
    return (measured - expected) / expected if expected else 0.0


def summary(model: str, graph: OpGraph) -> dict:
    """The JSON summary of an imported model, with the manifest comparison when there is one."""
    length, path = graph.longest_path()
    matmul = sum(op.flops for op in graph.ops if op.op_class in (OpClass.MATMUL, OpClass.CONV)) / 1e9
    info = {
        "model": model,
        "name": graph.name,
        "ops": len(graph.ops),
        "tensors": len(graph.tensors),
        "gflops": sum(op.flops for op in graph.ops) / 1e9,
        "matmul_conv_gflops": matmul,
        "param_bytes": graph.total_weight_bytes,
        "activation_bytes": sum(t.bytes for t in graph.tensors if t.producer is not None),
        "op_types": dict(Counter(op.op_type for op in graph.ops).most_common()),
        "longest_path_ops": int(length),
        "longest_path": [path[0], path[-1]],
        "layers": _layers(graph),
    }
    entry = _manifest_entry(model)
    if entry is not None:
        info["manifest"] = {
            "architecture": entry.get("architecture"),
            "parameters": entry.get("parameters"),
            "param_bytes": entry.get("parameter_bytes"),
            "param_bytes_error": _relative(info["param_bytes"], entry.get("parameter_bytes") or 0),
            "torch_matmul_gflops": entry.get("torch_matmul_gflops"),
            "matmul_gflops_error": _relative(matmul, entry.get("torch_matmul_gflops") or 0),
        }
    return info


def to_dot(graph: OpGraph) -> str:
    """The op graph in Graphviz DOT: one cluster per layer, edges labelled with MB sent."""

    def quote(*lines: str) -> str:  # DOT string; "\\n" separates lines
        return '"' + "\\n".join(t.replace("\\", "\\\\").replace('"', '\\"') for t in lines) + '"'

    lines = [f"digraph {quote(graph.name)} {{", "  rankdir=TB;", "  node [shape=box, fontsize=10];"]
    by_layer: dict[str, list[int]] = {}
    for i, op in enumerate(graph.ops):
        by_layer.setdefault(layer_of(op.module), []).append(i)
    for number, (layer, members) in enumerate(by_layer.items()):
        lines.append(f"  subgraph cluster_{number} {{ label={quote(layer)};")
        for i in members:
            op = graph.ops[i]
            lines.append(f"    n{i} [label={quote(op.op_type, op.id, f'{op.flops / 1e9:.3g} GFLOP')}];")
        lines.append("  }")
    for tensor in graph.tensors:
        if tensor.producer is None:
            continue
        for consumer in tensor.consumers:
            u, v = graph.index[tensor.producer], graph.index[consumer]
            lines.append(f'  n{u} -> n{v} [label="{tensor.bytes / 1e6:.3g} MB"];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def _instance_summary(instance: Instance) -> dict:
    """The cluster and stage count an instance poses, and the whole model's time on one device of
    each type: how much faster one type runs this model than another, before any split."""
    cluster = instance.cluster
    whole = instance.costs.times.sum(axis=0)
    return {
        "name": instance.name,
        "cluster": cluster.name,
        "hosts": [
            {"name": host.name, "devices": dict(Counter(d.type for d in cluster.devices if d.host == h))}
            for h, host in enumerate(cluster.hosts)
        ],
        "stages": instance.options.stages,
        "comm_mode": instance.options.comm_mode.value,
        "whole_model_ms": {name: float(whole[t]) * 1e3 for t, name in enumerate(cluster.type_names)},
    }


def run(args: argparse.Namespace) -> int:
    instance = None
    if is_instance_file(Path(args.model)):
        if args.dim:
            raise InputError(f"{args.model}: --dim applies to ONNX models; an instance's shapes are fixed")
        instance = load_instance(args.model)
        graph = instance.graph
    else:
        graph = load_graph(args.model, dims=dims_from_args(args.dim))
    info = summary(args.model, graph)
    if instance is not None:
        info["instance"] = _instance_summary(instance)
    if args.dot:
        write_atomic(args.dot, to_dot(graph), overwrite=args.force)
    if args.json or args.output:
        emit(info, args.output, args.force)
        return 0
    print(f"model          {info['model']}")
    print(f"ops            {info['ops']}  (tensors between ops: {info['tensors']})")
    print(f"GFLOPs         {info['gflops']:.4g}  (matmul/conv {info['matmul_conv_gflops']:.4g})")
    print(f"parameters     {info['param_bytes'] / 1e6:.4g} MB")
    print(f"activations    {info['activation_bytes'] / 1e6:.4g} MB")
    first, last = info["longest_path"]
    print(f"longest path   {info['longest_path_ops']} ops ({first} → {last})")
    print("op types       " + ", ".join(f"{t} {n}" for t, n in info["op_types"].items()))
    if "instance" in info:
        i = info["instance"]
        hosts = "; ".join(
            f"{h['name']}: " + ", ".join(f"{n} × {t}" for t, n in h["devices"].items()) for h in i["hosts"]
        )
        print(f"instance       {i['name']}: {i['stages']} stages, {i['comm_mode']} communication")
        print(f"cluster        {i['cluster']} ({hosts})")
        print("whole model    " + ", ".join(f"{ms:.4g} ms on {t}" for t, ms in i["whole_model_ms"].items()))
    if "manifest" in info:
        m = info["manifest"]
        print(
            f"manifest       {m['architecture']}: {m['parameters'] / 1e6:.2f} M parameters,"
            f" {m['param_bytes'] / 1e6:.4g} MB (imported {m['param_bytes_error']:+.2%});"
            f" torch matmul/conv {m['torch_matmul_gflops']:.4g} GFLOPs"
            f" (imported {m['matmul_gflops_error']:+.2%})"
        )
    print(f"{'layer':<{_LAYER_WIDTH}} {'ops':>6} {'GFLOPs':>10} {'params MB':>10}")
    for row in info["layers"]:
        megabytes = row["param_bytes"] / 1e6
        name = _shortened(row["layer"])
        print(f"{name:<{_LAYER_WIDTH}} {row['ops']:>6} {row['gflops']:>10.4g} {megabytes:>10.4g}")
    return 0
