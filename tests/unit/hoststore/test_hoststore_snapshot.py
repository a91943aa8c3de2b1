"""The canonical state.json format: round trips and one distinct error per defect."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durable_ops.hoststore import errors
from durable_ops.hoststore.snapshot import (
    MAX_SNAPSHOT_BYTES,
    Record,
    Snapshot,
    Tombstone,
    _canonical_fragment,
    _canonical_tombstone_fragment,
    _fragment,
    _tombstone_fragment,
    decode,
    encode,
    format_timestamp,
)
from durable_ops.hoststore.transitions import TERMINAL, UNRESOLVED, State

T0 = "2026-01-02T03:04:05.000006Z"
T1 = "2026-01-02T03:04:07.123456Z"


def _sample() -> Snapshot:
    return Snapshot(
        host_id="runner-1",
        records={
            "op-1": Record("op-1", "a" * 64, State.SUCCEEDED, 3, T0, T1),
            "op-2": Record("op-2", "sha256:beef", State.RUNNING, 2, T0, T1),
        },
    )


def _sample_with_tombstones() -> Snapshot:
    return Snapshot(
        host_id="runner-1",
        records=dict(_sample().records),
        tombstones={
            "op-0": Tombstone("op-0", "b" * 64, State.CANCELLED, 2, T0),
            "op-3": Tombstone("op-3", "plan-3", State.FAILED_RECOVERED, 4, T1),
        },
    )


def _body(snapshot: Snapshot) -> dict[str, Any]:
    document = json.loads(encode(snapshot))
    body: dict[str, Any] = document["body"]
    return body


def _json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _v1_checksum(body: object) -> str:
    """Format version 1: SHA-256 of the canonical body."""
    return hashlib.sha256(_json(body)).hexdigest()


def _bucket_checksum(body: dict[str, Any]) -> str:
    """Format versions 2 and 3, written out from docs/hoststore.md apart from the product.

    Bucket of a member: the first byte of SHA-256 of its id. Bucket digest: SHA-256
    of its canonical '"id":{...}' (operations) and '"id":[...]' (tombstones, version
    3) members in id order joined by ','. Checksum: SHA-256 of the canonical header
    followed by the 256 raw bucket digests.
    """
    members = {**body["operations"], **body.get("tombstones", {})}
    buckets: list[list[bytes]] = [[] for _ in range(256)]
    for key in sorted(members):
        member = _json(key) + b":" + _json(members[key])
        buckets[hashlib.sha256(key.encode()).digest()[0]].append(member)
    header = _json({"buckets": 256, "host_id": body["host_id"], "version": body["version"]})
    digests = b"".join(hashlib.sha256(b",".join(bucket)).digest() for bucket in buckets)
    return hashlib.sha256(header + digests).hexdigest()


def _checksum(body: Any) -> str:
    if isinstance(body, dict) and body.get("version") in (2, 3):
        try:
            return _bucket_checksum(body)
        except (KeyError, TypeError, AttributeError):
            pass  # not shaped like a body: any checksum will do, decoding refuses it first
    return _v1_checksum(body)


def _sealed(body: object, **extra: object) -> bytes:
    """A canonical document around ``body`` with a correct checksum, as a writer would make it."""
    document = {"body": body, "sha256": _checksum(body), **extra}
    return _json(document)


# Written by the version 1 encoder (before format version 2) for _sample(); kept
# verbatim so that reading old files stays tested against real old bytes.
V1_DOCUMENT = (
    b'{"body":{"host_id":"runner-1","operations":{"op-1":{"created_at":'
    b'"2026-01-02T03:04:05.000006Z","plan_hash":'
    b'"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","revision":3,'
    b'"state":"succeeded","updated_at":"2026-01-02T03:04:07.123456Z"},"op-2":{"created_at":'
    b'"2026-01-02T03:04:05.000006Z","plan_hash":"sha256:beef","revision":2,"state":"running",'
    b'"updated_at":"2026-01-02T03:04:07.123456Z"}},"version":1},'
    b'"sha256":"973d1bf7930d3d38102a22566f9d14b4ba422f483ba945c146813164794f62f9"}'
)
# Written by the version 2 encoder (before format version 3) for _sample(), likewise.
V2_DOCUMENT = (
    b'{"body":{"host_id":"runner-1","operations":{"op-1":{"created_at":'
    b'"2026-01-02T03:04:05.000006Z","plan_hash":'
    b'"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","revision":3,'
    b'"state":"succeeded","updated_at":"2026-01-02T03:04:07.123456Z"},"op-2":{"created_at":'
    b'"2026-01-02T03:04:05.000006Z","plan_hash":"sha256:beef","revision":2,"state":"running",'
    b'"updated_at":"2026-01-02T03:04:07.123456Z"}},"version":2},'
    b'"sha256":"a2873857aef0b6064c3cc5f39811fe3a05c99a22e7e86295b93bd5ac12568947"}'
)


def test_round_trip_is_exact() -> None:
    data = encode(_sample())
    assert decode(data, expected_host_id="runner-1") == _sample()
    assert encode(decode(data)) == data


def test_encoding_is_canonical_json() -> None:
    data = encode(_sample())
    document = json.loads(data)
    assert data == json.dumps(document, sort_keys=True, separators=(",", ":")).encode("utf-8")
    assert not data.endswith(b"\n")
    assert document["body"]["version"] == 3
    assert document["body"]["tombstones"] == {}
    assert document["sha256"] == _bucket_checksum(document["body"])
    assert document["body"]["host_id"] == "runner-1"


def test_tombstones_are_encoded_as_documented() -> None:
    data = encode(_sample_with_tombstones())
    assert decode(data, expected_host_id="runner-1") == _sample_with_tombstones()
    document = json.loads(data)
    assert document["body"]["tombstones"] == {
        "op-0": ["b" * 64, 2, "cancelled", T0],
        "op-3": ["plan-3", 4, "failed_recovered", T1],
    }
    assert document["sha256"] == _bucket_checksum(document["body"])
    assert b'"tombstones":{"op-0":["' + b"b" * 64 + b'",2,"cancelled","' in data


def test_older_versions_cannot_hold_tombstones() -> None:
    for version in (1, 2):
        with pytest.raises(errors.InvalidInput):
            encode(_sample_with_tombstones(), version=version)


def test_version_2_documents_are_still_read() -> None:
    assert decode(V2_DOCUMENT, expected_host_id="runner-1") == _sample()
    assert encode(_sample(), version=2) == V2_DOCUMENT
    assert json.loads(V2_DOCUMENT)["sha256"] == _bucket_checksum(json.loads(V2_DOCUMENT)["body"])
    rewritten = json.loads(encode(decode(V2_DOCUMENT)))
    assert rewritten["body"] == {**json.loads(V2_DOCUMENT)["body"], "version": 3, "tombstones": {}}
    with pytest.raises(errors.ChecksumMismatch):
        decode(V2_DOCUMENT.replace(b'"revision":3', b'"revision":4'))
    with pytest.raises(errors.UnknownField):
        decode(_sealed({**json.loads(V2_DOCUMENT)["body"], "tombstones": {}}))


def test_version_1_documents_are_still_read() -> None:
    assert decode(V1_DOCUMENT, expected_host_id="runner-1") == _sample()
    assert encode(_sample(), version=1) == V1_DOCUMENT
    assert json.loads(V1_DOCUMENT)["sha256"] == _v1_checksum(json.loads(V1_DOCUMENT)["body"])
    # Written again, it becomes version 3: the version, tombstones and the checksum differ.
    rewritten = encode(decode(V1_DOCUMENT))
    assert rewritten == encode(_sample())
    assert json.loads(rewritten)["body"] == {
        **json.loads(V1_DOCUMENT)["body"],
        "version": 3,
        "tombstones": {},
    }


def test_version_1_documents_keep_their_own_checks() -> None:
    with pytest.raises(errors.ChecksumMismatch):
        decode(V1_DOCUMENT.replace(b'"revision":3', b'"revision":4'))
    with pytest.raises(errors.HostMismatch):
        decode(V1_DOCUMENT, expected_host_id="runner-2")
    with pytest.raises(errors.SnapshotTruncated):
        decode(V1_DOCUMENT[:-1])
    with pytest.raises(errors.NotCanonical):
        decode(V1_DOCUMENT + b" ")


def test_each_checksum_is_bound_to_its_version() -> None:
    v1_as_v2 = V1_DOCUMENT.replace(b'"version":1', b'"version":2')
    v2_as_v1 = V2_DOCUMENT.replace(b'"version":2', b'"version":1')
    # A version 3 checksum on the same records labelled version 2 (the header differs).
    v3_as_v2 = encode(_sample()).replace(b'},"tombstones":{},"version":3}', b'},"version":2}')
    assert json.loads(v3_as_v2)["body"]["version"] == 2
    v2_as_v3 = V2_DOCUMENT.replace(b'},"version":2}', b'},"tombstones":{},"version":3}')
    assert json.loads(v2_as_v3)["body"]["tombstones"] == {}
    for data in (v1_as_v2, v2_as_v1, v3_as_v2, v2_as_v3):
        with pytest.raises(errors.ChecksumMismatch):
            decode(data)


def test_a_change_rehashes_only_its_bucket() -> None:
    """What makes version 2 cheap: records outside the changed one's bucket do not matter."""
    many = {f"op-{i}": Record(f"op-{i}", "h", State.SUCCEEDED, 3, T0, T1) for i in range(600)}
    body = _body(Snapshot("runner-1", many))
    assert json.loads(encode(Snapshot("runner-1", many)))["sha256"] == _bucket_checksum(body)
    buckets = {hashlib.sha256(key.encode()).digest()[0] for key in many}
    assert len(buckets) > 200, "600 ids spread over most of the 256 buckets"


def test_empty_store_round_trips() -> None:
    empty = Snapshot(host_id="h", records={})
    assert decode(encode(empty)) == empty


def _with_record_field(name: str, value: object) -> bytes:
    body = _body(_sample())
    body["operations"]["op-1"][name] = value
    return _sealed(body)


def _without_record_field(name: str) -> bytes:
    body = _body(_sample())
    del body["operations"]["op-1"][name]
    return _sealed(body)


def _with_body(**changes: object) -> bytes:
    body = _body(_sample())
    body.update(changes)
    return _sealed(body)


def _changed_body() -> bytes:
    data = encode(_sample())
    assert data.count(b'"succeeded"') == 1
    return data.replace(b'"succeeded"', b'"cancelled"')


def _with_tombstone(value: object) -> bytes:
    body = _body(_sample_with_tombstones())
    body["tombstones"]["op-0"] = value
    return _sealed(body)


def _deeply_nested(depth: int) -> bytes:
    return encode(_sample()).replace(b'"revision":3', b'"revision":' + b"[" * depth + b"]" * depth)


CASES: dict[str, tuple[bytes, type[errors.SnapshotError]]] = {
    "unknown top-level field": (
        _sealed(_body(_sample()), comment="hi"),
        errors.UnknownField,
    ),
    "unknown body field": (_with_body(pruned=True), errors.UnknownField),
    "unknown record field": (_with_record_field("owner", "x"), errors.UnknownField),
    "missing record field": (_without_record_field("updated_at"), errors.MissingField),
    "missing version": (
        _sealed({k: v for k, v in _body(_sample()).items() if k != "version"}),
        errors.MissingField,
    ),
    "duplicate body key": (
        encode(_sample()).replace(b'{"body":{', b'{"body":{"version":1,', 1),
        errors.DuplicateKey,
    ),
    "duplicate operation id": (
        encode(_sample()).replace(
            b'"operations":{', b'"operations":{"op-2":' + json.dumps({}).encode() + b",", 1
        ),
        errors.DuplicateKey,
    ),
    "NaN": (encode(_sample()).replace(b'"revision":3', b'"revision":NaN'), errors.NonFiniteNumber),
    "Infinity": (
        encode(_sample()).replace(b'"revision":3', b'"revision":Infinity'),
        errors.NonFiniteNumber,
    ),
    "-Infinity": (
        encode(_sample()).replace(b'"revision":3', b'"revision":-Infinity'),
        errors.NonFiniteNumber,
    ),
    "shallow excess nesting": (_deeply_nested(2), errors.NestingTooDeep),
    "recursion-deep nesting": (_deeply_nested(100_000), errors.NestingTooDeep),
    "truncated": (encode(_sample())[:-7], errors.SnapshotTruncated),
    "empty": (b"", errors.SnapshotTruncated),
    "changed body": (_changed_body(), errors.ChecksumMismatch),
    "changed checksum": (
        encode(_sample())[:-3] + (b"0" if encode(_sample())[-3:-2] != b"0" else b"1") + b'"}',
        errors.ChecksumMismatch,
    ),
    "version 0": (_with_body(version=0), errors.UnsupportedVersion),
    "version 4": (_with_body(version=4), errors.UnsupportedVersion),
    "version 3 with a version 1 checksum": (
        json.dumps(
            {"body": _body(_sample()), "sha256": _v1_checksum(_body(_sample()))},
            sort_keys=True,
            separators=(",", ":"),
        ).encode(),
        errors.ChecksumMismatch,
    ),
    "version as text": (_with_body(version="1"), errors.UnsupportedVersion),
    "version as float": (_with_body(version=1.0), errors.UnsupportedVersion),
    "pretty printed": (
        json.dumps(json.loads(encode(_sample())), indent=1, sort_keys=True).encode(),
        errors.NotCanonical,
    ),
    "trailing newline": (encode(_sample()) + b"\n", errors.NotCanonical),
    "unicode escapes": (
        encode(_sample()).replace(b'"runner-1"', b'"\\u0072unner-1"'),
        errors.NotCanonical,
    ),
    "not json": (b"state: ok", errors.SnapshotMalformed),
    "not utf-8": (encode(_sample()).replace(b"runner-1", b"runner\xff1"), errors.SnapshotMalformed),
    "byte order mark": (b"\xef\xbb\xbf" + encode(_sample()), errors.SnapshotMalformed),
    "top-level list": (b"[]", errors.SnapshotMalformed),
    "unknown state": (_with_record_field("state", "failed"), errors.SnapshotMalformed),
    "revision zero": (_with_record_field("revision", 0), errors.SnapshotMalformed),
    "revision beyond the table": (_with_record_field("revision", 5), errors.SnapshotMalformed),
    "revision as bool": (_with_record_field("revision", True), errors.SnapshotMalformed),
    "bad timestamp": (
        _with_record_field("created_at", "2026-13-02T03:04:05.000000Z"),
        errors.SnapshotMalformed,
    ),
    "bad operation id": (
        encode(_sample()).replace(b'"op-1"', b'"op 1"'),
        errors.SnapshotMalformed,
    ),
    "two unresolved operations": (
        _with_record_field("state", "queued"),
        errors.SnapshotMalformed,
    ),
    "oversized": (b" " * (MAX_SNAPSHOT_BYTES + 1), errors.SnapshotTooLarge),
    "missing tombstones": (
        _sealed({k: v for k, v in _body(_sample()).items() if k != "tombstones"}),
        errors.MissingField,
    ),
    "tombstones as a list": (_with_body(tombstones=[]), errors.SnapshotMalformed),
    "tombstone as an object": (
        _with_tombstone({"plan_hash": "b", "revision": 2, "state": "cancelled"}),
        errors.SnapshotMalformed,
    ),
    "tombstone too short": (_with_tombstone(["b", 2, "cancelled"]), errors.SnapshotMalformed),
    "tombstone too long": (
        _with_tombstone(["b", 2, "cancelled", T0, T1]),
        errors.SnapshotMalformed,
    ),
    "tombstone of a running operation": (
        _with_tombstone(["b", 2, "running", T0]),
        errors.SnapshotMalformed,
    ),
    "tombstone at revision 1": (
        _with_tombstone(["b", 1, "cancelled", T0]),
        errors.SnapshotMalformed,
    ),
    "tombstone revision as bool": (
        _with_tombstone(["b", True, "cancelled", T0]),
        errors.SnapshotMalformed,
    ),
    "tombstone with a bad plan hash": (
        _with_tombstone(["b b", 2, "cancelled", T0]),
        errors.SnapshotMalformed,
    ),
    "tombstone with a bad timestamp": (
        _with_tombstone(["b", 2, "cancelled", "2026-02-30T00:00:00.000000Z"]),
        errors.SnapshotMalformed,
    ),
    "tombstone nesting too deep": (
        _with_tombstone([["b"], 2, "cancelled", T0]),
        errors.NestingTooDeep,
    ),
    "an id both live and a tombstone": (
        encode(_sample_with_tombstones()).replace(b'"op-3":["', b'"op-1":["'),
        errors.SnapshotMalformed,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_defect_is_rejected_with_its_own_error(case: str) -> None:
    data, expected = CASES[case]
    with pytest.raises(errors.SnapshotError) as raised:
        decode(data, expected_host_id="runner-1")
    assert type(raised.value) is expected, raised.value


def test_host_mismatch_is_its_own_error() -> None:
    with pytest.raises(errors.HostMismatch):
        decode(encode(_sample()), expected_host_id="runner-2")


def test_the_required_defects_have_distinct_classes_and_codes() -> None:
    required = [
        errors.UnknownField,
        errors.DuplicateKey,
        errors.NonFiniteNumber,
        errors.NestingTooDeep,
        errors.SnapshotTruncated,
        errors.ChecksumMismatch,
        errors.UnsupportedVersion,
        errors.HostMismatch,
    ]
    assert len(set(required)) == len(required)
    assert len({cls.code for cls in required}) == len(required)


def test_every_proper_prefix_is_truncation() -> None:
    data = encode(_sample())
    for end in range(len(data)):
        with pytest.raises(errors.SnapshotTruncated):
            decode(data[:end])


def _single_byte_changes(
    data: bytes, positions: list[int], rng: random.Random, *, flips: int = 8
) -> list[bytes]:
    """At each position: ``flips`` single-bit flips and three other random bytes."""
    changed = []
    for at in positions:
        values = {data[at] ^ (1 << bit) for bit in rng.sample(range(8), flips)}
        values |= {rng.randrange(256) for _ in range(3)}
        values.discard(data[at])
        changed += [data[:at] + bytes([value]) + data[at + 1 :] for value in sorted(values)]
    return changed


def test_every_single_byte_change_of_a_small_document_is_rejected() -> None:
    data = encode(_sample())
    for changed in _single_byte_changes(data, list(range(len(data))), random.Random(1)):
        with pytest.raises(errors.SnapshotError):
            decode(changed, expected_host_id="runner-1")


def test_single_byte_changes_of_a_large_document_are_rejected() -> None:
    records = {
        f"op-{i:05d}": Record(f"op-{i:05d}", f"plan-{i}", State.SUCCEEDED, 3, T0, T1)
        for i in range(300)
    }
    data = encode(Snapshot("runner-1", records))
    rng = random.Random(2)
    positions = sorted(rng.sample(range(len(data)), 150))
    positions += [0, len(data) - 1, len(data) - 60]  # the ends and inside the checksum
    rejected: dict[type[errors.SnapshotError], int] = {}
    for changed in _single_byte_changes(data, positions, rng, flips=1):
        with pytest.raises(errors.SnapshotError) as raised:
            decode(changed, expected_host_id="runner-1")
        rejected[type(raised.value)] = rejected.get(type(raised.value), 0) + 1
    assert rejected.get(errors.ChecksumMismatch, 0) >= 20, rejected


def _filled_to(total: int) -> Snapshot:
    """A snapshot whose encoding is exactly ``total`` bytes."""
    base = len(encode(Snapshot("h", {})))
    one = len(encode(Snapshot("h", {"0": Record("0" * 128, "f" * 64, State.SUCCEEDED, 4, T0, T1)})))
    per_record = one - base + 1  # each further record also brings a comma
    count = (total - base + 1) // per_record
    gap = total - (base + count * per_record - 1)
    records = {}
    for index in range(count):
        grow = min(gap, 64)
        gap -= grow
        record = Record(f"{index:0128d}", "f" * (64 + grow), State.SUCCEEDED, 4, T0, T1)
        records[record.id] = record
    assert gap == 0
    return Snapshot("h", records)


def test_the_cap_is_inclusive() -> None:
    at_cap = _filled_to(MAX_SNAPSHOT_BYTES)
    data = encode(at_cap)
    assert len(data) == MAX_SNAPSHOT_BYTES
    assert decode(data) == at_cap
    with pytest.raises(errors.SnapshotTooLarge):
        decode(encode(_filled_to(MAX_SNAPSHOT_BYTES + 1)))


def test_timestamps_are_fixed_width_utc() -> None:
    from datetime import UTC, datetime, timedelta, timezone

    assert format_timestamp(datetime(5, 1, 2, tzinfo=UTC)) == "0005-01-02T00:00:00.000000Z"
    local = datetime(2026, 1, 2, 5, 4, 5, 6, tzinfo=timezone(timedelta(hours=2)))
    assert format_timestamp(local) == T0
    with pytest.raises(errors.InvalidInput):
        format_timestamp(datetime(2026, 1, 1))


IDS = st.from_regex(r"[A-Za-z0-9._:@/+=-]{1,40}", fullmatch=True)
TIMESTAMPS = st.datetimes(timezones=st.just(__import__("datetime").UTC)).map(format_timestamp)


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    ids = draw(st.lists(IDS, unique=True, max_size=6))
    unresolved_index = draw(st.none() | st.integers(0, max(len(ids) - 1, 0)))
    records = {}
    for index, operation_id in enumerate(ids):
        pool = UNRESOLVED if index == unresolved_index else TERMINAL
        records[operation_id] = Record(
            id=operation_id,
            plan_hash=draw(IDS),
            state=draw(st.sampled_from(sorted(pool))),
            revision=draw(st.integers(1, 4)),
            created_at=draw(TIMESTAMPS),
            updated_at=draw(TIMESTAMPS),
        )
    buried = draw(st.lists(IDS.filter(lambda key: key not in records), unique=True, max_size=4))
    tombstones = {
        key: Tombstone(
            id=key,
            plan_hash=draw(IDS),
            state=draw(st.sampled_from(sorted(TERMINAL))),
            revision=draw(st.integers(2, 4)),
            updated_at=draw(TIMESTAMPS),
        )
        for key in buried
    }
    host = draw(st.from_regex(r"[A-Za-z0-9._:-]{1,20}", fullmatch=True))
    return Snapshot(host_id=host, records=records, tombstones=tombstones)


@given(snapshots())
def test_any_valid_snapshot_round_trips(snapshot: Snapshot) -> None:
    data = encode(snapshot)
    assert decode(data, expected_host_id=snapshot.host_id) == snapshot
    document = json.loads(data)
    assert document["sha256"] == _bucket_checksum(document["body"])
    if snapshot.tombstones:
        return
    for version in (1, 2):
        old = encode(snapshot, version=version)
        assert decode(old, expected_host_id=snapshot.host_id) == snapshot
        assert json.loads(old)["sha256"] == _checksum(json.loads(old)["body"])


@given(
    st.text(min_size=1, max_size=12),
    st.text(max_size=12),
    st.text(max_size=30),
    st.integers(-(10**20), 10**20),
)
def test_the_fast_member_encoding_is_canonical_json(
    key: str, plan: str, stamp: str, revision: int
) -> None:
    """_fragment skips json.dumps for plain text; it must give the same bytes for any text."""
    record = Record(key, plan, State.UNKNOWN, revision, stamp, stamp[::-1])
    try:
        expected = _canonical_fragment(record)
    except UnicodeEncodeError:  # lone surrogates: neither way can write them
        with pytest.raises(UnicodeEncodeError):
            _fragment(record)
        return
    assert _fragment(record) == expected
    assert _fragment(dataclasses.replace(record, revision=True)) == _canonical_fragment(
        dataclasses.replace(record, revision=True)
    )


@given(st.text(min_size=1, max_size=12), st.text(max_size=12), st.text(max_size=30))
def test_the_fast_tombstone_encoding_is_canonical_json(key: str, plan: str, stamp: str) -> None:
    tombstone = Tombstone(key, plan, State.CANCELLED, 2, stamp)
    try:
        expected = _canonical_tombstone_fragment(tombstone)
    except UnicodeEncodeError:
        with pytest.raises(UnicodeEncodeError):
            _tombstone_fragment(tombstone)
        return
    assert _tombstone_fragment(tombstone) == expected


@st.composite
def mutations(draw: st.DrawFn, data: bytes) -> bytes:
    index = draw(st.integers(0, len(data) - 1))
    kind = draw(st.sampled_from(["flip", "set", "insert", "delete", "replace", "truncate", "dup"]))
    if kind == "flip":
        bit = draw(st.integers(0, 7))
        return data[:index] + bytes([data[index] ^ (1 << bit)]) + data[index + 1 :]
    if kind == "set":
        return data[:index] + bytes([draw(st.integers(0, 255))]) + data[index + 1 :]
    if kind == "insert":
        return data[:index] + draw(st.binary(min_size=1, max_size=8)) + data[index:]
    end = draw(st.integers(index, min(len(data), index + 32)))
    if kind == "delete":
        return data[:index] + data[end:]
    if kind == "replace":
        return data[:index] + draw(st.binary(max_size=8)) + data[end:]
    if kind == "dup":
        return data[:end] + data[index:end] + data[end:]
    return data[:index]


@settings(max_examples=500)
@given(st.data())
def test_any_byte_mutation_is_rejected_or_parses_to_the_original(data: st.DataObject) -> None:
    original = data.draw(snapshots())
    encoded = encode(original)
    mutated = data.draw(mutations(encoded))
    try:
        decoded = decode(mutated, expected_host_id=original.host_id)
    except errors.SnapshotError:
        return
    assert decoded == original
    assert mutated == encoded


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_snapshot_errors(data: bytes) -> None:
    with pytest.raises(errors.SnapshotError):
        decode(data)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=20,
)


@settings(max_examples=300)
@given(JSON_VALUES)
def test_arbitrary_json_raises_only_snapshot_errors(value: object) -> None:
    with pytest.raises(errors.SnapshotError):
        decode(_sealed({"version": 1, "x": value}))
