"""Exact global solver: the CP-SAT model of :mod:`.cp_sat` as a mixed-integer LP (pulp + CBC).

Same decisions and accounting, linearised (``s < r`` stages, ``c`` device classes, ``h``
hosts, ``i`` cut tensors; ``typ[s,τ]`` and ``host[s,h]`` are sums of the class binaries
``z[s,c]``; ``X[v,s] = Σ_τ x[v,s,τ]``):

- ``x[v,s,τ] ∈ {0,1}`` (op ``v`` on stage ``s`` of type ``τ``; absent where ``t_τ(v) = inf``),
  ``Σ_{s,τ} x[v,s,τ] = 1``, ``x[v,s,τ] ≤ typ[s,τ]``: compute ``Σ_{v,τ} t_τ(v) x[v,s,τ]`` is
  linear, with no big-M (the disaggregated, tight form).
- ``Σ_c z[s,c] = used[s] ≤ Σ_v X[v,s]``, ``used[s+1] ≤ used[s]``, ``Σ_s z[s,c] ≤ |c|``;
  precedence ``Σ_{s''≤s} X[v,s''] ≤ Σ_{s''≤s} X[u,s'']`` per edge; colocated ops share ``X``.
- ``q[i,s,r] ≥ X[p,s] + X[c,r] − 1`` (continuous; tensor ``i`` goes from ``s`` to ``r``).
- ``pair[s,r] ≥ Σ_i cost_min(i) q`` always, and ``≥ Σ_i cost_ℓ(i) q − M_ℓ (slack of the host
  condition selecting ℓ)``: intra link of ``h`` when ``host[s,h] = host[r,h] = 1``, inter-host
  when ``host[s,h] = 1 − host[r,h] = 1``. Receivers pay ``Σ_s pair[s,r]``; senders
  ``Σ_r pair[s,r]`` (per-destination) or ``Σ_i snd[i,s]`` with
  ``snd[i,s] ≥ cost_ℓ(i) (q[i,s,r] − slack)`` (once: the slowest destination).
- Memory as the evaluator estimates it (weights once per stage, transfer buffers, largest
  working set) ``≤ Σ_c M_c z[s,c]``; objective ``min B`` over the stage times (overlap: both
  parts separately).

Times are divided by a unit near the optimum (the LP bound) and bytes by the largest capacity,
so coefficients stay near 1. CBC runs as a subprocess through pulp (so it cannot clash with
another HiGHS build in this process), with the time limit, thread count and seed
(``randomCbcSeed``) of :class:`Settings` and a relative gap tolerance of 1e-7. **CBC gets no MIP
start, and runs without its integer preprocessing**: the bundled CBC (2.10.3) proved wrong optima
on two small ``once``-mode instances whose model admits the true one (fixed to it, CBC solves it
at its value). Given the order DP's placement as a start, a diamond of six ops over three
devices on two hosts: 0.07606 s "Optimal" against 0.07345. With no start, seven ops over two
hosts of two devices (found by ``make fuzz``): 0.06994 against 0.06359. Without the
preprocessing both come out right. Turning off CLP's presolve, or the cuts, also fixes both, but
each lost Inception-v1's proof at 10 s, where ``preprocess off`` kept all 16 proofs ``milp`` had
in ``make bench``. Wrong answers blamed on the preprocessing are known upstream. A proof that a
valid placement contradicts (the warm start below CBC's bound) is not believed either: the
result is then ``feasible`` with the LP bound. The order DP's placement is still the fallback (the
*warm start* below), returned when CBC ends without a better one. The time limit counts from the
start of :meth:`Milp.solve`: building stops at the deadline, CBC is not started with less time
left than the build took, and a watchdog kills CBC at the deadline (CBC checks its own limit
only between phases); each of these returns the warm start. **pulp reports "Optimal" when a time
limit stops CBC with an incumbent**, so the status comes from
``pulp.LpSolution[prob.sol_status]`` (infeasibility from ``prob.status``: CBC's "Integer
infeasible" leaves ``sol_status`` at "No Solution Found"). The bound is the optimum less the gap
tolerance when proven optimal, else the last "best possible" of CBC's log; it is reduced by 1e-6
relative (solver tolerances) and never below the LP bound of :mod:`.lp_bound`.
"""

from __future__ import annotations

import math
import re
import shlex
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path

import numpy as np
import pulp

from ..evaluator import evaluate
from ..instance import Instance
from ..placement import Placement, Status
from ._stage_model import (
    MEMORY_TOLERANCE,
    OutOfTime,
    StageModelData,
    check_deadline,
    infeasibility_note,
    out_of_time,
    stage_model_data,
)
from .base import Capabilities, Outcome, Scope, Settings, Solver
from .lp_bound import lp_lower_bound
from .order_dp import graph_order_split

_GAP = 1e-7
_CBC_OPTIONS = ("preprocess off",)  # see the module docstring: wrong optima with it
_BOUND_SAFETY = 1e-6
# CBC's progress lines end with "best possible <bound>" (8 significant digits); its final
# "Lower bound:" line keeps only 4, too coarse to use.
_CBC_BOUND = re.compile(r"best possible (-?[0-9.]+(?:[eE][-+]?[0-9]+)?)")
# CBC checks its time limit only between phases: on DenseNet/Inception-sized models the root LP
# alone takes 20 s and the MIP start another 15 s past a 2.5 s limit. So CBC runs under this
# watchdog, which kills it at the caller's deadline (argv: deadline as epoch seconds, a folder
# where it leaves `killed` when it kills CBC and `exit-status` when CBC exits, command).
_WATCHDOG = """import pathlib, subprocess, sys, time
folder = pathlib.Path(sys.argv[2])
try:
    code = subprocess.run(sys.argv[3:], timeout=max(float(sys.argv[1]) - time.time(), 0)).returncode
except subprocess.TimeoutExpired:
    (folder / "killed").touch()
    sys.exit(124)
(folder / "exit-status").write_text(str(code))
sys.exit(code)
"""
_CBC_SHARE = 0.8  # CBC's own limit, of the time left when it starts: it stops cleanly if it can
_FINISH_SECONDS = 0.15  # kept back from the deadline for pulp to return after the kill, and us with it


class _Model:
    """The MILP of one instance, in scaled units, with a handle to decode it."""

    def __init__(self, data: StageModelData, unit: float, memory: bool, deadline: float = math.inf) -> None:
        """Raises :class:`OutOfTime` past ``deadline`` (building takes seconds on large graphs)."""
        self.data = data
        p = self.problem = pulp.LpProblem("partition", pulp.LpMinimize)
        n, k = data.num_ops, data.num_stages
        classes = data.classes
        types = sorted({c.type_column for c in classes})
        hosts = sorted({c.host for c in classes})
        times = data.times / unit
        counter = iter(range(10**9))

        def binary(name: str) -> pulp.LpVariable:
            return pulp.LpVariable(f"{name}_{next(counter)}", cat=pulp.LpBinary)

        def nonneg(name: str, upper: float | None = None) -> pulp.LpVariable:
            return pulp.LpVariable(f"{name}_{next(counter)}", lowBound=0, upBound=upper)

        self.z = [[binary("z") for _ in classes] for _ in range(k)]
        used = [pulp.lpSum(self.z[s]) for s in range(k)]
        typ = {(s, t): pulp.lpSum(self.z[s][c] for c, cls in enumerate(classes) if cls.type_column == t)
               for s in range(k) for t in types}  # fmt: skip
        host = {(s, h): pulp.lpSum(self.z[s][c] for c, cls in enumerate(classes) if cls.host == h)
                for s in range(k) for h in hosts}  # fmt: skip
        representative = list(range(n))
        for group in data.colocate:
            for v in group:
                representative[v] = group[0]
        leaders = sorted(set(representative))
        item_times = np.zeros_like(times)
        np.add.at(item_times, representative, times)  # a colocation group runs as one item
        self.x: dict[tuple[int, int, int], pulp.LpVariable] = {}
        for v in leaders:
            check_deadline(deadline)
            own = []
            for s in range(k):
                for t in types:
                    if np.isfinite(item_times[v, t]):
                        self.x[v, s, t] = binary("x")
                        own.append(self.x[v, s, t])
                        p += self.x[v, s, t] <= typ[s, t]
            p += pulp.lpSum(own) == 1
        on = [[pulp.lpSum(self.x.get((representative[v], s, t), 0) for t in types) for s in range(k)]
              for v in range(n)]  # fmt: skip
        self.on = on

        for s in range(k):
            p += used[s] <= pulp.lpSum(on[v][s] for v in leaders)
            p += used[s] <= 1
            if s + 1 < k:
                p += used[s + 1] <= used[s]
        if data.instance.options.exact_stages:
            p += used[k - 1] == 1
        for c, cls in enumerate(classes):
            p += pulp.lpSum(self.z[s][c] for s in range(k)) <= len(cls.devices)
        for u, v in data.instance.graph.edges:
            check_deadline(deadline)
            if representative[u] != representative[v]:
                for s in range(k - 1):
                    p += pulp.lpSum(on[v][: s + 1]) <= pulp.lpSum(on[u][: s + 1])

        compute: list[list] = [[] for _ in range(k)]
        for (v, s, t), var in self.x.items():
            compute[s].append(float(item_times[v, t]) * var)

        tensors, kinds = data.tensors, data.link_kinds
        costs = data.transfer / unit
        cheapest = costs.min(axis=1) if len(tensors) else np.zeros(0)
        pairs = [(s, r) for s in range(k) for r in range(s + 1, k)]
        q: dict[tuple[int, int, int], pulp.LpVariable] = {}
        for i, tensor in enumerate(tensors):
            check_deadline(deadline)
            for s, r in pairs:
                q[i, s, r] = nonneg("q", 1)
                for c in tensor.consumers:
                    p += q[i, s, r] >= on[tensor.producer][s] + on[c][r] - 1
        self.q = q

        def slacks(s: int, r: int) -> list[tuple[int, pulp.LpAffineExpression | int]]:
            """(link kind, expression that is 0 when the hosts of s, r select it, else ≥ 1)."""
            if len(kinds) == 1:
                return [(0, 0)]
            out = [
                (ell, 2 - host[s, kind.host] - host[r, kind.host])
                for ell, kind in enumerate(kinds)
                if kind.host >= 0
            ]
            out += [(len(kinds) - 1, 1 - host[s, h] + host[r, h]) for h in hosts]
            return out

        send: list[list] = [[] for _ in range(k)]
        recv: list[list] = [[] for _ in range(k)]
        for s, r in pairs:
            check_deadline(deadline)
            if not tensors:
                break
            pair = nonneg("pair")
            recv[r].append(pair)
            if not data.once:
                send[s].append(pair)
            p += pair >= pulp.lpSum(float(cheapest[i]) * q[i, s, r] for i in range(len(tensors)))
            for ell, slack in slacks(s, r):
                big = float(costs[:, ell].sum())
                p += (
                    pair
                    >= pulp.lpSum(float(costs[i, ell]) * q[i, s, r] for i in range(len(tensors)))
                    - big * slack
                )
        if data.once:
            for i in range(len(tensors)):
                check_deadline(deadline)
                for s in range(k - 1):
                    snd = nonneg("snd")
                    send[s].append(snd)
                    for r in range(s + 1, k):
                        p += snd >= float(cheapest[i]) * q[i, s, r]
                        for ell, slack in slacks(s, r):
                            p += snd >= float(costs[i, ell]) * (q[i, s, r] - slack)

        self.bottleneck = nonneg("bottleneck")
        for s in range(k):
            comm = pulp.lpSum(send[s]) + pulp.lpSum(recv[s])
            if data.instance.options.overlap:
                p += self.bottleneck >= pulp.lpSum(compute[s])
                p += self.bottleneck >= comm
            else:
                p += self.bottleneck >= pulp.lpSum(compute[s]) + comm
        if memory:
            self._add_memory(pairs, nonneg, deadline)
        p += self.bottleneck

    def _add_memory(self, pairs: list[tuple[int, int]], nonneg, deadline: float) -> None:
        data, p, on = self.data, self.problem, self.on
        scale = max(c.memory for c in data.classes)
        for s in range(data.num_stages):
            check_deadline(deadline)
            terms = []
            for size, users in data.weight_users:
                used = nonneg("wu", 1)
                for v in users:
                    p += used >= on[v][s]
                terms.append(size / scale * used)
            for i, tensor in enumerate(data.tensors):
                check_deadline(deadline)
                outgoing = [self.q[i, a, b] for a, b in pairs if a == s]
                if outgoing:
                    sent = nonneg("sent", 1)
                    for q in outgoing:
                        p += sent >= q
                    terms.append(tensor.bytes / scale * sent)
                terms += [tensor.bytes / scale * self.q[i, a, b] for a, b in pairs if b == s]
            largest = nonneg("ws")
            for v in range(data.num_ops):
                p += largest >= float(data.working[v]) / scale * on[v][s]
            capacity = [
                cls.memory * (1 + MEMORY_TOLERANCE) / scale * self.z[s][c]
                for c, cls in enumerate(data.classes)
            ]
            p += pulp.lpSum(terms) + largest <= pulp.lpSum(capacity)

    def decode(self) -> Placement:
        data = self.data
        stage_of = []
        for v in range(data.num_ops):
            values = [pulp.value(self.on[v][s]) or 0.0 for s in range(data.num_stages)]
            stage_of.append(int(np.argmax(values)))
        stages = max(stage_of) + 1
        chosen = [int(np.argmax([var.value() or 0.0 for var in self.z[s]])) for s in range(stages)]
        return data.decode(stage_of, chosen)


class _CbcEnd(Enum):
    """How a CBC run ended: with a solution file read by pulp, killed by the watchdog at the
    deadline, or failed on its own (a non-zero exit; seen once under a loaded ``make bench``)."""

    FINISHED = "finished"
    KILLED = "killed"
    FAILED = "failed"


def _solve_with_cbc(
    problem: pulp.LpProblem, settings: Settings, deadline: float, folder: Path
) -> tuple[_CbcEnd, str]:
    """Run CBC until ``deadline`` (``perf_counter`` time; ``inf``: no limit); its log goes to
    ``folder/cbc.log``. Returns how it ended and, when it failed, why (its exit status when the
    watchdog saw it); pulp has read a solution only when it finished."""
    left = deadline - time.perf_counter()
    command = pulp.PULP_CBC_CMD(
        msg=False,
        timeLimit=max(left * _CBC_SHARE, 0.05) if math.isfinite(left) else None,
        threads=max(1, settings.threads),
        gapRel=max(_GAP, settings.relative_gap),
        logPath=str(folder / "cbc.log"),
        options=[*_CBC_OPTIONS, *([f"randomCbcSeed {settings.seed}"] if settings.seed > 0 else [])],
    )
    command.tmpDir = str(folder)  # files of a killed run go with the folder
    if math.isfinite(left):
        wrapper = folder / "cbc-watchdog"
        stop = time.time() + left - _FINISH_SECONDS
        wrapper.write_text(
            f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -c {shlex.quote(_WATCHDOG)} {stop!r}"
            f' {shlex.quote(str(folder))} {shlex.quote(command.path)} "$@"\n'
        )
        wrapper.chmod(0o700)
        command.path = str(wrapper)
    try:
        problem.solve(command)
    except pulp.PulpSolverError as error:
        if (folder / "killed").exists():  # the watchdog leaves this file when it kills CBC
            return _CbcEnd.KILLED, ""
        status = folder / "exit-status"
        return _CbcEnd.FAILED, (
            f"CBC exited with status {status.read_text()}" if status.exists() else f"CBC failed ({error})"
        )
    return _CbcEnd.FINISHED, ""


@contextmanager
def _pulp_2_api() -> Iterator[None]:
    """pulp 3.3 deprecates ``LpVariable(...)`` and the bundled CBC for pulp 4; the project
    supports pulp ≥ 2.8, which has neither replacement, so keep the old calls quietly."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


def _cbc_bound(log: str) -> float | None:
    """CBC's last reported bound on the optimum (scaled units), if it reported one."""
    found = _CBC_BOUND.findall(log)
    return float(found[-1]) if found else None


class Milp(Solver):
    name = "milp"
    capabilities = Capabilities(scope=Scope.GLOBAL, time_limit=True, gap_limit=True)

    def solve(self, instance: Instance, settings: Settings) -> Outcome:
        started = time.perf_counter()
        deadline = started + settings.time_limit if settings.time_limit is not None else math.inf
        data = stage_model_data(instance)
        lower_bound = lp_lower_bound(instance)
        unit = lower_bound if 0 < lower_bound < math.inf else 1.0
        start = graph_order_split(instance)[0]
        built = time.perf_counter()
        try:
            with _pulp_2_api():
                model = _Model(data, unit, data.memory_can_bind, deadline)
        except OutOfTime:
            return out_of_time("milp", start, lower_bound, "while building the model")
        # writing the model for CBC and starting it take about half the build (Inception-v1: MPS
        # 0.64 s after a 1.19 s build, + 0.1 s for the watchdog): not worth starting with less left
        if deadline - time.perf_counter() < time.perf_counter() - built:
            return out_of_time("milp", start, lower_bound, "after building the model")
        problem = model.problem
        settings.report(
            f"milp: {len(problem.variables())} variables, {problem.numConstraints()} constraints;"
            f" LP bound {lower_bound:.6g} s"
        )
        with tempfile.TemporaryDirectory() as folder, _pulp_2_api():
            end, failure = _solve_with_cbc(problem, settings, deadline, Path(folder))
            log = Path(folder) / "cbc.log"
            text = log.read_text(errors="replace") if log.exists() else ""
        if end is _CbcEnd.KILLED:
            return out_of_time("milp", start, lower_bound, "before CBC reported (stopped by the watchdog)")
        if end is _CbcEnd.FAILED:  # no solution and no bound from CBC; the start is still valid
            if start is None:
                return Outcome(None, Status.NO_SOLUTION, lower_bound, (f"milp: {failure}",))
            note = f"milp: {failure}; returning the warm start"
            return Outcome(start, Status.FEASIBLE, lower_bound, (note,))
        solution = pulp.LpSolution[problem.sol_status]
        notes = [f"milp (CBC): {solution}"]
        if problem.sol_status == pulp.LpSolutionOptimal:  # optimal within the gap tolerance
            within = (pulp.value(problem.objective) or 0.0) * (1 - max(_GAP, settings.relative_gap))
            cbc_bound = max(within, _cbc_bound(text) or 0.0)  # its log's bound may prove more
        else:
            cbc_bound = _cbc_bound(text)
        bound = lower_bound
        if cbc_bound is not None and problem.status != pulp.LpStatusInfeasible:
            bound = max(bound, cbc_bound * unit * (1 - _BOUND_SAFETY))
        if problem.status == pulp.LpStatusInfeasible:  # CBC's "Infeasible" / "Integer infeasible"
            if start is not None:  # contradicts a valid placement: only numerics can do that
                notes.append("milp: CBC reports infeasible, yet the warm start is valid; returning it")
                return Outcome(start, Status.FEASIBLE, lower_bound, tuple(notes))
            return Outcome(
                None, Status.INFEASIBLE, math.inf, (self._why_infeasible(data, settings, deadline),)
            )
        if problem.sol_status in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
            placement = model.decode()
            proven = problem.sol_status == pulp.LpSolutionOptimal
            if start is not None:
                known = evaluate(instance, start).bottleneck
                if known < evaluate(instance, placement).bottleneck:
                    placement = start  # CBC can return its incumbent below a better warm start
                if known < bound:  # a valid placement below CBC's bound: its proof is wrong
                    notes.append("milp: the warm start lies below CBC's bound; the LP bound is kept")
                    proven, bound = False, lower_bound
            # with a gap limit CBC calls a placement within it "optimal"
            status = Status.OPTIMAL if proven and not settings.gap_limit else Status.FEASIBLE
            return Outcome(placement, status, bound, tuple(notes))
        if start is not None:
            notes.append("milp: returning the warm start (order DP)")
            return Outcome(start, Status.FEASIBLE, bound, tuple(notes))
        return Outcome(None, Status.NO_SOLUTION, bound, tuple(notes))

    @staticmethod
    def _why_infeasible(data: StageModelData, settings: Settings, deadline: float) -> str:
        """Re-solve without memory (in the time left): if that is feasible, memory is the reason."""
        memory_is_the_cause = False
        if data.memory_can_bind:
            try:
                with _pulp_2_api():
                    relaxed = _Model(data, 1.0, memory=False, deadline=deadline)
                with tempfile.TemporaryDirectory() as folder, _pulp_2_api():
                    _solve_with_cbc(relaxed.problem, settings, deadline, Path(folder))
            except OutOfTime:
                return infeasibility_note("milp", False, data)
            memory_is_the_cause = relaxed.problem.sol_status in (
                pulp.LpSolutionOptimal,
                pulp.LpSolutionIntegerFeasible,
            )  # a time-limited relaxed solve without a solution proves nothing: not memory
        return infeasibility_note("milp", memory_is_the_cause, data)
