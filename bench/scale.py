"""Scale benchmark for the anytime solver (issue 6); not part of ``make test``.

Each case runs in its own process so its peak memory (``ru_maxrss``) is its own:

    .venv/bin/python bench/scale.py                  # every case
    .venv/bin/python bench/scale.py --case moe-k64   # one case

Cases: a DeepSeek-V3-like MoE (61 layers × 256 experts, ~110k ops, 4096 tokens) at k = 64 on
8 hosts × 8 devices of three types (MI300X, H100, A100 80 GB), and a 7B-class decoder
(Llama-2-7B shapes, 4096 tokens) at k = 8, 16, 32 on the same heterogeneous cluster and on a
homogeneous 4 × 8 H100 cluster. Targets from the issue: MoE < 60 s, gap ≤ 5 %, < 4 GB;
decoder gap ≤ 1 % in < 30 s. Prints one JSON line per case, then a table.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import partition
from partition import synthetic

CASES = {
    "moe-k64": ("moe", "hetero", 64, 55.0),
    "decoder-k8": ("decoder", "hetero", 8, 25.0),
    "decoder-k16": ("decoder", "hetero", 16, 25.0),
    "decoder-k32": ("decoder", "hetero", 32, 25.0),
    "decoder-k8-h100": ("decoder", "h100", 8, 25.0),
    "decoder-k16-h100": ("decoder", "h100", 16, 25.0),
    "decoder-k32-h100": ("decoder", "h100", 32, 25.0),
}


def run_case(name: str) -> dict:
    model, cluster_name, stages, limit = CASES[name]
    started = time.perf_counter()
    graph = synthetic.moe_graph() if model == "moe" else synthetic.decoder_graph()
    cluster = (
        synthetic.hetero_cluster()
        if cluster_name == "hetero"
        else synthetic.cluster_of([("H100-SXM", 8, "nvlink4")] * 4, name="4x8-H100")
    )
    instance = partition.build_instance(graph, cluster, partition.Options(stages=stages))
    built = time.perf_counter() - started
    started = time.perf_counter()
    result = partition.solve(
        instance, "anytime", time_limit=limit, progress=lambda m: print(m, file=sys.stderr, flush=True)
    )
    solved = time.perf_counter() - started
    return {
        "case": name,
        "ops": len(graph.ops),
        "cluster": cluster.name,
        "types": len(cluster.type_names),
        "k": stages,
        "time_limit_s": limit,
        "build_s": round(built, 2),
        "solve_s": round(solved, 2),
        "stages_used": result.placement.num_stages if result.placement else 0,
        "bottleneck_ms": round(result.bottleneck * 1e3, 4) if result.bottleneck else None,
        "bound_ms": round(result.lower_bound * 1e3, 4),
        "gap": round(result.gap, 4) if result.gap is not None else None,
        "status": result.status.value,
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=sorted(CASES), action="append", help="run only these cases")
    args = parser.parse_args()
    if args.case and len(args.case) == 1:
        print(json.dumps(run_case(args.case[0])), flush=True)
        return
    rows = []
    for name in args.case or CASES:
        output = subprocess.run(
            [sys.executable, __file__, "--case", name], check=True, capture_output=True, text=True
        ).stdout
        row = json.loads(output.strip().splitlines()[-1])
        print(json.dumps(row), flush=True)
        rows.append(row)
    columns = [
        "case",
        "ops",
        "k",
        "solve_s",
        "stages_used",
        "bottleneck_ms",
        "bound_ms",
        "gap",
        "peak_rss_gb",
    ]
    print(" | ".join(columns))
    for row in rows:
        print(" | ".join(str(row[c]) for c in columns))


if __name__ == "__main__":
    main()
