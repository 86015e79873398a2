"""A simulated pipeline schedule of a placement, and its Chrome trace.

The simulation plays the formulation's accounting forward in time, for pictures and traces
only (no solver or figure depends on it). Micro-batch ``m`` enters stage ``s`` when stage
``s - 1`` has finished it and stage ``s`` has finished micro-batch ``m - 1``:

    start(s, m) = max(end(s - 1, m), end(s, m - 1)),   end(s, m) = start(s, m) + time(s)

Without overlap a stage receives, computes, then sends, one after another; with ``--overlap``
communication runs beside compute and the stage takes the longer of the two. After the
pipeline fills, one micro-batch leaves every bottleneck-time, which is what the objective
measures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .placement_view import PlacementView

COMPUTE, RECV, SEND = "compute", "recv", "send"


@dataclass(frozen=True)
class Segment:
    stage: int
    micro_batch: int
    kind: str  # compute, recv or send
    start: float  # seconds
    end: float


def simulate(view: PlacementView, micro_batches: int) -> tuple[Segment, ...]:
    """Every stage's receive, compute and send segments for ``micro_batches`` micro-batches."""
    segments = []
    finished = [0.0] * len(view.stages)  # end of the previous micro-batch on each stage
    for m in range(micro_batches):
        ready = 0.0  # when the previous stage finished micro-batch m
        for s, stage in enumerate(view.stages):
            start = max(ready, finished[s])
            if view.overlap:
                parts = [(COMPUTE, start, stage.compute_s), (RECV, start, stage.recv_s)]
                parts.append((SEND, start + stage.recv_s, stage.send_s))
            else:
                parts = [
                    (RECV, start, stage.recv_s),
                    (COMPUTE, start + stage.recv_s, stage.compute_s),
                    (SEND, start + stage.recv_s + stage.compute_s, stage.send_s),
                ]
            segments.extend(Segment(s, m, kind, t, t + d) for kind, t, d in parts if d > 0)
            finished[s] = ready = start + stage.time_s
    return tuple(segments)


def chrome_trace(view: PlacementView, segments: tuple[Segment, ...]) -> dict[str, Any]:
    """The schedule in the Chrome trace event format (``chrome://tracing``, Perfetto).

    One thread per stage (named after its device); communication goes on a second thread of
    the stage's process so it can overlap compute without breaking the nesting rules.
    """
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": 0, "args": {"name": view.where}}
    ]
    for stage in view.stages:
        for tid, lane in ((2 * stage.stage, "compute"), (2 * stage.stage + 1, "communication")):
            events.append(
                {
                    "name": "thread_name",
                    "ph": "M",
                    "pid": 0,
                    "tid": tid,
                    "args": {"name": f"stage {stage.stage} {stage.device} {lane}"},
                }
            )
            events.append(
                {"name": "thread_sort_index", "ph": "M", "pid": 0, "tid": tid, "args": {"sort_index": tid}}
            )
    for segment in segments:
        events.append(
            {
                "name": f"{segment.kind} mb{segment.micro_batch}",
                "cat": segment.kind,
                "ph": "X",
                "pid": 0,
                "tid": 2 * segment.stage + (segment.kind != COMPUTE),
                "ts": segment.start * 1e6,
                "dur": (segment.end - segment.start) * 1e6,
                "args": {"stage": segment.stage, "micro_batch": segment.micro_batch},
            }
        )
    return {"traceEvents": events, "displayTimeUnit": "ms"}
