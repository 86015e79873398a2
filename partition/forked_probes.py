"""Probes of a relaxation run several at once, each in a forked process.

A bisection's probes are independent once their values are chosen, and a relaxation's
feasibility test is array code that holds the interpreter most of the time: two threads ran
two probes of the two-tower pass with group changes (CLIP on four types at k = 8) in 9.5 s
against 12.6 s one after the other, two forked processes in 6.8 s. Forked children inherit the
relaxation's tables as they are, so nothing but the probed values and the answers is pickled.
"""

from __future__ import annotations

import multiprocessing
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

Feasible = Callable[[float], bool]
# how many values a round probes at once, and the test of a round's values (answers in order)
Probes = tuple[int, Callable[[Sequence[float]], list[bool]]]

# The test a forked pool's children run: set before the fork, so that each child holds it
# (a closure over tables of hundreds of megabytes, which pickling would copy per probe).
_inherited: Feasible | None = None


def _inherited_probe(value: float) -> bool:
    assert _inherited is not None, "probed outside forked_probes"
    return _inherited(value)


def one_at_a_time(feasible: Feasible) -> Probes:
    """``feasible`` as :data:`Probes` of one value a round, in the caller's process."""
    return 1, lambda values: [feasible(value) for value in values]


@contextmanager
def forked_probes(feasible: Feasible, workers: int) -> Iterator[Probes]:
    """``feasible`` of ``workers`` values at once, each in a forked process; or
    :func:`one_at_a_time` where one worker is asked for or forking is not the platform's
    default way to start a process (macOS, where system libraries may not survive a fork, and
    Windows). The children end with the context."""
    global _inherited
    if workers < 2 or multiprocessing.get_all_start_methods()[0] != "fork":
        yield one_at_a_time(feasible)
        return
    # a child flushes its copy of the parent's buffers when it ends: empty them first
    sys.stdout.flush()
    sys.stderr.flush()
    _inherited = feasible
    try:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            yield workers, lambda values: pool.map(_inherited_probe, values, chunksize=1)
    finally:
        _inherited = None
