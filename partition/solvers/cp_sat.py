"""Exact global solver: the whole problem as one CP-SAT model (OR-Tools).

Variables (``s, s'`` stages with ``s < s'``, ``c`` device classes of
:mod:`._stage_model`, ``h`` hosts, ``i`` cut tensors, ``w`` weights):

- ``x[v,s]``: op ``v`` on stage ``s`` (exactly one per op), for the stages ``v`` may take (every
  stage, unless a caller restricts them: the polish's windows); ``used[s]`` iff stage ``s`` has an
  op; ``used[s+1] → used[s]`` (stages used contiguously from 0: no empty-stage symmetry).
- ``z[s,c]``: stage ``s`` runs on a device of class ``c``; ``Σ_c z[s,c] = used[s]``,
  ``Σ_s z[s,c] ≤ |c|``. Derived ``typ[s,τ]`` and ``host[s,h]`` are sums of ``z``.
- Precedence in cumulative form: for every edge ``(u, v)`` and ``s``,
  ``Σ_{s''≤s} x[v,s''] ≤ Σ_{s''≤s} x[u,s'']``. Colocated ops share their ``x`` column.
- ``q[i,s,s']``: tensor ``i`` produced on ``s`` is needed on ``s'``
  (``x[p,s] ∧ x[c,s'] → q`` for each consumer ``c``), for the stages its ends may take.
- Compute: ``comp[s] ≥ Σ_v t_τ(v) x[v,s]`` enforced by ``typ[s,τ]``; ``x[v,s] ∧ typ[s,τ]`` is
  forbidden when ``t_τ(v) = inf``.
- Communication: ``pair[s,s'] ≥ Σ_i cost_ℓ(i) q[i,s,s']`` enforced by the hosts of ``s`` and
  ``s'`` selecting link kind ``ℓ``. Receivers pay ``recv[s'] = Σ_s pair[s,s']``; senders pay
  ``Σ_{s'} pair[s,s']`` (``per-destination``) or, in ``once`` mode, ``Σ_i snd[i,s]`` with
  ``snd[i,s] ≥ cost_ℓ(i)`` whenever ``q[i,s,s']`` and the link of ``(s, s')`` is ``ℓ`` (the
  slowest destination).
- Memory (exactly the evaluator's estimate): ``Σ_w W_w wu[w,s] + Σ_i b_i (sent[i,s] +
  Σ_{s''} q[i,s'',s]) + ws[s] ≤ Σ_c M_c z[s,c]`` with ``wu`` (weight used on ``s``), ``sent``
  (tensor leaves ``s``) and ``ws[s] ≥ working(v) x[v,s]``.
- Objective: minimise ``B ≥ comp[s] + send[s] + recv[s]`` (with overlap, ``B ≥ comp[s]`` and
  ``B ≥ send[s] + recv[s]``); ``B`` starts at the larger of the LP lower bound of :mod:`.lp_bound` and
  :func:`partition.aggregate_bound.aggregate_lower_bound` (both valid for the true optimum).

Every derived variable only has lower bounds, which is exact for a minimisation: at an optimum
they take their defining values. Times are integers in units chosen from the data (about
``1e-8`` of the lower bound) and *rounded down*, so the model never overestimates a placement
and its proven bound, divided back, is a valid lower bound on the true optimum; the returned
placement is within a few units of optimal and is re-evaluated exactly. The objective ``B``
counts steps of ``_OBJECTIVE_STEP`` units (``step · B ≥`` each stage's time), so a proven
``B ≥ b`` says every placement exceeds ``b − 1`` steps. Byte counts, in units
of the largest capacity / 2**30, are rounded up (memory is never underestimated; a placement
within that many units per term of a device's capacity may be rejected). Ties in the
bottleneck are not broken by latency.

With a gap limit, the search stops at its first placement within the limit of its own bound or
of a bound the caller proved before (:attr:`~.base.Settings.known_bound`: ``auto`` computes the
chain or two-tower bound first), the latter by a solution callback: raising ``B``'s lower end
to that bound instead changed the search (CLIP over four types at k = 4 found no placement within
2% of it in 30 s, where the model as it is finds one in 9.6 s).

The solve starts from the best of the order DP's split of the graph's topological order and the
balanced-time and uniform baselines (``AddHint``), and honours the time limit and seed of
:class:`Settings` (a fixed seed gives the same answer on every run that ends before the limit:
the search runs on one worker, :func:`solver_parameters`). The limit counts from the start of
:meth:`CpSat.solve`: building the model stops at the deadline, and with less time left than
the build took the warm start is returned without a search.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import numpy as np
from ortools.sat.python import cp_model

from ..aggregate_bound import aggregate_lower_bound
from ..evaluator import evaluate
from ..instance import Instance
from ..placement import Evaluation, Placement, Status
from ._stage_model import (
    MEMORY_TOLERANCE,
    OutOfTime,
    StageModelData,
    check_deadline,
    infeasibility_note,
    out_of_time,
    stage_model_data,
)
from .base import OPTIMALITY_TOLERANCE, Capabilities, Outcome, Scope, Settings, Solver
from .ideal_dp import incumbents
from .lp_bound import lp_lower_bound

# Model time unit = lower bound × this, so the optimum is ~1e8 units; memory is counted in units
# of the largest capacity / 2**30 (75 bytes for 80 GB). Both rounded the safe way (see above).
_RESOLUTION = 1e-8
_MAX_MODEL_VALUE = 2**40
# The objective counts steps of this many units (2e-7 of the bound). Stage times are sums of
# variables bounded from below only, so a solution's bottleneck can sit above its stages' true
# times; counted in single units, the search then spent its time lowering it one unit per
# "solution" (bert_legacy on A100/L4/T4 at k = 8: 5,000 of them in 20 s, never reaching the
# optimum it proves in 13 s from other starts).
_OBJECTIVE_STEP = 20
_MEMORY_STEPS = 2**30


class StageModel:
    """The CP-SAT model of one instance, with handles to decode and warm-start it."""

    def __init__(
        self,
        data: StageModelData,
        unit: float,
        lower: int,
        upper: int,
        memory: bool,
        deadline: float = math.inf,
        fixed_comm: Sequence[float] = (),
        allowed: Sequence[Sequence[int]] | None = None,
    ) -> None:
        """Raises :class:`OutOfTime` past ``deadline`` (building takes seconds on large graphs).

        ``fixed_comm[s]`` (seconds, default 0) is communication stage ``s`` pays for transfers
        outside the model: the large-neighbourhood polish (:mod:`.lns`) models a window of stages
        and charges the stages around it for their traffic with the rest of the pipeline.
        ``allowed[v]`` (default: every stage) are the stages op ``v`` may take; the model has
        literals only for those, and tensors only between stages their ends may take: a window of
        the polish pins most ops to one stage, and with a literal for every op and stage its model
        took 77 ms to build against 21, and a window of two or three stages 2–3 times as long to
        solve (CLIP over four types at k = 8; wide windows spend their search budget either way).
        """
        self.data, self.unit = data, unit
        m = self.model = cp_model.CpModel()
        n, k = data.num_ops, data.num_stages
        classes = data.classes
        types = sorted({c.type_column for c in classes})
        hosts = sorted({c.host for c in classes})
        times = data.times
        stages_of = [tuple(range(k)) if allowed is None else tuple(sorted(allowed[v])) for v in range(n)]
        for group in data.colocate:
            shared = set.intersection(*(set(stages_of[v]) for v in group))
            for v in group:
                stages_of[v] = tuple(sorted(shared))

        # x[v][s]: op v on stage s, for the stages v may take (colocated ops share one dict)
        self.x = [{s: m.new_bool_var(f"x{v}_{s}") for s in stages_of[v]} for v in range(n)]
        for group in data.colocate:
            for v in group[1:]:
                self.x[v] = self.x[group[0]]
        on_stage = [[v for v in range(n) if s in self.x[v]] for s in range(k)]
        self.used = [m.new_bool_var(f"used{s}") for s in range(k)]
        self.z = [[m.new_bool_var(f"z{s}_{c}") for c in range(len(classes))] for s in range(k)]
        for v in range(n):
            m.add_exactly_one(self.x[v].values())
        for s in range(k):
            column = [self.x[v][s] for v in on_stage[s]]
            for literal in column:
                m.add_implication(literal, self.used[s])
            m.add_bool_or([~self.used[s], *column])
            m.add(sum(self.z[s]) == self.used[s])
            if s + 1 < k:
                m.add_implication(self.used[s + 1], self.used[s])
        if data.instance.options.exact_stages:
            m.add(self.used[k - 1] == 1)
        for c, cls in enumerate(classes):
            m.add(sum(self.z[s][c] for s in range(k)) <= len(cls.devices))
        typ = {(s, t): self._selector(s, [c for c, cls in enumerate(classes) if cls.type_column == t])
               for s in range(k) for t in types}  # fmt: skip
        host = {(s, h): self._selector(s, [c for c, cls in enumerate(classes) if cls.host == h])
                for s in range(k) for h in hosts}  # fmt: skip

        total = cp_model.LinearExpr.Sum
        for u, v in data.instance.graph.edges:
            check_deadline(deadline)
            # Σ_{s'' ≤ s} x[v,s''] ≤ Σ_{s'' ≤ s} x[u,s'']: only at the stages where a side changes,
            # and not once every stage u may take is counted (the right side is then 1)
            last = stages_of[u][-1] if stages_of[u] else -1  # none: exactly-one fails anyway
            for s in sorted({*stages_of[u], *stages_of[v]}):
                if s >= last:
                    break
                later = [literal for t, literal in self.x[v].items() if t <= s]
                if later:
                    m.add(total(later) <= total([literal for t, literal in self.x[u].items() if t <= s]))

        tensors, kinds = data.tensors, data.link_kinds
        costs = np.floor(data.transfer / unit).astype(np.int64)
        finite = np.where(np.isfinite(times), times, 0.0)
        horizon = int(np.floor(finite / unit).max(axis=1).sum() + costs.max(axis=1, initial=0).sum())
        step = _OBJECTIVE_STEP
        self.bottleneck = m.new_int_var(lower // step, -(-upper // step), "bottleneck")
        compute = [m.new_int_var(0, horizon, f"comp{s}") for s in range(k)]
        for s in range(k):
            here = np.array(on_stage[s], dtype=np.int64)
            for t in types:
                check_deadline(deadline)
                finite = np.isfinite(times[here, t])
                scaled = np.floor(np.where(finite, times[here, t], 0.0) / unit).astype(np.int64)
                positive = np.flatnonzero(scaled > 0)
                work = _weighted([self.x[v][s] for v in here[positive]], scaled[positive])
                m.add(compute[s] >= work).only_enforce_if(typ[s, t])
                for v in here[~finite]:
                    m.add_bool_or([~self.x[v][s], ~typ[s, t]])

        cheapest = costs.min(axis=1) if len(tensors) else np.zeros(0, dtype=np.int64)
        # q[i,s,r]: tensor i made on s is read on r, for the stages its ends may take
        self.q: dict[tuple[int, int, int], cp_model.IntVar] = {}
        for i, tensor in enumerate(tensors):
            check_deadline(deadline)
            for s in stages_of[tensor.producer]:
                for r in range(s + 1, k):
                    readers = [c for c in tensor.consumers if r in self.x[c]]
                    if not readers:
                        continue
                    q = self.q[i, s, r] = m.new_bool_var(f"q{i}_{s}_{r}")
                    producer = ~self.x[tensor.producer][s]
                    for c in readers:
                        m.add_bool_or([producer, ~self.x[c][r], q])
        crossing: dict[tuple[int, int], list[int]] = {}
        for i, s, r in self.q:
            crossing.setdefault((s, r), []).append(i)

        def link_literals(s: int, r: int) -> list[tuple[int, list]]:
            """(link kind, literals that select it) for stages ``s`` and ``r``."""
            if len(kinds) == 1:
                return [(0, [])]
            out = [
                (ell, [host[s, kind.host], host[r, kind.host]])
                for ell, kind in enumerate(kinds)
                if kind.host >= 0
            ]
            inter = len(kinds) - 1
            out += [(inter, [host[s, h], ~host[r, h]]) for h in hosts]
            return out

        send = [[] for _ in range(k)]
        recv = [[] for _ in range(k)]
        for (s, r), crossing_here in sorted(crossing.items()):
            check_deadline(deadline)
            rows = np.array(crossing_here, dtype=np.int64)
            pair = m.new_int_var(0, int(costs[rows].max(axis=1).sum()), f"pair{s}_{r}")
            recv[r].append(pair)
            if not data.once:
                send[s].append(pair)
            sent = [self.q[i, s, r] for i in crossing_here]
            m.add(pair >= _weighted(sent, cheapest[rows]))
            for ell, literals in link_literals(s, r):
                m.add(pair >= _weighted(sent, costs[rows, ell])).only_enforce_if(literals)
        if data.once:
            destinations: dict[tuple[int, int], list[int]] = {}
            for i, s, r in self.q:
                destinations.setdefault((i, s), []).append(r)
            for (i, s), targets in sorted(destinations.items()):
                check_deadline(deadline)
                snd = m.new_int_var(0, int(costs[i].max()), f"snd{i}_{s}")
                send[s].append(snd)
                for r in targets:
                    m.add(snd >= int(cheapest[i])).only_enforce_if(self.q[i, s, r])
                    for ell, literals in link_literals(s, r):
                        m.add(snd >= int(costs[i, ell])).only_enforce_if([self.q[i, s, r], *literals])

        for s in range(k):
            comm = sum(send[s]) + sum(recv[s])
            if s < len(fixed_comm):
                comm += math.floor(fixed_comm[s] / unit)
            if data.instance.options.overlap:
                m.add(step * self.bottleneck >= compute[s])
                m.add(step * self.bottleneck >= comm)
            else:
                m.add(step * self.bottleneck >= compute[s] + comm)

        if memory:
            self._add_memory(on_stage, deadline)
        m.minimize(self.bottleneck)

    def proven_bound(self, solver: cp_model.CpSolver) -> float:
        """Seconds below which the solve proved there is no placement: with the objective at
        least ``b`` steps, every placement's largest stage (in units, rounded down) exceeds
        ``b - 1`` steps."""
        steps = solver.BestObjectiveBound()
        return (_OBJECTIVE_STEP * (steps - 1) + 1) * self.unit * (1 - 1e-12)

    def _selector(self, s: int, members: list[int]) -> cp_model.IntVar:
        """A literal true iff stage ``s`` uses one of the classes in ``members``."""
        if len(members) == 1:
            return self.z[s][members[0]]
        literal = self.model.new_bool_var("")
        self.model.add(sum(self.z[s][c] for c in members) == literal)
        return literal

    def _add_memory(self, on_stage: list[list[int]], deadline: float) -> None:
        data, m, k = self.data, self.model, self.data.num_stages
        byte_unit = max(c.memory for c in data.classes) / _MEMORY_STEPS
        working = np.ceil(data.working / byte_unit).astype(np.int64)
        outgoing: dict[int, dict[int, list[cp_model.IntVar]]] = {}  # stage → tensor → its q
        incoming: dict[int, list[tuple[int, cp_model.IntVar]]] = {}
        for (i, s, r), q in self.q.items():
            outgoing.setdefault(s, {}).setdefault(i, []).append(q)
            incoming.setdefault(r, []).append((i, q))
        sizes = [math.ceil(tensor.bytes / byte_unit) for tensor in data.tensors]
        for s in range(k):
            check_deadline(deadline)
            terms = []
            for size, users in data.weight_users:
                here = [self.x[v][s] for v in users if s in self.x[v]]
                if not here:
                    continue
                used = m.new_bool_var("")
                for literal in here:
                    m.add_implication(literal, used)
                terms.append(math.ceil(size / byte_unit) * used)
            for i, leaving in outgoing.get(s, {}).items():
                if sizes[i] > 0:
                    sent = m.new_bool_var("")
                    for q in leaving:
                        m.add_implication(q, sent)
                    terms.append(sizes[i] * sent)
            terms += [sizes[i] * q for i, q in incoming.get(s, []) if sizes[i] > 0]
            largest = m.new_int_var(0, int(working.max(initial=0)), f"ws{s}")
            for v in on_stage[s]:
                if working[v] > 0:
                    m.add(largest >= int(working[v]) * self.x[v][s])
            capacity = [
                math.floor(cls.memory * (1 + MEMORY_TOLERANCE) / byte_unit) * self.z[s][c]
                for c, cls in enumerate(data.classes)
            ]
            m.add(sum(terms) + largest <= sum(capacity))

    def hint(self, placement: Placement) -> None:
        """Hint every decision literal from a placement (derived ones follow by propagation)."""
        data = self.data
        classes = [data.class_of_device(d) for d in placement.devices]
        literals: list[cp_model.IntVar] = []
        values: list[bool] = []
        hinted = set()
        for v, stage in enumerate(placement.stage_of):
            if id(self.x[v]) not in hinted:  # colocated ops share one dict of literals
                hinted.add(id(self.x[v]))
                literals += self.x[v].values()
                values += (stage == s for s in self.x[v])
        for s in range(data.num_stages):
            literals.append(self.used[s])
            values.append(s < placement.num_stages)
            literals += self.z[s]
            values += (s < placement.num_stages and classes[s] == c for c in range(len(data.classes)))
        for (i, s, r), q in self.q.items():
            tensor = data.tensors[i]
            literals.append(q)
            values.append(
                placement.stage_of[tensor.producer] == s
                and any(placement.stage_of[c] == r for c in tensor.consumers)
            )
        self._add_hints([literal.index for literal in literals], [int(value) for value in values])

    def _add_hints(self, indices: Sequence[int], values: Sequence[int]) -> None:
        """Hint the variables at proto ``indices`` (none hinted yet) with ``values``, through the
        proto: ``AddHint`` one call at a time took a quarter of a large-neighbourhood window's
        time (CLIP, 8k variables a window)."""
        hint = self.model.Proto().solution_hint
        hint.vars.extend(indices)
        hint.values.extend(values)

    def complete_hint(self, settings: Settings, deadline: float, *, with_lp: bool = False) -> None:
        """Extend the hint to every variable: CP-SAT repairs a partial hint slowly (no solution in
        15 s on DenseNet-121), so solve a copy with the hinted variables fixed (their domains
        narrowed to the value), stopping at the first solution, and hint all of its values (if it
        found one; else keep the partial hint)."""
        hint = self.model.Proto().solution_hint
        fixed = self.model.Clone()
        variables = fixed.Proto().variables
        for index, value in zip(hint.vars, hint.values, strict=True):
            domain = variables[index].domain
            domain.clear()
            domain.extend([value, value])
        solver = cp_model.CpSolver()
        solver_parameters(solver, settings, deadline, with_lp=with_lp)
        solver.parameters.stop_after_first_solution = True
        if solver.Solve(fixed) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return
        solution = list(solver.response_proto.solution)
        self.model.ClearHints()
        self._add_hints(range(len(solution)), solution)

    def decode(self, solver: cp_model.CpSolver) -> Placement:
        data = self.data
        stage_of = self.stages(solver)
        stages = max(stage_of) + 1
        chosen = [
            next(c for c in range(len(data.classes)) if solver.Value(self.z[s][c])) for s in range(stages)
        ]
        return data.decode(stage_of, chosen)

    def stages(self, solver: cp_model.CpSolver) -> list[int]:
        """The stage of every op in the solver's solution."""
        return [next(s for s, literal in column.items() if solver.value(literal)) for column in self.x]


def _weighted(literals: list[cp_model.IntVar], weights: np.ndarray) -> cp_model.LinearExprT:
    """``Σ weights · literals`` built at once (``LinearExpr.WeightedSum``), where Python's ``sum``
    builds it a term at a time (with ``LinearExpr.Sum`` for the precedences, a fifth less time
    building a large-neighbourhood window's model on CLIP: the same proto)."""
    return cp_model.LinearExpr.WeightedSum(literals, weights.tolist())


def model_unit(data: StageModelData, lower_bound: float) -> float:
    """Seconds per model unit: ``_RESOLUTION`` of the bound, coarse enough to fit int64."""
    finite = np.where(np.isfinite(data.times), data.times, 0.0)
    worst = float(
        finite.max(axis=1).sum() + 2 * data.transfer.max(axis=1, initial=0.0).sum() * data.num_stages
    )
    reference = lower_bound if 0 < lower_bound < math.inf else max(worst, 1e-12)
    return max(reference * _RESOLUTION, worst / _MAX_MODEL_VALUE, 1e-300)


class _StopWithin(cp_model.CpSolverSolutionCallback):
    """Stops the search at its first solution whose objective (model steps) is at most
    ``target``."""

    def __init__(self, target: float) -> None:
        super().__init__()
        self.target, self.stopped = target, False

    def on_solution_callback(self) -> None:
        if self.ObjectiveValue() <= self.target:
            self.stopped = True
            self.StopSearch()


def solver_parameters(
    solver: cp_model.CpSolver, settings: Settings, deadline: float, *, with_lp: bool = False
) -> None:
    """Workers, seed and the time left until ``deadline`` (``perf_counter`` time; ``inf``: none),
    and whether the search keeps CP-SAT's LP relaxation (``with_lp``; see below)."""
    # Without the LP the whole model's search runs on one worker, whatever the threads: with two
    # CP-SAT runs a portfolio of its own that proves later (bert_legacy on A100/L4/T4 at k = 8:
    # optimal in 14.8 s with one, 5.94% at 60 s with two; even of no-LP subsolvers alone, under
    # auto, none in 60 s against 29 s; Mixtral there 5.6 s against 23.4). The polish's windows,
    # with the LP, take the threads they are given (bench/scoreboard.md, *The cores by default*).
    solver.parameters.num_workers = max(1, settings.threads) if with_lp else 1
    solver.parameters.random_seed = settings.seed
    # OR-Tools 9.15: the presolve step that detects included linear constraints cut off optimal
    # solutions of this model (wrong optima and wrong INFEASIBLE, found by the exhaustive tests,
    # while the same model with every variable fixed to the true optimum was feasible); the
    # same workaround as google/or-tools issue #5293. Off.
    solver.parameters.presolve_inclusion_work_limit = 0
    # The whole model's search runs without the LP relaxation: its bound on this model is far
    # below the optimum (0.60 of 0.90 ms on bert_legacy over A100/L4/T4 at k = 8) and the time
    # spent on it slowed every proof. CP-SAT alone, side by side with the LP (level 1):
    # bert_legacy there not proven in 60 s → 12.1 s, Mixtral 27.9 → 4.5 s, GPT-2 35.3 → 5.3 s
    # (with the objective's steps). The polish's windows keep it (``with_lp``): without it the
    # polish ended elsewhere on CLIP and T5, worse as often as better.
    solver.parameters.linearization_level = 1 if with_lp else 0
    if math.isfinite(deadline):
        solver.parameters.max_time_in_seconds = max(deadline - time.perf_counter(), 0.01)


def _starts(instance: Instance, settings: Settings) -> list[tuple[str, Placement, Evaluation]]:
    """The placements CP-SAT may start from: the heuristic incumbents and the warm start, if
    valid. With a warm start at the optimum, the search has only the proof left (bert_legacy on
    H100/A100 at k = 8: proven in 4.2 s from the polished placement, 5.8 s from the order DP's)."""
    starts = incumbents(instance, settings)
    if settings.warm_start is not None:
        evaluation = evaluate(instance, settings.warm_start)
        if evaluation.valid:
            starts.append(("warm start", settings.warm_start, evaluation))
    return starts


class CpSat(Solver):
    name = "cp-sat"
    capabilities = Capabilities(scope=Scope.GLOBAL, time_limit=True, warm_start=True, gap_limit=True)

    def solve(self, instance: Instance, settings: Settings) -> Outcome:
        started = time.perf_counter()
        deadline = started + settings.time_limit if settings.time_limit is not None else math.inf
        data = stage_model_data(instance)
        lower_bound = max(lp_lower_bound(instance), aggregate_lower_bound(instance))
        known = max(lower_bound, settings.known_bound)
        # The best of the warm start, the order DP's split and the balanced-time and uniform
        # baselines: a hint no worse than any of them, and a tighter upper end for B.
        best = min(_starts(instance, settings), key=lambda found: found[2].bottleneck, default=None)
        start = None if best is None else best[1]
        unit = model_unit(data, lower_bound)
        upper = int(_MAX_MODEL_VALUE)
        if start is not None:
            upper = math.ceil(evaluate(instance, start).bottleneck / unit) + 1
        lower = min(math.floor(lower_bound / unit), upper) if math.isfinite(lower_bound) else 0
        built = time.perf_counter()
        try:
            model = StageModel(data, unit, lower, upper, data.memory_can_bind, deadline)
        except OutOfTime:
            return out_of_time("cp-sat", start, known, "while building the model")
        built = time.perf_counter() - built
        # hinting and completing the hint cost about as much as the build (DenseNet-121: 0.35 +
        # 0.5 s after 1.6 s), and a search shorter than that rarely beats the warm start
        if start is not None and deadline - time.perf_counter() < built:
            return out_of_time("cp-sat", start, known, "after building the model")
        if start is not None:
            model.hint(start)
            model.complete_hint(settings, deadline)
        settings.report(
            f"cp-sat: {data.num_ops} ops, {len(data.tensors)} cut tensors, {data.num_stages} stages,"
            f" {len(data.classes)} device classes; LP bound {lower_bound:.6g} s"
        )
        if time.perf_counter() > deadline:
            return out_of_time("cp-sat", start, known, "before the search")
        solver = cp_model.CpSolver()
        solver_parameters(solver, settings, deadline)
        # the objective is the bottleneck alone: CP-SAT's gap is the placement's (in model steps)
        solver.parameters.relative_gap_limit = settings.relative_gap
        within = None
        if settings.gap_limit and known > lower_bound:
            # a solution stops the search once its objective is within the gap limit of the
            # bound proven before, up to solve's own tolerance: that bound is bisected to exactly
            # ``upper / (1 + G)`` for the best heuristic placement, which must count as within
            # the limit (CLIP over H100/A100 at k = 4 with 2%: 3.5 s; with the objective required
            # 1e-5 inside the limit instead, CP-SAT searched its whole share for a better one and
            # the solve took 33.8 s)
            target = settings.target(known) * (1 + OPTIMALITY_TOLERANCE)
            within = _StopWithin(target / (_OBJECTIVE_STEP * unit))
        status = solver.Solve(model.model, within)
        bound = max(known, model.proven_bound(solver))
        notes = [f"cp-sat: {solver.StatusName(status)} after {solver.WallTime():.2f} s"]
        if within is not None and within.stopped:
            notes.append("cp-sat: within the gap limit of the bound proven before it")
        if status == cp_model.OPTIMAL and not settings.gap_limit:
            return Outcome(model.decode(solver), Status.OPTIMAL, bound, tuple(notes))
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):  # OPTIMAL: within relative_gap_limit
            return Outcome(model.decode(solver), Status.FEASIBLE, bound, tuple(notes))
        if status == cp_model.INFEASIBLE and start is not None:
            # Only byte rounding (≤ 1 byte per term) can reject a placement the evaluator accepts.
            notes.append("cp-sat: the model rejects the valid warm start (memory at capacity); returning it")
            return Outcome(start, Status.FEASIBLE, known, tuple(notes))
        if status == cp_model.INFEASIBLE:
            return Outcome(
                None, Status.INFEASIBLE, math.inf, (self._why_infeasible(data, settings, deadline),)
            )
        if status == cp_model.MODEL_INVALID:
            raise AssertionError(f"cp-sat built an invalid model: {model.model.Validate()}")
        if start is not None:  # nothing better found in time: the warm start is still valid
            notes.append(f"cp-sat: returning its start ({best[0]}), nothing better found")
            return Outcome(start, Status.FEASIBLE, known, tuple(notes))
        return Outcome(None, Status.NO_SOLUTION, known, tuple(notes))

    @staticmethod
    def _why_infeasible(data: StageModelData, settings: Settings, deadline: float) -> str:
        """Re-solve without memory (in the time left): if that is feasible, memory is the reason."""
        memory_is_the_cause = False
        if data.memory_can_bind:
            try:
                relaxed = StageModel(data, model_unit(data, 0.0), 0, int(_MAX_MODEL_VALUE), False, deadline)
            except OutOfTime:
                return infeasibility_note("cp-sat", False, data)
            solver = cp_model.CpSolver()
            solver_parameters(solver, settings, deadline)
            solver.parameters.stop_after_first_solution = True
            memory_is_the_cause = solver.Solve(relaxed.model) in (cp_model.OPTIMAL, cp_model.FEASIBLE)
        return infeasibility_note("cp-sat", memory_is_the_cause, data)
