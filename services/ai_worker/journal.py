"""The host-local journal of attempts: which inference this host started and how it ended.

The AI worker holds the host operation store (``durable_ops.hoststore``, seed
002, SPEC §7) so that one host runs one local-model worker, and journals
every attempt in it before the model sees any input::

    start   begin(record id, plan hash) -> queued, then advance -> running
    finish  running -> succeeded | failed_recovered

A record left ``queued`` or ``running`` means a worker on this host died
mid-attempt. On start the worker reconciles those with the Operations
service before it claims anything (``reconcile``).

Record id = ``{operation_id}/{attempt}/{route}/{owner_id}/{claim}``. The owner is
in the id because reconciling needs ``GetOperation``, which runs in the owner's
scope; the route, because a fallback claim continues the same attempt on the
external route and needs a record of its own; the claim (the first 16 hex digits of
the SHA-256 of its lease token, never the token), because a released attempt is
claimed again with its number given back (``model.lifecycle``): under the same id
its second run found the first's record settled, and ran with nothing journaled as
running, so a worker dying in it left nothing to reconcile. Records of releases
before the claim was in the id have four parts, and still parse. None of these parts
can hold a ``/`` (operation ids are hex, owner ids are ``[A-Za-z0-9._@:-]``). The
plan hash is the SHA-256 of the record id: one claim has one plan, so a repeated
``begin`` replays the original record instead of conflicting.

``NullJournal`` stands in when ``OPS_HOST_STORE_DIR`` is empty.

Taking the store also keeps it bounded (ADR 0018): settled attempts older
than a day become tombstones (a repeated ``begin`` still replays them), and
tombstones older than 30 days are forgotten. No claim can come back that
late: its operation's deadline is at most 24 h after the operation became due
(``bounds.DEADLINE_MAX_AHEAD``), and every claim of it is made after that.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from durable_ops.clock import Clock, utc_now
from durable_ops.hoststore import HostLocked, HostStoreError, Record, State, acquire
from durable_ops.hoststore import Session as HostSession
from durable_ops.model.routing import Route

_CLAIM = re.compile("[0-9a-f]{16}")


class JournalError(Exception):
    """The journal cannot record an attempt; the worker must stop rather than run blind."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class JournalLocked(JournalError):
    """Another worker holds this host's store."""


@dataclass(frozen=True)
class JournalEntry:
    operation_id: str
    attempt: int
    owner_id: str
    route: Route
    claim: str = ""  # ``claim_of`` its lease token; "" in a record from before it was kept

    @property
    def record_id(self) -> str:
        parts = [self.operation_id, str(self.attempt), self.route.value, self.owner_id]
        return "/".join([*parts, self.claim] if self.claim else parts)

    @property
    def plan_hash(self) -> str:
        return hashlib.sha256(self.record_id.encode()).hexdigest()

    @classmethod
    def parse(cls, record_id: str) -> JournalEntry:
        parts = record_id.split("/")
        claim = parts.pop() if len(parts) == 5 else None
        if (
            len(parts) != 4
            or not parts[1].isdigit()
            or parts[2] not in set(Route)
            or (claim is not None and _CLAIM.fullmatch(claim) is None)
        ):
            raise JournalError(f"host store record {record_id!r} was not written by an AI worker")
        operation_id, attempt, route, owner_id = parts
        return cls(operation_id, int(attempt), owner_id, Route(route), claim or "")


def claim_of(lease_token: str) -> str:
    """What a record keeps of the claim it journals: enough to tell claims apart, and
    nothing that holds its lease."""
    return hashlib.sha256(lease_token.encode()).hexdigest()[:16]


class AttemptJournal(Protocol):
    def start(self, entry: JournalEntry) -> None: ...

    def finish(self, entry: JournalEntry, succeeded: bool) -> None: ...

    def unresolved(self) -> list[JournalEntry]: ...

    def close(self) -> None: ...


class NullJournal:
    """No host store configured: nothing is journaled, nothing needs reconciling."""

    def start(self, entry: JournalEntry) -> None:
        return None

    def finish(self, entry: JournalEntry, succeeded: bool) -> None:
        return None

    def unresolved(self) -> list[JournalEntry]:
        return []

    def close(self) -> None:
        return None


COMPACT_AFTER = timedelta(days=1)
FORGET_AFTER = timedelta(days=30)


class HostStoreJournal:
    """The journal in the host operation store; holds its lock until ``close``."""

    def __init__(self, session: HostSession) -> None:
        self._session = session

    @classmethod
    def acquire(cls, directory: str, host_id: str, *, clock: Clock = utc_now) -> HostStoreJournal:
        try:
            session = acquire(directory, host_id, clock=clock)
        except HostLocked as exc:
            raise JournalLocked(
                f"another AI worker holds the host store at {directory}: "
                "one host runs one local-model worker"
            ) from exc
        except HostStoreError as exc:
            raise JournalError(
                f"cannot open the host store at {directory}: {exc.message} "
                "(docs/operations.md, 'A damaged store', says what to do)"
            ) from exc
        try:
            session.compact(older_than=COMPACT_AFTER)
            session.forget(older_than=FORGET_AFTER)
        except HostStoreError as exc:
            session.close()
            raise JournalError(
                f"cannot compact the host store at {directory}: {exc.message}"
            ) from exc
        return cls(session)

    def start(self, entry: JournalEntry) -> None:
        try:
            record, _created = self._session.begin(entry.record_id, entry.plan_hash)
            if record.state is State.QUEUED:
                self._session.advance(record.id, record.revision, State.RUNNING)
        except HostStoreError as exc:
            raise JournalError(f"cannot journal the attempt: {exc.message}") from exc

    def finish(self, entry: JournalEntry, succeeded: bool) -> None:
        target = State.SUCCEEDED if succeeded else State.FAILED_RECOVERED
        try:
            record = self._session.get(entry.record_id)
            if record.state is State.QUEUED:
                # Begun but never marked running: the claim was taken, so it ran (or may have).
                record = self._session.advance(record.id, record.revision, State.RUNNING)
            if not record.state.is_terminal:
                self._session.advance(record.id, record.revision, target)
        except HostStoreError as exc:
            raise JournalError(f"cannot journal the outcome: {exc.message}") from exc

    def unresolved(self) -> list[JournalEntry]:
        try:
            record: Record | None = self._session.unresolved()
        except HostStoreError as exc:
            raise JournalError(f"cannot read the host store: {exc.message}") from exc
        return [] if record is None else [JournalEntry.parse(record.id)]

    def close(self) -> None:
        self._session.close()


def open_journal(directory: str, host_id: str) -> AttemptJournal:
    """The host store journal when a directory is configured, else ``NullJournal``."""
    if not directory:
        return NullJournal()
    return HostStoreJournal.acquire(directory, host_id)
