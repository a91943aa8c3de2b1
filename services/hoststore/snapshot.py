"""The canonical ``state.json`` format: records, encoding, decoding. Pure, no I/O.

A snapshot file is one canonical JSON document (sorted keys, no insignificant
whitespace, UTF-8, no trailing newline)::

    {"body":{"host_id":"runner-1",
             "operations":{"op-1":{"created_at":"2026-01-02T03:04:05.000000Z",
                                   "plan_hash":"9f86d0...","revision":2,
                                   "state":"running",
                                   "updated_at":"2026-01-02T03:04:06.000000Z"}},
             "version":1},
     "sha256":"<hex SHA-256 of the canonical encoding of body>"}

(shown wrapped here; on disk it is one line). Decoding accepts exactly the bytes
``encode`` produces for some valid snapshot and rejects everything else with a
distinct ``SnapshotError`` subclass. The checksum detects accidents (torn or
edited files), it is not authentication.
"""

from __future__ import annotations

import hashlib
import json
import re
from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from services.hoststore.errors import (
    ChecksumMismatch,
    DuplicateKey,
    HostMismatch,
    InvalidArgument,
    MissingField,
    NestingTooDeep,
    NonFiniteNumber,
    NotCanonical,
    SnapshotError,
    SnapshotMalformed,
    SnapshotTooLarge,
    SnapshotTruncated,
    UnknownField,
    UnsupportedVersion,
)
from services.hoststore.transitions import MAX_REVISION, UNRESOLVED, State

FORMAT_VERSION: Final = 1
MAX_SNAPSHOT_BYTES: Final = 16 * 1024 * 1024
# Admission keeps this much room for the active record to grow later: its state
# name can lengthen by 10 bytes ("queued" -> "failed_recovered") while revisions
# stay single digits and timestamps are fixed width, so 64 bytes is ample.
RECORD_GROWTH_RESERVE: Final = 64
# document -> body -> operations -> record
MAX_NESTING: Final = 4

_ID_PATTERN: Final = re.compile(r"[A-Za-z0-9._:@/+=-]{1,128}")
_HOST_ID_PATTERN: Final = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_SHA256_PATTERN: Final = re.compile(r"[0-9a-f]{64}")
_TIMESTAMP_PATTERN: Final = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z")

_STATE_NAMES: Final = frozenset(state.value for state in State)
_DOCUMENT_FIELDS: Final = frozenset({"body", "sha256"})
_BODY_FIELDS: Final = frozenset({"host_id", "operations", "version"})
_RECORD_FIELDS: Final = frozenset({"created_at", "plan_hash", "revision", "state", "updated_at"})


@dataclass(frozen=True, slots=True)
class Record:
    """One operation as stored; immutable, so every copy handed out is a value."""

    id: str
    plan_hash: str
    state: State
    revision: int
    created_at: str
    updated_at: str


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The whole store: host identity and every operation ever begun, by id.

    ``records`` is never mutated after construction; changes build a new snapshot.
    """

    host_id: str
    records: Mapping[str, Record]

    def unresolved(self) -> Record | None:
        return next((r for r in self.records.values() if r.state in UNRESOLVED), None)


def operation_id(value: object) -> str:
    return _argument("operation id", value, _ID_PATTERN)


def plan_hash(value: object) -> str:
    return _argument("plan hash", value, _ID_PATTERN)


def host_id(value: object) -> str:
    return _argument("host id", value, _HOST_ID_PATTERN)


def format_timestamp(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise InvalidArgument("timestamps must be timezone-aware")
    utc = moment.astimezone(UTC)
    # Hand-formatted so every timestamp has the same width (strftime("%Y") does not
    # pad years below 1000 on glibc); fixed width is what the growth reserve assumes.
    return (
        f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T"
        f"{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}.{utc.microsecond:06d}Z"
    )


def encode(snapshot: Snapshot) -> bytes:
    body = {
        "host_id": snapshot.host_id,
        "operations": {record.id: _record_fields(record) for record in snapshot.records.values()},
        "version": FORMAT_VERSION,
    }
    return _document(_canonical(body))


def _record_fields(record: Record) -> dict[str, object]:
    return {
        "created_at": record.created_at,
        "plan_hash": record.plan_hash,
        "revision": record.revision,
        "state": record.state.value,
        "updated_at": record.updated_at,
    }


class IncrementalEncoder:
    """``encode`` for a sequence of snapshots that each differ from the last by one record.

    A store that retains many records rewrites all of them on every change; this
    keeps the canonical bytes of every record, sorted in chunks, and the SHA-256
    state at the start of each chunk, so a change re-encodes one record, re-joins
    one chunk and hashes only from that chunk on. The bytes are exactly those of
    ``encode`` (the tests compare them). Any snapshot that is not "the previous
    one plus or with one changed record" is encoded from scratch.
    """

    CHUNK = 64

    def __init__(self) -> None:
        self._last: Snapshot | None = None
        self._prefix = b""
        self._chunks: list[list[str]] = []  # sorted ids, split into runs
        self._firsts: list[str] = []  # first id of each run, for bisect
        self._fragments: dict[str, bytes] = {}  # id -> b'"id":{...}'
        self._joined: list[bytes] = []  # fragments of each run joined by commas
        self._states: list[Any] = []  # SHA-256 state before each run (None: unknown)

    def encode(
        self, snapshot: Snapshot, *, previous: Snapshot | None = None, changed: str | None = None
    ) -> bytes:
        """The canonical bytes of ``snapshot``.

        Pass ``previous`` (the snapshot this encoder encoded last) and ``changed``
        (the one id whose record was added or replaced) to reuse the rest.
        """
        if (
            previous is not None
            and previous is self._last
            and changed is not None
            and changed in snapshot.records
            and snapshot.host_id == previous.host_id
            and len(snapshot.records) == len(previous.records) + (changed not in previous.records)
        ):
            start = self._update(snapshot.records[changed])
        else:
            self._rebuild(snapshot)
            start = 0
        self._last = snapshot
        return self._finish(start)

    def _rebuild(self, snapshot: Snapshot) -> None:
        self._prefix = b'{"host_id":' + _canonical(snapshot.host_id) + b',"operations":{'
        ids = sorted(snapshot.records)
        self._fragments = {key: _fragment(snapshot.records[key]) for key in ids}
        self._chunks = [ids[at : at + self.CHUNK] for at in range(0, len(ids), self.CHUNK)]
        self._firsts = [chunk[0] for chunk in self._chunks]
        self._joined = [self._join(chunk) for chunk in self._chunks]
        self._states = [None] * len(self._chunks)

    def _join(self, chunk: list[str]) -> bytes:
        fragments = self._fragments
        return b",".join([fragments[key] for key in chunk])

    def _update(self, record: Record) -> int:
        """Take in one added or changed record; the index of the first run to rehash."""
        key = record.id
        self._fragments[key] = _fragment(record)
        if not self._chunks:
            self._chunks, self._firsts = [[key]], [key]
            self._joined, self._states = [self._join([key])], [None]
            return 0
        index = max(bisect_right(self._firsts, key) - 1, 0)
        chunk = self._chunks[index]
        at = bisect_left(chunk, key)
        if at == len(chunk) or chunk[at] != key:
            chunk.insert(at, key)
            self._firsts[index] = chunk[0]
            if len(chunk) > 2 * self.CHUNK:
                head, tail = chunk[: self.CHUNK], chunk[self.CHUNK :]
                self._chunks[index : index + 1] = [head, tail]
                self._firsts[index : index + 1] = [head[0], tail[0]]
                self._joined[index : index + 1] = [self._join(head), self._join(tail)]
                self._states[index : index + 1] = [None, None]
                return index
        self._joined[index] = self._join(chunk)
        return index

    def _finish(self, start: int) -> bytes:
        state = self._states[start] if start < len(self._states) else None
        if state is None:
            start = 0
            hasher = hashlib.sha256(self._prefix)
        else:
            hasher = state.copy()
        last = len(self._joined) - 1
        for index in range(start, last + 1):
            self._states[index] = hasher.copy()
            hasher.update(self._joined[index])
            if index < last:
                hasher.update(b",")
        suffix = b'},"version":' + str(FORMAT_VERSION).encode("ascii") + b"}"
        hasher.update(suffix)
        parts = [b'{"body":', self._prefix]
        for index, joined in enumerate(self._joined):
            if index:
                parts.append(b",")
            parts.append(joined)
        parts += [suffix, b',"sha256":"', hasher.hexdigest().encode("ascii"), b'"}']
        return b"".join(parts)


def _fragment(record: Record) -> bytes:
    return _canonical(record.id) + b":" + _canonical(_record_fields(record))


def decode(data: bytes, *, expected_host_id: str | None = None) -> Snapshot:
    """Parse ``state.json`` bytes, or raise the ``SnapshotError`` naming the defect."""
    if len(data) > MAX_SNAPSHOT_BYTES:
        raise SnapshotTooLarge(f"snapshot is {len(data)} bytes, above {MAX_SNAPSHOT_BYTES}")
    if not data:
        raise SnapshotTruncated("snapshot is empty")
    document = _parse(_text(data))
    _check_nesting(document)
    top = _object(document, "document")
    _check_fields(top, _DOCUMENT_FIELDS, "document")
    body = _object(top["body"], "body")
    _check_version(body)
    _check_fields(body, _BODY_FIELDS, "body")
    snapshot = Snapshot(
        host_id=_field_text(body["host_id"], "host_id", _HOST_ID_PATTERN),
        records=_records(_object(body["operations"], "operations")),
    )
    if len([r for r in snapshot.records.values() if r.state in UNRESOLVED]) > 1:
        raise SnapshotMalformed("more than one unresolved operation")
    checksum = top["sha256"]
    if not isinstance(checksum, str) or not _SHA256_PATTERN.fullmatch(checksum):
        raise SnapshotMalformed("sha256 must be 64 lowercase hex digits")
    canonical_body = _canonical(body)
    if hashlib.sha256(canonical_body).hexdigest() != checksum:
        raise ChecksumMismatch("snapshot body does not match its SHA-256 checksum")
    if _document(canonical_body) != data:
        raise NotCanonical("snapshot is valid JSON but not in canonical form")
    if expected_host_id is not None and snapshot.host_id != expected_host_id:
        raise HostMismatch(
            f"snapshot belongs to host {snapshot.host_id!r}, not {expected_host_id!r}"
        )
    return snapshot


def _argument(what: str, value: object, pattern: re.Pattern[str]) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise InvalidArgument(f"{what} must match {pattern.pattern}, got {value!r}")
    return value


def _canonical(value: object) -> bytes:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def _document(canonical_body: bytes) -> bytes:
    # Equal to _canonical({"body": ..., "sha256": ...}) because "body" sorts first,
    # without encoding a 16 MiB body twice.
    checksum = hashlib.sha256(canonical_body).hexdigest()
    return b'{"body":' + canonical_body + b',"sha256":"' + checksum.encode("ascii") + b'"}'


def _text(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.end >= len(data) and exc.reason == "unexpected end of data":
            raise SnapshotTruncated("snapshot ends inside a UTF-8 character") from None
        raise SnapshotMalformed(f"snapshot is not UTF-8: {exc.reason}") from None


def _unique_object(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result: dict[str, object] = {}
    for key, value in pairs:
        if key in result:
            raise DuplicateKey(f"duplicate key {key!r}")
        result[key] = value
    return result


def _reject_constant(name: str) -> object:
    raise NonFiniteNumber(f"{name} is not allowed")


def _parse(text: str) -> object:
    try:
        return json.loads(text, object_pairs_hook=_unique_object, parse_constant=_reject_constant)
    except SnapshotError:
        raise
    except RecursionError:
        raise NestingTooDeep(f"snapshot nests deeper than {MAX_NESTING} levels") from None
    except json.JSONDecodeError as exc:
        if exc.pos >= len(text) or exc.msg.startswith("Unterminated string"):
            raise SnapshotTruncated(f"snapshot ends early: {exc.msg}") from None
        raise SnapshotMalformed(f"snapshot is not JSON: {exc}") from None
    except ValueError as exc:
        # e.g. an integer beyond int_max_str_digits
        raise SnapshotMalformed(f"snapshot is not JSON: {exc}") from None


def _check_nesting(document: object) -> None:
    pending: list[tuple[object, int]] = [(document, 1)]
    while pending:
        value, depth = pending.pop()
        children: list[object]
        if isinstance(value, dict):
            children = list(value.values())
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > MAX_NESTING:
            raise NestingTooDeep(f"snapshot nests deeper than {MAX_NESTING} levels")
        pending.extend((child, depth + 1) for child in children)


def _object(value: object, where: str) -> dict[str, object]:
    if not isinstance(value, dict):
        raise SnapshotMalformed(f"{where} must be a JSON object")
    return value


def _check_fields(value: Mapping[str, object], expected: frozenset[str], where: str) -> None:
    unknown = sorted(set(value) - expected)
    if unknown:
        raise UnknownField(f"{where} has unknown field(s) {unknown}")
    missing = sorted(expected - set(value))
    if missing:
        raise MissingField(f"{where} lacks field(s) {missing}")


def _check_version(body: Mapping[str, object]) -> None:
    if "version" not in body:
        raise MissingField("body lacks field ['version']")
    version = body["version"]
    if type(version) is not int or version != FORMAT_VERSION:
        raise UnsupportedVersion(f"snapshot version {version!r} is not {FORMAT_VERSION}")


def _field_text(value: object, where: str, pattern: re.Pattern[str]) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise SnapshotMalformed(f"{where} must match {pattern.pattern}")
    return value


def _timestamp(value: object, where: str) -> str:
    text = _field_text(value, where, _TIMESTAMP_PATTERN)
    try:
        # The pattern fixed the layout; this checks the ranges (month 13, Feb 30).
        datetime.fromisoformat(text[:-1])
    except ValueError:
        raise SnapshotMalformed(f"{where} is not a valid UTC timestamp") from None
    return text


def _records(operations: Mapping[str, object]) -> dict[str, Record]:
    records: dict[str, Record] = {}
    for key, value in operations.items():
        where = f"operation {key!r}"
        fields = _object(value, where)
        _check_fields(fields, _RECORD_FIELDS, where)
        state_name = fields["state"]
        if not isinstance(state_name, str) or state_name not in _STATE_NAMES:
            raise SnapshotMalformed(f"{where}: unknown state {state_name!r}")
        revision = fields["revision"]
        if type(revision) is not int or not 1 <= revision <= MAX_REVISION:
            raise SnapshotMalformed(f"{where}: revision must be an integer in 1..{MAX_REVISION}")
        records[key] = Record(
            id=_field_text(key, f"{where} id", _ID_PATTERN),
            plan_hash=_field_text(fields["plan_hash"], f"{where} plan_hash", _ID_PATTERN),
            state=State(state_name),
            revision=revision,
            created_at=_timestamp(fields["created_at"], f"{where} created_at"),
            updated_at=_timestamp(fields["updated_at"], f"{where} updated_at"),
        )
    return records
