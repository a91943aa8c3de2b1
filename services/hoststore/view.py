"""The read-only view behind ``opsctl host-store show DIR [--json]``.

It takes no lock and writes nothing (no marker repair, no remnant cleanup), so it
is safe to run beside a live session; what it prints is the state on disk at the
moment of reading. Exit codes: 0 the store is valid (or not yet initialized),
1 the store is invalid or corrupt, 2 the directory cannot be used at all.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from dataclasses import dataclass, field
from typing import TextIO

from durable_ops.hoststore import lockfile, snapshot, statefile
from durable_ops.hoststore.directory import check_private_file
from durable_ops.hoststore.errors import (
    HostStoreError,
    ReadFailed,
    SnapshotMissing,
    UnsafeDirectory,
    UnsafeFile,
)
from durable_ops.hoststore.snapshot import MAX_SNAPSHOT_BYTES, Record, Snapshot, Tombstone
from durable_ops.hoststore.transitions import UNRESOLVED

PLAN_HASH_PREFIX = 12


@dataclass
class Inspection:
    directory: str
    initialized: bool = False
    current: Snapshot | None = None
    temp_remnants: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def show(directory: str | os.PathLike[str], *, as_json: bool, out: TextIO) -> int:
    path = os.path.abspath(os.fspath(directory))
    try:
        found = inspect(path)
    except HostStoreError as exc:
        _render_error(path, exc.code, exc.message, as_json=as_json, out=out)
        return 2 if isinstance(exc, UnsafeDirectory) else 1
    except OSError as exc:
        _render_error(path, "unreadable", str(exc), as_json=as_json, out=out)
        return 2
    if as_json:
        _render_json(found, out)
    else:
        _render_text(found, out)
    return 0


def inspect(path: str) -> Inspection:
    """Read and verify the store in ``path`` without locking or writing anything."""
    found = Inspection(directory=path)
    _inspect_directory(found)
    found.temp_remnants = sorted(n for n in os.listdir(path) if statefile.TEMP_PATTERN.fullmatch(n))
    lock_bytes = _read(found, lockfile.LOCK_NAME, len(lockfile.MARKER) + 1)
    found.initialized = lock_bytes is not None and lockfile.parse_marker(lock_bytes)
    data = _read(found, statefile.STATE_NAME, MAX_SNAPSHOT_BYTES + 1)
    if data is None:
        if found.initialized:
            raise SnapshotMissing("host.lock is marked initialized but state.json is missing")
        return found
    found.current = snapshot.decode(data)
    if not found.initialized:
        found.warnings.append(
            "host.lock lacks the initialization marker; the next acquire repairs it"
        )
    return found


def _inspect_directory(found: Inspection) -> None:
    try:
        status = os.lstat(found.directory)
    except OSError as exc:
        raise UnsafeDirectory(f"cannot inspect {found.directory}: {exc.strerror}") from exc
    if stat.S_ISLNK(status.st_mode):
        raise UnsafeDirectory(f"{found.directory} is a symlink; give the real directory")
    if not stat.S_ISDIR(status.st_mode):
        raise UnsafeDirectory(f"{found.directory} is not a directory")
    mode = stat.S_IMODE(status.st_mode)
    if mode != 0o700:
        found.warnings.append(f"directory mode is {mode:04o}; acquire requires 0700")


def _read(found: Inspection, name: str, limit: int) -> bytes | None:
    """The first ``limit`` bytes of ``name``, refused as ``acquire`` would refuse it.

    Opened like the session opens it (no symlink, no waiting on a FIFO or a
    device), then held to the same test: a private regular file of the current
    user. A file the worker would refuse (say mode 0644) is a problem, not a warning.
    """
    full = os.path.join(found.directory, name)
    try:
        fd = os.open(full, statefile.READ_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeFile(f"{name} is a symlink") from None
        raise ReadFailed(f"cannot open {name}: {exc.strerror}") from exc
    try:
        check_private_file(os.fstat(fd), name)
        chunks: list[bytes] = []
        remaining = limit
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _row(record: Record) -> dict[str, object]:
    return {
        "id": record.id,
        "state": record.state.value,
        "revision": record.revision,
        "plan_hash_prefix": record.plan_hash[:PLAN_HASH_PREFIX],
        "created_at": record.created_at,
        "updated_at": record.updated_at,
    }


def _tombstone_row(tombstone: Tombstone) -> dict[str, object]:
    return {
        "id": tombstone.id,
        "state": tombstone.state.value,
        "revision": tombstone.revision,
        "plan_hash_prefix": tombstone.plan_hash[:PLAN_HASH_PREFIX],
        "updated_at": tombstone.updated_at,
    }


def _sorted_records(found: Inspection) -> list[Record]:
    if found.current is None:
        return []
    return sorted(found.current.records.values(), key=lambda record: record.id)


def _sorted_tombstones(found: Inspection) -> list[Tombstone]:
    if found.current is None:
        return []
    return sorted(found.current.tombstones.values(), key=lambda tombstone: tombstone.id)


def _render_json(found: Inspection, out: TextIO) -> None:
    document = {
        "ok": True,
        "directory": found.directory,
        "host_id": found.current.host_id if found.current else None,
        "initialized": found.initialized,
        "snapshot_present": found.current is not None,
        "operations": [_row(record) for record in _sorted_records(found)],
        "tombstones": [_tombstone_row(tombstone) for tombstone in _sorted_tombstones(found)],
        "temp_remnants": found.temp_remnants,
        "warnings": found.warnings,
    }
    out.write(json.dumps(document, indent=2, sort_keys=True) + "\n")


def _render_text(found: Inspection, out: TextIO) -> None:
    lines = [f"host store {found.directory}"]
    if found.current is None:
        lines.append("no state.json: the store has not been initialized")
    else:
        records = _sorted_records(found)
        unresolved = [r.id for r in records if r.state in UNRESOLVED]
        lines.append(f"host id: {found.current.host_id}")
        lines.append(f"initialized: {'yes' if found.initialized else 'no'}")
        lines.append("checksum: ok")
        lines.append(
            f"operations: {len(records)}"
            + (f" (unresolved: {', '.join(unresolved)})" if unresolved else "")
        )
        if records:
            lines.extend(_table(records))
        tombstones = _sorted_tombstones(found)
        lines.append(f"tombstones (compacted, still answer begin): {len(tombstones)}")
        if tombstones:
            lines.extend(_tombstone_table(tombstones))
    if found.temp_remnants:
        lines.append("temporary remnants (ignored, never read as work):")
        lines.extend(f"  {name}" for name in found.temp_remnants)
    lines.extend(f"warning: {warning}" for warning in found.warnings)
    out.write("\n".join(lines) + "\n")


def _table(records: list[Record]) -> list[str]:
    header = ("ID", "STATE", "REV", "PLAN", "CREATED", "UPDATED")
    rows = [
        (
            r.id,
            r.state.value,
            str(r.revision),
            r.plan_hash[:PLAN_HASH_PREFIX],
            r.created_at,
            r.updated_at,
        )
        for r in records
    ]
    return _aligned([header, *rows])


def _tombstone_table(tombstones: list[Tombstone]) -> list[str]:
    header = ("ID", "STATE", "REV", "PLAN", "UPDATED")
    rows = [
        (t.id, t.state.value, str(t.revision), t.plan_hash[:PLAN_HASH_PREFIX], t.updated_at)
        for t in tombstones
    ]
    return _aligned([header, *rows])


def _aligned(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def _render_error(path: str, code: str, message: str, *, as_json: bool, out: TextIO) -> None:
    if as_json:
        document = {"ok": False, "directory": path, "error": {"code": code, "message": message}}
        out.write(json.dumps(document, indent=2, sort_keys=True) + "\n")
    else:
        out.write(f"host store {path} is invalid: {message} [{code}]\n")
