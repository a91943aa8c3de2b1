"""How many inferences one AI worker runs at once (PROD-003, ADR 0044). Pure rules, no I/O.

Two rules live here, so the next machine re-decides with the same arithmetic:

* ``decide(cells)`` turns the PROD-003 benchmark's cells (``benchmarks.prod003``:
  worker concurrency x llama-server slots, a queue of analyses each) into the
  default: keep 1, raise to N, or follow the local model server's slot count.
* ``startup_concurrency(...)`` is what a worker runs at start-up under the
  setting ``OPS_WORKER_CONCURRENCY`` (0: follow the server's slot count, read
  from llama-server's ``GET /props`` ``total_slots`` or the length of
  ``GET /slots``; ``slots_from_props`` / ``slots_from_slots`` read them).

Why a rule and not a number: the answer depends on the machine (cores, the
model, how llama.cpp batches parallel slots), so the figure that decides is the
benchmark's, and the rule says how the figure decides.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

FOLLOW_SERVER_SLOTS = 0
"""``OPS_WORKER_CONCURRENCY=0``: run as many inferences as the local server has slots."""

FOLLOW_BOUND = 4
"""The most inferences a worker following the server's slot count runs at once, whatever
the server says: the largest slot count the benchmark measured (a server started with
``--parallel 64`` on a small machine would otherwise be given 64 answers at once, each
streaming at a 64th of the speed a user waits on)."""

MIN_GAIN = 0.15
"""A higher concurrency is worth it when it brings at least 15 % more analyses a minute
than the lower one chosen so far: less is within the noise of a shared machine, and
each extra inference in flight holds a lease and slows every answer's first token."""

LATENCY_TOLERANCE = 0.10
"""...and when the p95 time from the click to the result is at most 10 % worse than at
concurrency 1 on the same server (more throughput bought with a worse tail is not taken)."""


@dataclass(frozen=True)
class Cell:
    """One benchmark cell: ``concurrency`` inferences a worker runs at once against a
    server with ``slots`` slots, a queue of ``analyses`` admitted at once."""

    concurrency: int
    slots: int
    analyses: int
    failures: int  # analyses that did not end succeeded with their note
    per_minute: float  # succeeded analyses per minute of the queue's wall time
    click_to_result_p95: float  # seconds, the admission POST to the result

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.slots < 1:
            raise ValueError("a cell's concurrency and slots are at least 1")
        if not 0 <= self.failures <= self.analyses:
            raise ValueError("a cell's failures are between 0 and its analyses")


class Outcome(StrEnum):
    KEEP_ONE = "keep_one"
    RAISE = "raise"
    FOLLOW_SLOTS = "follow_slots"


@dataclass(frozen=True)
class Decision:
    outcome: Outcome
    # The default of OPS_WORKER_CONCURRENCY: 1, N, or FOLLOW_SERVER_SLOTS.
    concurrency: int
    # With FOLLOW_SLOTS: the bound it follows the server to (FOLLOW_BOUND is set from it).
    bound: int
    # Per slot count: the concurrency the figures justify on a server with that many.
    chosen: Mapping[int, int]
    reason: str


def chosen_concurrency(cells: Iterable[Cell]) -> int:
    """On one server (one slot count): the concurrency its figures justify.

    From 1 upwards, a cell replaces the one chosen so far when it had no failure, its
    p95 click → result is within ``LATENCY_TOLERANCE`` of concurrency 1's, and it ran at
    least ``MIN_GAIN`` more analyses a minute than the one chosen so far.
    """
    ordered = sorted(cells, key=lambda cell: cell.concurrency)
    if len({cell.slots for cell in ordered}) > 1:
        raise ValueError("cells of one server only (one slot count)")
    if not ordered or ordered[0].concurrency != 1:
        raise ValueError("the cells need concurrency 1, the baseline")
    baseline = ordered[0]
    if baseline.failures or baseline.per_minute <= 0:
        raise ValueError(
            f"concurrency 1 on {baseline.slots} slot(s) failed {baseline.failures} of"
            f" {baseline.analyses}: no baseline to decide from"
        )
    chosen = baseline
    tail_limit = baseline.click_to_result_p95 * (1 + LATENCY_TOLERANCE)
    for cell in ordered[1:]:
        if cell.failures or cell.click_to_result_p95 > tail_limit:
            continue
        if cell.per_minute >= chosen.per_minute * (1 + MIN_GAIN):
            chosen = cell
    return chosen.concurrency


def decide(cells: Iterable[Cell]) -> Decision:
    """The default worker concurrency from the benchmark's cells (every slot count
    measured needs its concurrency-1 cell).

    Per slot count, ``chosen_concurrency``. Then:

    1. 1 everywhere: keep 1.
    2. The same N > 1 everywhere: raise to N (what pays is the worker's own overlap,
       whatever the server's slots).
    3. Never above the slot count and never lower on a server with more slots: follow
       the server's slot count, up to the largest concurrency chosen (the bound).
    4. Otherwise (figures that disagree): raise to the smallest concurrency chosen,
       which paid on every server measured (1: keep 1).
    """
    by_slots: dict[int, list[Cell]] = {}
    for cell in cells:
        by_slots.setdefault(cell.slots, []).append(cell)
    if not by_slots:
        raise ValueError("no cells to decide from")
    chosen = {slots: chosen_concurrency(by_slots[slots]) for slots in sorted(by_slots)}
    values = list(chosen.values())
    shown = ", ".join(f"{slots} slot(s) → {value}" for slots, value in chosen.items())
    if all(value == 1 for value in values):
        return Decision(
            Outcome.KEEP_ONE, 1, 1, chosen, f"no higher concurrency paid on any server ({shown})"
        )
    if len(set(values)) == 1:
        value = values[0]
        return Decision(
            Outcome.RAISE, value, value, chosen, f"{value} paid on every server ({shown})"
        )
    follows = all(value <= slots for slots, value in chosen.items()) and values == sorted(values)
    if follows:
        bound = max(values)
        return Decision(
            Outcome.FOLLOW_SLOTS,
            FOLLOW_SERVER_SLOTS,
            bound,
            chosen,
            f"what paid grew with the server's slots, never past them ({shown});"
            f" followed up to {bound}",
        )
    least = min(values)
    outcome = Outcome.KEEP_ONE if least == 1 else Outcome.RAISE
    return Decision(
        outcome, least, least, chosen, f"the figures disagree ({shown}): the least of them"
    )


# ---- at start-up -----------------------------------------------------------------------


def slots_from_props(props: Any) -> int | None:
    """llama-server's ``GET /props`` answer: its ``total_slots`` (``--parallel``), or None
    when the answer has none (another server, or an older llama-server)."""
    if not isinstance(props, dict):
        return None
    total = props.get("total_slots")
    if isinstance(total, bool) or not isinstance(total, int) or total < 1:
        return None
    return total


def slots_from_slots(slots: Any) -> int | None:
    """llama-server's ``GET /slots`` answer: one entry per slot; None when it is no list
    of them."""
    if not isinstance(slots, list) or not slots:
        return None
    if not all(isinstance(slot, dict) and "id" in slot for slot in slots):
        return None
    return len(slots)


@dataclass(frozen=True)
class Startup:
    concurrency: int
    why: str  # a sentence for the start-up log


def startup_concurrency(
    configured: int, server_slots: int | None, *, host_store: bool, bound: int = FOLLOW_BOUND
) -> Startup:
    """What a worker runs under ``OPS_WORKER_CONCURRENCY=configured``: the number itself,
    or (``FOLLOW_SERVER_SLOTS``) the local server's slot count up to ``bound``; 1 when the
    server does not say it, or when a host store allows one inference per host."""
    if configured != FOLLOW_SERVER_SLOTS:
        return Startup(configured, "set by OPS_WORKER_CONCURRENCY")
    if host_store:
        return Startup(1, "the host store runs one inference per host")
    if server_slots is None:
        return Startup(1, "the local model server does not say its slot count (/props, /slots)")
    if server_slots > bound:
        return Startup(bound, f"the local model server's {server_slots} slots, bounded")
    return Startup(server_slots, f"the local model server's {server_slots} slot(s)")
