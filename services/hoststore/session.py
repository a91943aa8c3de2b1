"""``acquire`` and the ``Session`` that holds a host store.

A session owns the directory descriptor and the locked ``host.lock`` descriptor
until ``close``. It keeps the last snapshot it persisted (or loaded) in memory;
the file is only read at acquire. Any error on the save path, or finding
``host.lock`` or the directory replaced, poisons the session: the rename may or
may not have happened, so the caller must close, reacquire and query before
deciding anything.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from types import TracebackType

from durable_ops.hoststore import directory as location
from durable_ops.hoststore import ledger, lockfile, mounts, platforms, statefile
from durable_ops.hoststore import snapshot as fmt
from durable_ops.hoststore.errors import (
    InvalidInput,
    LockReplaced,
    SaveFailed,
    SessionClosed,
    SessionPoisoned,
    SnapshotMissing,
    UnknownOperation,
)
from durable_ops.hoststore.filesystem import FileSystem
from durable_ops.hoststore.snapshot import Record, Snapshot
from durable_ops.hoststore.transitions import State, parse_state

Clock = Callable[[], datetime]


def _utc_now() -> datetime:
    return datetime.now(UTC)


def acquire(
    directory: str | os.PathLike[str],
    host_id: str,
    *,
    filesystem: FileSystem | None = None,
    clock: Clock = _utc_now,
) -> Session:
    """Lock the host store in ``directory`` for ``host_id`` and load (or create) it.

    Refuses unsupported platforms, unsafe directories and files, network/FUSE
    file systems, a lock held elsewhere, a marked store without ``state.json``
    and every invalid snapshot. ``filesystem`` and ``clock`` exist for tests.
    """
    platforms.require_supported()
    host = fmt.host_id(host_id)
    fs = filesystem if filesystem is not None else FileSystem()
    path = os.path.abspath(os.fspath(directory))
    dir_fd = location.open_directory(fs, path)
    lock_fd: int | None = None
    try:
        mounts.require_local(dir_fd, path)
        lock_fd = lockfile.open_and_lock(fs, dir_fd, path)
        current = _load_or_initialize(fs, dir_fd, lock_fd, host)
    except BaseException:
        if lock_fd is not None:
            _close_quietly(fs, lock_fd)
        _close_quietly(fs, dir_fd)
        raise
    return Session(
        path=path,
        dir_fd=dir_fd,
        lock_fd=lock_fd,
        current=current,
        filesystem=fs,
        clock=clock,
    )


class Session:
    """An exclusive hold on one host store. Not for sharing across processes.

    Calls are serialised by an internal mutex, so threads of one process may share
    a session. After ``close`` or poisoning every call except ``close`` raises.
    """

    def __init__(
        self,
        *,
        path: str,
        dir_fd: int,
        lock_fd: int,
        current: Snapshot,
        filesystem: FileSystem,
        clock: Clock,
    ) -> None:
        self._path = path
        self._dir_fd = dir_fd
        self._lock_fd = lock_fd
        # What the descriptors name cannot change; each save compares the paths with them.
        self._dir_identity = location.identity(dir_fd)
        self._lock_identity = location.identity(lock_fd)
        self._snapshot = current
        self._fs = filesystem
        self._clock = clock
        self._mutex = threading.Lock()
        # Re-encodes only what changed: a store retaining many records stays cheap to save.
        self._encoder = fmt.IncrementalEncoder()
        self._closed = False
        self._poison: str | None = None

    @property
    def directory(self) -> str:
        return self._path

    @property
    def host_id(self) -> str:
        return self._snapshot.host_id

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def poisoned(self) -> bool:
        return self._poison is not None

    def begin(self, operation_id: str, plan_hash: str) -> tuple[Record, bool]:
        """Register queued work; ``(record, created)``. Same id and hash replays the original."""
        identifier = fmt.operation_id(operation_id)
        plan = fmt.plan_hash(plan_hash)
        change = self._apply(
            lambda current, now: ledger.begin(
                current, identifier, plan, now=now, encoder=self._encoder
            )
        )
        return change.record, change.created

    def advance(self, operation_id: str, revision: int, next_state: State | str) -> Record:
        """Move ``operation_id`` from ``revision`` to ``next_state`` (compare-and-swap)."""
        identifier = fmt.operation_id(operation_id)
        if type(revision) is not int or revision < 1:
            raise InvalidInput(f"revision must be a positive integer, got {revision!r}")
        target = parse_state(next_state)
        change = self._apply(
            lambda current, now: ledger.advance(
                current, identifier, revision, target, now=now, encoder=self._encoder
            )
        )
        return change.record

    def get(self, operation_id: str) -> Record:
        identifier = fmt.operation_id(operation_id)
        with self._mutex:
            self._require_usable()
            record = self._snapshot.records.get(identifier)
        if record is None:
            raise UnknownOperation(f"no operation {identifier!r}")
        return record

    def records(self) -> tuple[Record, ...]:
        """Every operation ever begun, sorted by id."""
        with self._mutex:
            self._require_usable()
            return tuple(sorted(self._snapshot.records.values(), key=lambda r: r.id))

    def unresolved(self) -> Record | None:
        """The one non-terminal operation that blocks new ids, if any."""
        with self._mutex:
            self._require_usable()
            return self._snapshot.unresolved()

    def close(self) -> None:
        """Release the lock. Idempotent, and allowed on a poisoned session."""
        with self._mutex:
            if self._closed:
                return
            self._closed = True
            _close_quietly(self._fs, self._lock_fd)
            _close_quietly(self._fs, self._dir_fd)

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _apply(self, decide: Callable[[Snapshot, str], ledger.Change]) -> ledger.Change:
        with self._mutex:
            self._require_usable()
            change = decide(self._snapshot, fmt.format_timestamp(self._clock()))
            if change.payload is None:
                return change
            try:
                location.check_unchanged(self._path, self._dir_fd, self._dir_identity)
                lockfile.check_held(self._dir_fd, self._lock_fd, self._lock_identity)
            except LockReplaced as exc:
                self._poison = exc.message
                raise
            try:
                statefile.save(self._fs, self._dir_fd, change.payload.parts)
            except OSError as exc:
                self._poison = f"saving state.json failed: {exc}"
                raise SaveFailed(
                    f"saving state.json failed ({exc}); the session is poisoned: close it,"
                    " reacquire and query before deciding anything",
                    errno=exc.errno,
                ) from exc
            self._snapshot = change.snapshot
            return change

    def _require_usable(self) -> None:
        if self._closed:
            raise SessionClosed("the session is closed")
        if self._poison is not None:
            raise SessionPoisoned(f"the session is poisoned: {self._poison}")


def _load_or_initialize(fs: FileSystem, dir_fd: int, lock_fd: int, host: str) -> Snapshot:
    marked = lockfile.is_marked(lock_fd)
    data = statefile.read(dir_fd)
    if data is None:
        if marked:
            raise SnapshotMissing(
                "host.lock says this store holds work but state.json is missing;"
                " restore it from a valid copy, never start afresh"
            )
        initial = Snapshot(host_id=host, records={})
        # The marker may only claim what is durable: snapshot first, marker second.
        document = fmt.encode(initial)
        _durably("initializing the store", lambda: statefile.save(fs, dir_fd, (document,)))
        _durably("writing the initialization marker", lambda: lockfile.write_marker(fs, lock_fd))
        return initial
    current = fmt.decode(data, expected_host_id=host)
    if not marked:
        # A crash between the first snapshot and the marker: the valid snapshot repairs it.
        _durably("repairing the initialization marker", lambda: lockfile.write_marker(fs, lock_fd))
    return current


def _durably(what: str, action: Callable[[], None]) -> None:
    try:
        action()
    except OSError as exc:
        raise SaveFailed(f"{what} failed: {exc}", errno=exc.errno) from exc


def _close_quietly(fs: FileSystem, fd: int) -> None:
    # Linux releases the descriptor (and with it the flock) even when close reports
    # an error, so there is nothing further to do with one.
    with contextlib.suppress(OSError):
        fs.close(fd)
