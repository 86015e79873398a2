"""The independent evaluator: checks a placement and computes every figure of the formulation.

It shares no code with the solvers on purpose: it walks ops and tensors one at a time, the
slow obvious way, so that a solver's mistake cannot hide in a shared helper.

Activation memory of a stage (inference, one micro-batch in flight) is estimated as the bytes
of the distinct tensors it receives plus those it sends (buffers held for the transfer) plus
the largest working set (bytes read and written) of any one of its ops.
"""

from __future__ import annotations

from .instance import CommMode, Instance
from .placement import Evaluation, Placement, StageFigures

_TOLERANCE = 1e-9


def evaluate(instance: Instance, placement: Placement) -> Evaluation:
    """Validate ``placement`` against ``instance`` and compute its per-stage figures."""
    graph, cluster, options = instance.graph, instance.cluster, instance.options
    violations: list[str] = []
    num_ops, num_stages = len(graph.ops), placement.num_stages

    if len(placement.stage_of) != num_ops:
        return Evaluation((), (f"placement assigns {len(placement.stage_of)} ops, the graph has {num_ops}",))
    if num_stages == 0:
        return Evaluation((), ("placement has no stages",))
    bad = [v for v, s in enumerate(placement.stage_of) if not 0 <= s < num_stages]
    if bad:
        return Evaluation(
            (),
            (
                f"op {graph.ops[bad[0]].id!r} is placed on stage {placement.stage_of[bad[0]]},"
                f" outside 0..{num_stages - 1}",
            ),
        )
    bad_devices = [d for d in placement.devices if not 0 <= d < len(cluster.devices)]
    if bad_devices:
        return Evaluation((), (f"device index {bad_devices[0]} is not in the cluster",))

    if num_stages > options.stages:
        violations.append(f"{num_stages} stages used, at most {options.stages} allowed")
    if options.exact_stages and num_stages != options.stages:
        violations.append(f"{num_stages} stages used, exactly {options.stages} required")
    if len(set(placement.devices)) != num_stages:
        violations.append("two stages share a device")
    members: list[list[int]] = [[] for _ in range(num_stages)]
    for v, s in enumerate(placement.stage_of):
        members[s].append(v)
    for s, ops in enumerate(members):
        if not ops:
            violations.append(f"stage {s} has no ops")
    for tensor in graph.tensors:
        if tensor.producer is None:
            continue
        source = placement.stage_of[graph.index[tensor.producer]]
        for consumer in tensor.consumers:
            if placement.stage_of[graph.index[consumer]] < source:
                violations.append(
                    f"edge {tensor.producer!r} -> {consumer!r} goes from stage {source}"
                    f" back to stage {placement.stage_of[graph.index[consumer]]}"
                )
    for group in options.colocate:
        if len({placement.stage_of[graph.index[op_id]] for op_id in group}) > 1:
            violations.append(f"colocation group {list(group)} is split across stages")

    compute = [0.0] * num_stages
    for v, s in enumerate(placement.stage_of):
        type_column = cluster.type_index[placement.devices[s]]
        time = float(instance.costs.times[v, type_column])
        if time == float("inf"):
            violations.append(
                f"op {graph.ops[v].id!r} cannot run on {cluster.devices[placement.devices[s]].type}"
            )
        compute[s] += time

    send = [0.0] * num_stages
    recv = [0.0] * num_stages
    buffered = [0.0] * num_stages
    for tensor in graph.tensors:
        if tensor.producer is None:
            continue
        source = placement.stage_of[graph.index[tensor.producer]]
        targets = sorted({placement.stage_of[graph.index[c]] for c in tensor.consumers} - {source})
        if not targets:
            continue
        costs = [
            instance.transfer_time(placement.devices[source], placement.devices[t], tensor.bytes)
            for t in targets
        ]
        send[source] += max(costs) if options.comm_mode is CommMode.ONCE else sum(costs)
        buffered[source] += tensor.bytes
        for target, cost in zip(targets, costs, strict=True):
            recv[target] += cost
            buffered[target] += tensor.bytes

    stages = []
    for s, ops in enumerate(members):
        used_weights = {w for v in ops for w in graph.ops[v].weights}
        params = sum(graph.weights[w] for w in used_weights)
        working = max((graph.ops[v].bytes_read + graph.ops[v].bytes_written for v in ops), default=0.0)
        comm = send[s] + recv[s]
        time = max(compute[s], comm) if options.overlap else compute[s] + comm
        capacity = cluster.memory(placement.devices[s])
        figures = StageFigures(compute[s], send[s], recv[s], time, params, buffered[s] + working, capacity)
        if figures.memory > capacity * (1 + _TOLERANCE):
            violations.append(
                f"stage {s} needs {figures.memory / 1e9:.3f} GB on"
                f" {cluster.devices[placement.devices[s]].id}, which has {capacity / 1e9:.3f} GB"
            )
        stages.append(figures)
    return Evaluation(tuple(stages), tuple(violations))
