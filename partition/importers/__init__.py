"""Measured per-layer costs from other partitioning projects, as partition instances.

Each peer format (PipeDream ``graph.txt``, Sailor profiles, Piper JSON) has its own module
that reads a file into :class:`ImportedCosts`: a *layer graph* (each layer is one op, since
the files carry no finer structure) with one column of measured times per device type the file
covers, and any device types the catalog lacks. :func:`imported_instance` joins it with a
cluster. Costs stay ``imported`` in provenance; a cluster device type the file has no times for
is an error, since a roofline estimate of a layer without FLOP counts would be meaningless.

Instances are for inference: where a file separates forward and backward times, only the
forward time is used. Piper files give one training time per layer (forward + backward), which
is used as is and recorded in the instance's source.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from ..cluster import Cluster, load_cluster
from ..costs import CostTable, Provenance
from ..devices import Catalog, DeviceType, bundled_catalog
from ..errors import InputError
from ..graph import Op, OpGraph, Tensor
from ..instance import Instance, Options, build_instance
from ..jsonio import require_file


@dataclass(frozen=True)
class Layer:
    """One measured layer: its id, kind, description, parameter bytes and output bytes."""

    id: str
    kind: str
    description: str
    param_bytes: float
    output_bytes: float


@dataclass(frozen=True, eq=False)
class ImportedCosts:
    """A layer graph and its measured seconds per layer on each device type the file covers."""

    graph: OpGraph
    times: Mapping[str, np.ndarray]  # device type → seconds per op, in graph.ops order
    device_types: Mapping[str, DeviceType] = field(default_factory=dict)
    source: Mapping[str, Any] = field(default_factory=dict)

    def catalog(self, base: Catalog | None = None) -> Catalog:
        """``base`` (the bundled catalog) plus the device types this file defines."""
        base = base or bundled_catalog()
        return Catalog({**base.device_types, **self.device_types}, base.link_types)


def layer_graph(name: str, layers: Sequence[Layer], edges: Sequence[tuple[str, str, float]]) -> OpGraph:
    """An op graph with one op per layer, in a topological order that follows the file's order.

    Edges ``(producer, consumer, bytes)`` leaving one layer with the same byte count are one
    tensor with several consumers (the layer's output), so ``once`` accounting sees one send.
    """
    position = {layer.id: i for i, layer in enumerate(layers)}
    for u, v, size in edges:
        for end in (u, v):
            if end not in position:
                raise InputError(f"{name}: edge {u!r} → {v!r} names unknown layer {end!r}")
        if not np.isfinite(size) or size < 0:
            raise InputError(f"{name}: edge {u!r} → {v!r} has invalid size {size!r}")
    dag = nx.DiGraph()
    dag.add_nodes_from(position)
    dag.add_edges_from((u, v) for u, v, _ in edges if u != v)
    if not nx.is_directed_acyclic_graph(dag):
        cycle = nx.find_cycle(dag)
        raise InputError(f"{name}: the layer graph has a cycle (through {cycle[0][0]!r})")
    order = list(nx.lexicographical_topological_sort(dag, key=position.__getitem__))
    outputs: dict[tuple[str, float], list[str]] = {}
    for u, v, size in edges:
        if u != v:
            outputs.setdefault((u, float(size)), []).append(v)
    tensors = tuple(
        Tensor(
            f"{u}:out{'' if size == layers[position[u]].output_bytes else f'@{size:.0f}'}", size, u, tuple(vs)
        )
        for (u, size), vs in outputs.items()
    )
    received: dict[str, float] = {}
    for tensor in tensors:
        for v in tensor.consumers:
            received[v] = received.get(v, 0.0) + tensor.bytes
    by_id = {layer.id: layer for layer in layers}
    ops = tuple(
        Op(
            id=layer.id,
            op_type=layer.kind,
            name=layer.description,
            bytes_read=received.get(layer.id, 0.0),
            bytes_written=layer.output_bytes,
            inputs=tuple(t.name for t in tensors if layer.id in t.consumers),
            outputs=tuple(t.name for t in tensors if t.producer == layer.id),
            weights=(f"{layer.id}.params",) if layer.param_bytes > 0 else (),
        )
        for layer in (by_id[i] for i in order)
    )
    weights = {f"{layer.id}.params": layer.param_bytes for layer in layers if layer.param_bytes > 0}
    return OpGraph(name, ops, tensors, weights)


def in_graph_order(graph: OpGraph, seconds: Mapping[str, float]) -> np.ndarray:
    """Per-layer seconds (keyed by layer id) as an array in ``graph.ops`` order."""
    return np.array([seconds[op.id] for op in graph.ops], dtype=float)


def check_times(where: str, device_type: str, seconds: Mapping[str, float]) -> None:
    """Reject negative, NaN or infinite measured times, naming the first bad layer."""
    for layer, value in seconds.items():
        if not np.isfinite(value) or value < 0:
            raise InputError(f"{where}: layer {layer!r} on {device_type}: invalid time {value!r}")


def imported_instance(imported: ImportedCosts, cluster: Cluster, options: Options) -> Instance:
    """Join imported costs with a cluster whose every device type the file covers."""
    missing = [t for t in cluster.type_names if t not in imported.times]
    if missing:
        raise InputError(
            f"{imported.graph.name}: the imported profile has no times for device type"
            f" {missing[0]!r} of cluster {cluster.name!r} (it covers: {', '.join(sorted(imported.times))})"
        )
    times = np.column_stack([imported.times[t] for t in cluster.type_names])
    costs = CostTable(cluster.type_names, times, tuple(Provenance.IMPORTED for _ in cluster.type_names))
    return build_instance(imported.graph, cluster, options, costs=costs, source=dict(imported.source))


def _readers() -> dict[str, Callable[..., ImportedCosts]]:
    from . import pipedream, piper, sailor

    return {"pipedream": pipedream.read, "sailor": sailor.read, "piper": piper.read}


FORMATS = ("pipedream", "sailor", "piper")
SINGLE_TYPE_FORMATS = ("pipedream", "piper")  # files measured on one, unnamed, device type


def read_costs(fmt: str, path: str | Path, **options: Any) -> ImportedCosts:
    """Read a peer file of format ``fmt`` (one of :data:`FORMATS`) with format options."""
    readers = _readers()
    if fmt not in readers:
        raise InputError(f"unknown import format {fmt!r} (known: {', '.join(FORMATS)})")
    require_file(Path(path), f"{fmt} profile")
    return readers[fmt](Path(path), **options)


def import_instance(
    fmt: str,
    path: str | Path,
    cluster: Cluster | str | Path,
    options: Options,
    *,
    onto: tuple[OpGraph, str | Path] | None = None,
    **format_options: Any,
) -> Instance:
    """Read a peer file and build an instance on ``cluster`` (a cluster, a file or a bundled name).

    A cluster named by path or bundled name may use the device types the file defines. With
    ``onto`` (an ONNX model's op graph and its path), layer times are mapped onto its ops
    (:mod:`.onto_onnx`).
    """
    if fmt in SINGLE_TYPE_FORMATS and format_options.get("device_type") is None:
        if not isinstance(cluster, Cluster):
            cluster = load_cluster(cluster)
        if len(cluster.type_names) != 1:
            raise InputError(
                f"{path}: a {fmt} profile holds times for one device type; name it with --gpu TYPE"
                f" (cluster {cluster.name!r} has {', '.join(cluster.type_names)})"
            )
        format_options["device_type"] = cluster.type_names[0]
    imported = read_costs(fmt, path, **format_options)
    if onto is not None:
        from .onto_onnx import map_onto_onnx

        imported = map_onto_onnx(imported, *onto)
    if not isinstance(cluster, Cluster):
        cluster = load_cluster(cluster, catalog=imported.catalog())
    return imported_instance(imported, cluster, options)
