"""Medians, percentiles, ratios and interleaved rounds: the arithmetic of every figure.

A figure is a ratio of a subject to a baseline measured in the same run. Rounds
alternate the order (subject first, then baseline first, ...) so a drift in
the machine's load lands on both sides, and the figure is the median of the
per-round ratios.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of nothing")
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0-100), linearly interpolated between closest ranks."""
    if not values:
        raise ValueError("percentile of nothing")
    if not 0 <= p <= 100:
        raise ValueError("p must be within 0..100")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low = math.floor(rank)
    high = math.ceil(rank)
    if low == high:
        return ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def ratio(subject: float, baseline: float) -> float:
    if baseline == 0:
        return math.inf if subject > 0 else math.nan
    return subject / baseline


@dataclass(frozen=True)
class Paired:
    """Per-round values of a subject and its baseline, measured alternately."""

    subject: tuple[float, ...]
    baseline: tuple[float, ...]

    @property
    def ratios(self) -> tuple[float, ...]:
        return tuple(ratio(s, b) for s, b in zip(self.subject, self.baseline, strict=True))

    @property
    def ratio(self) -> float:
        """The figure: the median of the per-round ratios."""
        return median(self.ratios)

    @property
    def subject_median(self) -> float:
        return median(self.subject)

    @property
    def baseline_median(self) -> float:
        return median(self.baseline)


def interleave(rounds: int, subject: Callable[[], float], baseline: Callable[[], float]) -> Paired:
    """Run ``rounds`` rounds, alternating which side goes first."""
    if rounds < 1:
        raise ValueError("at least one round")
    subjects: list[float] = []
    baselines: list[float] = []
    for index in range(rounds):
        if index % 2 == 0:
            subjects.append(subject())
            baselines.append(baseline())
        else:
            baselines.append(baseline())
            subjects.append(subject())
    return Paired(tuple(subjects), tuple(baselines))


async def interleave_async(
    rounds: int,
    subject: Callable[[], Awaitable[float]],
    baseline: Callable[[], Awaitable[float]],
) -> Paired:
    """``interleave`` for measurements that are coroutines."""
    if rounds < 1:
        raise ValueError("at least one round")
    subjects: list[float] = []
    baselines: list[float] = []
    for index in range(rounds):
        if index % 2 == 0:
            subjects.append(await subject())
            baselines.append(await baseline())
        else:
            baselines.append(await baseline())
            subjects.append(await subject())
    return Paired(tuple(subjects), tuple(baselines))


class Stopwatch:
    """Elapsed seconds on the monotonic performance counter."""

    def __init__(self) -> None:
        self.started = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.started


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else math.inf
