"""Large-neighbourhood polish: CP-SAT re-solves windows of stages around the bottleneck stage.

**Neighbourhood.** Given an incumbent placement (a stage per op, a device per stage), a *window*
is a run of consecutive stages ``a..b``. Ops outside it keep their stages and stages outside it
keep their devices; the window's ops may move to any window stage (precedence kept, every window
stage keeps at least one op, so the stage count is unchanged), and each window stage may take a
device of any class (type × host, :mod:`._stage_model`) that no stage outside the window holds:
device swaps among the window's stages and swaps with idle devices are part of the neighbourhood.
Windows are tried around the slowest stages, narrowest first (each of the slowest stages and
one neighbour), widening (up to ``_MAX_WIDTH`` stages) while nothing improves, and searched longer
(twice the effort) once every window failed but not all were proven; before each window a cheap
exact move gives the bottleneck stage any other stage's device (a swap) or an idle device.
Once every window around them is proven to hold nothing better, windows centre on twice as many
stages (improving a stage that is not the slowest can still open moves for the slowest, see
Acceptance), and then coarsened windows keep twice as many ops free. The polish ends at the
deadline or when every window is proven.

**Memory.** A window's sub-problem is a function of a few arrays (:meth:`_Polisher.fingerprint`:
the window's ops and stages, the devices, the transfers with an end in it, and the compute and
other traffic of the outside stages they reach), and its search is deterministic; so a window
proven, or searched in vain at an effort, for an earlier incumbent is not searched again while
its fingerprint is the same: after an improvement elsewhere only the windows it touched are. The
polish ends where it would without this, sooner (CLIP over 2 × 8 A100 at k = 16 from the
two-tower witness: 88 windows instead of 107 to the same 0.30472 ms).

**Escape.** Windows move ops between neighbouring stages only; a caller may add a global move
(``escape``: a placement to a placement or ``None``), tried on the start and on each new
incumbent, no more than a fifth of the time (:data:`_ESCAPE_PAUSE`), and taken under the same
acceptance. ``anytime`` gives graphs of two towers the towers interleaved anew along the
incumbent's own order (:func:`.tower_split.along`).

**Sub-problem.** The window's ops, plus one *fixed op* per outside stage that exchanges tensors
with the window, form a small instance whose stages are the window's and those outside stages,
in pipeline order; the global CP-SAT model of :mod:`.cp_sat` (:class:`~.cp_sat.StageModel`)
solves it with

- each fixed op pinned to its stage and to its stage's device class; its time is the stage's
  compute, and the stage's traffic with other outside stages is a constant (``fixed_comm``);
- tensors between the window and a fixed op kept as tensors, so the communication both ends
  pay (``L + b/B`` over the link of the devices chosen, per destination) is modelled exactly;
- window ops restricted to window stages; per class, window stages use at most the devices
  that no outside stage holds;
- objective: the largest stage time over the sub-instance's stages — exactly the stage times
  the window's decisions can change (every other stage keeps its time).

Exact but for two documented cases: in ``once`` mode a tensor made outside and sent both into
the window and elsewhere is charged max(outside) + max(window) instead of the max of both (an
over-estimate), and the fixed stages' memory is not modelled (it is constant: their buffers for
window traffic exist whatever the window does). A window of more than ``_WINDOW_OPS`` ops is
coarsened first: after the exact contractions of :mod:`partition.coarsen`, each window stage
keeps a band of ops free at each end and its core (with every op on a path inside it) becomes
one op, so moves concentrate at the stage boundaries, the incumbent stays a solution (and the
hint), and the sub-problem is built from the window's ops only, whatever the graph's size.

**Acceptance.** A candidate replaces the incumbent when its stage times sorted largest first are
lexicographically smaller (the bottleneck never rises; a tie at the bottleneck is broken stage
by stage, which opens later moves), scored exactly by :mod:`._scoring`; the independent
evaluator checks each accepted placement (graphs up to ``_EVALUATE_OPS`` ops; above, the final
one). The result is never worse than the start in (bottleneck, latency): the start is returned
otherwise. The time limit is a deadline on the whole polish; each window's CP-SAT search gets a
fixed budget of CP-SAT's deterministic time (so a polish that runs out of windows before the
deadline gives the same placement on every run) under a wall-clock cap, with the threads and
seed of :class:`Settings`.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np
from ortools.sat.python import cp_model

from ..coarsen import Coarsening, coarsen_exact
from ..costs import CostTable
from ..evaluator import evaluate
from ..graph import Op, OpGraph, Tensor
from ..instance import CommMode, Instance, Options
from ..placement import Placement
from ._scoring import Crossings, Scorer, TensorArrays
from ._stage_model import OutOfTime, device_classes, stage_model_data
from .base import Settings
from .cp_sat import StageModel, model_unit, solver_parameters

_WINDOW_OPS = 400  # coarsen a window with more ops than this ...
_MAX_WINDOW_OPS = 3200  # ... doubled, up to this, once every window is proven with cores contracted
_MAX_WIDTH = 8  # widest window, in stages
_FOCUS_STAGES = 3  # windows are centred on the slowest few stages (twice as many once all are proven)
_MIN_WINDOW_SECONDS = 0.3  # less time left than this: stop
_BUILD_SECONDS_PER_OP = 2e-3  # first guess at building and hinting a window model, per window op
_WINDOW_WORK = 1.0  # CP-SAT deterministic time per window (repeatable, unlike wall time), doubled
_MAX_WINDOW_SECONDS = 5.0  # when every open window failed; the wall-clock cap is this + 3 × that
_EVALUATE_OPS = 20_000  # independent evaluator on every acceptance up to this many ops
_EVALUATE_SECONDS_PER_OP = 1.5e-5  # the evaluator's pace (110k ops in ~1.1 s on 2 shared cores)
_RELATIVE = 1e-9  # stage times closer than this (relative) are equal
_ESCAPE_PAUSE = 4.0  # the caller's global move runs again only after this many times its last run


@dataclass(frozen=True)
class Stall:
    """When a polish gives up for a caller that has another start to polish: once the bottleneck
    has fallen by no more than ``gain`` (relative; 0: not at all) over the last ``seconds``, if
    that happens before ``until`` (``perf_counter`` time, leaving the other start the time it
    needs) and, with ``waiting``, while it says another start waits; when it says none does but
    ``reseeded`` says one waits under another seed (``Start.reseed``), once the bottleneck has
    not fallen at all; else the polish runs to its deadline."""

    seconds: float
    until: float
    gain: float = 0.0
    waiting: Callable[[], bool] | None = None
    reseeded: Callable[[], bool] | None = None

    def gives_up(self, falls: list[tuple[float, float]], now: float, bottleneck: float) -> float | None:
        """The gain below which a polish whose bottleneck fell as ``falls`` says (times and
        values, from its start) and is ``bottleneck`` at ``now`` gave up, or ``None`` if it goes on."""
        since = now - self.seconds
        if now >= self.until or since <= falls[0][0]:
            return None
        gain = self.gain
        if self.waiting is not None and not self.waiting():
            if self.reseeded is None or not self.reseeded():
                return None
            gain = 0.0
        before = next(value for when, value in reversed(falls) if when <= since)
        return gain if bottleneck >= before * (1 - gain) else None


@dataclass(frozen=True)
class PolishReport:
    """What a polish did: the placement (the start if nothing better was found) and a summary."""

    placement: Placement
    improved: bool
    windows: int
    notes: tuple[str, ...]


@dataclass(frozen=True, eq=False)
class _Window:
    """A window's sub-problem and how to map its solution back to the whole placement."""

    first: int  # window stages first..last (original stage indices)
    last: int
    stages: tuple[int, ...]  # original stage of each sub-stage, in order
    level: Coarsening  # coarse sub-instance; members index the sub-instance's ops
    sub_ops: np.ndarray  # original op of each sub-instance op (-1 for a fixed op)
    fixed: dict[int, int]  # coarse op → sub-stage, for fixed ops
    fixed_comm: tuple[float, ...]  # per sub-stage
    floor: float  # a lower bound on the sub-problem's objective (the fixed stages' own time)
    ceiling: float  # the incumbent's largest time over the sub-stages
    hint: Placement  # the incumbent on the coarse sub-instance


def _leximax_better(new: np.ndarray, old: np.ndarray) -> bool:
    """``new`` stage times are better: sorted largest first, lexicographically smaller."""
    a, b = np.sort(new)[::-1], np.sort(old)[::-1]
    differs = np.flatnonzero(np.abs(a - b) > _RELATIVE * max(float(b[0]), 1e-300))
    return bool(len(differs)) and a[differs[0]] < b[differs[0]]


class _Polisher:
    """One polish run: the instance's arrays, the incumbent, the deadline."""

    def __init__(
        self,
        instance: Instance,
        settings: Settings,
        deadline: float,
        scorer: Scorer | None,
        complete_hints: bool = True,
    ) -> None:
        self.instance = instance
        self.complete_hints = complete_hints
        self.settings = settings
        self.deadline = deadline
        self.scorer = scorer or Scorer(instance, TensorArrays.of(instance))
        self.names = [t.name for t in instance.graph.tensors if t.producer is not None]
        self.pair_producer = self.scorer.producer[self.scorer.pair_tensor]
        self.classes = device_classes(instance.cluster)
        self.class_of_device = np.zeros(len(instance.cluster.devices), dtype=np.int64)
        for c, cls in enumerate(self.classes):
            self.class_of_device[list(cls.devices)] = c
        self.windows = 0
        self.build_seconds_per_op = _BUILD_SECONDS_PER_OP  # the slowest build seen so far
        # sub-problems by fingerprint, across incumbents: those proven to hold nothing better
        # (whether exactly, else with their stages' cores contracted), and those searched in
        # vain at an effort
        self.known: dict[bytes, bool] = {}
        self.failed: set[tuple[bytes, float]] = set()
        self.restart()

    def restart(self) -> None:
        """A new incumbent: no window is proven or tried for it, efforts start again."""
        self.proven: set[tuple[int, int]] = set()  # windows proven to hold nothing better
        self.coarse: set[tuple[int, int]] = set()  # of them, those proven with stage cores contracted
        self.tried: set[tuple[int, int]] = set()  # windows searched at the current effort without success
        self.work = _WINDOW_WORK  # deterministic seconds per window search, doubled when all fail
        self.focus = _FOCUS_STAGES  # windows centre on this many of the slowest stages
        self.window_ops = _WINDOW_OPS  # ops a window keeps free before its stage cores are contracted

    def affordable(self, ops: int) -> bool:
        """Time is left to build a window of ``ops`` ops and search it a little (builds cannot
        stop half-way without wasting them, so none starts that would overrun the deadline)."""
        return self.remaining() > _MIN_WINDOW_SECONDS + 1.5 * ops * self.build_seconds_per_op

    def remaining(self) -> float:
        return self.deadline - time.perf_counter()

    # -- the sub-problem -------------------------------------------------------------------------

    def _surroundings(
        self, stage_of: np.ndarray, devices: np.ndarray, first: int, last: int
    ) -> tuple[Crossings, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """For the window of stages ``first..last``: the placement's transfers, which of them have
        an end in the window, the outside stages those reach (in order), and every stage's
        compute and traffic with the stages outside the window (``fixed_comm``)."""
        count = len(devices)
        inside = np.zeros(count, dtype=bool)
        inside[first : last + 1] = True
        moved = self.scorer.crossings(stage_of, devices)
        outer = ~inside[moved.source] & ~inside[moved.target]
        fixed_comm = np.bincount(moved.target[outer], moved.cost[outer], minlength=count)
        if self.scorer.once:
            worst = np.zeros(len(self.scorer.bytes))
            np.maximum.at(worst, moved.tensor[outer], moved.cost[outer])
            sent = np.unique(moved.tensor[outer])
            fixed_comm += np.bincount(stage_of[self.scorer.producer[sent]], worst[sent], minlength=count)
        else:
            fixed_comm += np.bincount(moved.source[outer], moved.cost[outer], minlength=count)
        touching = ~outer
        talking = np.union1d(moved.source[touching], moved.target[touching])
        talking = talking[~inside[talking]]
        column = self.scorer.type_of_device[devices]
        compute = np.bincount(stage_of, self.scorer.times[np.arange(len(stage_of)), column[stage_of]], count)
        return moved, touching, talking, compute, fixed_comm

    def fingerprint(self, stage_of: np.ndarray, devices: np.ndarray, first: int, last: int) -> bytes:
        """What the sub-problem of stages ``first..last`` is built from (:meth:`window`): the
        window's ops and their stages, every stage's device, the transfers with an end in the
        window and their costs, and the compute and other traffic of each outside stage they
        reach. A window proven for an earlier incumbent is proven again while this is the same:
        the search is deterministic (a fixed budget of CP-SAT's deterministic time), so after an
        improvement elsewhere only the windows it touched are searched again."""
        moved, touching, talking, compute, fixed_comm = self._surroundings(stage_of, devices, first, last)
        ops = np.flatnonzero((stage_of >= first) & (stage_of <= last))
        digest = hashlib.blake2b(digest_size=16)
        for part in (
            np.array([first, last, self.window_ops], dtype=np.int64),
            devices.astype(np.int64),
            ops.astype(np.int64),
            stage_of[ops].astype(np.int64),
            moved.tensor[touching].astype(np.int64),
            moved.source[touching].astype(np.int64),
            moved.target[touching].astype(np.int64),
            moved.cost[touching].astype(np.float64),
            talking.astype(np.int64),
            compute[talking].astype(np.float64),
            fixed_comm[talking].astype(np.float64),
        ):
            digest.update(np.ascontiguousarray(part).tobytes())
        return digest.digest()

    def window(self, stage_of: np.ndarray, devices: np.ndarray, first: int, last: int) -> _Window:
        """The sub-instance of stages ``first..last`` (module docstring)."""
        instance, graph = self.instance, self.instance.graph
        inside = np.zeros(len(devices), dtype=bool)
        inside[first : last + 1] = True
        _, _, talking, compute, fixed_comm = self._surroundings(stage_of, devices, first, last)
        stages = tuple(sorted({*range(first, last + 1), *(int(r) for r in talking)}))

        in_window = inside[stage_of]
        ops = np.flatnonzero(in_window)
        fixed_id = {r: f"__fixed_stage_{r}" for r in stages if not inside[r]}
        before = [r for r in stages if r < first]
        after = [r for r in stages if r > last]
        sub_ops = np.concatenate([np.full(len(before), -1), ops, np.full(len(after), -1)]).astype(np.int64)
        fixed_op = [
            Op(id=fixed_id[r], op_type="FixedStage", module=fixed_id[r], name=fixed_id[r]) for r in before
        ]
        ops_list = [*fixed_op, *(graph.ops[v] for v in ops)]
        ops_list += [
            Op(id=fixed_id[r], op_type="FixedStage", module=fixed_id[r], name=fixed_id[r]) for r in after
        ]

        def end(v: int) -> str:
            return graph.ops[v].id if in_window[v] else fixed_id[int(stage_of[v])]

        rows = np.flatnonzero(in_window[self.pair_producer] | in_window[self.scorer.pair_consumer])
        consumers: dict[int, dict[str, None]] = {}
        for row in rows.tolist():
            consumers.setdefault(int(self.scorer.pair_tensor[row]), {})[
                end(int(self.scorer.pair_consumer[row]))
            ] = None
        tensors = []
        for i, targets in consumers.items():
            producer = end(int(self.scorer.producer[i]))
            targets.pop(producer, None)
            if targets:
                tensors.append(Tensor(self.names[i], float(self.scorer.bytes[i]), producer, tuple(targets)))
        weights = {w: graph.weights[w] for v in ops for w in graph.ops[v].weights}
        sub_graph = OpGraph(f"{graph.name}[{first}:{last + 1}]", tuple(ops_list), tuple(tensors), weights)

        types = len(instance.cluster.type_names)
        fixed_rows = [
            np.repeat(compute[np.asarray(rs, dtype=np.int64)][:, None], types, axis=1)
            for rs in (before, after)
        ]
        times = np.vstack([fixed_rows[0], instance.costs.times[ops], fixed_rows[1]])
        provenance = instance.costs.provenance[np.where(sub_ops >= 0, sub_ops, ops[0])]
        window_ids = {graph.ops[v].id for v in ops}
        colocate = tuple(g for g in instance.options.colocate if g[0] in window_ids)
        options = Options(
            stages=len(stages),
            exact_stages=True,
            comm_mode=instance.options.comm_mode,
            overlap=instance.options.overlap,
            colocate=colocate,
        )
        sub = Instance(
            sub_graph.name,
            sub_graph,
            instance.cluster,
            CostTable(instance.costs.type_names, times, provenance),
            options,
        )
        sub_stage = {r: j for j, r in enumerate(stages)}
        stage_of_sub = np.array(
            [sub_stage[r] for r in before]
            + [sub_stage[int(s)] for s in stage_of[ops]]
            + [sub_stage[r] for r in after],
            dtype=np.int64,
        )
        level = self._coarsen(
            sub, stage_of_sub, set(range(len(before))) | set(range(len(sub_ops) - len(after), len(sub_ops)))
        )
        coarse_stage = np.array([stage_of_sub[m[0]] for m in level.members], dtype=np.int64)
        fixed = {c: int(coarse_stage[c]) for c, m in enumerate(level.members) if sub_ops[m[0]] < 0}
        times_all, _ = self.scorer.stage_times(stage_of, devices)
        own = [
            max(compute[r], fixed_comm[r]) if self.scorer.overlap else compute[r] + fixed_comm[r]
            for r in fixed_id
        ]
        return _Window(
            first,
            last,
            stages,
            level,
            sub_ops,
            fixed,
            tuple(float(fixed_comm[r]) if not inside[r] else 0.0 for r in stages),
            max(own, default=0.0),
            float(times_all[list(stages)].max()),
            Placement(tuple(coarse_stage.tolist()), tuple(int(devices[r]) for r in stages)),
        )

    def _coarsen(self, sub: Instance, stage_of_sub: np.ndarray, fixed: set[int]) -> Coarsening:
        """The exact contractions; then, in a window of more than ``self.window_ops`` ops, each window
        stage keeps a *band* of ops free at each of its ends: its other ops (its core, in the
        graph's topological order) and every op on a path between two of them become one op. A
        core's hull lies inside its stage (stages are monotone along edges), so it is convex and
        the incumbent remains a solution; the core may still move as a whole."""
        level = coarsen_exact(sub)
        count = len(level.members)
        if count <= self.window_ops:
            return level
        stage = np.array([stage_of_sub[m[0]] for m in level.members])
        movable = np.array([m[0] not in fixed for m in level.members])
        window_stages = sorted(set(stage[movable].tolist()))
        band = max(1, self.window_ops // (2 * len(window_stages)))
        edges = level.instance.graph.edges  # sorted by producer: a forward pass sees each op's inputs first
        groups: list[list[int]] = []
        in_core = np.zeros(count, dtype=bool)
        for j in window_stages:
            members = np.flatnonzero((stage == j) & movable)
            if len(members) <= 2 * band + 1:
                continue
            below = np.zeros(count, dtype=bool)
            below[members[band : len(members) - band]] = True
            above = below.copy()
            for u, v in edges:
                below[v] |= below[u]
            for u, v in reversed(edges):
                above[u] |= above[v]
            hull = np.flatnonzero(below & above)
            groups.append(hull.tolist())
            in_core[hull] = True
        groups += [[c] for c in np.flatnonzero(~in_core).tolist()]
        return level.then(groups, exact=False)

    def solve_window(self, window: _Window, devices: np.ndarray) -> tuple[list[int], list[int], bool] | None:
        """CP-SAT on the window: each coarse op's sub-stage, a device of the class each sub-stage
        chose, and whether that is proven optimal for the window (``None``: nothing in time)."""
        sub = window.level.instance
        data = stage_model_data(sub)
        unit = model_unit(data, window.ceiling)
        upper = math.ceil(window.ceiling / unit) + 1
        if self.instance.options.comm_mode is CommMode.ONCE:  # the model may over-estimate (docstring)
            upper = 2 * upper
        lower = min(math.floor(window.floor / unit), upper)
        built = time.perf_counter()
        deadline = min(self.deadline, built + _MAX_WINDOW_SECONDS + 3 * self.work)
        k = data.num_stages
        free = [j for j, r in enumerate(window.stages) if window.first <= r <= window.last]
        pinned = [j for j in range(k) if j not in free]
        allowed = [(window.fixed[c],) if c in window.fixed else free for c in range(len(sub.graph.ops))]
        try:
            model = StageModel(
                data, unit, lower, upper, data.memory_can_bind, deadline, window.fixed_comm, allowed
            )
        except OutOfTime:
            return None
        m = model.model
        for j in pinned:
            m.Add(model.z[j][data.class_of_device(window.hint.devices[j])] == 1)
        held = np.bincount(
            [
                data.class_of_device(int(d))
                for r, d in enumerate(devices)
                if not window.first <= r <= window.last
            ],
            minlength=len(data.classes),
        )
        for c, cls in enumerate(data.classes):
            m.Add(sum(model.z[j][c] for j in free) <= len(cls.devices) - int(held[c]))
        model.hint(window.hint)
        if self.complete_hints:
            model.complete_hint(self.settings, deadline, with_lp=True)
        per_op = (time.perf_counter() - built) / max(len(window.sub_ops), 1)
        self.build_seconds_per_op = max(self.build_seconds_per_op, per_op)
        solver = cp_model.CpSolver()
        solver_parameters(solver, self.settings, deadline, with_lp=True)
        solver.parameters.max_deterministic_time = self.work
        status = solver.Solve(m)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return None
        stage_of = model.stages(solver)
        chosen = [next(c for c in range(len(data.classes)) if solver.Value(model.z[j][c])) for j in range(k)]
        return stage_of, [data.classes[c].devices[0] for c in chosen], status == cp_model.OPTIMAL

    def expand(
        self,
        window: _Window,
        stage_of: np.ndarray,
        devices: np.ndarray,
        solution: tuple[list[int], list[int], bool],
    ) -> tuple[np.ndarray, np.ndarray]:
        """The whole placement with the window's ops and devices replaced by a window solution.

        Each window stage gets a device of the class it chose: its own device when that class
        is its own, else an idle one of the class (devices of a class are interchangeable).
        """
        coarse_stage, representatives, _ = solution
        new_stage = stage_of.copy()
        for c, members in enumerate(window.level.members):
            originals = window.sub_ops[list(members)]
            new_stage[originals[originals >= 0]] = window.stages[coarse_stage[c]]
        new_devices = devices.copy()
        free = [j for j, r in enumerate(window.stages) if window.first <= r <= window.last]
        wanted = {window.stages[j]: self.class_of_device[representatives[j]] for j in free}
        keep = {r for r, c in wanted.items() if self.class_of_device[devices[r]] == c}
        taken = {int(devices[r]) for r in range(len(devices)) if r in keep or r not in wanted}
        for r, c in wanted.items():
            if r in keep:
                continue
            d = next(d for d in self.classes[c].devices if d not in taken)
            new_devices[r] = d
            taken.add(d)
        return new_stage, new_devices

    # -- moves -----------------------------------------------------------------------------------

    def swap_devices(self, stage_of: np.ndarray, devices: np.ndarray, times: np.ndarray) -> np.ndarray | None:
        """The best leximax improvement from giving the bottleneck stage another stage's device
        (the two swap) or an idle device of another class, or ``None``."""
        b = int(np.argmax(times))
        idle = sorted(set(range(len(self.class_of_device))) - {int(d) for d in devices})
        candidates = []
        for r in range(len(devices)):
            if r != b and self.class_of_device[devices[r]] != self.class_of_device[devices[b]]:
                trial = devices.copy()
                trial[b], trial[r] = devices[r], devices[b]
                candidates.append(trial)
        classes = {int(self.class_of_device[d]): d for d in reversed(idle)}
        for c, d in classes.items():
            if c != self.class_of_device[devices[b]]:
                trial = devices.copy()
                trial[b] = d
                candidates.append(trial)
        best, best_times = None, times
        for trial in candidates:
            new_times, valid = self.scorer.stage_times(stage_of, trial)
            if valid and _leximax_better(new_times, best_times):
                best, best_times = trial, new_times
        return best

    def windows_around(self, times: np.ndarray) -> list[tuple[int, int]]:
        """Windows to try, in order: narrowest first, each width around the slowest stages first."""
        count = len(times)
        focus = np.argsort(-times, kind="stable")[: self.focus].tolist()
        found: list[tuple[int, int]] = []
        for width in range(2, min(count, _MAX_WIDTH) + 1):
            for centre in focus:
                starts = range(max(0, centre - width + 1), min(centre, count - width) + 1)
                for a in sorted(starts, key=lambda a: (abs(2 * a + width - 1 - 2 * centre), a)):
                    if (a, a + width - 1) not in found:
                        found.append((a, a + width - 1))
        return found


def polish(
    instance: Instance,
    start: Placement,
    settings: Settings,
    deadline: float,
    scorer: Scorer | None = None,
    escape: Callable[[Placement, float], Placement | None] | None = None,
    stall: Stall | None = None,
    complete_hints: bool = True,
    enough: Callable[[float], bool] | None = None,
) -> PolishReport:
    """Improve ``start`` by large-neighbourhood search until ``deadline`` (``perf_counter`` time)
    or until every window around the slowest stages is proven to hold nothing better.

    ``scorer``: the instance's :class:`~._scoring.Scorer` when the caller has one (saves building
    it again on large graphs). ``escape``: the caller's global move (a placement and a deadline to
    a placement, or ``None``), tried on each new incumbent, first on the start, but never again
    before :data:`_ESCAPE_PAUSE` times its last run has gone to windows; it replaces the
    incumbent when better (Acceptance). Windows only move ops between neighbouring stages:
    on CLIP over 16 V100s at k = 16 the two towers interleaved anew along the incumbent's stages
    (:func:`.tower_split.along`) move every cut at once, 0.3423 ms to 0.3412 in 1.6 s, where
    the windows' next move (to 0.3419) came 72 s later.

    ``stall``: when to stop early once the bottleneck stops falling (:class:`Stall`; a caller
    with a second start to polish). ``complete_hints``: whether each window's CP-SAT search
    starts from the incumbent completed to a full solution of its model, or from the
    incumbent's decisions only (stages and device classes), completed CP-SAT's own way: from a
    start far from any local optimum (the two-tower witness) the partial hint yields other
    solutions of the same bottleneck, whose lower stages the acceptance takes (CLIP over 2 × 8
    A100 at k = 16, 30 s from the witness: 0.30305 ms against 0.30521). ``enough``: whether a
    bottleneck is good enough to stop at (a caller with a gap limit, :func:`good_enough`).
    """
    if len(instance.graph.ops) > _EVALUATE_OPS:  # leave time for the evaluator's final check
        deadline -= len(instance.graph.ops) * _EVALUATE_SECONDS_PER_OP
    search = _Polisher(instance, settings, deadline, scorer, complete_hints)
    stage_of = np.asarray(start.stage_of, dtype=np.int64)
    devices = np.asarray(start.devices, dtype=np.int64)
    times, valid = search.scorer.stage_times(stage_of, devices)
    if not valid or len(devices) < 2:
        return PolishReport(start, False, 0, ())
    initial = times
    falls = [(time.perf_counter(), float(times.max()))]  # when the bottleneck fell, and to what
    escaped, next_escape = False, time.perf_counter()  # escaped from the incumbent; when the next may run
    escapes = 0  # escapes taken

    def accepted(new_stage: np.ndarray, new_devices: np.ndarray, what: str) -> bool:
        nonlocal stage_of, devices, times
        new_times, valid = search.scorer.stage_times(new_stage, new_devices)
        if not (valid and _leximax_better(new_times, times) and _checked(instance, new_stage, new_devices)):
            return False
        if new_times.max() < times.max() * (1 - _RELATIVE):
            falls.append((time.perf_counter(), float(new_times.max())))
        stage_of, devices, times = new_stage, new_devices, new_times
        search.restart()
        settings.report(f"lns: {what}, bottleneck {times.max():.6g} s")
        return True

    stalled: float | None = None  # the gain below which the polish gave up
    while search.remaining() > _MIN_WINDOW_SECONDS:
        if enough is not None and enough(float(times.max())):
            break
        now = time.perf_counter()
        if stall is not None:
            stalled = stall.gives_up(falls, now, float(times.max()))
        if stalled is not None:
            break
        swapped = search.swap_devices(stage_of, devices, times)
        if swapped is not None and accepted(stage_of, swapped, "device swap"):
            escaped = False
            continue
        if escape is not None and not escaped and time.perf_counter() >= next_escape:
            began = time.perf_counter()
            moved = escape(Placement(tuple(stage_of.tolist()), tuple(devices.tolist())), search.deadline)
            escaped = True  # also after a move: the move's result is where the escape would end again
            next_escape = time.perf_counter() + _ESCAPE_PAUSE * (time.perf_counter() - began)
            if moved is not None and len(moved.devices) == len(devices):
                escapes += accepted(np.asarray(moved.stage_of), np.asarray(moved.devices), "escaped")
            continue
        around = [w for w in search.windows_around(times) if w not in search.proven]
        if not around:  # every window around the slowest stages is proven: centre on more stages
            if search.focus < len(devices):
                search.focus *= 2
            elif search.coarse and search.window_ops < _MAX_WINDOW_OPS:  # free twice as many ops
                search.window_ops *= 2
                search.proven -= search.coarse
                search.coarse.clear()
            else:
                break
            continue
        todo = [w for w in around if w not in search.tried]
        if not todo:  # every open window failed at this effort: search them longer
            search.work *= 2
            search.tried.clear()
            continue
        first, last = todo[0]
        sub_problem = search.fingerprint(stage_of, devices, first, last)
        if sub_problem in search.known:  # the same sub-problem, proven for an earlier incumbent
            search.proven.add((first, last))
            if not search.known[sub_problem]:
                search.coarse.add((first, last))
            continue
        if (sub_problem, search.work) in search.failed:  # ... or searched in vain at this effort
            search.tried.add((first, last))
            continue
        if not search.affordable(int(np.isin(stage_of, np.arange(first, last + 1)).sum())):
            break
        window = search.window(stage_of, devices, first, last)
        search.windows += 1
        solution = search.solve_window(window, devices)
        search.tried.add((first, last))
        outcome = "nothing in time" if solution is None else "optimal" if solution[2] else "feasible"
        settings.report(
            f"lns: stages {first}-{last} ({len(window.sub_ops)} ops, {len(window.level.members)} after"
            f" coarsening, effort {search.work:g}): {outcome}"
        )
        if solution is None:
            search.failed.add((sub_problem, search.work))
            continue
        if solution[2]:
            search.proven.add((first, last))
            search.known[sub_problem] = window.level.exact
            if not window.level.exact:
                search.coarse.add((first, last))
        if accepted(*search.expand(window, stage_of, devices, solution), "improved"):
            escaped = False
        elif not solution[2]:
            search.failed.add((sub_problem, search.work))
    placement = Placement(tuple(stage_of.tolist()), tuple(devices.tolist()))
    key = (float(times.max()), float(times.sum()))
    if placement != start and (
        key >= (float(initial.max()), float(initial.sum()))
        or not _checked(instance, stage_of, devices, always=True)
    ):
        placement = start
    improved = placement != start
    summary = f"lns: {search.windows} windows searched, {len(search.proven)} proven locally optimal"
    if stalled is not None and stall:
        gain = "without gain" if not stalled else f"with less than {stalled:.0%} gain"
        summary += f", stopped after {stall.seconds:.3g} s {gain}"
    summary += f", escape moves taken: {escapes}; bottleneck" if escape is not None else "; bottleneck"
    summary += (
        f" {initial.max():.6g} s → {times.max():.6g} s (latency {initial.sum():.6g} s → {times.sum():.6g} s)"
        if improved
        else f" {initial.max():.6g} s not improved"
    )
    settings.report(summary)
    return PolishReport(placement, improved, search.windows, (summary,))


@dataclass(frozen=True)
class Start:
    """A placement to polish, with the :func:`polish` options it is polished with, and
    ``reseed``, added to the caller's seed for the windows' searches: a polish of one start
    under other seeds ends in other local optima (below)."""

    placement: Placement
    escape: Callable[[Placement, float], Placement | None] | None = None
    complete_hints: bool = True
    reseed: int = 0


def polish_together(
    instance: Instance,
    starts: Sequence[Start],
    settings: Settings,
    deadline: float,
    scorer: Scorer | None = None,
    waiting: Sequence[Start] = (),
    stall: Callable[[], Stall] | None = None,
    target: float = 0.0,
) -> list[tuple[Start, PolishReport]]:
    """:func:`polish` of each start (one at least) until ``deadline``, all at once, a thread
    each, the threads sharing ``settings.threads`` (at least one CP-SAT worker each): for a
    caller with more than one thread, so that no start waits for another's share. The windows'
    CP-SAT searches, most of a polish (61% of 20 s on CLIP), let the other threads run.

    ``waiting``: more starts, in turn, each taken by the first thread whose polish ends while
    the rule ``stall()`` (made as a polish begins) would still stop a polish; while any waits, a
    polish gives up under that rule. So more time polishes more starts, where the first ones
    would gain little: the polishes of one placement under one seed end at the same local
    optimum. Starts polished again under other seeds (``Start.reseed``) wait behind the others,
    and while only they wait a polish gives up only once its bottleneck has not fallen at all
    over the rule's time: a polish that still gains a little keeps its time. Once one
    polish reaches a bottleneck of ``target`` (a caller's gap limit; 0: none), all stop.
    Returns each polish run with its start, thread by thread."""
    each = replace(settings, threads=max(1, settings.threads // len(starts)))
    queue, lock = deque(waiting), threading.Lock()
    enough = good_enough(target)

    def pending() -> bool:
        with lock:
            return bool(queue)

    def fresh() -> bool:
        with lock:
            return any(start.reseed == 0 for start in queue)

    def thread(start: Start | None) -> list[tuple[Start, PolishReport]]:
        done = []
        while start is not None:
            rule = (
                None if stall is None or not pending() else replace(stall(), waiting=fresh, reseeded=pending)
            )
            report = polish(
                instance,
                start.placement,
                replace(each, seed=each.seed + start.reseed),
                deadline,
                scorer,
                start.escape,
                rule,
                start.complete_hints,
                enough,
            )
            done.append((start, report))
            with lock:
                latest = deadline - _MIN_WINDOW_SECONDS if stall is None else stall().until
                met = enough is not None and enough(float("inf"))
                start = queue.popleft() if queue and time.perf_counter() < latest and not met else None
        return done

    with ThreadPoolExecutor(max_workers=len(starts)) as pool:
        futures = [pool.submit(thread, start) for start in starts]
        return [polished for future in futures for polished in future.result()]


def good_enough(target: float) -> Callable[[float], bool] | None:
    """A test of :func:`polish`'s bottleneck against ``target`` (``None`` for 0, no target)
    that, once one bottleneck has met it, says so for every later one: polishes that share it
    stop together, and asked of ``inf`` it says whether one has met it."""
    if target <= 0:
        return None
    met = threading.Event()

    def enough(bottleneck: float) -> bool:
        if bottleneck <= target:
            met.set()
        return met.is_set()

    return enough


def _checked(instance: Instance, stage_of: np.ndarray, devices: np.ndarray, *, always: bool = False) -> bool:
    """The independent evaluator accepts the placement (skipped on large graphs unless ``always``)."""
    if len(stage_of) > _EVALUATE_OPS and not always:
        return True
    return evaluate(instance, Placement(tuple(stage_of.tolist()), tuple(devices.tolist()))).valid
