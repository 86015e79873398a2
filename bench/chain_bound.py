"""Lower bounds side by side: aggregate (with the trivial one) vs the dominator-chain bound.

    .venv/bin/python bench/chain_bound.py instances/v1/t5_small.homo-16v100.k16.json.gz=0.3919 …
    .venv/bin/python bench/chain_bound.py decoder:32 moe:64=23.51

Each argument is an instance file or a synthetic case (``decoder:K``, ``moe:K`` on the 3-type
cluster of ``bench/scale.py``, ``decoder-h100:K`` on 4 × 8 H100), optionally ``=MS``: a known
bottleneck in ms (e.g. the best placement of ``bench/issue5_measurements.md``), which brackets
the bisection and gives the gap. Not part of ``make test``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import partition
from partition import synthetic
from partition.aggregate_bound import aggregate_lower_bound
from partition.bounds import trivial_lower_bound
from partition.chain_bound import chain_lower_bound, dominators


def _instance(name: str) -> partition.Instance:
    if ":" not in name:
        return partition.open_instance(name)
    model, stages = name.split(":")
    graph = synthetic.moe_graph() if model == "moe" else synthetic.decoder_graph()
    cluster = (
        synthetic.cluster_of([("H100-SXM", 8, "nvlink4")] * 4, name="4x8-H100")
        if model.endswith("h100")
        else synthetic.hetero_cluster()
    )
    return partition.build_instance(graph, cluster, partition.Options(stages=int(stages)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="+", help="INSTANCE[=BOTTLENECK_MS] or decoder:K / moe:K")
    args = parser.parse_args()
    print("| instance | ops | dominators | best known ms | aggregate ms (gap) | chain ms (gap) | chain s |")
    print("|---|---|---|---|---|---|---|")
    for case in args.cases:
        name, _, best = case.partition("=")
        instance = _instance(name)
        known = float(best) if best else None
        aggregate = max(trivial_lower_bound(instance), aggregate_lower_bound(instance)) * 1e3
        started = time.perf_counter()
        chain = chain_lower_bound(instance, known * 1e-3 if known else None) * 1e3
        elapsed = time.perf_counter() - started

        def cell(bound: float, known: float | None = known) -> str:
            return f"{bound:.4f}" + (f" ({known / bound - 1:.1%})" if known else "")

        print(
            f"| {name} | {len(instance.graph.ops)} | {int(np.sum(dominators(instance)))} | {best or '–'} |"
            f" {cell(aggregate)} | {cell(chain)} | {elapsed:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
