"""Sailor per-layer profiles: real heterogeneous GPU measurements of four LLMs.

``Planner/simulations/profiles_tmp.json`` is ``[model][gpu][microbatch][tp][layer] = [forward_s,
backward_s, update_s]``; a per-GPU ``sailor_planner/profiles/<model>/<gpu>/profile.json`` is
the ``[microbatch][tp][layer]`` part of it. ``Planner/llm_info.json`` gives per layer
``[model][tp][layer]`` the parameter and activation bytes at microbatch 1 (activations are
scaled by the microbatch). Layers form a chain: embedding, transformer blocks, head.

One Sailor "device" at tensor-parallel degree ``tp`` is a group of ``tp`` GPUs; an instance
takes one (microbatch, tp) setting, and each GPU type measured at that setting becomes a
column. Sailor's GPU names map to catalog types where the catalog has them; the others are
defined here from vendor datasheets (dense peaks, no sparsity).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..devices import DeviceType
from ..errors import InputError
from ..jsonio import read_json
from . import ImportedCosts, Layer, check_times, in_graph_order, layer_graph

_CATALOG_NAMES = {"A100-40": "A100-40GB", "A100-80": "A100-80GB"}
_DEFINED = {
    "V100-16": DeviceType("V100-16GB", {"fp32": 15.7e12, "fp16": 125e12}, 0.9e12, 16e9),
    "GH-96": DeviceType("GH200-96GB", {"fp32": 67e12, "fp16": 989e12, "bf16": 989e12}, 4.0e12, 96e9),
    "RTX-2080": DeviceType("RTX-2080", {"fp32": 10.1e12, "fp16": 40.3e12}, 448e9, 8e9),
    "RTX-3090": DeviceType("RTX-3090", {"fp32": 35.6e12, "fp16": 71e12, "bf16": 71e12}, 936e9, 24e9),
    "Titan-RTX": DeviceType("TITAN-RTX", {"fp32": 16.3e12, "fp16": 130e12}, 672e9, 24e9),
}


def device_type_name(gpu: str) -> str:
    """The partition device-type name of a Sailor GPU name (unknown names are kept)."""
    if gpu in _CATALOG_NAMES:
        return _CATALOG_NAMES[gpu]
    return _DEFINED[gpu].name if gpu in _DEFINED else gpu


def _find_layer_info(path: Path) -> Path:
    for folder in [path.parent, *path.parents]:
        candidate = folder / "llm_info.json"
        if candidate.is_file():
            return candidate
        if folder.name == "Planner":
            break
    raise InputError(f"{path}: no llm_info.json (Sailor's per-layer sizes) beside it; pass --layer-info")


def _profiles(document: Any, path: Path, model: str | None) -> tuple[str, dict[str, Any]]:
    """``(model, {gpu: [microbatch][tp][layer] profile})`` from either Sailor file layout."""
    if not isinstance(document, Mapping) or not document:
        raise InputError(f"{path}: not a Sailor profile (expected a JSON object)")
    if all(key.isdigit() for key in document):  # per-GPU file: .../profiles/<model>/<gpu>/profile.json
        found = path.parent.parent.name
        if model is not None and model != found:
            raise InputError(f"{path}: this per-GPU profile is of model {found!r}, not {model!r}")
        return found, {path.parent.name: dict(document)}
    if model is None:
        if len(document) != 1:
            raise InputError(
                f"{path}: the file profiles several models; choose one with --model ({', '.join(document)})"
            )
        model = next(iter(document))
    if model not in document:
        raise InputError(f"{path}: no model {model!r} (models: {', '.join(document)})")
    return model, dict(document[model])


def _kinds(params: list[float]) -> list[str]:
    """``embedding`` first, ``transformer`` for the repeated blocks (the most common parameter
    size after the embedding), ``head`` for every layer after the last block (LLaMA's final
    norm and its output projection are two layers)."""
    blocks = Counter(params[1:]).most_common(1)[0][0] if len(params) > 1 else None
    last = max((i for i in range(1, len(params)) if params[i] == blocks), default=0)
    return [
        "embedding" if i == 0 else "transformer" if params[i] == blocks else "head" if i > last else "layer"
        for i in range(len(params))
    ]


def read(
    path: Path,
    *,
    model: str | None = None,
    microbatch: int = 1,
    tp: int = 1,
    layer_info: str | Path | None = None,
) -> ImportedCosts:
    """Read a Sailor profile at one (microbatch, tp) setting; forward times (seconds) are used."""
    model, per_gpu = _profiles(read_json(path, "Sailor profile"), path, model)
    info_path = Path(layer_info) if layer_info else _find_layer_info(path)
    info = read_json(info_path, "Sailor llm_info")
    sizes = info.get(model, {}).get(str(tp)) if isinstance(info, Mapping) else None
    if not isinstance(sizes, Mapping):
        raise InputError(f"{info_path}: no per-layer sizes for model {model!r} at tp={tp}")
    mb, degree = str(microbatch), str(tp)
    measured = {gpu: table[mb][degree] for gpu, table in per_gpu.items() if degree in table.get(mb, {})}
    if not measured:
        settings = sorted({(int(m), int(t)) for table in per_gpu.values() for m in table for t in table[m]})
        raise InputError(
            f"{path}: {model} has no GPU measured at microbatch {microbatch}, tp {tp}"
            f" (measured (microbatch, tp): {', '.join(f'({m}, {t})' for m, t in settings)})"
        )
    count = len(sizes)
    try:
        kinds = _kinds([sizes[str(i)]["params_bytes"] for i in range(count)])
        layers = [
            Layer(
                id=f"layer{i}",
                kind=kinds[i],
                description=f"{model} layer {i}",
                param_bytes=float(sizes[str(i)]["params_bytes"]),
                output_bytes=float(sizes[str(i)]["act_output_bytes"]) * microbatch,
            )
            for i in range(count)
        ]
        times: dict[str, dict[str, float]] = {}
        for gpu, table in measured.items():
            if set(table) != {str(i) for i in range(count)}:
                raise InputError(f"{path}: {model} on {gpu}: {len(table)} layers, llm_info has {count}")
            times[device_type_name(gpu)] = {f"layer{i}": float(table[str(i)][0]) for i in range(count)}
    except (KeyError, TypeError, ValueError, IndexError) as error:
        raise InputError(f"{path}: malformed Sailor profile or llm_info ({error!r})") from None
    for name, seconds in times.items():
        check_times(str(path), name, seconds)
    graph = layer_graph(
        f"sailor-{model}-mb{microbatch}-tp{tp}",
        layers,
        [(f"layer{i}", f"layer{i + 1}", layers[i].output_bytes) for i in range(count - 1)],
    )
    return ImportedCosts(
        graph=graph,
        times={name: in_graph_order(graph, seconds) for name, seconds in times.items()},
        device_types={_DEFINED[g].name: _DEFINED[g] for g in measured if g in _DEFINED},
        source={
            "format": "sailor",
            "file": str(path),
            "layer_info": str(info_path),
            "model": model,
            "microbatch": microbatch,
            "tensor_parallel": tp,
            "gpus": {gpu: device_type_name(gpu) for gpu in measured},
            "costs": "imported Sailor forward time per layer (s) per GPU type; inference",
        },
    )
