"""Which leases one worker's lease stream holds, beat after beat (ADR 0026). Pure.

A request adds leases (operation, owner, token, length), changes the length or
progress of leases the stream holds, and drops the ones the worker let go. Every
beat extends every lease the stream holds, so ``apply`` answers the whole list
for the one UPDATE of the beat, with the progress each entry carried.

An entry with a bad field is refused alone (the worker learns why, the rest stay
held); a request that cannot be read as a beat at all (an entry naming no
operation, one operation named twice, more leases than a stream holds) is
refused whole: it is the client's bug, not a lease's fate.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from durable_ops.model import bounds
from durable_ops.model.drafts import ANSWER_DRAFT_MAX_BYTES, DRAFT_TOO_LARGE
from durable_ops.model.errors import DomainError, InvalidArgument

HELD_LEASES_MAX = 1000  # a worker's concurrency bound: one stream carries all its leases
DEFAULT_LEASE_SECONDS = 30  # an added lease that names no length, as a single heartbeat's
NAMED_TWICE = "lease_named_twice"
TOO_MANY_LEASES = "too_many_leases"
LEASE_NOT_HELD = "lease_not_held"


@dataclass(frozen=True)
class Entry:
    """One lease as a request names it; empty owner and token: one the stream holds."""

    operation_id: str
    owner_id: str = ""
    token: str = ""
    lease_seconds: int = 0  # 0: unchanged (an added lease: DEFAULT_LEASE_SECONDS)
    progress: int | None = None
    answer_text: str | None = None


@dataclass(frozen=True)
class HeldLease:
    """A lease the stream holds: what each beat's guarded UPDATE binds for its row."""

    operation_id: str
    owner_id: str
    token: str
    lease_seconds: int
    progress: int | None = None  # what this beat writes; None leaves the row's progress
    answer_text: str | None = None  # the attempt's answer so far, this beat's; None: unchanged


@dataclass(frozen=True)
class Beat:
    """What one request asks: extend ``held`` (in the order they were added); answer
    ``refused`` entries with their error."""

    held: list[HeldLease]
    refused: dict[str, DomainError]


class HeldLeases:
    """The leases of one stream, in the order they were added."""

    def __init__(self, max_leases: int = HELD_LEASES_MAX) -> None:
        self._max = max_leases
        self._held: dict[str, HeldLease] = {}

    def __contains__(self, operation_id: object) -> bool:
        return operation_id in self._held

    def __len__(self) -> int:
        return len(self._held)

    def apply(self, entries: Sequence[Entry], dropped: Sequence[str]) -> Beat:
        """Take one request in; raises ``InvalidArgument`` when it is not a beat at all."""
        if len(entries) > self._max:
            raise InvalidArgument(
                "leases", f"a stream holds at most {self._max} leases", code=TOO_MANY_LEASES
            )
        named = [entry.operation_id for entry in entries]
        if not all(named):
            raise InvalidArgument("operation_id", "every lease names its operation")
        if len(set(named)) != len(named) or set(named) & set(dropped):
            raise InvalidArgument(
                "operation_id", "a request names each operation once", code=NAMED_TWICE
            )
        before = dict(self._held)
        for operation_id in dropped:
            self._held.pop(operation_id, None)
        refused: dict[str, DomainError] = {}
        progress: dict[str, int] = {}
        texts: dict[str, str] = {}
        for entry in entries:
            try:
                lease = self._admit(entry)
            except DomainError as error:
                self._held.pop(entry.operation_id, None)
                refused[entry.operation_id] = error
                continue
            self._held[entry.operation_id] = lease
            if entry.progress is not None:
                progress[entry.operation_id] = entry.progress
            if entry.answer_text is not None:
                texts[entry.operation_id] = entry.answer_text
        if len(self._held) > self._max:
            self._held = before  # refused whole: the stream holds what it held
            raise InvalidArgument(
                "leases", f"a stream holds at most {self._max} leases", code=TOO_MANY_LEASES
            )
        held = [
            replace(
                lease,
                progress=progress.get(lease.operation_id),
                answer_text=texts.get(lease.operation_id),
            )
            for lease in self
        ]
        return Beat(held, refused)

    def lose(self, operation_id: str) -> None:
        """The lease is gone (lost or refused by the database): the stream stops holding it."""
        self._held.pop(operation_id, None)

    def __iter__(self) -> Iterator[HeldLease]:
        return iter(self._held.values())

    def _admit(self, entry: Entry) -> HeldLease:
        """The lease ``entry`` leaves the stream holding, or the error refusing it."""
        bounds.text("operation_id", entry.operation_id, bounds.ID_MAX)
        if entry.progress is not None:
            bounds.int_range("progress_percent", entry.progress, bounds.PROGRESS_RANGE)
        if entry.answer_text is not None and len(entry.answer_text.encode()) > (
            ANSWER_DRAFT_MAX_BYTES
        ):
            raise InvalidArgument(
                "answer_text", f"is at most {ANSWER_DRAFT_MAX_BYTES} bytes", code=DRAFT_TOO_LARGE
            )
        if entry.lease_seconds:
            bounds.int_range("lease_seconds", entry.lease_seconds, bounds.LEASE_SECONDS_RANGE)
        current = self._held.get(entry.operation_id)
        if (
            current is not None
            and entry.owner_id in ("", current.owner_id)
            and entry.token in ("", current.token)
        ):
            return replace(current, lease_seconds=entry.lease_seconds or current.lease_seconds)
        if not entry.owner_id or not entry.token:
            raise InvalidArgument(
                "lease_token",
                "a lease the stream does not hold is added with its owner and token",
                code=LEASE_NOT_HELD,
            )
        bounds.owner_id(entry.owner_id)
        bounds.text("lease_token", entry.token, bounds.LEASE_TOKEN_MAX)
        return HeldLease(
            entry.operation_id,
            entry.owner_id,
            entry.token,
            entry.lease_seconds or DEFAULT_LEASE_SECONDS,
        )
