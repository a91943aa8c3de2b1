"""The canonical ``state.json`` format: records, encoding, decoding. Pure, no I/O.

A snapshot file is one canonical JSON document (sorted keys, no insignificant
whitespace, UTF-8, no trailing newline)::

    {"body":{"host_id":"runner-1",
             "operations":{"op-2":{"created_at":"2026-01-02T03:04:05.000000Z",
                                   "plan_hash":"9f86d0...","revision":2,
                                   "state":"running",
                                   "updated_at":"2026-01-02T03:04:06.000000Z"}},
             "tombstones":{"op-1":["5e8841...",3,"succeeded",
                                   "2026-01-01T00:00:00.000000Z"]},
             "version":3},
     "sha256":"<hex SHA-256 checksum of the body, see below>"}

(shown wrapped here; on disk it is one line). Decoding accepts exactly the bytes
``encode`` produces for some valid snapshot and rejects everything else with a
distinct ``SnapshotError`` subclass. The checksum detects accidents (torn or
edited files), it is not authentication.

A *tombstone* (``tombstones``, ADR 0018) is what compaction keeps of a finished
record: ``[plan_hash, revision, state, updated_at]``, enough for ``begin`` to
replay the outcome or refuse another plan hash. An id is in ``operations`` or in
``tombstones``, never in both.

Checksums. Version 3 (written) hashes the body in 256 buckets so that a change
rehashes one bucket, not the whole body:

- each record's or tombstone's *fragment* is its canonical member of
  ``operations`` or ``tombstones``, ``"<id>":{...}`` or ``"<id>":[...]``,
  exactly as it appears in the body;
- it belongs to bucket ``SHA-256(id)[0]`` (the first byte, 0..255);
- a bucket's digest is ``SHA-256`` of its fragments in id order joined by
  ``,`` (an empty bucket hashes the empty string);
- ``sha256`` is the hex ``SHA-256`` of the canonical header
  ``{"buckets":256,"host_id":"<host>","version":3}`` followed by the 256
  raw 32-byte bucket digests in bucket order.

Version 2 (still read, never written) is the same without ``tombstones`` and
with ``"version":2`` in body and header. Version 1 (still read, never written)
has no ``tombstones`` either, and its checksum is the hex ``SHA-256`` of the
canonical encoding of ``body``. Either way every byte of the document is covered: the
checksum covers the canonical data, and decoding requires the file to be that
canonical encoding byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from math import isqrt
from typing import Final

from durable_ops.hoststore.errors import (
    ChecksumMismatch,
    DuplicateKey,
    HostMismatch,
    InvalidInput,
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
from durable_ops.hoststore.transitions import MAX_REVISION, TERMINAL, UNRESOLVED, State

# The version every save writes. Versions 1 and 2 have no tombstones and are still
# read (see the module docstring); the next save rewrites them as version 3.
FORMAT_VERSION: Final = 3
READABLE_VERSIONS: Final = frozenset({1, 2, 3})
CHECKSUM_BUCKETS: Final = 256
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
_BODY_FIELDS: Final = {
    1: frozenset({"host_id", "operations", "version"}),
    2: frozenset({"host_id", "operations", "version"}),
    3: frozenset({"host_id", "operations", "tombstones", "version"}),
}
_TERMINAL_NAMES: Final = frozenset(state.value for state in TERMINAL)
_RECORD_FIELDS: Final = frozenset({"created_at", "plan_hash", "revision", "state", "updated_at"})
_DIGEST_SIZE: Final = 32
# Text that canonical JSON (ensure_ascii=False) copies between its quotes unescaped.
_PLAIN_TEXT: Final = re.compile(r'[^"\\\x00-\x1f]*')


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
class Tombstone:
    """What compaction keeps of a terminal record (ADR 0018): enough to answer ``begin``.

    ``updated_at`` is when the record reached its final ``state`` at ``revision``;
    its ``created_at`` is not kept.
    """

    id: str
    plan_hash: str
    state: State
    revision: int
    updated_at: str


class RecordMap(Mapping[str, Record]):
    """An immutable id -> record mapping that shares its bulk with the one it came from.

    ``with_record`` does not copy the whole map: the bulk (``base``) is shared and
    never mutated, and only the records changed since it was last merged
    (``recent``) are copied. Once ``recent`` outgrows ``max(FLATTEN_AT, sqrt(len))``
    the two are merged into a new base, so a change costs O(sqrt(len)) amortized
    instead of O(len), and a lookup is at most two dict probes. (Copying a
    10,000-entry dict and freeing the old one on every change touched every record.)
    """

    __slots__ = ("_base", "_length", "_recent")
    FLATTEN_AT = 64

    def __init__(self, base: Mapping[str, Record] | None = None) -> None:
        self._base: dict[str, Record] = dict(base) if base is not None else {}
        self._recent: dict[str, Record] = {}
        self._length = len(self._base)

    def with_record(self, record: Record) -> RecordMap:
        key = record.id
        following = RecordMap.__new__(RecordMap)
        following._length = self._length + (key not in self)
        recent = {**self._recent, key: record}
        if len(recent) > max(self.FLATTEN_AT, isqrt(self._length)):
            following._base, following._recent = {**self._base, **recent}, {}
        else:
            following._base, following._recent = self._base, recent
        return following

    def __getitem__(self, key: str) -> Record:
        recent = self._recent
        return recent[key] if key in recent else self._base[key]

    def get(self, key: str, default: Record | None = None) -> Record | None:  # type: ignore[override]
        found = self._recent.get(key)
        return found if found is not None else self._base.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._recent or key in self._base

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[str]:
        # Like a dict: a replaced record keeps its place, an added one comes last.
        recent = self._recent
        yield from self._base
        yield from (key for key in recent if key not in self._base)

    def __repr__(self) -> str:
        return f"RecordMap({dict(self)!r})"


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The whole store: host identity, the live records and the tombstones, by id.

    Neither mapping is mutated after construction; changes build a new snapshot
    (``with_record``, or ``retention.compact`` and ``retention.forget``).
    """

    host_id: str
    records: Mapping[str, Record]
    tombstones: Mapping[str, Tombstone] = field(default_factory=dict)
    # (the unresolved record or None) once known; None until then. Not part of the value.
    _unresolved: tuple[Record | None] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def unresolved(self) -> Record | None:
        known = self._unresolved
        if known is not None:
            return known[0]
        found = [r for r in self.records.values() if r.state in UNRESOLVED]
        if len(found) > 1:
            # Never produced by the rules (decode refuses it too); do not cache it.
            return found[0]
        result = found[0] if found else None
        object.__setattr__(self, "_unresolved", (result,))
        return result

    def with_record(self, record: Record) -> Snapshot:
        """A new snapshot with ``record`` added or replaced; this one is left unchanged.

        What ``unresolved`` answers is carried over, so a store retaining many
        records need not scan them all on every ``begin``.
        """
        records = self.records
        if not isinstance(records, RecordMap):
            records = RecordMap(records)  # one copy, then shared from snapshot to snapshot
        following = Snapshot(self.host_id, records.with_record(record), self.tombstones)
        known = self._unresolved
        if known is not None:
            # ``known`` says at most one record is unresolved, and which one.
            previous = known[0]
            carried: tuple[Record | None] | None
            if record.state in UNRESOLVED:
                carried = (record,) if previous is None or previous.id == record.id else None
            elif previous is not None and previous.id == record.id:
                carried = (None,)
            else:
                carried = known
            object.__setattr__(following, "_unresolved", carried)
        return following


@dataclass(frozen=True, slots=True)
class Encoded:
    """A canonical document as the pieces it is made of: write them in order.

    ``b"".join(parts)`` is the document; keeping the pieces lets a store that
    retains many records write them without first copying them into one object.
    """

    parts: tuple[bytes, ...]
    size: int

    @classmethod
    def of(cls, data: bytes) -> Encoded:
        return cls((data,), len(data))

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        return b"".join(self.parts)


def operation_id(value: object) -> str:
    return _argument("operation id", value, _ID_PATTERN)


def plan_hash(value: object) -> str:
    return _argument("plan hash", value, _ID_PATTERN)


def host_id(value: object) -> str:
    return _argument("host id", value, _HOST_ID_PATTERN)


def format_timestamp(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise InvalidInput("timestamps must be timezone-aware")
    # Every timestamp has the same width, which the growth reserve assumes: isoformat
    # pads the year to four digits (strftime("%Y") does not below 1000 on glibc) and,
    # with timespec, always writes the microseconds; the offset of UTC is "+00:00".
    return moment.astimezone(UTC).isoformat(timespec="microseconds")[:-6] + "Z"


def encode(snapshot: Snapshot, *, version: int = FORMAT_VERSION) -> bytes:
    """The canonical document, from scratch: the reference the incremental encoder matches.

    ``version=1`` or ``2`` writes an older format (no tombstones); only tests of
    reading old files use them.
    """
    if version not in READABLE_VERSIONS:
        raise InvalidInput(f"cannot encode format version {version!r}")
    if version < 3 and snapshot.tombstones:
        raise InvalidInput(f"format version {version} cannot hold tombstones")
    body: dict[str, object] = {
        "host_id": snapshot.host_id,
        "operations": {record.id: _record_fields(record) for record in snapshot.records.values()},
        "version": version,
    }
    if version >= 3:
        body["tombstones"] = {t.id: _tombstone_fields(t) for t in snapshot.tombstones.values()}
    canonical_body = _canonical(body)
    if version == 1:
        checksum = _checksum_v1(canonical_body)
    else:
        checksum = bucket_checksum(
            snapshot.host_id, snapshot.records.values(), snapshot.tombstones.values(), version
        )
    return _document(canonical_body, checksum)


def bucket_of(operation_id: str) -> int:
    """The checksum bucket of a record: the first byte of SHA-256 of its id."""
    return hashlib.sha256(operation_id.encode("utf-8")).digest()[0]


def bucket_checksum(
    host: str,
    records: Iterable[Record],
    tombstones: Iterable[Tombstone] = (),
    version: int = FORMAT_VERSION,
) -> str:
    """The version 2 or 3 checksum of a body, computed from scratch.

    Version 2 bodies hold no tombstones; the rule is the same with the header's version.
    """
    members = [(record.id, _fragment(record)) for record in records]
    members += [(tombstone.id, _tombstone_fragment(tombstone)) for tombstone in tombstones]
    members.sort()  # so every bucket comes out in id order (an id is in one section only)
    buckets: list[list[bytes]] = [[] for _ in range(CHECKSUM_BUCKETS)]
    for key, fragment in members:
        buckets[bucket_of(key)].append(fragment)
    digests = b"".join(hashlib.sha256(b",".join(bucket)).digest() for bucket in buckets)
    return _combine_buckets(_bucket_header(host, version), digests)


def _bucket_header(host: str, version: int) -> bytes:
    return _canonical({"buckets": CHECKSUM_BUCKETS, "host_id": host, "version": version})


def _combine_buckets(header: bytes, digests: bytes | bytearray) -> str:
    hasher = hashlib.sha256(header)
    hasher.update(digests)
    return hasher.hexdigest()


def _checksum_v1(canonical_body: bytes) -> str:
    return hashlib.sha256(canonical_body).hexdigest()


def _record_fields(record: Record) -> dict[str, object]:
    return {
        "created_at": record.created_at,
        "plan_hash": record.plan_hash,
        "revision": record.revision,
        "state": record.state.value,
        "updated_at": record.updated_at,
    }


def _tombstone_fields(tombstone: Tombstone) -> list[object]:
    return [tombstone.plan_hash, tombstone.revision, tombstone.state.value, tombstone.updated_at]


class IncrementalEncoder:
    """``encode`` for a sequence of snapshots that each differ from the last by one record.

    A store that retains many records rewrites all of them on every change; this
    keeps the canonical bytes of every record twice over: in sorted runs (joined,
    ready to write in body order) and in the checksum buckets, with each bucket's
    digest. A change re-encodes one record, re-joins one run, rehashes one bucket
    (about 1/256 of the body) and the 8 KiB of bucket digests. The tombstones
    change only at compaction; they are kept joined, as one piece, and in the
    same buckets. The bytes are exactly those of ``encode`` (the tests compare
    them). Any snapshot that is not "the previous one plus or with one changed
    record, with the same tombstones" is encoded from scratch.
    """

    CHUNK = 32

    def __init__(self) -> None:
        self._last: Snapshot | None = None
        self._head = b""  # b'{"body":{"host_id":...,"operations":{'
        self._tail = b""  # b'},"tombstones":{...},"version":3},"sha256":"'
        self._header = hashlib.sha256()  # SHA-256 state after the checksum header
        # The records in id order, split into runs of CHUNK to 2 * CHUNK: their ids,
        # their fragments (b'"id":{...}'; every run but the first starts with b"", so
        # that joining by commas gives it a leading comma) and the two joined, so
        # that head + runs + tail is the document.
        self._run_ids: list[list[str]] = []
        self._run_fragments: list[list[bytes]] = []
        self._joined: list[bytes] = []
        self._firsts: list[str] = []  # first id of each run, for bisect
        self._size = 0  # total length of self._joined
        # The same fragments by checksum bucket, in id order, and each bucket's digest.
        self._bucket_of: dict[str, int] = {}  # id -> its bucket, hashed once
        self._bucket_ids: list[list[str]] = []
        self._bucket_fragments: list[list[bytes]] = []
        self._digests = bytearray()  # the 32-byte digest of each bucket, in order

    def encode(
        self, snapshot: Snapshot, *, previous: Snapshot | None = None, changed: str | None = None
    ) -> bytes:
        """The canonical bytes of ``snapshot``; see ``encode_parts``."""
        return bytes(self.encode_parts(snapshot, previous=previous, changed=changed))

    def encode_parts(
        self, snapshot: Snapshot, *, previous: Snapshot | None = None, changed: str | None = None
    ) -> Encoded:
        """The canonical document of ``snapshot``, in pieces.

        Pass ``previous`` (the snapshot this encoder encoded last) and ``changed``
        (the one id whose record was added or replaced) to reuse the rest.
        """
        if (
            previous is not None
            and previous is self._last
            and changed is not None
            and changed in snapshot.records
            and snapshot.host_id == previous.host_id
            and snapshot.tombstones is previous.tombstones
            and len(snapshot.records) == len(previous.records) + (changed not in previous.records)
        ):
            self._update(snapshot.records[changed])
        else:
            self._rebuild(snapshot)
        self._last = snapshot
        hasher = self._header.copy()
        hasher.update(self._digests)
        checksum = hasher.hexdigest().encode("ascii")
        head, tail = self._head, self._tail
        return Encoded(
            # The tail (which holds every tombstone) is a piece of its own, never copied.
            (head, *self._joined, tail, checksum + b'"}'),
            len(head) + self._size + len(tail) + len(checksum) + 2,
        )

    def _rebuild(self, snapshot: Snapshot) -> None:
        host = _canonical(snapshot.host_id)
        self._head = b'{"body":{"host_id":' + host + b',"operations":{'
        tombstones = snapshot.tombstones
        buried = sorted(tombstones)
        buried_fragments = [_tombstone_fragment(tombstones[key]) for key in buried]
        self._tail = (
            b'},"tombstones":{'
            + b",".join(buried_fragments)
            + b'},"version":'
            + str(FORMAT_VERSION).encode("ascii")
            + b'},"sha256":"'
        )
        self._header = hashlib.sha256(_bucket_header(snapshot.host_id, FORMAT_VERSION))
        records = snapshot.records
        ids = sorted(records)
        fragments = [_fragment(records[key]) for key in ids]
        size = self.CHUNK
        self._run_ids = [ids[at : at + size] for at in range(0, len(ids), size)]
        self._run_fragments = [
            ([b""] if at else []) + fragments[at : at + size] for at in range(0, len(ids), size)
        ]
        self._joined = [b",".join(run) for run in self._run_fragments]
        self._firsts = [run[0] for run in self._run_ids]
        self._size = sum(map(len, self._joined))
        members = sorted(
            [*zip(ids, fragments, strict=True), *zip(buried, buried_fragments, strict=True)]
        )
        self._bucket_of = {key: bucket_of(key) for key, _ in members}
        self._bucket_ids = [[] for _ in range(CHECKSUM_BUCKETS)]
        self._bucket_fragments = [[] for _ in range(CHECKSUM_BUCKETS)]
        for key, fragment in members:  # in id order
            bucket = self._bucket_of[key]
            self._bucket_ids[bucket].append(key)
            self._bucket_fragments[bucket].append(fragment)
        self._digests = bytearray(
            b"".join(
                hashlib.sha256(b",".join(bucket)).digest() for bucket in self._bucket_fragments
            )
        )

    def _update(self, record: Record) -> None:
        """Take in one added or changed record."""
        key = record.id
        fragment = _fragment(record)
        bucket = self._bucket_of.get(key)
        added = bucket is None
        if not self._run_ids:
            self._run_ids, self._run_fragments, self._joined = [[]], [[]], [b""]
            self._firsts, self._size = [key], 0
        # Its run: replace or insert the fragment and join the run again.
        index = max(bisect_right(self._firsts, key) - 1, 0)
        ids, fragments = self._run_ids[index], self._run_fragments[index]
        at = bisect_left(ids, key)
        lead = 1 if index else 0
        if added:
            ids.insert(at, key)
            fragments.insert(at + lead, fragment)
            self._firsts[index] = ids[0]
        else:
            fragments[at + lead] = fragment
        if len(ids) > 2 * self.CHUNK:
            self._split(index)
        else:
            joined = b",".join(fragments)
            self._size += len(joined) - len(self._joined[index])
            self._joined[index] = joined
        # Its checksum bucket: the same, then the bucket's digest.
        if bucket is None:
            bucket = self._bucket_of[key] = bucket_of(key)
            members = self._bucket_ids[bucket]
            at = bisect_left(members, key)
            members.insert(at, key)
            self._bucket_fragments[bucket].insert(at, fragment)
        else:
            at = bisect_left(self._bucket_ids[bucket], key)
            self._bucket_fragments[bucket][at] = fragment
        digest = hashlib.sha256(b",".join(self._bucket_fragments[bucket])).digest()
        self._digests[bucket * _DIGEST_SIZE : (bucket + 1) * _DIGEST_SIZE] = digest

    def _split(self, index: int) -> None:
        """Cut the run at ``index``, grown to more than 2 * CHUNK ids, into two."""
        ids, fragments = self._run_ids[index], self._run_fragments[index]
        cut, lead = self.CHUNK, 1 if index else 0
        halves = [fragments[: cut + lead], [b"", *fragments[cut + lead :]]]
        joined = [b",".join(half) for half in halves]
        self._size += sum(map(len, joined)) - len(self._joined[index])
        self._run_ids[index : index + 1] = [ids[:cut], ids[cut:]]
        self._run_fragments[index : index + 1] = halves
        self._joined[index : index + 1] = joined
        self._firsts[index : index + 1] = [ids[0], ids[cut]]


def _fragment(record: Record) -> bytes:
    """``"<id>":{...}``: the record's canonical member of ``operations``."""
    key, plan, created, updated = record.id, record.plan_hash, record.created_at, record.updated_at
    if (
        type(record.revision) is int
        and type(key) is str
        and type(plan) is str
        and type(created) is str
        and type(updated) is str
        and _PLAIN_TEXT.fullmatch(key + plan + created + updated)
    ):
        # What json.dumps gives for strings it copies verbatim, several times faster.
        return (
            f'"{key}":{{"created_at":"{created}","plan_hash":"{plan}",'
            f'"revision":{record.revision},"state":"{record.state.value}",'
            f'"updated_at":"{updated}"}}'
        ).encode()
    return _canonical_fragment(record)


def _canonical_fragment(record: Record) -> bytes:
    return _canonical(record.id) + b":" + _canonical(_record_fields(record))


def _tombstone_fragment(tombstone: Tombstone) -> bytes:
    """``"<id>":[plan_hash,revision,state,updated_at]``: its canonical member of ``tombstones``."""
    key, plan, updated = tombstone.id, tombstone.plan_hash, tombstone.updated_at
    if (
        type(tombstone.revision) is int
        and type(key) is str
        and type(plan) is str
        and type(updated) is str
        and _PLAIN_TEXT.fullmatch(key + plan + updated)
    ):
        return (
            f'"{key}":["{plan}",{tombstone.revision},"{tombstone.state.value}","{updated}"]'
        ).encode()
    return _canonical_tombstone_fragment(tombstone)


def _canonical_tombstone_fragment(tombstone: Tombstone) -> bytes:
    return _canonical(tombstone.id) + b":" + _canonical(_tombstone_fields(tombstone))


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
    version = _check_version(body)
    _check_fields(body, _BODY_FIELDS[version], "body")
    snapshot = Snapshot(
        host_id=_field_text(body["host_id"], "host_id", _HOST_ID_PATTERN),
        records=_records(_object(body["operations"], "operations")),
        tombstones=(_tombstones(_object(body["tombstones"], "tombstones")) if version >= 3 else {}),
    )
    if len([r for r in snapshot.records.values() if r.state in UNRESOLVED]) > 1:
        raise SnapshotMalformed("more than one unresolved operation")
    both = sorted(snapshot.records.keys() & snapshot.tombstones.keys())
    if both:
        raise SnapshotMalformed(f"operation(s) {both[:3]} are both live and tombstones")
    checksum = top["sha256"]
    if not isinstance(checksum, str) or not _SHA256_PATTERN.fullmatch(checksum):
        raise SnapshotMalformed("sha256 must be 64 lowercase hex digits")
    canonical_body = _canonical(body)
    if version == 1:
        expected = _checksum_v1(canonical_body)
    else:
        expected = bucket_checksum(
            snapshot.host_id, snapshot.records.values(), snapshot.tombstones.values(), version
        )
    if expected != checksum:
        raise ChecksumMismatch("snapshot body does not match its SHA-256 checksum")
    if _document(canonical_body, checksum) != data:
        raise NotCanonical("snapshot is valid JSON but not in canonical form")
    if expected_host_id is not None and snapshot.host_id != expected_host_id:
        raise HostMismatch(
            f"snapshot belongs to host {snapshot.host_id!r}, not {expected_host_id!r}"
        )
    return snapshot


def _argument(what: str, value: object, pattern: re.Pattern[str]) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise InvalidInput(f"{what} must match {pattern.pattern}, got {value!r}")
    return value


def _canonical(value: object) -> bytes:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def _document(canonical_body: bytes, checksum: str) -> bytes:
    # Equal to _canonical({"body": ..., "sha256": ...}) because "body" sorts first,
    # without encoding a 16 MiB body twice.
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


def _check_version(body: Mapping[str, object]) -> int:
    if "version" not in body:
        raise MissingField("body lacks field ['version']")
    version = body["version"]
    if type(version) is not int or version not in READABLE_VERSIONS:
        raise UnsupportedVersion(
            f"snapshot version {version!r} is not one of {sorted(READABLE_VERSIONS)}"
        )
    return version


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


def _tombstones(section: Mapping[str, object]) -> dict[str, Tombstone]:
    tombstones: dict[str, Tombstone] = {}
    for key, value in section.items():
        where = f"tombstone {key!r}"
        if not isinstance(value, list) or len(value) != 4:
            raise SnapshotMalformed(f"{where} must be [plan_hash, revision, state, updated_at]")
        plan, revision, state_name, updated = value
        if not isinstance(state_name, str) or state_name not in _TERMINAL_NAMES:
            raise SnapshotMalformed(f"{where}: {state_name!r} is not a terminal state")
        # Every terminal state is at least one transition away from the first revision.
        if type(revision) is not int or not 2 <= revision <= MAX_REVISION:
            raise SnapshotMalformed(f"{where}: revision must be an integer in 2..{MAX_REVISION}")
        tombstones[key] = Tombstone(
            id=_field_text(key, f"{where} id", _ID_PATTERN),
            plan_hash=_field_text(plan, f"{where} plan_hash", _ID_PATTERN),
            state=State(state_name),
            revision=revision,
            updated_at=_timestamp(updated, f"{where} updated_at"),
        )
    return tombstones
