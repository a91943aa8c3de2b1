"""What acquire refuses before it touches anything: platform, directory, file system, files."""

from __future__ import annotations

import errno
import os
import stat
import sys
from pathlib import Path

import pytest

from durable_ops import private_files
from durable_ops.hoststore import (
    LockFileInvalid,
    UnsafeDirectory,
    UnsafeFile,
    UnsupportedFileSystem,
    UnsupportedPlatform,
    acquire,
    directory,
    lockfile,
    mounts,
)
from durable_ops.hoststore.filesystem import FileSystem


@pytest.fixture
def store(tmp_path: Path) -> Path:
    directory = tmp_path / "store"
    directory.mkdir()
    directory.chmod(0o700)
    return directory


def test_a_private_directory_is_accepted(store: Path) -> None:
    acquire(store, "runner-1").close()
    assert sorted(os.listdir(store)) == ["host.lock", "state.json"]
    assert (store / "host.lock").stat().st_mode & 0o777 == 0o600
    assert (store / "state.json").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("platform", ["win32", "cygwin", "darwin", "freebsd14", "openbsd7", "aix"])
def test_other_platforms_refuse_to_acquire(
    store: Path, platform: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "platform", platform)
    with pytest.raises(UnsupportedPlatform):
        acquire(store, "runner-1")
    assert os.listdir(store) == []


def test_a_missing_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UnsafeDirectory, match="does not exist"):
        acquire(tmp_path / "absent", "runner-1")


def test_a_symlink_to_a_directory_is_refused(store: Path, tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(store)
    # "is a symlink", not "symlink": the test's own tmp_path holds that word.
    with pytest.raises(UnsafeDirectory, match="is a symlink"):
        acquire(link, "runner-1")
    with pytest.raises(UnsafeDirectory, match="is a symlink"):
        acquire(str(link) + "/", "runner-1")
    assert os.listdir(store) == []


def test_a_directory_replaced_between_its_inspection_and_its_open_is_refused(
    store: Path, tmp_path: Path
) -> None:
    """What was checked (lstat) must be what is held open: another directory is refused."""

    class SwapBeforeOpen(FileSystem):
        def open(
            self, name: str, flags: int, mode: int = 0o600, *, dir_fd: int | None = None
        ) -> int:
            if dir_fd is None and name == str(store):
                store.rename(tmp_path / "inspected")
                store.mkdir(mode=0o700)
            return super().open(name, flags, mode, dir_fd=dir_fd)

    with pytest.raises(UnsafeDirectory, match="replaced while it was being opened"):
        acquire(store, "runner-1", filesystem=SwapBeforeOpen())
    assert os.listdir(store) == []


def test_a_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_text("")
    with pytest.raises(UnsafeDirectory, match="not a directory"):
        acquire(path, "runner-1")


@pytest.mark.parametrize("mode", [0o755, 0o750, 0o701, 0o707, 0o500, 0o1700, 0o2700])
def test_any_mode_but_0700_is_refused(store: Path, mode: int) -> None:
    store.chmod(mode)
    with pytest.raises(UnsafeDirectory, match="mode"):
        acquire(store, "runner-1")
    store.chmod(0o700)
    assert os.listdir(store) == []


def test_another_owner_is_refused(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: real + 1)
    with pytest.raises(UnsafeDirectory, match="owned by uid"):
        acquire(store, "runner-1")


def _fake_mountinfo(store: Path, tmp_path: Path, fs_type: str) -> Path:
    device = store.stat().st_dev
    text = (
        "1 0 254:200 / / rw - ext4 /dev/vdz rw\n"
        f"2 1 {os.major(device)}:{os.minor(device)} / {store} rw - {fs_type} server:/x rw\n"
    )
    path = tmp_path / "mountinfo"
    path.write_text(text)
    return path


@pytest.mark.parametrize("fs_type", ["nfs4", "nfs", "cifs", "smb3", "fuse.sshfs", "fuse", "9p"])
def test_network_and_fuse_file_systems_are_refused(
    store: Path, tmp_path: Path, fs_type: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mounts, "MOUNTINFO_PATH", str(_fake_mountinfo(store, tmp_path, fs_type)))
    with pytest.raises(UnsupportedFileSystem, match=fs_type):
        acquire(store, "runner-1")
    assert os.listdir(store) == []


def test_a_local_file_system_in_mountinfo_is_accepted(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mounts, "MOUNTINFO_PATH", str(_fake_mountinfo(store, tmp_path, "xfs")))
    acquire(store, "runner-1").close()


def test_an_unreadable_mountinfo_is_refused(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mounts, "MOUNTINFO_PATH", str(tmp_path / "no-proc"))
    with pytest.raises(UnsupportedFileSystem, match="cannot read"):
        acquire(store, "runner-1")


def test_the_real_mountinfo_knows_this_directory(store: Path) -> None:
    text = Path(mounts.MOUNTINFO_PATH).read_text()
    device = store.stat().st_dev
    types = mounts.file_system_types(
        mounts.parse_mountinfo(text), (os.major(device), os.minor(device)), str(store)
    )
    assert types
    assert not any(mounts.is_unsupported(fs_type) for fs_type in types)


def test_a_symlinked_host_lock_is_refused(store: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_bytes(b"")
    (store / "host.lock").symlink_to(target)
    with pytest.raises(UnsafeFile, match="is a symlink"):
        acquire(store, "runner-1")


def test_a_shared_host_lock_is_refused(store: Path) -> None:
    (store / "host.lock").write_bytes(b"")
    (store / "host.lock").chmod(0o644)
    with pytest.raises(UnsafeFile, match="mode"):
        acquire(store, "runner-1")


def test_a_host_lock_with_foreign_bytes_is_refused(store: Path) -> None:
    (store / "host.lock").write_bytes(b"pid=1234\n")
    (store / "host.lock").chmod(0o600)
    with pytest.raises(LockFileInvalid):
        acquire(store, "runner-1")
    assert (store / "host.lock").read_bytes() == b"pid=1234\n"


def test_a_symlinked_snapshot_is_refused(store: Path, tmp_path: Path) -> None:
    acquire(store, "runner-1").close()
    moved = tmp_path / "moved.json"
    (store / "state.json").rename(moved)
    (store / "state.json").symlink_to(moved)
    with pytest.raises(UnsafeFile, match="symlink"):
        acquire(store, "runner-1")


def test_a_shared_snapshot_is_refused(store: Path) -> None:
    acquire(store, "runner-1").close()
    (store / "state.json").chmod(0o640)
    with pytest.raises(UnsafeFile, match="mode"):
        acquire(store, "runner-1")


@pytest.mark.parametrize("name", ["host.lock", "state.json"])
@pytest.mark.parametrize("mode", [0o660, 0o620, 0o606, 0o602])
def test_a_file_group_or_other_may_write_is_refused(store: Path, name: str, mode: int) -> None:
    """Write access alone is enough to tamper with the store: not only read access is refused."""
    acquire(store, "runner-1").close()
    (store / name).chmod(mode)
    with pytest.raises(UnsafeFile, match=f"{name} has mode {mode:04o}"):
        acquire(store, "runner-1")


@pytest.mark.parametrize("name", ["host.lock", "state.json"])
def test_a_file_of_another_owner_is_refused(
    store: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The directory is ours and private, but a file in it (put there by root, say) is not."""
    acquire(store, "runner-1").close()
    foreign = (store / name).stat().st_ino
    real_fstat = os.fstat

    def fstat(fd: int) -> os.stat_result:
        status = real_fstat(fd)
        if stat.S_ISREG(status.st_mode) and status.st_ino == foreign:
            fields = list(status[:10])
            fields[stat.ST_UID] = status.st_uid + 1
            return os.stat_result(fields)
        return status

    monkeypatch.setattr(os, "fstat", fstat)
    with pytest.raises(UnsafeFile, match=f"{name} is owned by uid"):
        acquire(store, "runner-1")


class _Unwritable(FileSystem):
    """``host.lock`` cannot be opened for writing, as on a read-only file system: what a
    mode cannot show a test run as root (``tests/e2e/test_unwritable_places.py`` mounts one)."""

    def __init__(self, code: int) -> None:
        self.code = code

    def open(self, name: str, flags: int, mode: int = 0o600, *, dir_fd: int | None = None) -> int:
        if name == lockfile.LOCK_NAME:
            raise OSError(self.code, os.strerror(self.code))
        return super().open(name, flags, mode, dir_fd=dir_fd)


@pytest.mark.parametrize(
    "code", [errno.EROFS, errno.EACCES, errno.EPERM], ids=["EROFS", "EACCES", "EPERM"]
)
def test_a_directory_the_store_cannot_write_is_refused_naming_it(store: Path, code: int) -> None:
    """Its folder is what to fix (the AI worker: a bad OPS_HOST_STORE_DIR, exit 2), not a
    damaged file (an UnsafeFile, which it ended on with exit 1)."""
    with pytest.raises(UnsafeDirectory) as refused:
        acquire(store, "runner-1", filesystem=_Unwritable(code))
    assert refused.value.message == f"cannot write {store / 'host.lock'}: {os.strerror(code)}"


def test_another_failure_to_open_host_lock_is_still_the_files() -> None:
    assert directory.unwritable(OSError(errno.ENOSPC, "No space left on device"), "x") is None
    assert directory.unwritable(OSError(errno.EIO, "Input/output error"), "x") is None


def test_the_store_counts_a_folder_unwritable_as_opsctl_does() -> None:
    """One rule for a folder that cannot hold our files (``private_files``), repeated in the
    store only because it imports nothing of the rest of durable_ops."""
    assert directory.UNWRITABLE == private_files.UNWRITABLE_PLACE
