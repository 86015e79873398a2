"""Instances shared by the tests of the global solvers (cp-sat, milp) and the LP bound."""

from __future__ import annotations

import networkx as nx
from conftest import random_dag_instance
from hypothesis import strategies as st

import partition

# Two device types; the two L4s of h1 are interchangeable, the L4 of h0 is not (other host).
TWO_TYPES = [
    {"name": "h0", "devices": {"H100-SXM": 1, "L4": 1}, "intra_link": "pcie4"},
    {"name": "h1", "devices": {"L4": 2}, "intra_link": "nvlink3"},
]
# A 9 GB type beside a 24 GB L4: memory decides the placement (weights up to 4 GB per op).
TIGHT_MEMORY = [
    {"name": "h0", "devices": {"small": 2}, "intra_link": "pcie4"},
    {"name": "h1", "devices": {"small": 1, "L4": 1}, "intra_link": "nvlink3"},
]


@st.composite
def small_instances(draw, max_ops: int = 8) -> partition.Instance:
    """Random DAGs of ≤ ``max_ops`` ops in every comm mode, with overlap, memory, colocation."""
    num_ops = draw(st.integers(3, max_ops))
    tight = draw(st.booleans())
    instance = random_dag_instance(
        draw(st.integers(0, 10**6)),
        num_ops,
        hosts=TIGHT_MEMORY if tight else TWO_TYPES,
        stages=draw(st.integers(2, 3)),
        comm_mode=draw(st.sampled_from(["per-destination", "once"])),
        overlap=draw(st.booleans()),
        edge_probability=draw(st.sampled_from([0.1, 0.3, 0.6])),
        memory=9e9 if tight else None,
    )
    changes = {"exact_stages": draw(st.booleans())}
    if draw(st.booleans()):
        first, second = sorted(
            draw(st.lists(st.integers(0, num_ops - 1), min_size=2, max_size=2, unique=True))
        )
        changes["colocate"] = ((f"op{first}", f"op{second}"),)
    return instance.with_options(**changes)


def packing_infeasible_instance() -> partition.Instance:
    """Three 6 GB-weight ops on two 10 GB devices: each op fits, all weights fit in total
    (18 ≤ 20 GB), but two ops always share a stage — so no placement exists (memory)."""
    dag = nx.DiGraph()
    for v in range(3):
        dag.add_node(f"op{v}", flops=1e10, bytes_read=1e6, bytes_written=1e6, param_bytes=6e9)
    dag.add_edge("op0", "op1", bytes=1e6)
    dag.add_edge("op1", "op2", bytes=1e6)
    cluster = partition.parse_cluster(
        {
            "name": "two-small",
            "hosts": [{"devices": {"small": 2}, "intra_link": "pcie4"}],
            "device_types": {
                "small": {"peak_flops": {"fp32": 10e12}, "memory_bandwidth": 1e12, "memory": 10e9}
            },
        }
    )
    return partition.make_instance(partition.graph_from_networkx(dag, "packing"), cluster, 2)


HETERO = [
    {"name": "h0", "devices": {"H100-SXM": 2, "L4": 2}, "intra_link": "pcie5"},
    {"name": "h1", "devices": {"A100-80GB": 4}, "intra_link": "nvlink3"},
]


def larger_instance() -> partition.Instance:
    """60 ops on three device types over two hosts: too big to prove optimal in half a second."""
    return random_dag_instance(11, 60, hosts=HETERO, stages=6, edge_probability=0.05)


def medium_instance() -> partition.Instance:
    """14 ops on three device types over two hosts: proved optimal in about a second."""
    return random_dag_instance(12, 14, hosts=HETERO, stages=3, edge_probability=0.2)


# Small ``once``-mode instances, exactly three stages, on which the bundled CBC proved a wrong
# optimum (tests/test_milp.py): ops (op type, flops, bytes read, bytes written, weight bytes),
# edges (bytes), devices per host, the one device type, and the optimum (s).
CBC_TRAPS = {
    # A diamond over three devices on two hosts (a property test's example, shrunk): given the
    # order DP's placement as a MIP start, CBC proved 0.07606 s optimal.
    "mip-start": (
        [
            ("Softmax", 95487392131.84378, 801473190.7411906, 582579874.0283034, 0.0),
            ("Conv", 192141467958.19278, 160579175.7224415, 734842574.2578053, 0.0),
            ("Conv", 207179332865.9241, 431197392.3937636, 587211772.8667026, 0.0),
            ("Softmax", 114396264335.76779, 648898659.8727453, 696519780.6734853, 2412493917.1986485),
            ("Softmax", 389410649631.7987, 299102821.79385877, 314672016.03230244, 0.0),
            ("Relu", 189052556407.55072, 773503732.6391675, 31315661.654808726, 5685024255.679425),
        ],
        {
            (0, 1): 748550242.5735937,
            (0, 2): 181796341.73716524,
            (0, 3): 1321034084.8490467,
            (0, 4): 1862934563.097235,
            (1, 5): 414461617.0451944,
            (2, 5): 1260217390.5507073,
            (3, 5): 596396365.0057838,
            (4, 5): 1483539184.4706538,
        },
        (1, 2),
        {
            "peak_flops": {"fp32": 44719064447816.46},
            "memory_bandwidth": 890531646335.7723,
            "memory": 15618937589.421896,
        },
        0.07345413935226122,
    ),
    # Seven ops of a random DAG over two hosts of two devices (make fuzz's property test, seed
    # 536870911): with its default integer preprocessing and no MIP start, CBC proved 0.06994 s.
    "preprocessing": (
        [
            ("MatMul", 288418970995.4062, 210836935.77842253, 755183113.9955992, 3756838231.734927),
            ("Softmax", 108827229589.146, 6185503.402783785, 231044788.943577, 0.0),
            ("Conv", 254409339997.8799, 562779487.1047518, 457098209.7798658, 6843587721.030924),
            ("Relu", 34504874016.397095, 268389439.61386034, 146243822.4677867, 0.0),
            ("Softmax", 249686636113.16168, 773109195.3366244, 948879740.8211323, 0.0),
            ("Conv", 198478156857.77274, 495442741.0523551, 342057161.4832379, 0.0),
            ("Relu", 186876066828.93942, 970251524.956163, 867716033.0547593, 4625641876.960577),
        ],
        {
            (0, 2): 1130222246.0804424,
            (0, 3): 283157425.43701625,
            (0, 5): 1054070636.3818365,
            (1, 3): 829120363.7602363,
            (1, 4): 195910572.15280685,
            (2, 3): 137110010.07333928,
        },
        (2, 2),
        {
            "peak_flops": {"fp32": 27571844649899.125},
            "memory_bandwidth": 1614959773462.902,
            "memory": 11334023441.151417,
        },
        0.06358931499553448,
    ),
}


def cbc_trap_instance(name: str) -> partition.Instance:
    """The instance of :data:`CBC_TRAPS` ``name``."""
    ops, edges, per_host, device, _ = CBC_TRAPS[name]
    dag = nx.DiGraph()
    for v, (kind, flops, read, written, weights) in enumerate(ops):
        dag.add_node(
            v, op_type=kind, flops=flops, bytes_read=read, bytes_written=written, param_bytes=weights
        )
    for (u, v), size in edges.items():
        dag.add_edge(u, v, bytes=size)
    cluster = partition.parse_cluster(
        {
            "name": f"generated-{name}",
            "hosts": [
                {"name": f"h{h}", "devices": {"T0": count}, "intra_link": "nvlink3"}
                for h, count in enumerate(per_host)
            ],
            "inter_host_link": "ib-hdr",
            "device_types": {"T0": device},
        }
    )
    graph = partition.graph_from_networkx(dag, name)
    return partition.make_instance(graph, cluster, 3, comm_mode="once", exact_stages=True)
