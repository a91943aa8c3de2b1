"""Datetimes → protobuf Timestamps: the same stamp as protobuf's own ``FromDatetime``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from durable_ops.wire import operations as wire


def _protobufs(value: datetime) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(value.astimezone(UTC))
    return stamp


@pytest.mark.parametrize(
    "value",
    [
        datetime(2026, 12, 3, 10, 30, 15, 123456, tzinfo=UTC),
        datetime(1969, 12, 31, 23, 59, 59, 500000, tzinfo=UTC),  # before the epoch
        datetime(2026, 12, 3, 10, 30, tzinfo=timezone(timedelta(hours=-7, minutes=-30))),
        datetime(2026, 12, 3, 10, 30, 15, 999999),  # naive: local time, as astimezone reads it
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    ],
)
def test_a_timestamp_is_the_one_protobuf_would_make(value: datetime) -> None:
    assert wire.timestamp(value) == _protobufs(value)
    assert wire.from_timestamp(wire.timestamp(value)) == value.astimezone(UTC)
