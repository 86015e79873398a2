"""Probes run at once in forked children, and the bisection that rounds them up."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from partition.chain_bound import _RELATIVE_GAP, _narrowed
from partition.forked_probes import forked_probes

THRESHOLD = 0.7314159  # the least value the tests' relaxation admits


def _admits(value: float) -> bool:
    return value >= THRESHOLD


def test_the_probes_run_at_once_in_forked_children() -> None:
    # Each probe waits at a barrier for the other: probed one after the other they would
    # break it (10 s) and the pool would raise. The children hold the parent's closure as it
    # was at the fork, and answer in the values' order.
    parent = os.getpid()
    both = multiprocessing.get_context("fork").Barrier(2, timeout=10)

    def in_a_child(value: float) -> bool:
        both.wait()
        return os.getpid() != parent and _admits(value)

    with forked_probes(in_a_child, 2) as (width, test):
        assert width == 2
        assert test([0.9, 0.5]) == [True, False]


def test_one_worker_or_no_default_fork_probes_in_the_callers_process(monkeypatch) -> None:
    parent = os.getpid()

    def in_the_parent(value: float) -> bool:
        return os.getpid() == parent and _admits(value)

    with forked_probes(in_the_parent, 1) as (width, test):
        assert width == 1 and test([0.9]) == [True]
    # macOS lists fork among its start methods, but its default is spawn
    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: ["spawn", "fork", "forkserver"])
    with forked_probes(in_the_parent, 2) as (width, test):
        assert width == 1 and test([0.9]) == [True]


@pytest.mark.parametrize("upper", [None, 1.0])
def test_probing_two_values_a_round_narrows_to_the_same_threshold_in_fewer_rounds(upper) -> None:
    # The largest rejected value and the least admitted one bracket the threshold each round:
    # two values a round split it in three, so the bracket closes in fewer rounds; with one
    # value a round the probes are the bisection's before rounds, one by one.
    rounds: dict[int, list[list[float]]] = {1: [], 2: []}

    def counted(width: int):
        def test(values):
            rounds[width].append(list(values))
            return [_admits(v) for v in values]

        return width, test

    found = {width: _narrowed(_admits, 0.5, 1.0, None, upper, 0.0, many=counted(width)) for width in (1, 2)}
    for lower in found.values():
        assert THRESHOLD * (1 - 2 * _RELATIVE_GAP) < lower < THRESHOLD
    assert len(rounds[2]) < len(rounds[1])
    assert all(len(values) == 2 for values in rounds[2][-3:])  # the gallop's last step may probe one
    assert [value for values in rounds[1] for value in values] == _bisection(0.5, 1.0, upper)
    if upper is not None:  # galloping from 0.5: 0.5005, 0.5015, 0.5035 … two steps a round
        assert rounds[2][0] == pytest.approx([0.5005, 0.5005 * 1.002])
        assert [values[0] for values in rounds[1][:2]] == rounds[2][0]


def _bisection(lower: float, high: float, upper: float | None) -> list[float]:
    """The values the one-at-a-time bisection probed before rounds (session 41's ``_narrowed``
    with share 0): from a known ``lower`` below ``upper`` a gallop of 1e-3, doubling, until a
    value is admitted or the next passes ``high``, then the midpoints."""
    probed, step = [], 1e-3 if upper is not None else 0.0
    while high - lower > _RELATIVE_GAP * high:
        galloping = step > 0 and lower * (1 + step) < high
        middle = lower * (1 + step) if galloping else (lower + high) / 2
        probed.append(middle)
        if _admits(middle):
            high, step = middle, 0.0
        else:
            lower, step = middle, 2 * step if galloping else 0.0
    return probed


def test_a_round_that_contradicts_itself_keeps_the_rejected_value() -> None:
    # A probe giving up at its deadline admits its value, maybe one below a value another
    # probe rejects: the bracket then closes on the rejected value, which stays proven.
    def contradictory(values):
        return [True, False]

    assert _narrowed(_admits, 0.5, 1.0, None, many=(2, contradictory)) == pytest.approx(5 / 6)
