"""partition: optimal pipeline partitioning of ONNX models over heterogeneous clusters.

Typical use::

    import partition
    instance = partition.make_instance("model.onnx", "hetero-2h100-4a100-2l4", stages=4)
    result = partition.solve(instance)
    print(result.bottleneck, result.lower_bound, result.status)
"""

from .api import graph_from_networkx, load_graph, make_instance, open_instance, solve
from .cluster import Cluster, load_cluster, parse_cluster
from .costs import CostTable, Provenance, RooflineModel, roofline_costs
from .errors import (
    ClusterError,
    InfeasibleError,
    InputError,
    ModelError,
    PartitionError,
    SolverError,
)
from .evaluate import evaluate
from .graph import Op, OpClass, OpGraph, Tensor
from .instance import CommMode, Instance, Options, build_instance, load_instance, parse_instance
from .placement import Evaluation, Placement, Result, StageFigures, Status
from .report import placement_from_json, result_json
from .solvers import get_solver, solver_names

__all__ = [
    "Cluster",
    "ClusterError",
    "CommMode",
    "CostTable",
    "Evaluation",
    "InfeasibleError",
    "InputError",
    "Instance",
    "ModelError",
    "Op",
    "OpClass",
    "OpGraph",
    "Options",
    "PartitionError",
    "Placement",
    "Provenance",
    "Result",
    "RooflineModel",
    "SolverError",
    "StageFigures",
    "Status",
    "Tensor",
    "build_instance",
    "evaluate",
    "get_solver",
    "graph_from_networkx",
    "load_cluster",
    "load_graph",
    "load_instance",
    "make_instance",
    "open_instance",
    "parse_cluster",
    "parse_instance",
    "placement_from_json",
    "result_json",
    "roofline_costs",
    "solve",
    "solver_names",
]
