"""Piper input JSON: a layer graph with per-layer time, parameters and edge bytes.

``{"nodes": [{"id", "name", "TMPCs": {tp: [{"id": "vanilla", "timePerSample", "parameterSize",
...}]}}], "edges": [{"sourceId", "destId", "communicationCost"}]}``. A Sailor baseline
``profile.json`` wraps one such document per microbatch size (``{"1": {...}, "2": {...}}``).

``timePerSample`` is the layer's *training* time (forward + backward): Piper does not separate
them, so the instance uses it as is and says so in its source. Its unit is the file's: the
``gnmt`` and ``resnet`` inputs derive from PipeDream profiles and are in milliseconds
(``--time-unit ms``), ``bert32a100`` and Sailor's baselines are in seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..jsonio import read_json
from . import ImportedCosts, Layer, check_times, in_graph_order, layer_graph

TIME_UNITS = {"s": 1.0, "ms": 1e-3}


def _document(raw: Any, path: Path, microbatch: int | None) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise InputError(f"{path}: not a Piper input (expected a JSON object)")
    if "nodes" in raw:
        return raw
    if raw and all(key.isdigit() for key in raw):  # Sailor's wrapper: one document per microbatch
        chosen = str(microbatch if microbatch is not None else min(int(k) for k in raw))
        if chosen not in raw:
            raise InputError(
                f"{path}: no microbatch {chosen} (microbatches: {', '.join(sorted(raw, key=int))})"
            )
        return raw[chosen]
    raise InputError(f"{path}: not a Piper input (no 'nodes')")


def read(
    path: Path,
    *,
    device_type: str,
    tp: int = 1,
    variant: str = "vanilla",
    time_unit: str = "s",
    microbatch: int | None = None,
) -> ImportedCosts:
    """Read a Piper input at tensor-parallel degree ``tp`` and TMPC ``variant``."""
    if time_unit not in TIME_UNITS:
        raise InputError(f"time unit {time_unit!r} is not one of {', '.join(TIME_UNITS)}")
    document = _document(read_json(path, "Piper input"), path, microbatch)
    layers: list[Layer] = []
    seconds: dict[str, float] = {}
    ids: dict[Any, str] = {}
    try:
        for node in document["nodes"]:
            configs = node["TMPCs"].get(str(tp))
            if configs is None:
                raise InputError(
                    f"{path}: node {node['id']} has no measurement at tp={tp}"
                    f" (has {', '.join(node['TMPCs'])})"
                )
            config = next((c for c in configs if c["id"] == variant), None)
            if config is None:
                raise InputError(f"{path}: node {node['id']} has no {variant!r} configuration at tp={tp}")
            layer_id = f"n{node['id']}"
            ids[node["id"]] = layer_id
            seconds[layer_id] = float(config["timePerSample"]) * TIME_UNITS[time_unit]
            layers.append(
                Layer(layer_id, str(node["name"]), str(node["name"]), float(config["parameterSize"]), 0.0)
            )
        edges = [
            (ids[e["sourceId"]], ids[e["destId"]], float(e["communicationCost"])) for e in document["edges"]
        ]
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise InputError(f"{path}: malformed Piper input ({error!r})") from None
    check_times(str(path), device_type, seconds)
    sent: dict[str, float] = {}
    for u, _, size in edges:
        sent[u] = max(sent.get(u, 0.0), size)
    layers = [Layer(x.id, x.kind, x.description, x.param_bytes, sent.get(x.id, 0.0)) for x in layers]
    graph = layer_graph(f"piper-{path.stem}", layers, edges)
    return ImportedCosts(
        graph=graph,
        times={device_type: in_graph_order(graph, seconds)},
        source={
            "format": "piper",
            "file": str(path),
            "measured_on": device_type,
            "tensor_parallel": tp,
            "variant": variant,
            "time_unit": time_unit,
            "costs": "imported Piper timePerSample per layer: training (forward + backward) time,"
            " which Piper does not split",
        },
    )
