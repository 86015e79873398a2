"""Shared fixtures: random small instances and the paths of the models that ship with onnx."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import networkx as nx
import numpy as np
import onnx
import pytest

import partition

LIGHT = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"
TWO_HOSTS = [  # two H100s on NVLink; an A100 beside another H100 on PCIe; InfiniBand between
    {"name": "h0", "devices": {"H100-SXM": 2}, "intra_link": "nvlink4"},
    {"name": "h1", "devices": {"A100-40GB": 1, "H100-SXM": 1}, "intra_link": "pcie4"},
]
SPANNING_HOSTS = [  # H100s on two hosts of their own, A100s on a third: two groups of hosts
    {"name": "h0", "devices": {"H100-SXM": 1}, "intra_link": "nvlink4"},
    {"name": "h1", "devices": {"H100-SXM": 1}, "intra_link": "nvlink4"},
    {"name": "h2", "devices": {"A100-40GB": 2}, "intra_link": "pcie4"},
]
PAIRED_HOSTS = [  # two H100s and two A100s, each pair on a host of its own: stages may change host
    {"name": "h0", "devices": {"H100-SXM": 2}, "intra_link": "nvlink4"},  # without opening or
    {"name": "h1", "devices": {"A100-40GB": 2}, "intra_link": "nvlink3"},  # filling one
]
TWIN_HOSTS = [  # one type on two hosts of two devices each (2 x 8 A100 in small)
    {"name": "h0", "devices": {"A100-40GB": 2}, "intra_link": "nvlink3"},
    {"name": "h1", "devices": {"A100-40GB": 2}, "intra_link": "nvlink3"},
]
TYPED_HOSTS = [  # each type on a host of its own (the zoo's mixed clusters); InfiniBand between
    {"name": "h0", "devices": {"H100-SXM": 2}, "intra_link": "nvlink4"},
    {"name": "h1", "devices": {"A100-40GB": 1}, "intra_link": "pcie4"},
    {"name": "h2", "devices": {"L4": 1}, "intra_link": "pcie4"},
]

# 6-8 devices, as the zoo's clusters at k = 8 (the bounds' larger cross-checks): H100s on two
# hosts beside an A100 one; A100s and L4s sharing a host beside four T4s (A100/L4/T4 in small);
# three types on four hosts, the A100s on two; one type on two hosts
LARGER_CLUSTERS = (
    [*PAIRED_HOSTS, {"name": "h2", "devices": {"H100-SXM": 2}, "intra_link": "nvlink4"}],
    [
        {"name": "h0", "devices": {"A100-40GB": 2, "L4": 2}, "intra_link": "pcie4"},
        {"name": "h1", "devices": {"T4": 4}, "intra_link": "pcie4"},
    ],
    [*TYPED_HOSTS, {"name": "h3", "devices": {"A100-40GB": 2}, "intra_link": "nvlink3"}],
    [{"name": f"h{i}", "devices": {"A100-40GB": 3}, "intra_link": "nvlink3"} for i in range(2)],
)


def one_output_per_op(graph: partition.OpGraph) -> partition.OpGraph:
    """``graph`` with each op's tensors merged into one, read by all their readers (so a cut
    tensor can have several destination stages)."""
    outputs: dict[str, list[partition.Tensor]] = {}
    for tensor in graph.tensors:
        outputs.setdefault(tensor.producer, []).append(tensor)
    tensors = tuple(
        partition.Tensor(f"{p}.out", ts[0].bytes, p, tuple(c for t in ts for c in t.consumers))
        for p, ts in outputs.items()
    )
    return partition.OpGraph(graph.name, graph.ops, tensors, graph.weights)


class RandomOps:
    """A DAG being built op by op with random costs (the hypothesis generators' shape-specific
    graphs): each op memory- or compute-bound at random, so device types' speed ratios differ
    from op to op; ``floor`` is the least bytes a small op reads and writes, ``edge_bytes`` the
    range of a tensor's bytes."""

    def __init__(self, seed: int, floor: float = 1e5, edge_bytes: tuple[float, float] = (1e6, 3e8)) -> None:
        self.seed, self.floor, self.edge_bytes = seed, floor, edge_bytes
        self.rng = np.random.default_rng(seed)
        self.dag = nx.DiGraph()

    def node(self, name: str, cheap: bool = False) -> None:
        """An op; ``cheap``: a few MFLOPs and little traffic (CLIP's ArgMax over token ids)."""
        rng = self.rng
        memory_bound = cheap or rng.random() < 0.5
        flops = rng.uniform(1e8, 2e9) if memory_bound else rng.uniform(1e10, 8e10)
        self.dag.add_node(
            name,
            flops=float(rng.uniform(1e6, 1e7) if cheap else flops),
            bytes_read=float(
                rng.uniform(1e7, 3e8) if memory_bound and not cheap else rng.uniform(self.floor, 1e7)
            ),
            bytes_written=float(rng.uniform(self.floor, 1e7)),
            param_bytes=float(rng.uniform(0, 1e9)),
        )

    def edge(self, u: str, v: str) -> None:
        self.dag.add_edge(u, v, bytes=float(self.rng.uniform(*self.edge_bytes)))

    def path(self, start: str, names: Sequence[str]) -> str:
        """Ops ``names`` one after another from ``start``, each reading the one before; the last
        of them (``start`` when there are none)."""
        for name in names:
            self.node(name)
            self.edge(start, name)
            start = name
        return start

    def skip_chains(self, lengths: Sequence[int], skip: float) -> list[str]:
        """Two chains ``a0, a1, …`` and ``b0, b1, …`` of ``lengths`` ops, each op also reading the
        one two back with probability ``skip`` (a residual edge); their last ops."""
        for tower, length in zip("ab", lengths, strict=True):
            for i in range(length):
                self.node(f"{tower}{i}")
                if i:
                    self.edge(f"{tower}{i - 1}", f"{tower}{i}")
                if i >= 2 and self.rng.random() < skip:
                    self.edge(f"{tower}{i - 2}", f"{tower}{i}")
        return [f"{tower}{length - 1}" for tower, length in zip("ab", lengths, strict=True)]

    def instance(
        self,
        name: str,
        hosts: list[dict] = TWO_HOSTS,
        stages: tuple[int, int] = (2, 4),
        shared_outputs: bool | None = None,
    ) -> partition.Instance:
        """The DAG on ``hosts`` with ``stages`` (fewest, most; at most one a device) stages; odd
        seeds count a tensor once, even ones per destination; with ``shared_outputs`` (by default
        every third seed) one output tensor per op, read by all its successors (an MoE layer's
        hidden state)."""
        cluster = partition.parse_cluster({"name": "hosts", "hosts": hosts, "inter_host_link": "ib-hdr"})
        graph = partition.graph_from_networkx(self.dag, f"{name}-{self.seed}")
        if shared_outputs is None:
            shared_outputs = self.seed % 3 == 0
        if shared_outputs:
            graph = one_output_per_op(graph)
        mode = "once" if self.seed % 2 else "per-destination"
        fewest, most = stages
        count = int(self.rng.integers(fewest, min(most, len(cluster.devices)) + 1))
        return partition.make_instance(graph, cluster, count, comm_mode=mode)

    def larger_instance(self, name: str, shared_outputs: bool = False) -> partition.Instance:
        """:meth:`instance` on one of :data:`LARGER_CLUSTERS` (by seed) with 4-8 stages."""
        return self.instance(
            name, LARGER_CLUSTERS[self.seed // 3 % len(LARGER_CLUSTERS)], (4, 8), shared_outputs
        )


def best_checked_bottleneck(instance: partition.Instance, seconds: float = 20.0) -> float | None:
    """The better bottleneck of ideal-dp's and cp-sat's placements (``None``: neither found one),
    after checking that neither solver reports a bound above it or calls a worse one optimal:
    the reference of the bounds' larger cross-checks, which brute force cannot reach."""
    results = [partition.solve(instance, solver, time_limit=seconds) for solver in ("ideal-dp", "cp-sat")]
    placed = [result.bottleneck for result in results if result.placement is not None]
    if not placed:
        return None
    best = min(placed)
    for result in results:
        assert result.lower_bound is None or result.lower_bound <= best * (1 + 1e-9), result.solver
        if result.status is partition.Status.OPTIMAL:
            assert result.bottleneck <= best * (1 + 1e-9), result.solver
    return best


def random_dag_instance(
    seed: int,
    num_ops: int,
    *,
    hosts: list[dict],
    stages: int,
    comm_mode: str = "per-destination",
    overlap: bool = False,
    edge_probability: float = 0.3,
    memory: float | None = None,
    shared_outputs: bool = False,
) -> partition.Instance:
    """A random DAG with random FLOPs/bytes/params on a cluster of the given hosts.

    Each edge is its own tensor, unless ``shared_outputs``: then each op has one output tensor
    read by all its successors (so a cut tensor can have several destination stages).
    """
    rng = np.random.default_rng(seed)
    dag = nx.DiGraph()
    for v in range(num_ops):
        dag.add_node(
            f"op{v}",
            flops=float(rng.uniform(1e9, 5e10)),
            bytes_read=float(rng.uniform(1e6, 1e8)),
            bytes_written=float(rng.uniform(1e6, 1e8)),
            param_bytes=float(rng.uniform(0, 4e9)),
        )
    for v in range(1, num_ops):
        dag.add_edge(
            f"op{v - 1}", f"op{v}", bytes=float(rng.uniform(1e6, 5e8))
        ) if rng.random() < 0.7 else None
        for u in range(v - 1):
            if rng.random() < edge_probability:
                dag.add_edge(f"op{u}", f"op{v}", bytes=float(rng.uniform(1e6, 5e8)))
    document = {"name": f"random-{seed}", "hosts": hosts, "inter_host_link": "ib-hdr"}
    if memory is not None:
        document["device_types"] = {
            "small": {"peak_flops": {"fp32": 10e12}, "memory_bandwidth": 1e12, "memory": memory}
        }
    cluster = partition.parse_cluster(document)
    graph = partition.graph_from_networkx(dag, f"random-{seed}")
    if shared_outputs:
        graph = one_output_per_op(graph)
    return partition.make_instance(
        graph,
        cluster,
        stages,
        comm_mode=comm_mode,
        overlap=overlap,
    )


@pytest.fixture
def light_models() -> Path:
    return LIGHT
