"""Figure 7: host store ``advance`` vs a raw durable write of the same bytes.

Subject: ``Session.advance`` (queued→running→succeeded for a fresh record
each time, ``begin`` untimed in between): the rules, the canonical encoding,
the checksum, the lock checks and the save (write, fsync, rename, directory
fsync). Baseline: a loop of exactly that save path, by hand, writing the
bytes of the store's current ``state.json``. Measured on a store holding only
the records the rounds add, and on one that already retains 10,000 records.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from benchmarks.context import Context
from benchmarks.stats import Paired, interleave
from benchmarks.table import Row, Target
from durable_ops.hoststore import Session, State, acquire
from durable_ops.hoststore import snapshot as fmt
from durable_ops.hoststore.statefile import STATE_NAME

TARGET = Target(">=", 0.8)
PLAN = "plan-" + "0" * 59
RETAINED = 10_000


@contextmanager
def store(retained: int) -> Iterator[Session]:
    """A fresh store directory (0700) holding ``retained`` finished records."""
    folder = tempfile.mkdtemp(prefix="bench-hoststore-")
    host = socket.gethostname().split(".")[0] or "bench-host"
    try:
        if retained:
            stamp = fmt.format_timestamp(datetime.now(UTC))
            records = {
                f"retained-{i:06d}": fmt.Record(
                    f"retained-{i:06d}", PLAN, State.SUCCEEDED, 3, stamp, stamp
                )
                for i in range(retained)
            }
            path = os.path.join(folder, STATE_NAME)
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as out:
                out.write(fmt.encode(fmt.Snapshot(host, records)))
        session = acquire(folder, host)
        try:
            yield session
        finally:
            session.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def advance_round(session: Session, advances: int) -> float:
    """Advances per second, timing only the advances."""
    spent = 0.0
    prefix = secrets.token_hex(4)
    for index in range(advances // 2):
        operation_id = f"op-{prefix}-{index}"
        record, _created = session.begin(operation_id, PLAN)
        started = time.perf_counter()
        record = session.advance(operation_id, record.revision, State.RUNNING)
        session.advance(operation_id, record.revision, State.SUCCEEDED)
        spent += time.perf_counter() - started
    return (advances // 2 * 2) / spent


def raw_round(directory: str, writes: int) -> float:
    """Writes per second of open+write+fsync+close+rename+directory fsync of state.json's bytes."""
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with open(os.path.join(directory, STATE_NAME), "rb") as current:
            payload = current.read()
        started = time.perf_counter()
        for _ in range(writes):
            name = f".raw.{secrets.token_hex(8)}.tmp"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
            try:
                view = memoryview(payload)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(name, "raw.json", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            os.fsync(dir_fd)
        return writes / (time.perf_counter() - started)
    finally:
        os.close(dir_fd)


def measure(ctx: Context, retained: int, advances: int) -> tuple[Paired, int]:
    with store(retained) as session:
        advance_round(session, 10)  # warm-up
        paired = interleave(
            ctx.rounds,
            lambda: advance_round(session, advances),
            lambda: raw_round(session.directory, advances),
        )
        size = os.path.getsize(os.path.join(session.directory, STATE_NAME))
    return paired, size


def run(ctx: Context) -> list[Row]:
    rows = []
    for retained, advances in ((0, ctx.pick(100, 400)), (RETAINED, ctx.pick(30, 100))):
        ctx.begin_section(f"7 host store ({retained:,} retained records)")
        paired, size = measure(ctx, retained, advances)
        rows.append(
            Row(
                "7",
                f"host store advance/s ÷ raw write+fsync+rename+dir fsync, {retained:,} retained",
                f"{paired.subject_median:.0f}/s",
                f"{paired.baseline_median:.0f}/s",
                paired.ratio,
                TARGET,
                f"state.json {size:,} bytes at the end; per-round ratios "
                + ", ".join(f"{r:.2f}" for r in paired.ratios),
            )
        )
    return rows
