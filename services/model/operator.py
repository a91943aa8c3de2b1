"""What an operator asks for (``opsctl operations``, ADR 19): filters, ages, names. Pure.

An operator lists, cancels and retries operations across owners by filter: an
owner, a state, a task type and an age (``--older-than 2h``: created at least
that long ago). Each part is checked here once, for the CLI and the service.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from durable_ops.model import bounds
from durable_ops.model.errors import InvalidArgument
from durable_ops.model.states import OperationState

DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(?:\d+[smhdw])+")
_DURATION_PART = re.compile(r"(\d+)([smhdw])")
_NAME = re.compile(r"[A-Za-z0-9._@:-]+")
NAME_MAX = 64
DURATION_RULE = "a duration such as 90s, 30m, 2h, 7d, 1w or 1d12h"


def parse_duration(text: str) -> timedelta:
    """``30m``, ``2h``, ``7d``, ``1d12h``: a positive age, at most ``bounds.OLDER_THAN_MAX``.

    ``ValueError`` for anything else (no unit, a sign, spaces, zero, too long).
    """
    if text.startswith("-"):
        raise ValueError(f"{text!r} is negative: an age is {DURATION_RULE}")
    if len(text) > 32 or _DURATION.fullmatch(text) is None:
        raise ValueError(f"{text!r} is not {DURATION_RULE}")
    seconds = sum(
        int(number) * DURATION_UNITS[unit] for number, unit in _DURATION_PART.findall(text)
    )
    if seconds <= 0:
        raise ValueError(f"{text!r} is not a positive duration")
    if seconds > bounds.OLDER_THAN_MAX.total_seconds():
        raise ValueError(f"{text!r} is longer than {bounds.OLDER_THAN_MAX.days} days")
    return timedelta(seconds=seconds)


def age_text(seconds: int) -> str:
    """``45s``, ``12m 5s``, ``3h 20m``, ``2d 4h``: two units say how long something waits."""
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s" if minutes else f"{secs}s"


def operator_name(value: str) -> str:
    """Who runs ``opsctl operations`` as the audit log names them (``sub`` of the credential)."""
    if not value or len(value) > NAME_MAX or _NAME.fullmatch(value) is None:
        raise InvalidArgument(
            "operator", f"must be 1 to {NAME_MAX} of letters, digits and . _ @ : -"
        )
    return value


@dataclass(frozen=True)
class OperatorFilter:
    """Which operations: every one left empty matches any."""

    owner_id: str = ""
    state: OperationState | None = None
    task_type: str = ""
    older_than: timedelta | None = None
    failure_code: str = ""  # what the worker reported (``model_error``); the console's search

    def validated(self) -> OperatorFilter:
        if self.owner_id:
            bounds.owner_id(self.owner_id)
        if self.task_type:
            bounds.task_type(self.task_type)
        if self.failure_code:
            bounds.failure_code(self.failure_code)  # no stored code has another character
        if self.older_than is not None and not (
            timedelta(0) <= self.older_than <= bounds.OLDER_THAN_MAX
        ):
            raise InvalidArgument(
                "older_than", f"must be between 0 and {bounds.OLDER_THAN_MAX.days} days"
            )
        return self

    @property
    def is_empty(self) -> bool:
        return not (
            self.owner_id or self.state or self.task_type or self.older_than or self.failure_code
        )

    def created_before(self, now: datetime) -> datetime | None:
        """The newest ``created_at`` that matches, or ``None`` for any age."""
        return None if self.older_than is None else now - self.older_than

    def describe(self) -> str:
        """``owner=bob state=queued``: the filter in one line, for logs and confirmations."""
        parts = [
            f"owner={self.owner_id}" if self.owner_id else "",
            f"state={self.state.value}" if self.state else "",
            f"task={self.task_type}" if self.task_type else "",
            f"older_than={_seconds(self.older_than)}" if self.older_than is not None else "",
            f"failure={self.failure_code}" if self.failure_code else "",
        ]
        return " ".join(part for part in parts if part) or "all operations"


def _seconds(age: timedelta) -> str:
    return f"{int(age.total_seconds())}s"
