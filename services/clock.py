"""The wall clock, injectable: rules take ``now``; processes ask a ``Clock`` for it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)
