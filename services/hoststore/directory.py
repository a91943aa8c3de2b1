"""Opening the store directory and checking that it and its files are private.

The directory is opened once, without following symlinks, and every later file
operation is relative to that descriptor (the counterpart of Go's ``os.Root``):
renaming or replacing the path afterwards cannot redirect the store's writes.
"""

from __future__ import annotations

import errno
import os
import stat

from durable_ops.hoststore.errors import LockReplaced, UnsafeDirectory, UnsafeFile
from durable_ops.hoststore.filesystem import FileSystem

DIRECTORY_MODE = 0o700
# A directory that cannot hold the store's files (read-only, refused to this user, gone):
# its folder is the thing to fix, as for every folder opsctl cannot write. The errors are
# those of ``private_files.UNWRITABLE_PLACE`` (a test holds them equal); the store, a leaf
# library, imports nothing of the rest of durable_ops.
UNWRITABLE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT, errno.ENOTDIR})


def open_directory(fs: FileSystem, path: str) -> int:
    """Return a descriptor of ``path`` after refusing anything but a private directory."""
    try:
        seen = os.lstat(path)
    except FileNotFoundError:
        raise UnsafeDirectory(f"{path} does not exist") from None
    except OSError as exc:
        raise UnsafeDirectory(f"cannot inspect {path}: {exc.strerror}") from exc
    if stat.S_ISLNK(seen.st_mode):
        raise UnsafeDirectory(f"{path} is a symlink; give the real directory")
    if not stat.S_ISDIR(seen.st_mode):
        raise UnsafeDirectory(f"{path} is not a directory")
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = fs.open(path, flags, dir_fd=None)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeDirectory(f"{path} is a symlink; give the real directory") from None
        raise UnsafeDirectory(f"cannot open {path}: {exc.strerror}") from exc
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (seen.st_dev, seen.st_ino):
            raise UnsafeDirectory(f"{path} was replaced while it was being opened")
        _check_private_directory(opened, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def unwritable(error: OSError, path: str) -> UnsafeDirectory | None:
    """What ``error``, met writing ``path`` in the store's directory, says when that
    directory cannot hold the store: one line naming ``path`` and why. None for any other
    error (a full disk among them)."""
    if error.errno not in UNWRITABLE:
        return None
    return UnsafeDirectory(f"cannot write {path}: {error.strerror or error}")


def identity(fd: int) -> tuple[int, int]:
    """``(st_dev, st_ino)`` of an open descriptor; it cannot change while the descriptor is open."""
    status = os.fstat(fd)
    return status.st_dev, status.st_ino


def check_unchanged(path: str, dir_fd: int, held: tuple[int, int] | None = None) -> None:
    """Refuse to go on if ``path`` no longer names the directory we hold open.

    ``held`` is ``identity(dir_fd)`` if the caller already knows it.
    """
    try:
        current = os.stat(path, follow_symlinks=False)
    except OSError as exc:
        raise LockReplaced(f"store directory {path} is gone: {exc.strerror}") from exc
    if (current.st_dev, current.st_ino) != (held or identity(dir_fd)):
        raise LockReplaced(f"store directory {path} was replaced behind this session")


def check_private_file(status: os.stat_result, name: str) -> None:
    if not stat.S_ISREG(status.st_mode):
        raise UnsafeFile(f"{name} is not a regular file")
    if status.st_uid != os.geteuid():
        raise UnsafeFile(f"{name} is owned by uid {status.st_uid}, not by uid {os.geteuid()}")
    if stat.S_IMODE(status.st_mode) & 0o077:
        raise UnsafeFile(
            f"{name} has mode {stat.S_IMODE(status.st_mode):04o}; group and other"
            " must have no access (0600)"
        )


def _check_private_directory(status: os.stat_result, path: str) -> None:
    if status.st_uid != os.geteuid():
        raise UnsafeDirectory(
            f"{path} is owned by uid {status.st_uid}, not by the current user (uid {os.geteuid()})"
        )
    mode = stat.S_IMODE(status.st_mode)
    if mode != DIRECTORY_MODE:
        raise UnsafeDirectory(f"{path} has mode {mode:04o}; it must be {DIRECTORY_MODE:04o}")
