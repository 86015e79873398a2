"""Solvers as plug-ins behind one interface, found by name in a registry.

A solver's module is imported when the solver is first asked for: CP-SAT's (``ortools.sat``,
which imports pandas) and CBC's (``pulp``) take about 0.3 s together, which ``partition
--help``, ``inspect`` and ``evaluate`` would otherwise pay at start-up.
"""

from __future__ import annotations

import importlib

from ..errors import SolverError
from .base import Capabilities, Outcome, Scope, Settings, Solver

# name → (module in this package, class): the classes' own ``name`` must match (tested)
_PLUG_INS: dict[str, tuple[str, str]] = {
    "order-dp": ("order_dp", "OrderDP"),
    "brute-force": ("brute_force", "BruteForce"),
    "ideal-dp": ("ideal_dp", "IdealDP"),
    "cp-sat": ("cp_sat", "CpSat"),
    "milp": ("milp", "Milp"),
    "anytime": ("anytime", "Anytime"),
    "uniform": ("baselines", "Uniform"),
    "balanced-params": ("baselines", "BalancedParams"),
    "balanced-time": ("baselines", "BalancedTime"),
    "single-device": ("baselines", "SingleDevice"),
}
# the classes loaded so far, by name (tests register their own here)
_REGISTRY: dict[str, type[Solver]] = {}


def solver_names() -> list[str]:
    return sorted(_PLUG_INS.keys() | _REGISTRY.keys())


def get_solver(name: str) -> Solver:
    """The solver registered as ``name``, its module imported on first use; the error lists the
    valid names."""
    if name not in _REGISTRY:
        if name not in _PLUG_INS:
            raise SolverError(f"unknown solver {name!r} (valid: auto, {', '.join(solver_names())})")
        module, cls = _PLUG_INS[name]
        _REGISTRY[name] = getattr(importlib.import_module(f".{module}", __name__), cls)
    return _REGISTRY[name]()


__all__ = ["Capabilities", "Outcome", "Scope", "Settings", "Solver", "get_solver", "solver_names"]
