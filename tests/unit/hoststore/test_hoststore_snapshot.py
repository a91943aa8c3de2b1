"""The canonical state.json format: round trips and one distinct error per defect."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.hoststore import errors
from services.hoststore.snapshot import (
    MAX_SNAPSHOT_BYTES,
    Record,
    Snapshot,
    decode,
    encode,
    format_timestamp,
)
from services.hoststore.transitions import TERMINAL, UNRESOLVED, State

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


def _body(snapshot: Snapshot) -> dict[str, Any]:
    document = json.loads(encode(snapshot))
    body: dict[str, Any] = document["body"]
    return body


def _sealed(body: object, **extra: object) -> bytes:
    """A canonical document around ``body`` with a correct checksum, as a writer would make it."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    document = {"body": body, "sha256": hashlib.sha256(canonical).hexdigest(), **extra}
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def test_round_trip_is_exact() -> None:
    data = encode(_sample())
    assert decode(data, expected_host_id="runner-1") == _sample()
    assert encode(decode(data)) == data


def test_encoding_is_canonical_json() -> None:
    data = encode(_sample())
    document = json.loads(data)
    assert data == json.dumps(document, sort_keys=True, separators=(",", ":")).encode("utf-8")
    assert not data.endswith(b"\n")
    body = json.dumps(document["body"], sort_keys=True, separators=(",", ":")).encode()
    assert document["sha256"] == hashlib.sha256(body).hexdigest()
    assert document["body"]["version"] == 1
    assert document["body"]["host_id"] == "runner-1"


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
    "version 2": (_with_body(version=2), errors.UnsupportedVersion),
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
    with pytest.raises(errors.InvalidArgument):
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
    host = draw(st.from_regex(r"[A-Za-z0-9._:-]{1,20}", fullmatch=True))
    return Snapshot(host_id=host, records=records)


@given(snapshots())
def test_any_valid_snapshot_round_trips(snapshot: Snapshot) -> None:
    assert decode(encode(snapshot), expected_host_id=snapshot.host_id) == snapshot


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
