"""Imported per-layer times mapped onto the ops of a matching ONNX model.

A peer profile measures layers (Sailor: embedding, N transformer blocks, head), not ops. When
an ONNX model with the same layer structure is at hand, its op graph is a finer instance: the
solver may cut inside the embedding/head segments and the memory and communication figures are
the ONNX model's. The mapping is by segment:

- **Imported side**: a chain of layers; the ``transformer`` layers are the blocks (they must be
  contiguous), the layers before them the *pre* segment, those after them the *post* segment.
- **ONNX side**: blocks are found from module paths. The first numbered component of an op's
  path (``/model/model/layers.7/self_attn`` → container ``/model/model/layers``, block 7;
  ``layers.7.mlp`` likewise) names its block; the container with the most blocks is the stack.
  Ops before the first block op in topological order are *pre*, after the last are *post*, and
  an op between blocks outside any block (a shared mask, a reshape) joins the block of the
  closest block op before it.
- The counts must agree (blocks, and a pre/post segment on one side needs one on the other);
  a mismatch is refused in one line rather than guessed.
- **Split**: on each device type, each ONNX op of a segment gets the segment's imported time
  (the sum of its layers' times) in proportion to the op's roofline time on that device type,
  so a block's ops add up to exactly the measured block time and the roofline only decides how
  it is shared among the block's ops. Every time keeps provenance ``imported``. An op the
  device type cannot run (roofline ``inf``) stays ``inf`` there; a segment whose ops all have
  zero modelled time shares its time equally.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ..costs import RooflineModel
from ..errors import InputError
from ..graph import OpGraph
from . import ImportedCosts

_BLOCK = re.compile(r"^(.*?)[./](\d+)(?=[./]|$)")
BLOCK_KIND = "transformer"


def _block_of(module: str) -> tuple[str, int] | None:
    match = _BLOCK.match(module)
    return None if match is None else (match.group(1), int(match.group(2)))


def onnx_segments(graph: OpGraph) -> tuple[np.ndarray, int]:
    """Segment per op (0 = pre, 1..N = block, N + 1 = post) and the block count N."""
    found = [_block_of(op.module) for op in graph.ops]
    containers: dict[str, set[int]] = {}  # in order of first appearance: ties go to the first
    for b in filter(None, found):
        containers.setdefault(b[0], set()).add(b[1])
    if not containers:
        raise InputError(f"{graph.name}: no numbered blocks in the ONNX module paths (e.g. layers.0)")
    stack = max(containers, key=lambda c: len(containers[c]))
    rank = {index: r for r, index in enumerate(sorted(containers[stack]))}
    count = len(rank)
    block = [rank[b[1]] + 1 if b and b[0] == stack else 0 for b in found]
    positions = [v for v, b in enumerate(block) if b]
    first, last = positions[0], positions[-1]
    segment = np.zeros(len(graph.ops), dtype=int)
    current = 0
    for v, b in enumerate(block):
        if b:
            current = b
        segment[v] = b or (0 if v < first else count + 1 if v > last else current)
    return segment, count


def _imported_segments(imported: ImportedCosts) -> tuple[list[list[int]], int]:
    """Layer indices of the pre segment, each block and the post segment; the block count."""
    kinds = [op.op_type for op in imported.graph.ops]
    blocks = [v for v, kind in enumerate(kinds) if kind == BLOCK_KIND]
    name = imported.graph.name
    if not blocks:
        raise InputError(f"{name}: the profile has no transformer blocks to map; import it without --onnx")
    if blocks != list(range(blocks[0], blocks[-1] + 1)):
        raise InputError(f"{name}: its transformer blocks are not consecutive layers; cannot map them")
    pre, post = list(range(blocks[0])), list(range(blocks[-1] + 1, len(kinds)))
    return [pre, *([v] for v in blocks), post], len(blocks)


def map_onto_onnx(imported: ImportedCosts, graph: OpGraph, onnx_path: str | Path) -> ImportedCosts:
    """``imported``'s layer times spread over the ops of ``graph`` (see the module docstring)."""
    layers, blocks = _imported_segments(imported)
    segment, onnx_blocks = onnx_segments(graph)
    where = f"{imported.graph.name} onto {onnx_path}"
    if blocks != onnx_blocks:
        raise InputError(
            f"{where}: the profile has {blocks} transformer blocks, the ONNX model has {onnx_blocks}"
        )
    for index, side in ((0, "before"), (blocks + 1, "after")):
        has_layers, has_ops = bool(layers[index]), bool(np.any(segment == index))
        if has_layers != has_ops:
            counts = f"{len(layers[index])} layers" if has_layers else "no layers"
            ops = f"{int(np.sum(segment == index))} ops" if has_ops else "no ops"
            raise InputError(f"{where}: {counts} {side} the blocks in the profile, {ops} in the ONNX model")
    catalog = imported.catalog().device_types
    model = RooflineModel()
    times: dict[str, np.ndarray] = {}
    for type_name, layer_times in imported.times.items():
        if type_name not in catalog:
            raise InputError(f"{where}: device type {type_name!r} has no figures to split layer times by")
        device = catalog[type_name]
        modelled = np.array([model.op_time(op, device) for op in graph.ops])
        column = np.where(np.isinf(modelled), np.inf, 0.0)
        for s, members in enumerate(layers):
            ops = (segment == s) & np.isfinite(modelled)
            total, share = float(layer_times[members].sum()), modelled[ops]
            column[ops] = total * (share / share.sum() if share.sum() > 0 else 1.0 / max(len(share), 1))
        times[type_name] = column
    source = {
        **imported.source,
        "layer_graph": imported.graph.name,
        "mapped_onto": str(onnx_path),
        "blocks": blocks,
        "split": "each segment's imported time shared by its ONNX ops in proportion to their roofline time",
    }
    return ImportedCosts(graph=graph, times=times, device_types=imported.device_types, source=source)
