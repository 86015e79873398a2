"""Solvers as plug-ins behind one interface, found by name in a registry."""

from __future__ import annotations

from ..errors import SolverError
from .anytime import Anytime
from .base import Capabilities, Outcome, Scope, Settings, Solver
from .baselines import BalancedParams, BalancedTime, SingleDevice, Uniform
from .brute_force import BruteForce
from .cp_sat import CpSat
from .ideal_dp import IdealDP
from .milp import Milp
from .order_dp import OrderDP

_REGISTRY: dict[str, type[Solver]] = {
    cls.name: cls
    for cls in (
        OrderDP,
        BruteForce,
        IdealDP,
        CpSat,
        Milp,
        Anytime,
        Uniform,
        BalancedParams,
        BalancedTime,
        SingleDevice,
    )
}


def solver_names() -> list[str]:
    return sorted(_REGISTRY)


def get_solver(name: str) -> Solver:
    """The solver registered as ``name``; the error lists the valid names."""
    try:
        return _REGISTRY[name]()
    except KeyError:
        raise SolverError(f"unknown solver {name!r} (valid: auto, {', '.join(solver_names())})") from None


__all__ = ["Capabilities", "Outcome", "Scope", "Settings", "Solver", "get_solver", "solver_names"]
