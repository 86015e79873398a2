"""PipeDream profiler ``graph.txt``: per-layer times measured on one GPU, and the layer DAG.

Node lines read ``nodeN -- <module repr> -- forward_compute_time=<ms>, backward_compute_time=<ms>,
activation_size=<bytes>, parameter_size=<bytes>``; a layer with several outputs lists its sizes
as ``[a; b; c]``. Edge lines are tab-indented ``nodeA -- nodeB`` (the last may lack its newline,
so it can run into the next node line). Times are per minibatch in milliseconds; only the forward
time is used (inference). Every edge carries the producer's whole activation, as PipeDream
assumes. ``Input`` layers keep their measured time (data loading: 474 ms in ``resnet18``), as
the Piper inputs derived from these profiles do; it is in the file, so it is in the instance.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import InputError
from . import ImportedCosts, Layer, check_times, in_graph_order, layer_graph

_NODE = re.compile(
    r"^(?P<id>node\d+) -- (?P<description>.*) -- forward_compute_time=(?P<fwd>[^,]+),"
    r" backward_compute_time=(?P<bwd>[^,]+), activation_size=(?P<act>\[[^\]]*\]|[^,]+),"
    r" parameter_size=(?P<params>\S+)$"
)
_EDGE = re.compile(r"^\t(?P<u>node\d+) -- (?P<v>node\d+)(?P<rest>.*)$")
_MS = 1e-3


def _number(text: str, where: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise InputError(f"{where}: {text!r} is not a number") from None


def _activation(text: str, where: str) -> float:
    """Bytes of a layer's outputs: one number, or ``[a; b; c]`` for several outputs."""
    parts = text.strip("[]").split(";") if text.startswith("[") else [text]
    return sum(_number(part.strip(), where) for part in parts)


def read(path: Path, *, device_type: str) -> ImportedCosts:
    """Read a ``graph.txt``; its times become the column of ``device_type``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    layers: list[Layer] = []
    forward: dict[str, float] = {}
    links: list[tuple[str, str]] = []
    for number, raw in enumerate(lines, start=1):
        where = f"{path}:{number}"
        pending = [raw]
        while pending:
            line = pending.pop()
            if not line.strip():
                continue
            edge = _EDGE.match(line)
            if edge:
                links.append((edge["u"], edge["v"]))
                if edge["rest"]:
                    pending.append(edge["rest"])  # a node line glued to the last edge line
                continue
            node = _NODE.match(line)
            if node is None:
                raise InputError(f"{where}: not a PipeDream node or edge line: {line[:80]!r}")
            description = node["description"]
            layers.append(
                Layer(
                    id=node["id"],
                    kind=description.split("(", 1)[0].strip() or "layer",
                    description=description,
                    param_bytes=_number(node["params"], where),
                    output_bytes=_activation(node["act"], where),
                )
            )
            forward[node["id"]] = _number(node["fwd"], where) * _MS
    if not layers:
        raise InputError(f"{path}: no PipeDream node lines")
    check_times(str(path), device_type, forward)
    output = {layer.id: layer.output_bytes for layer in layers}
    name = f"pipedream-{path.parent.name}"
    graph = layer_graph(name, layers, [(u, v, output.get(u, 0.0)) for u, v in links])
    return ImportedCosts(
        graph=graph,
        times={device_type: in_graph_order(graph, forward)},
        source={
            "format": "pipedream",
            "file": str(path),
            "model": path.parent.name,
            "measured_on": device_type,
            "costs": "imported PipeDream forward_compute_time per layer (ms → s); inference",
        },
    )
