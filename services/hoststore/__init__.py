"""The host operation store (seed 002): one exclusive, durable, local store per host.

    session = acquire("/var/lib/durable-ops/host", "runner-1")
    record, created = session.begin("op-1", plan_hash)
    record = session.advance("op-1", record.revision, State.RUNNING)   # the claim
    session.compact(older_than=timedelta(days=30))   # finished records -> tombstones
    session.close()

See ``docs/hoststore.md`` for the contract, the file format and what is not
promised. Errors are listed in ``durable_ops.hoststore.errors``.
"""

from durable_ops.hoststore.errors import (
    ChecksumMismatch,
    DuplicateKey,
    ForbiddenTransition,
    HostLocked,
    HostMismatch,
    HostStoreError,
    InvalidInput,
    LockFileInvalid,
    LockReplaced,
    MissingField,
    NestingTooDeep,
    NonFiniteNumber,
    NotCanonical,
    PlanHashConflict,
    ReadFailed,
    RevisionMismatch,
    SaveFailed,
    SessionClosed,
    SessionPoisoned,
    SnapshotError,
    SnapshotMalformed,
    SnapshotMissing,
    SnapshotTooLarge,
    SnapshotTruncated,
    StoreFull,
    UnknownField,
    UnknownOperation,
    UnresolvedOperation,
    UnsafeDirectory,
    UnsafeFile,
    UnsupportedFileSystem,
    UnsupportedPlatform,
    UnsupportedVersion,
)
from durable_ops.hoststore.session import Session, acquire
from durable_ops.hoststore.snapshot import Record, Tombstone
from durable_ops.hoststore.transitions import State
from durable_ops.hoststore.view import show

__all__ = [
    "ChecksumMismatch",
    "DuplicateKey",
    "ForbiddenTransition",
    "HostLocked",
    "HostMismatch",
    "HostStoreError",
    "InvalidInput",
    "LockFileInvalid",
    "LockReplaced",
    "MissingField",
    "NestingTooDeep",
    "NonFiniteNumber",
    "NotCanonical",
    "PlanHashConflict",
    "ReadFailed",
    "Record",
    "RevisionMismatch",
    "SaveFailed",
    "Session",
    "SessionClosed",
    "SessionPoisoned",
    "SnapshotError",
    "SnapshotMalformed",
    "SnapshotMissing",
    "SnapshotTooLarge",
    "SnapshotTruncated",
    "State",
    "StoreFull",
    "Tombstone",
    "UnknownField",
    "UnknownOperation",
    "UnresolvedOperation",
    "UnsafeDirectory",
    "UnsafeFile",
    "UnsupportedFileSystem",
    "UnsupportedPlatform",
    "UnsupportedVersion",
    "acquire",
    "show",
]
