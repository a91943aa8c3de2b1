"""Fair shares across owners within a priority (issue 37 point 1, ADR 0049). Pure.

Start-time fair queuing: each operation is given, when it is created, a virtual
start tag, and the claim takes a priority's rows in tag order. The tag is

    max(V, owner_last + STRIDE // weight)

``V`` is the priority's virtual time (the tag at the head of its due queue, else
the clock), ``owner_last`` the highest tag the owner used at that priority, and
``weight`` the owner's share (``owner_shares``, default 1). An owner with nothing
waiting starts at the head; a backlog is spread a stride apart, so the claim
alternates between owners in proportion to their weights.

An operation scheduled for later takes its turn when it joins the line, at its
time (the sweeper, ADR 0056), as if created then: a backlog's ``V`` lags the clock
by as long as the backlog takes, so a turn set to its due time at create put it
behind every operation a greedy owner made before that moment.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from durable_ops.model import bounds

# Virtual µs between two operations of a weight-1 owner: the axis is the clock's (an
# empty queue starts at the clock), so fairness off is the same axis (the due time).
STRIDE = 1000
HELD_TAG = 0  # a scheduled operation's tag until it joins the line: below any owner's last
WEIGHT_RANGE = (1, 100)
DEFAULT_WEIGHT = 1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def micros(moment: datetime) -> int:
    """``moment`` on the tag axis: µs since the epoch."""
    return (moment - _EPOCH) // _MICROSECOND


def weight(value: int | None) -> int:
    """An owner's share as stored (None: the default); out of range is the caller's error."""
    if value is None:
        return DEFAULT_WEIGHT
    return bounds.int_range("weight", value, WEIGHT_RANGE)


def start_tag(
    *,
    head: int | None,
    owner_last: int | None,
    share: int | None,
    now: datetime,
) -> int:
    """The virtual start tag of an owner's operation joining the line at one priority."""
    tag = micros(now) if head is None else head
    if owner_last is not None:
        tag = max(tag, owner_last + STRIDE // weight(share))
    return tag


def fifo_tag(due: datetime) -> int:
    """The tag with fairness off: the due time, so the claim's order is first due, first out."""
    return micros(due)


# ---- aging: a waiting operation's priority rises with its wait, bounded -------------------

# A queued operation gains one level per AGING_STEP it has been due, at most AGING_MAX
# levels above the priority it was created with: a low priority waits at most about
# AGING_MAX steps behind a stream of work AGING_MAX levels above it (and then its turn).
AGING_STEP = timedelta(seconds=60)
AGING_MAX = 5
AGING_LEVELS_MAX = 64  # the sweeper looks at this many priority levels at most


def aged_priority(base: int, waited: timedelta) -> int:
    """The priority of an operation created at ``base`` that has been due for ``waited``."""
    steps = max(0, waited // AGING_STEP)
    return min(base + min(AGING_MAX, steps), bounds.PRIORITY_RANGE[1])
