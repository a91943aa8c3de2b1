"""Every error the host store raises, each with a stable ``code``.

Callers branch on the class or on ``code``; messages are for people. The tree:

    HostStoreError            host_store_error
    ├── InvalidInput          invalid_argument         bad id, plan hash, host id or state
    ├── UnsupportedPlatform   unsupported_platform     not Linux (Windows is refused too)
    ├── UnsafeDirectory       unsafe_directory         missing, symlink, not a directory,
    │                                                  other owner, mode not 0700, or
    │                                                  unwritable (a read-only file system)
    ├── UnsupportedFileSystem unsupported_file_system  NFS, SMB, FUSE, ... or unknown
    ├── UnsafeFile            unsafe_file              host.lock/state.json not a private
    │                                                  regular file of the current user
    ├── HostLocked            host_locked              another session holds the store
    ├── LockFileInvalid       lock_file_invalid        host.lock holds foreign bytes
    ├── LockReplaced          lock_replaced            host.lock or the directory swapped
    │                                                  behind the holder (poisons)
    ├── ReadFailed            read_failed              host.lock/state.json could not be read
    ├── SnapshotMissing       snapshot_missing         marker set, state.json absent
    ├── SnapshotError         snapshot_invalid         state.json rejected (base class)
    │   ├── SnapshotTooLarge     snapshot_too_large
    │   ├── SnapshotTruncated    snapshot_truncated
    │   ├── SnapshotMalformed    snapshot_malformed    not UTF-8/JSON, wrong shape/type
    │   ├── DuplicateKey         snapshot_duplicate_key
    │   ├── NonFiniteNumber      snapshot_non_finite_number   NaN, Infinity
    │   ├── NestingTooDeep       snapshot_nesting_too_deep
    │   ├── UnknownField         snapshot_unknown_field
    │   ├── MissingField         snapshot_missing_field
    │   ├── UnsupportedVersion   snapshot_version_unsupported
    │   ├── ChecksumMismatch     snapshot_checksum_mismatch   the body was changed
    │   ├── NotCanonical         snapshot_not_canonical       valid data, other bytes
    │   └── HostMismatch         snapshot_host_mismatch
    ├── SessionClosed         session_closed
    ├── SessionPoisoned       session_poisoned         an earlier save or lock check failed
    ├── SaveFailed            save_failed              poisons: the rename may have happened
    ├── StoreFull             capacity_exceeded        16 MiB cap; does not poison
    ├── UnknownOperation      operation_not_found
    ├── PlanHashConflict      plan_hash_conflict       same id, another plan hash
    ├── UnresolvedOperation   operation_unresolved     another id is not terminal yet
    ├── RevisionMismatch      revision_mismatch        compare-and-swap lost
    └── ForbiddenTransition   invalid_transition       the table forbids the move
"""

from __future__ import annotations


class HostStoreError(Exception):
    code = "host_store_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInput(HostStoreError):
    code = "invalid_argument"


class UnsupportedPlatform(HostStoreError):
    code = "unsupported_platform"


class UnsafeDirectory(HostStoreError):
    code = "unsafe_directory"


class UnsupportedFileSystem(HostStoreError):
    code = "unsupported_file_system"


class UnsafeFile(HostStoreError):
    code = "unsafe_file"


class HostLocked(HostStoreError):
    code = "host_locked"


class LockFileInvalid(HostStoreError):
    code = "lock_file_invalid"


class LockReplaced(HostStoreError):
    code = "lock_replaced"


class ReadFailed(HostStoreError):
    code = "read_failed"


class SnapshotMissing(HostStoreError):
    code = "snapshot_missing"


class SnapshotError(HostStoreError):
    code = "snapshot_invalid"


class SnapshotTooLarge(SnapshotError):
    code = "snapshot_too_large"


class SnapshotTruncated(SnapshotError):
    code = "snapshot_truncated"


class SnapshotMalformed(SnapshotError):
    code = "snapshot_malformed"


class DuplicateKey(SnapshotError):
    code = "snapshot_duplicate_key"


class NonFiniteNumber(SnapshotError):
    code = "snapshot_non_finite_number"


class NestingTooDeep(SnapshotError):
    code = "snapshot_nesting_too_deep"


class UnknownField(SnapshotError):
    code = "snapshot_unknown_field"


class MissingField(SnapshotError):
    code = "snapshot_missing_field"


class UnsupportedVersion(SnapshotError):
    code = "snapshot_version_unsupported"


class ChecksumMismatch(SnapshotError):
    code = "snapshot_checksum_mismatch"


class NotCanonical(SnapshotError):
    code = "snapshot_not_canonical"


class HostMismatch(SnapshotError):
    code = "snapshot_host_mismatch"


class SessionClosed(HostStoreError):
    code = "session_closed"


class SessionPoisoned(HostStoreError):
    code = "session_poisoned"


class SaveFailed(HostStoreError):
    code = "save_failed"

    def __init__(self, message: str, *, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


class StoreFull(HostStoreError):
    code = "capacity_exceeded"


class UnknownOperation(HostStoreError):
    code = "operation_not_found"


class PlanHashConflict(HostStoreError):
    code = "plan_hash_conflict"


class UnresolvedOperation(HostStoreError):
    code = "operation_unresolved"


class RevisionMismatch(HostStoreError):
    code = "revision_mismatch"


class ForbiddenTransition(HostStoreError):
    code = "invalid_transition"
