"""The ids of an owner's change events (``WatchOwner``, ``GET /api/events``). Pure.

``<updated_at in microseconds since 1970>-<n>``: the time of the change, so a
stream resumed with the last id it gave (``Last-Event-ID``) reads on from
there on any replica, and the stream's own count ``n``, so two changes of one
microsecond still have two ids. Nothing in it names an operation or an owner:
it says only when the owner's own data last changed. Read strictly: anything
else is refused with ``bad_event_id``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from durable_ops.model.errors import InvalidArgument

BAD_EVENT_ID = "bad_event_id"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_LATEST_MICROS = (datetime(9999, 1, 1, tzinfo=UTC) - EPOCH) // timedelta(microseconds=1)
_SHAPE = re.compile(r"([0-9]{1,18})-([0-9]{1,9})")


def event_id(at: datetime, n: int) -> str:
    return f"{(at - EPOCH) // timedelta(microseconds=1)}-{n}"


def event_time(value: str, field: str = "after") -> datetime:
    """The time an event id names; ``InvalidArgument`` ``bad_event_id`` for anything else."""
    found = _SHAPE.fullmatch(value)
    if found is None or int(found.group(1)) >= _LATEST_MICROS:
        raise InvalidArgument(field, "is not an event id this service gave", code=BAD_EVENT_ID)
    return EPOCH + timedelta(microseconds=int(found.group(1)))
