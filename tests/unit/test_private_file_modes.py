"""The modes ``private_files`` gives, whatever the umask of the process."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from durable_ops.private_files import prepare_sqlite_file, private_directory
from durable_ops.settings import SettingsError


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    """umask 000: what is private here is so by our doing, not the umask's."""
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def test_every_directory_made_is_0700_and_an_existing_one_is_left_alone(
    tmp_path: Path, permissive_umask: None
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    private_directory(shared / "a" / "b")
    assert [_mode(shared / "a"), _mode(shared / "a" / "b")] == [0o700, 0o700]
    assert _mode(shared) == 0o755  # maybe shared on purpose: not ours to change
    private_directory(shared / "a" / "b")  # again: nothing to do


def test_a_new_database_file_is_0600_and_empty(tmp_path: Path, permissive_umask: None) -> None:
    database = tmp_path / "var" / "ops.sqlite3"
    prepare_sqlite_file(database)
    assert (_mode(database.parent), _mode(database), database.stat().st_size) == (0o700, 0o600, 0)


def test_a_read_only_database_stays_read_only_once_tightened(tmp_path: Path) -> None:
    database = tmp_path / "ops.sqlite3"
    database.write_bytes(b"")
    database.chmod(0o444)
    prepare_sqlite_file(database)
    assert _mode(database) == 0o400


def test_a_place_that_cannot_hold_the_database_is_named(tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    with pytest.raises(SettingsError, match=r"a-file is not a directory\): check OPS_DATABASE_URL"):
        prepare_sqlite_file(blocked / "ops.sqlite3")
