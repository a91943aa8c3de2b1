"""Telling network, shared and FUSE file systems apart, from mountinfo text."""

from __future__ import annotations

import pytest

from durable_ops.hoststore.mounts import file_system_types, is_unsupported, parse_mountinfo

MOUNTINFO = "\n".join(
    [
        "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw",
        "40 27 0:50 / /srv/nfs rw,relatime shared:12 - nfs4 server:/export rw,vers=4.2",
        "41 27 0:51 / /srv/smb rw - cifs //server/share rw",
        "42 27 0:52 / /home/me/remote rw,nosuid - fuse.sshfs me@host:/ rw",
        "43 27 0:53 / /mnt/with\\040space rw - xfs /dev/sdb rw",
        "44 27 0:54 / /srv/nfs/inner rw - tmpfs tmpfs rw",
        "garbage line",
    ]
)


def test_parse_reads_device_mount_point_and_type() -> None:
    mounts = parse_mountinfo(MOUNTINFO)
    assert [(m.device, m.mount_point, m.fs_type) for m in mounts] == [
        ((254, 0), "/", "ext4"),
        ((0, 50), "/srv/nfs", "nfs4"),
        ((0, 51), "/srv/smb", "cifs"),
        ((0, 52), "/home/me/remote", "fuse.sshfs"),
        ((0, 53), "/mnt/with space", "xfs"),
        ((0, 54), "/srv/nfs/inner", "tmpfs"),
    ]


@pytest.mark.parametrize(
    "fs_type",
    ["nfs", "nfs4", "cifs", "smb3", "fuse", "fuse.sshfs", "fuse.gcsfuse", "fuseblk", "9p", "ceph"],
)
def test_network_shared_and_fuse_types_are_unsupported(fs_type: str) -> None:
    assert is_unsupported(fs_type)


@pytest.mark.parametrize("fs_type", ["ext4", "xfs", "btrfs", "tmpfs", "zfs", "overlay", "f2fs"])
def test_local_types_are_supported(fs_type: str) -> None:
    assert not is_unsupported(fs_type)


def test_the_device_number_decides_first() -> None:
    mounts = parse_mountinfo(MOUNTINFO)
    assert file_system_types(mounts, (0, 50), "/anything") == {"nfs4"}


def test_unknown_devices_fall_back_to_the_longest_containing_mount_point() -> None:
    mounts = parse_mountinfo(MOUNTINFO)
    assert file_system_types(mounts, (9, 9), "/srv/nfs/a/b") == {"nfs4"}
    assert file_system_types(mounts, (9, 9), "/srv/nfs/inner/x") == {"tmpfs"}
    assert file_system_types(mounts, (9, 9), "/srv/nfsx") == {"ext4"}
    assert file_system_types(mounts, (9, 9), "/mnt/with space/store") == {"xfs"}


def test_nothing_known_yields_no_type() -> None:
    assert file_system_types([], (254, 0), "/srv") == set()
