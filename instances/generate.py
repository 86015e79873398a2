"""Build the versioned benchmark instance set: models × clusters × stage counts.

Usage (from the repository root)::

    .venv/bin/python instances/generate.py            # writes instances/v1/*.json.gz
    .venv/bin/python instances/generate.py --check    # regenerate in memory, compare to disk

Models are onnx's bundled ``light_*.onnx`` (real model-zoo architectures whose weights are
``ConstantOfShape`` nodes: they need no download) plus every ``models/*.onnx`` in the
repository. Clusters are the JSON files in ``instances/clusters/``. Each model goes on each
cluster at every k in {2, 4, 8, 16} that the cluster's device count allows. Costs come from
the roofline model; each file's ``source`` field says so, with the model, cluster and onnx
version, so an instance can be traced back to what produced it.

Files are canonical JSON, gzip-compressed with a fixed timestamp: regenerating with the same
package and onnx versions reproduces them byte for byte (``--check`` verifies that).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import onnx

import partition
from partition.instance import build_instance
from partition.jsonio import dumps, write_atomic

ROOT = Path(__file__).resolve().parents[1]
SET_VERSION = "v1"
STAGE_COUNTS = (2, 4, 8, 16)
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def models() -> list[tuple[str, Path, str]]:
    """(short name, path, provenance) of every model in the set, bundled ones first.

    Bundled models are named ``light-*`` so they never clash with an export of the same
    architecture in ``models/`` (e.g. ``light-resnet50`` and ``resnet50``).
    """
    found = []
    for path in sorted(LIGHT.glob("light_*.onnx")):
        short = "light-" + path.stem.removeprefix("light_").removeprefix("bvlc_")
        found.append(
            (
                short,
                path,
                f"onnx {onnx.__version__} bundled model backend/test/data/light/{path.name}"
                " (model-zoo architecture, weights as ConstantOfShape)",
            )
        )
    for path in sorted((ROOT / "models").glob("*.onnx")):
        found.append((path.stem, path, f"repository model models/{path.name}"))
    return found


def _pinned_dims(path: Path) -> dict[str, int] | None:
    """Values for a zoo model's symbolic input dims, as its manifest records them."""
    manifest = ROOT / "models" / "manifest.json"
    if path.parent != ROOT / "models" or not manifest.is_file():
        return None
    return json.loads(manifest.read_text()).get(path.stem, {}).get("dims") or None


def instances() -> list[tuple[str, partition.Instance]]:
    """(file name, instance) for the whole set, in a stable order."""
    clusters = [
        (p, partition.load_cluster(p)) for p in sorted((ROOT / "instances" / "clusters").glob("*.json"))
    ]
    built = []
    for short, path, provenance in models():
        graph = partition.load_graph(str(path), dims=_pinned_dims(path))
        for cluster_path, cluster in clusters:
            costs = partition.roofline_costs(graph, cluster)
            for k in STAGE_COUNTS:
                if k > len(cluster.devices) or k > len(graph.ops):
                    continue
                name = f"{short}.{cluster.name}.k{k}"
                source = {
                    "set": f"partition benchmark instances {SET_VERSION} (instances/generate.py)",
                    "model": provenance,
                    "cluster": f"instances/clusters/{cluster_path.name}",
                    "costs": "roofline model (partition/costs.py) with default efficiency factors,"
                    " device and link figures from the bundled catalog",
                }
                options = partition.Options(stages=k)
                instance = build_instance(graph, cluster, options, costs=costs, name=name, source=source)
                built.append((f"{name}.json.gz", instance))
    return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the files on disk; write nothing")
    args = parser.parse_args(argv)
    target = ROOT / "instances" / SET_VERSION
    target.mkdir(exist_ok=True)
    wanted = instances()
    names = [name for name, _ in wanted]
    if len(set(names)) != len(names):
        clash = next(n for n in names if names.count(n) > 1)
        raise SystemExit(f"two models give the instance name {clash!r}: rename one of them")
    stale = 0
    for file_name, instance in wanted:
        text = dumps(instance.to_json())
        path = target / file_name
        if args.check:
            same = path.is_file() and gzip.decompress(path.read_bytes()).decode() == text
            stale += not same
            if not same:
                print(f"differs: {path.relative_to(ROOT)}", file=sys.stderr)
        else:
            write_atomic(path, text, overwrite=True)
    extra = sorted(set(p.name for p in target.glob("*.json.gz")) - {name for name, _ in wanted})
    for name in extra:
        print(f"not generated any more: {target.relative_to(ROOT) / name}", file=sys.stderr)
    size = sum(p.stat().st_size for p in target.glob("*.json.gz"))
    print(f"{len(wanted)} instances in {target.relative_to(ROOT)}/ ({size / 1e6:.2f} MB)")
    return 1 if args.check and (stale or extra) else 0


if __name__ == "__main__":
    sys.exit(main())
