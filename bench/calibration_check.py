"""Calibration check: is the calibrated roofline within 20% of measured on every zoo model?

Profiles every runnable model of ``models/`` on this CPU with ``partition profile`` (one
thread, ``--runs`` measured runs after ``--warmup``; symbolic dims pinned to the manifest's
reference inputs), fits ONE calibrated roofline model on all the tables
(``partition.calibrate.fit``), and prints per model the measured whole-model time (median of
the profiled runs), the roofline's whole-model time with the default factors, calibrated on
all models, and calibrated leave-one-model-out (fitted on the other models only: the honest
figure for a model the calibration has not seen), each with its error, and the per-op median
and 90th-percentile absolute relative error before and after. The sum of the table's per-op
medians is shown against its whole-model median (what the table leaves out: dispatch between
kernels, and under load the preemption of long runs). A model whose weights alone
exceed this machine's available memory is skipped with the reason.

The machine may be shared: each row shows the load average before and after its profile and
the whole run's wall time over the profiling thread's CPU time (1.0 on an idle core; 2 means
half the wall time was spent waiting for a core). Kernels longer than a scheduler slice are
slowed by load more than short ones, so only rows near 1.0 test the model. On a loaded machine,
``--load-corrected`` scales each model's times by its CPU/wall ratio: exact for kernels much
longer than a scheduler slice (the matmuls that dominate these models), too low for short ones;
a rough check of the model apart from the load, not a measurement.

    .venv/bin/python bench/calibration_check.py [--runs 5] [--out /tmp/calibration] [--reuse] [MODEL ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from partition.api import load_graph  # noqa: E402
from partition.calibrate import Calibrated, Errors, calibrated_json, errors, fit  # noqa: E402
from partition.costs import RooflineModel  # noqa: E402
from partition.graph import OpGraph  # noqa: E402
from partition.jsonio import dumps  # noqa: E402
from partition.measured import MeasuredTable, OpTiming, load_cost_table  # noqa: E402

TARGET = 0.20


@dataclass(frozen=True)
class Profiled:
    name: str
    graph: OpGraph
    table: MeasuredTable
    load: tuple[float, float]  # 1-min load average before and after profiling

    @property
    def contention(self) -> float | None:
        """Whole-run wall time over the profiling thread's CPU time: 1 on an idle core."""
        cpu = self.table.notes.get("whole_model_cpu_s")
        return self.table.whole_model.median / cpu if cpu else None


def _available_memory() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return float(line.split()[1]) * 1024
    return float("inf")


def _runnable(names: list[str], manifest: dict) -> tuple[list[str], list[tuple[str, str]]]:
    """Models to profile and ``(model, reason)`` for those skipped."""
    available = _available_memory()
    runnable, skipped = [], []
    for name in names:
        weights = manifest.get(name, {}).get("parameter_bytes", 0)
        if weights > available:
            skipped.append(
                (
                    name,
                    f"weights alone {weights / 2**30:.1f} GiB > {available / 2**30:.1f} GiB available memory",
                )
            )
        else:
            runnable.append(name)
    return runnable, skipped


def _profile(name: str, dims: dict[str, int], path: Path, runs: int, warmup: int, reuse: bool) -> Profiled:
    model = ROOT / "models" / f"{name}.onnx"
    graph = load_graph(model, dims=dims)
    if reuse and path.is_file():
        return Profiled(name, graph, load_cost_table(path), (float("nan"),) * 2)
    command = [sys.executable, "-m", "partition", "profile", str(model), "--runs", str(runs)]
    command += ["--warmup", str(warmup), "-o", str(path), "--force", "--quiet"]
    command += [f"--dim={k}={v}" for k, v in dims.items()]
    before = os.getloadavg()[0]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return Profiled(name, graph, load_cost_table(path), (before, os.getloadavg()[0]))


def _load_corrected(p: Profiled) -> Profiled:
    """Every time of ``p`` scaled by its profile's CPU / wall ratio (module docstring)."""
    ratio = 1 / p.contention if p.contention else 1.0

    def scaled(t: OpTiming) -> OpTiming:
        mean = None if t.mean is None else t.mean * ratio
        return OpTiming(t.median * ratio, t.low * ratio, t.high * ratio, t.runs, mean)

    table = p.table
    assert table.whole_model is not None
    whole, ops = scaled(table.whole_model), {k: scaled(t) for k, t in table.ops.items()}
    notes = {**table.notes, "whole_model_cpu_s": whole.median}  # now wall = CPU: contention 1.0
    return replace(p, table=replace(table, ops=ops, whole_model=whole, notes=notes))


def _whole(e: Errors, measured: float) -> tuple[float, float]:
    """Predicted whole-model seconds and its error against the measured run."""
    assert e.whole_run is not None
    return measured * (1 + e.whole_run), e.whole_run


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("models", nargs="*", help="zoo model names (default: every models/*.onnx)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("/tmp/calibration"))
    parser.add_argument("--reuse", action="store_true", help="reuse cost tables already in --out")
    parser.add_argument(
        "--load-corrected",
        action="store_true",
        help="scale each model's times by its CPU/wall ratio (approximate; see the module docstring)",
    )
    args = parser.parse_args()
    manifest = json.loads((ROOT / "models" / "manifest.json").read_text())
    names = args.models or sorted(p.stem for p in (ROOT / "models").glob("*.onnx"))
    runnable, skipped = _runnable(names, manifest)
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    for name, reason in skipped:
        print(f"skipped {name}: {reason}")
    profiled = []
    for name in runnable:
        dims = manifest.get(name, {}).get("dims") or {}
        print(f"profiling {name} ...", file=sys.stderr, flush=True)
        profiled.append(_profile(name, dims, args.out / f"{name}.json", args.runs, args.warmup, args.reuse))
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    if args.load_corrected:
        profiled = [_load_corrected(p) for p in profiled]
        print("times scaled by each model's CPU/wall ratio (--load-corrected)")

    device = profiled[0].table.device
    pairs = [(p.graph, p.table) for p in profiled]
    started = time.perf_counter()
    everything = fit(pairs, device)
    print(f"fit on {len(pairs)} models: {time.perf_counter() - started:.1f} s", file=sys.stderr)
    default = RooflineModel()
    header = (
        "| model | ops | load | wall/CPU | measured ms | Σ op medians | roofline ms (err)"
        " | calibrated ms (err) | leave-one-out ms (err)"
        " | op median err before → after (LOO) | op p90 err before → after (LOO) |"
    )
    print(header)
    print("|" + "---|" * header.count(" | ") + "---|")
    report = {}
    for p in profiled:
        others = fit([(q.graph, q.table) for q in profiled if q is not p], device)
        measured = p.table.whole_model.median
        before, after, held = (errors(p.graph, p.table, m, device) for m in (default, everything, others))
        cells = [f"{t * 1e3:.1f} ({e:+.1%})" for t, e in (_whole(x, measured) for x in (before, after, held))]
        share = "–" if p.contention is None else f"{p.contention:.2f}"
        op_sum = sum(t.median for t in p.table.ops.values())  # the table's sum against its whole run
        load = f"{p.load[0]:.1f}–{p.load[1]:.1f}"
        print(
            f"| {p.name} | {len(p.graph.ops)} | {load} | {share} | {measured * 1e3:.1f}"
            f" | {op_sum * 1e3:.1f} ({op_sum / measured - 1:+.1%}) | {' | '.join(cells)}"
            f" | {before.median:.0%} → {after.median:.0%} ({held.median:.0%})"
            f" | {before.p90:.0%} → {after.p90:.0%} ({held.p90:.0%}) |"
        )
        report[p.name] = {
            "measured_s": measured,
            "load": p.load,
            "wall_over_cpu": p.contention,
            "op_median_sum_s": op_sum,
            **{k: vars(e) for k, e in (("before", before), ("after", after), ("leave_one_out", held))},
        }
    missed = [n for n, r in report.items() if abs(r["after"]["whole_run"]) > TARGET]
    held_missed = [n for n, r in report.items() if abs(r["leave_one_out"]["whole_run"]) > TARGET]
    print(f"\nwithin {TARGET:.0%} after calibration: {len(report) - len(missed)}/{len(report)}", end="")
    print(f" (missed: {', '.join(missed) or 'none'}); leave-one-model-out: {len(report) - len(held_missed)}"
          f"/{len(report)} (missed: {', '.join(held_missed) or 'none'})")  # fmt: skip
    factors = ", ".join(f"{c.value} {e[0]:.3g}/{e[1]:.3g}" for c, e in everything.efficiency.items())
    print(
        f"calibrated on all: launch {everything.launch_overhead * 1e6:.3g} µs, dispatch"
        f" {everything.dispatch_overhead * 1e6:.3g} µs per op; (compute/memory) efficiency: {factors}"
    )
    (args.out / "calibrated.json").write_text(dumps(calibrated_json(Calibrated(device, everything), report)))
    print(f"calibrated model and errors: {args.out / 'calibrated.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
