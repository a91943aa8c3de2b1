"""Files only their owner may read: ``var/``, the SQLite database, kept secrets and keys.

A directory we create is 0700 and a SQLite database file 0600, whichever
command makes it first: the file is created here, before SQLite opens it,
because SQLite would make it 0644 and then give its ``-wal`` and ``-shm``
files the database file's own mode (so a umask alone is not enough: those
two come later, from whichever process writes first). A secret or key file
that group or others may read is refused, not fixed: its content must be
taken as known, and only its owner can decide whether to rotate it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

import structlog

from durable_ops.settings import SettingsError

DIRECTORY_MODE = 0o700
FILE_MODE = 0o600
SQLITE_COMPANIONS = ("-wal", "-shm")
# A place that cannot hold our files: read-only, missing (a parent we may not make), not
# ours. A setting to correct, unlike a full disk.
UNWRITABLE_PLACE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT, errno.ENOTDIR})
log = structlog.get_logger(__name__)


def unwritable_place(error: OSError, setting: str) -> SettingsError | None:
    """What ``error``, met writing under the directory ``setting`` names, says when that
    directory cannot hold files: a bad setting, in one line naming the path and
    ``setting``. None for any other error (a full disk among them)."""
    if error.errno not in UNWRITABLE_PLACE:
        return None
    where = f" {error.filename}" if error.filename else ""
    return SettingsError(f"cannot write{where}: {error.strerror or error}; check {setting}")


@contextlib.contextmanager
def writing_under(setting: str) -> Iterator[None]:
    """Around writing files under the directory ``setting`` names: ``unwritable_place``."""
    try:
        yield
    except OSError as error:
        refused = unwritable_place(error, setting)
        if refused is None:
            raise
        raise refused from error


def private_directory(path: Path) -> None:
    """Create ``path`` (and missing parents) 0700; an existing directory is left as it is."""
    if path.is_dir():
        return
    private_directory(path.parent)
    try:
        path.mkdir(mode=DIRECTORY_MODE)
    except FileExistsError:  # another process made it meanwhile, or it is not a directory
        if not path.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, f"{path} is not a directory") from None
        return
    os.chmod(path, DIRECTORY_MODE)  # exactly, whatever the umask took away


def prepare_sqlite_file(database: Path) -> None:
    """Make ``database`` and its folder private before SQLite opens it.

    A missing file is created empty (SQLite takes an empty file for an empty
    database) with mode 0600. An existing database, ``-wal`` or ``-shm`` of
    ours that group or others may read, left by an earlier release, is
    tightened to 0600 rather than refused: the fix is the same ``chmod`` and
    refusing would stop every service of an existing installation for it.
    A place that cannot hold it is a ``SettingsError`` naming it.
    """
    try:
        private_directory(database.parent)
        # Exists already: made earlier, or by a process starting at the same time.
        with contextlib.suppress(FileExistsError):
            os.close(os.open(database, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
        for path in (database, *(Path(f"{database}{suffix}") for suffix in SQLITE_COMPANIONS)):
            _tighten(path)
    except OSError as error:
        raise SettingsError(
            f"cannot make the SQLite database {database} private ({error.strerror}):"
            " check OPS_DATABASE_URL"
        ) from error


def _tighten(path: Path) -> None:
    try:
        status = path.stat()
    except FileNotFoundError:
        return
    mode = stat.S_IMODE(status.st_mode)
    # Another user's file (a database shared on purpose) is theirs to set; we could not anyway.
    if status.st_uid != os.geteuid() or not mode & 0o077:
        return
    os.chmod(path, mode & 0o700)
    log.warning("file_mode_tightened", path=str(path), was=f"{mode:04o}", now=f"{mode & 0o700:04o}")


def read_private_text(path: Path) -> str:
    """The text of a secret or key file, refused (``SettingsError``) when group or others
    may read or write it."""
    with path.open() as file:
        mode = stat.S_IMODE(os.fstat(file.fileno()).st_mode)
        if mode & 0o077:
            raise SettingsError(
                f"{path} has mode {mode:04o}, so other local users may read or change it:"
                f" run `chmod 600 {path}` (and rotate what it holds if they may have)"
            )
        return file.read()


def write_private_file(path: Path, content: bytes, *, replace: bool = False) -> None:
    """Write ``path`` 0600, whole or not at all: written aside, then linked in place, so
    when another process made it first, theirs stays (``replace`` puts this one instead)."""
    private_directory(path.parent)
    draft = path.with_name(f".{path.name}.{secrets.token_hex(8)}.draft")
    descriptor = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        with os.fdopen(descriptor, "wb") as out:
            out.write(content)
            out.flush()
            os.fsync(out.fileno())
        if replace:
            os.replace(draft, path)
        else:
            with contextlib.suppress(FileExistsError):
                os.link(draft, path)
    finally:
        draft.unlink(missing_ok=True)
