"""The read-only view: what it lists, that it verifies, that it neither locks nor writes."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from durable_ops.hoststore import State, acquire, lockfile, show
from durable_ops.hoststore.snapshot import decode, encode


@pytest.fixture
def store(tmp_path: Path) -> Path:
    directory = tmp_path / "store"
    directory.mkdir()
    directory.chmod(0o700)
    return directory


@pytest.fixture
def populated(store: Path) -> Path:
    with acquire(store, "runner-1") as session:
        session.begin("op-1", "0123456789abcdef0123")
        session.advance("op-1", 1, State.RUNNING)
        session.advance("op-1", 2, State.SUCCEEDED)
        session.begin("op-2", "feedfacefeedface")
    return store


def _run(directory: Path | str, *, as_json: bool) -> tuple[int, str]:
    out = io.StringIO()
    code = show(directory, as_json=as_json, out=out)
    return code, out.getvalue()


def _fingerprint(directory: Path) -> dict[str, tuple[int, int, int, bytes]]:
    result = {}
    for name in sorted(os.listdir(directory)):
        status = (directory / name).stat()
        content = (directory / name).read_bytes()
        result[name] = (status.st_ino, status.st_mtime_ns, status.st_mode, content)
    return result


def test_text_lists_every_record(populated: Path) -> None:
    code, text = _run(populated, as_json=False)
    assert code == 0
    assert "host id: runner-1" in text
    assert "checksum: ok" in text
    assert "operations: 2 (unresolved: op-2)" in text
    with acquire(populated, "runner-1") as session:
        records = session.records()
    for record in records:
        row = next(line for line in text.splitlines() if line.startswith(record.id + " "))
        fields = row.split()
        assert fields[1:4] == [record.state.value, str(record.revision), record.plan_hash[:12]]
        assert fields[4:] == [record.created_at, record.updated_at]
    assert "0123456789abcdef0123" not in text, "only a prefix of the plan hash is shown"


def test_json_lists_every_record(populated: Path) -> None:
    code, text = _run(populated, as_json=True)
    assert code == 0
    document = json.loads(text)
    assert document["ok"] is True
    assert document["host_id"] == "runner-1"
    assert document["initialized"] is True
    assert [(op["id"], op["state"], op["revision"]) for op in document["operations"]] == [
        ("op-1", "succeeded", 3),
        ("op-2", "queued", 1),
    ]
    assert document["operations"][0]["plan_hash_prefix"] == "0123456789ab"
    assert set(document["operations"][0]) == {
        "id",
        "state",
        "revision",
        "plan_hash_prefix",
        "created_at",
        "updated_at",
    }
    assert document["temp_remnants"] == []


def test_remnants_are_reported_and_left_alone(populated: Path) -> None:
    remnant = populated / ".state.json.00112233aabbccdd.tmp"
    remnant.write_bytes(b'{"body":{"host')
    code, text = _run(populated, as_json=False)
    assert code == 0
    assert ".state.json.00112233aabbccdd.tmp" in text
    code, text = _run(populated, as_json=True)
    assert json.loads(text)["temp_remnants"] == [remnant.name]
    assert remnant.read_bytes() == b'{"body":{"host'


def test_the_view_works_while_a_session_holds_the_lock(populated: Path) -> None:
    with acquire(populated, "runner-1") as session:
        assert _run(populated, as_json=True)[0] == 0
        session.advance("op-2", 1, State.CANCELLED)
        assert [
            op["state"] for op in json.loads(_run(populated, as_json=True)[1])["operations"]
        ] == [
            "succeeded",
            "cancelled",
        ]


@pytest.mark.parametrize("as_json", [False, True])
def test_the_view_writes_nothing(populated: Path, as_json: bool) -> None:
    (populated / ".state.json.00112233aabbccdd.tmp").write_bytes(b"x")
    before = _fingerprint(populated)
    dir_before = populated.stat().st_mtime_ns
    assert _run(populated, as_json=as_json)[0] == 0
    assert _fingerprint(populated) == before
    assert populated.stat().st_mtime_ns == dir_before


def test_the_view_does_not_repair_a_missing_marker(populated: Path) -> None:
    (populated / "host.lock").write_bytes(b"")
    code, text = _run(populated, as_json=False)
    assert code == 0
    assert "initialized: no" in text
    assert "lacks the initialization marker" in text
    assert (populated / "host.lock").read_bytes() == b""


def test_an_empty_directory_is_reported_uninitialized_and_left_empty(store: Path) -> None:
    code, text = _run(store, as_json=False)
    assert code == 0
    assert "not been initialized" in text
    assert os.listdir(store) == []


@pytest.mark.parametrize("as_json", [False, True])
def test_a_corrupt_snapshot_fails_with_a_clear_message(populated: Path, as_json: bool) -> None:
    data = (populated / "state.json").read_bytes()
    (populated / "state.json").write_bytes(data.replace(b'"queued"', b'"running"'))
    code, text = _run(populated, as_json=as_json)
    assert code == 1
    if as_json:
        document = json.loads(text)
        assert document["ok"] is False
        assert document["error"]["code"] == "snapshot_checksum_mismatch"
    else:
        assert "checksum" in text
        assert "snapshot_checksum_mismatch" in text


def test_a_truncated_snapshot_fails(populated: Path) -> None:
    data = (populated / "state.json").read_bytes()
    (populated / "state.json").write_bytes(data[: len(data) // 2])
    code, text = _run(populated, as_json=False)
    assert (code, "snapshot_truncated" in text) == (1, True)


def test_a_missing_snapshot_of_a_marked_store_fails(populated: Path) -> None:
    (populated / "state.json").unlink()
    code, text = _run(populated, as_json=False)
    assert (code, "snapshot_missing" in text) == (1, True)


def test_foreign_lock_bytes_fail(populated: Path) -> None:
    (populated / "host.lock").write_bytes(b"garbage")
    code, text = _run(populated, as_json=True)
    assert (code, json.loads(text)["error"]["code"]) == (1, "lock_file_invalid")
    assert lockfile.MARKER not in (populated / "host.lock").read_bytes()


def test_unusable_directories_fail(tmp_path: Path, populated: Path) -> None:
    assert _run(tmp_path / "absent", as_json=False)[0] == 2
    link = tmp_path / "link"
    link.symlink_to(populated)
    code, text = _run(link, as_json=False)
    assert (code, "symlink" in text) == (2, True)
    (tmp_path / "file").write_text("")
    assert _run(tmp_path / "file", as_json=False)[0] == 2


def test_a_loose_mode_is_a_warning(populated: Path) -> None:
    populated.chmod(0o755)
    code, text = _run(populated, as_json=True)
    assert code == 0
    assert any("0755" in warning for warning in json.loads(text)["warnings"])


def test_a_version_1_store_is_shown_and_left_as_it_is(populated: Path) -> None:
    state = populated / "state.json"
    state.write_bytes(encode(decode(state.read_bytes()), version=1))
    before = _fingerprint(populated)
    code, text = _run(populated, as_json=False)
    assert code == 0
    assert "checksum: ok" in text
    assert "operations: 2 (unresolved: op-2)" in text
    assert _fingerprint(populated) == before
