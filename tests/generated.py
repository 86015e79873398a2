"""Hypothesis strategies for random small instances: DAG shapes × clusters × options.

Shapes: chains, diamonds, wide layered graphs, skip connections, random DAGs. Clusters: 1–3
device types on 1–2 hosts, memory tight or loose, some op types unsupported on some types.
Small enough (≤ 7 ops, ≤ 4 devices) for exhaustive search to be the ground truth.
"""

from __future__ import annotations

import networkx as nx
import numpy as np
from hypothesis import strategies as st

import partition

SHAPES = ("chain", "diamond", "layered", "skip", "random")
OP_TYPES = ("MatMul", "Conv", "Relu", "Softmax")


def _dag(shape: str, n: int, rng: np.random.Generator) -> nx.DiGraph:
    dag = nx.DiGraph()
    dag.add_nodes_from(range(n))
    if shape == "chain":
        dag.add_edges_from((v, v + 1) for v in range(n - 1))
    elif shape == "diamond":  # 0 fans out to the middle ops, which all feed the last
        dag.add_edges_from((0, v) for v in range(1, n - 1))
        dag.add_edges_from((v, n - 1) for v in range(1, n - 1))
    elif shape == "layered":  # layers of width 2, each op feeds both ops of the next layer
        dag.add_edges_from((u, v) for u in range(n) for v in range(n) if v // 2 == u // 2 + 1)
    elif shape == "skip":  # a chain with skip connections over one or two ops
        dag.add_edges_from((v, v + 1) for v in range(n - 1))
        dag.add_edges_from((v, v + 2 + int(rng.integers(0, 2))) for v in range(0, n - 3, 2))
    else:
        dag.add_edges_from((u, v) for v in range(n) for u in range(v) if rng.random() < 0.35)
    return dag


@st.composite
def small_instances(draw, max_ops: int = 7, max_devices: int = 4) -> partition.Instance:
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    shape = draw(st.sampled_from(SHAPES))
    n = draw(st.integers(2, max_ops))
    dag = _dag(shape, n, rng)
    for v in dag.nodes:
        dag.nodes[v].update(
            op_type=OP_TYPES[int(rng.integers(0, len(OP_TYPES)))],
            flops=float(rng.uniform(1e9, 4e11)),
            bytes_read=float(rng.uniform(1e6, 1e9)),
            bytes_written=float(rng.uniform(1e6, 1e9)),
            param_bytes=float(rng.choice([0.0, rng.uniform(1e8, 8e9)])),
        )
    for u, v in dag.edges:
        dag.edges[u, v]["bytes"] = float(rng.uniform(1e5, 2e9))
    graph = partition.graph_from_networkx(dag, f"{shape}-{seed}")

    num_types = draw(st.integers(1, 3))
    memory = draw(st.sampled_from(["loose", "tight"]))
    capacity = 80e9 if memory == "loose" else float(graph.param_bytes.max() + graph.working_set.max()) * 1.6
    device_types = {}
    for t in range(num_types):
        unsupported = [OP_TYPES[t]] if t > 0 and draw(st.booleans()) else []
        device_types[f"T{t}"] = {
            "peak_flops": {"fp32": float(rng.uniform(5e12, 6e13))},
            "memory_bandwidth": float(rng.uniform(3e11, 3e12)),
            "memory": capacity * float(rng.uniform(0.8, 1.5)),
            "unsupported_op_types": unsupported,
        }
    num_devices = draw(st.integers(num_types, max_devices))
    counts = [1] * num_types
    for _ in range(num_devices - num_types):
        counts[int(rng.integers(0, num_types))] += 1
    two_hosts = num_devices > 1 and draw(st.booleans())
    devices = [f"T{t}" for t in range(num_types) for _ in range(counts[t])]
    split = len(devices) // 2 if two_hosts else len(devices)
    hosts = [devices[:split], devices[split:]] if two_hosts else [devices]
    cluster = partition.parse_cluster(
        {
            "name": f"generated-{seed}",
            "hosts": [
                {
                    "name": f"h{h}",
                    "devices": {t: part.count(t) for t in dict.fromkeys(part)},
                    "intra_link": "nvlink3",
                }
                for h, part in enumerate(hosts)
            ],
            "inter_host_link": "ib-hdr",
            "device_types": device_types,
        }
    )
    stages = draw(st.integers(1, len(cluster.devices)))
    return partition.make_instance(
        graph,
        cluster,
        stages,
        comm_mode=draw(st.sampled_from(["per-destination", "once"])),
        overlap=draw(st.booleans()),
        exact_stages=draw(st.booleans()) and stages <= n,
    )
