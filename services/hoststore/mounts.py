"""Refusing network, shared and FUSE file systems, from ``/proc/self/mountinfo``.

``flock`` on such file systems is emulated, per-client or absent, and their
``fsync``/``rename`` promises differ, so the store runs on local file systems
only. ``os.statvfs`` does not expose the file-system type, hence mountinfo: the
mount is found by the device number of the open directory (falling back to the
longest mount point containing its path, e.g. for btrfs subvolumes).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from durable_ops.hoststore.errors import UnsupportedFileSystem

MOUNTINFO_PATH = "/proc/self/mountinfo"

_SHARED_TYPES: Final = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "ncpfs",
        "9p",
        "afs",
        "ceph",
        "glusterfs",
        "lustre",
        "gfs2",
        "ocfs2",
        "beegfs",
        "gpfs",
        "davfs",
        "virtiofs",
        "vboxsf",
        "vmhgfs",
    }
)
_OCTAL_ESCAPE: Final = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True, slots=True)
class Mount:
    device: tuple[int, int]
    mount_point: str
    fs_type: str


def parse_mountinfo(text: str) -> list[Mount]:
    mounts = []
    for line in text.splitlines():
        fields = line.split(" ")
        if "-" not in fields[6:]:
            continue
        separator = fields.index("-", 6)
        if separator + 1 >= len(fields) or ":" not in fields[2]:
            continue
        major, _, minor = fields[2].partition(":")
        if not (major.isdigit() and minor.isdigit()):
            continue
        mounts.append(
            Mount(
                device=(int(major), int(minor)),
                mount_point=_OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), fields[4]),
                fs_type=fields[separator + 1],
            )
        )
    return mounts


def is_unsupported(fs_type: str) -> bool:
    return fs_type in _SHARED_TYPES or fs_type == "fuseblk" or fs_type.split(".")[0] == "fuse"


def file_system_types(mounts: Iterable[Mount], device: tuple[int, int], path: str) -> set[str]:
    """Types of the mounts holding ``path`` on ``device``; empty if none can be told."""
    mounts = list(mounts)
    by_device = {mount.fs_type for mount in mounts if mount.device == device}
    if by_device:
        return by_device
    containing = [mount for mount in mounts if _contains(mount.mount_point, path)]
    if not containing:
        return set()
    longest = max(len(mount.mount_point) for mount in containing)
    return {mount.fs_type for mount in containing if len(mount.mount_point) == longest}


def require_local(dir_fd: int, path: str) -> None:
    try:
        with open(MOUNTINFO_PATH, encoding="utf-8", errors="surrogateescape") as source:
            text = source.read()
    except OSError as exc:
        raise UnsupportedFileSystem(
            f"cannot read {MOUNTINFO_PATH} to tell the file system of {path}: {exc.strerror}"
        ) from exc
    device = os.fstat(dir_fd).st_dev
    try:
        real_path = os.readlink(f"/proc/self/fd/{dir_fd}")
    except OSError:
        real_path = os.path.realpath(path)
    types = file_system_types(
        parse_mountinfo(text), (os.major(device), os.minor(device)), real_path
    )
    if not types:
        raise UnsupportedFileSystem(f"cannot tell which file system holds {path}")
    refused = sorted(fs_type for fs_type in types if is_unsupported(fs_type))
    if refused:
        raise UnsupportedFileSystem(
            f"{path} is on a {refused[0]} file system; network, shared and FUSE file"
            " systems (NFS, SMB, FUSE, ...) are not supported"
        )


def _contains(mount_point: str, path: str) -> bool:
    if mount_point == "/":
        return path.startswith("/")
    return path == mount_point or path.startswith(mount_point.rstrip("/") + "/")
