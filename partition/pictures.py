"""Pictures of a placement: a PNG of stage figures and the pipeline, and a Graphviz op graph.

The PNG has three panels, so a reader sees at once *why* the bottleneck is what it is:

- stage times, stacked compute / receive / send (side by side with ``--overlap``, where
  stage time is the larger of compute and communication), coloured by device type, with the
  bottleneck and the proven lower bound as horizontal lines;
- memory used against capacity per stage (log scale: weights of a small model and an 80 GB
  capacity must both be visible);
- the simulated pipeline (:mod:`partition.schedule`) for a few micro-batches, as a Gantt chart.

matplotlib is imported here only, with the non-interactive Agg backend (no display needed).
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence

from .instance import Instance
from .placement import Placement
from .placement_view import PlacementView
from .schedule import COMPUTE, RECV, SEND, simulate

# Colour-blind-safe palette (Okabe–Ito), then greys: device types in order of appearance.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#999999")
# Micro-batches in the timeline: ColorBrewer Pastel1, distinct from the device-type colours.
MICRO_BATCH_PALETTE = ("#FBB4AE", "#B3CDE3", "#CCEBC5", "#DECBE4", "#FED9A6", "#FFFFCC", "#E5D8BD", "#FDDAEC")
_HATCH = {RECV: "..", SEND: "//"}


def _type_colours(view: PlacementView) -> dict[str, str]:
    types = list(dict.fromkeys(s.device_type for s in view.stages))
    return {t: PALETTE[i % len(PALETTE)] for i, t in enumerate(types)}


def render_png(view: PlacementView, *, micro_batches: int = 4, dpi: int = 100) -> bytes:
    """The placement picture as PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    colours = _type_colours(view)
    stages = view.stages
    ms = 1e3
    figure = Figure(figsize=(12, 7.5), dpi=dpi, layout="constrained")
    grid = figure.add_gridspec(2, 2, height_ratios=(1, 1), width_ratios=(1.6, 1))
    times, memory, gantt = (
        figure.add_subplot(grid[0, 0]),
        figure.add_subplot(grid[0, 1]),
        figure.add_subplot(grid[1, :]),
    )
    labels = [f"s{s.stage}\n{s.device_type}" for s in stages]
    x = list(range(len(stages)))

    width = 0.4 if view.overlap else 0.7
    for i, stage in enumerate(stages):
        colour = colours[stage.device_type]
        edge = "#C00000" if math.isclose(stage.time_s, view.bottleneck_s, rel_tol=1e-9) else "black"
        left = i - width / 2 if view.overlap else i
        times.bar(left, stage.compute_s * ms, width, color=colour, edgecolor=edge, linewidth=1.5)
        base = 0.0 if view.overlap else stage.compute_s
        at = i + width / 2 if view.overlap else i
        for kind, value in ((RECV, stage.recv_s), (SEND, stage.send_s)):
            times.bar(at, value * ms, width, bottom=base * ms, color=colour, alpha=0.45, hatch=_HATCH[kind],
                      edgecolor=edge, linewidth=1.5)  # fmt: skip
            base += value
    times.axhline(view.bottleneck_s * ms, color="#C00000", linestyle="--", linewidth=1.2)
    if view.lower_bound_s > 0:
        times.axhline(view.lower_bound_s * ms, color="black", linestyle=":", linewidth=1.2)
    gap = f", gap {view.bottleneck_s / view.lower_bound_s - 1:.1%}" if view.lower_bound_s > 0 else ""
    times.set_title(
        f"stage time: bottleneck {view.bottleneck_s * ms:.4g} ms,"
        f" lower bound {view.lower_bound_s * ms:.4g} ms{gap}",
        fontsize=10,
    )
    times.set_xticks(x, labels, fontsize=8)
    times.set_ylabel("ms per micro-batch")
    legend = [Patch(facecolor=c, label=t) for t, c in colours.items()]
    legend += [
        Patch(facecolor="white", edgecolor="black", hatch=_HATCH[RECV], label="receive"),
        Patch(facecolor="white", edgecolor="black", hatch=_HATCH[SEND], label="send"),
        matplotlib.lines.Line2D([], [], color="#C00000", linestyle="--", label="bottleneck"),
        matplotlib.lines.Line2D([], [], color="black", linestyle=":", label="lower bound"),
    ]
    times.legend(handles=legend, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)

    gb = 1e9
    for i, stage in enumerate(stages):
        memory.bar(
            i, max(stage.memory_bytes, 1.0) / gb, 0.6, color=colours[stage.device_type], edgecolor="black"
        )
        memory.plot(
            [i - 0.35, i + 0.35], [stage.memory_capacity_bytes / gb] * 2, color="black", linewidth=2.5
        )
    memory.set_yscale("log")
    memory.set_xticks(x, [f"s{s.stage}" for s in stages], fontsize=8)
    memory.set_ylabel("GB (log scale)")
    memory.set_title("memory used (bars) vs capacity (black lines)", fontsize=10)

    schedule = simulate(view, micro_batches)
    mb_colours = [MICRO_BATCH_PALETTE[m % len(MICRO_BATCH_PALETTE)] for m in range(micro_batches)]
    for segment in schedule:
        lane = len(stages) - 1 - segment.stage
        if not view.overlap:
            offset, height = -0.35, 0.7
        else:  # compute above, communication below, in the same lane
            offset, height = (-0.05, 0.4) if segment.kind == COMPUTE else (-0.35, 0.3)
        gantt.broken_barh(
            [(segment.start * ms, (segment.end - segment.start) * ms)],
            (lane + offset, height),
            facecolors=mb_colours[segment.micro_batch] if segment.kind == COMPUTE else "#DDDDDD",
            edgecolors="black",
            linewidth=0.5,
            hatch=_HATCH.get(segment.kind),
        )
        if segment.kind == COMPUTE:
            middle = ((segment.start + segment.end) / 2 * ms, lane + offset + height / 2)
            gantt.text(*middle, str(segment.micro_batch), ha="center", va="center", fontsize=7)
    gantt.set_yticks(range(len(stages)), [f"s{s.stage} {s.device}" for s in reversed(stages)], fontsize=8)
    gantt.set_xlabel("ms")
    gantt.set_title(
        f"simulated pipeline, {micro_batches} micro-batches (numbers; grey = receive .. / send //):"
        f" one leaves every {view.bottleneck_s * ms:.4g} ms once full",
        fontsize=10,
    )
    figure.suptitle(
        f"{view.instance.get('name', '?')} on {view.instance.get('cluster', '?')}: {len(stages)} stages,"
        f" solver {view.solver}, {view.status}",
        fontsize=11,
    )
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def _quote(*lines: str) -> str:
    """A DOT string literal of ``lines`` joined by DOT's own line breaks."""
    return '"' + "\\n".join(line.replace("\\", "\\\\").replace('"', '\\"') for line in lines) + '"'


def op_graph_dot(instance: Instance, placement: Placement, devices: Sequence[str] = ()) -> str:
    """The op graph in Graphviz DOT, one cluster box and one colour per stage.

    Edges between stages are bold and labelled with the megabytes they carry.
    """
    graph = instance.graph
    lines = [
        f"digraph {_quote(instance.name)} {{",
        '  graph [rankdir=TB, fontname="Helvetica"];',
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=9];',
    ]
    members: list[list[int]] = [[] for _ in placement.devices]
    for v, s in enumerate(placement.stage_of):
        members[s].append(v)
    for s, ops in enumerate(members):
        device = devices[s] if s < len(devices) else instance.cluster.devices[placement.devices[s]].id
        colour = PALETTE[s % len(PALETTE)]
        lines.append(f"  subgraph cluster_{s} {{")
        lines.append(f"    label={_quote(f'stage {s}: {device}')}; color={_quote(colour)};")
        for v in ops:
            op = graph.ops[v]
            lines.append(
                f"    {_quote(op.id)} [label={_quote(op.id, op.op_type)}, fillcolor={_quote(colour + '55')}];"
            )
        lines.append("  }")
    for tensor in graph.tensors:
        if tensor.producer is None:
            continue
        source = placement.stage_of[graph.index[tensor.producer]]
        for consumer in tensor.consumers:
            if placement.stage_of[graph.index[consumer]] != source:
                label = f"{tensor.bytes / 1e6:.3g} MB"
                lines.append(
                    f"  {_quote(tensor.producer)} -> {_quote(consumer)} [penwidth=2, label={_quote(label)}];"
                )
            else:
                lines.append(f"  {_quote(tensor.producer)} -> {_quote(consumer)};")
    lines.append("}")
    return "\n".join(lines) + "\n"
