"""partition: optimal pipeline partitioning of ONNX models over heterogeneous clusters.

Typical use::

    import partition
    instance = partition.make_instance("model.onnx", "hetero-2h100-4a100-2l4", stages=4)
    result = partition.solve(instance)
    print(result.bottleneck, result.lower_bound, result.status)

Names are imported on first use (PEP 562), so ``import partition`` is instant and the CLI can
handle Ctrl-C from its first line.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "api": ("graph_from_networkx", "load_graph", "make_instance", "open_instance", "solve"),
    "cluster": ("Cluster", "load_cluster", "parse_cluster"),
    "costs": ("CostTable", "Provenance", "RooflineModel", "roofline_costs"),
    "errors": (
        "ClusterError",
        "InfeasibleError",
        "InputError",
        "ModelError",
        "PartitionError",
        "SolverError",
    ),
    "evaluator": ("evaluate",),
    "graph": ("Op", "OpClass", "OpGraph", "Tensor"),
    "instance": ("CommMode", "Instance", "Options", "build_instance", "load_instance", "parse_instance"),
    "placement": ("Evaluation", "Placement", "Result", "StageFigures", "Status"),
    "report": ("placement_from_json", "result_json"),
    "solvers": ("get_solver", "solver_names"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module 'partition' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_MODULE_OF[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


if TYPE_CHECKING:  # static analysers see the eager imports
    from .api import graph_from_networkx, load_graph, make_instance, open_instance, solve  # noqa: F401
    from .cluster import Cluster, load_cluster, parse_cluster  # noqa: F401
    from .costs import CostTable, Provenance, RooflineModel, roofline_costs  # noqa: F401
    from .errors import (  # noqa: F401
        ClusterError,
        InfeasibleError,
        InputError,
        ModelError,
        PartitionError,
        SolverError,
    )
    from .evaluator import evaluate  # noqa: F401
    from .graph import Op, OpClass, OpGraph, Tensor  # noqa: F401
    from .instance import (  # noqa: F401
        CommMode,
        Instance,
        Options,
        build_instance,
        load_instance,
        parse_instance,
    )
    from .placement import Evaluation, Placement, Result, StageFigures, Status  # noqa: F401
    from .report import placement_from_json, result_json  # noqa: F401
    from .solvers import get_solver, solver_names  # noqa: F401
