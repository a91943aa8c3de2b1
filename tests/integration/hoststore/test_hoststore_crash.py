"""A crash loop: a writer SIGKILLed at hundreds of random points loses nothing it acknowledged.

A writer process drives operations through begin/advance without pause, and
every few operations compacts finished records into tombstones and now and then
forgets old tombstones (ADR 0018). It reports each acknowledged mutation over a
pipe, and announces each forget before it starts. The test kills it at a random
moment, reopens the store and checks that it is valid and holds every reported
mutation (or a later one of the same operation), as a record or a tombstone
that replays its outcome and refuses another plan hash. An id may be missing
only if it finished no later than the cutoff of a forget that was announced.

Writers are forked by a small helper interpreter, not by the pytest process:
forking a process that other tests have filled with gRPC or database threads is
unsafe, and starting a fresh interpreter per kill would be too slow.
"""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from durable_ops.hoststore import (
    PlanHashConflict,
    State,
    Tombstone,
    UnknownOperation,
    acquire,
    statefile,
)
from tests.support.figures import report

ROOT = Path(__file__).resolve().parents[3]
HOST = "runner-1"
KILLS = 220

# Protocol on stdout, one line each: "pid N" once the writer is forked, "ack ID
# STATE REVISION UPDATED_AT" from the writer after each acknowledged call,
# "compacted N" after a compaction, "forget CUTOFF" before a forget starts,
# "error ..." if the writer meets anything unexpected, and "exit N STATUS" once
# the helper reaped it.
FORKER = """
import os, random, sys
from datetime import UTC, datetime, timedelta
from durable_ops.hoststore import acquire
from durable_ops.hoststore.retention import cutoff
from durable_ops.hoststore.transitions import ALLOWED

store, host = sys.argv[1], sys.argv[2]


def write(line):
    os.write(1, (line + "\\n").encode()[:500])


def writer(seed):
    rng = random.Random(seed)
    try:
        session = acquire(store, host)
        count = 0
        while True:
            pending = session.unresolved()
            if pending is None:
                count += 1
                # The seed makes ids unique across writers, even once old ones are forgotten.
                pending, _ = session.begin(f"op-{seed:04d}-{count:04d}", f"plan-{seed}-{count}")
                write(f"ack {pending.id} {pending.state} {pending.revision} {pending.updated_at}")
            target = rng.choice(sorted(ALLOWED[pending.state]))
            record = session.advance(pending.id, pending.revision, target)
            write(f"ack {record.id} {record.state} {record.revision} {record.updated_at}")
            if rng.random() < 0.2:
                compacted = session.compact(older_than=timedelta(milliseconds=rng.choice([0, 20])))
                write(f"compacted {compacted}")
            if rng.random() < 0.03:
                horizon = timedelta(milliseconds=rng.choice([100, 1000, 5000]))
                now = datetime.now(UTC)
                write(f"forget {cutoff(now, horizon)}")
                session.forget(older_than=horizon, now=now)
    except BaseException as exc:
        write(f"error {type(exc).__name__}: {exc}")
    os._exit(1)


for command in sys.stdin:
    seed = int(command)
    pid = os.fork()
    if pid == 0:
        writer(seed)
    write(f"pid {pid}")
    _, status = os.waitpid(pid, 0)
    write(f"exit {pid} {status}")
"""


class Forker:
    """The helper process and the lines it (and its writers) print."""

    def __init__(self, store: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", FORKER, str(store), HOST],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            cwd=ROOT,
        )
        assert self.process.stdout is not None
        self.fd = self.process.stdout.fileno()
        self.buffer = b""

    def start(self, seed: int) -> int:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{seed}\n".encode())
        self.process.stdin.flush()
        lines = self._until(lambda seen: any(line.startswith("pid ") for line in seen))
        return int(next(line for line in lines if line.startswith("pid ")).split()[1])

    def wait_for_acks(self, count: int) -> None:
        self._until(
            lambda seen: (
                sum(line.startswith("ack ") for line in seen) >= count
                or any(line.startswith(("error ", "exit ")) for line in seen)
            )
        )

    def finish(self, pid: int) -> tuple[list[str], int]:
        """All lines of this round, once the helper reports the writer reaped."""
        lines = self._until(lambda seen: any(line.startswith(f"exit {pid} ") for line in seen))
        self.buffer = b""
        status = int(next(line for line in lines if line.startswith("exit ")).split()[2])
        return lines, status

    def close(self) -> None:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)
        self.process.stdout.close()

    def _until(self, done: Callable[[list[str]], bool], timeout: float = 30.0) -> list[str]:
        deadline = time.monotonic() + timeout
        while not done(self._lines()):
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"the helper stopped answering: {self._lines()[-3:]}"
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if ready:
                chunk = os.read(self.fd, 65536)
                assert chunk, f"the helper died: {self._lines()[-3:]}"
                self.buffer += chunk
        return self._lines()

    def _lines(self) -> list[str]:
        complete, _, _ = self.buffer.rpartition(b"\n")
        return complete.decode().splitlines()


def _kill_point(rng: random.Random, forker: Forker) -> None:
    """Wait for a random point: early (acquire, initialization) or after some acks."""
    if rng.random() < 0.2:
        time.sleep(rng.uniform(0.0, 0.005))
        return
    # Waiting for acknowledgements rather than for a fixed time keeps the kill points
    # spread over the work however fast or slow the machine is.
    forker.wait_for_acks(rng.randint(1, 30))
    time.sleep(rng.uniform(0.0, 0.002))


@pytest.mark.slow
def test_every_acknowledged_mutation_survives_sigkill(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir(mode=0o700)
    store.chmod(0o700)
    rng = random.Random(20260202)
    acknowledged: dict[str, tuple[State, int, str]] = {}
    forget_cutoff = ""  # the latest cutoff of an announced forget
    kills_after_acks = compactions = buried = forgotten = 0
    forker = Forker(store)
    try:
        for round_number in range(KILLS):
            pid = forker.start(seed=round_number)
            _kill_point(rng, forker)
            os.kill(pid, signal.SIGKILL)
            lines, status = forker.finish(pid)

            errors = [line for line in lines if line.startswith("error ")]
            assert not errors, errors
            assert os.WIFSIGNALED(status)
            assert os.WTERMSIG(status) == signal.SIGKILL
            acks = [line.split()[1:] for line in lines if line.startswith("ack ")]
            for operation_id, state_name, revision_text, updated_at in acks:
                acknowledged[operation_id] = (State(state_name), int(revision_text), updated_at)
            kills_after_acks += bool(acks)
            compactions += sum(line.startswith("compacted ") for line in lines)
            for line in lines:
                if line.startswith("forget "):
                    forget_cutoff = max(forget_cutoff, line.split()[1])

            with acquire(store, HOST) as session:
                for operation_id, (state, revision, updated_at) in acknowledged.items():
                    try:
                        record = session.get(operation_id)
                    except UnknownOperation:
                        # Only what finished before an announced forget's cutoff may be
                        # gone. (Its final change may be unacknowledged: a writer killed
                        # after that save, then a later writer forgot it.)
                        assert updated_at <= forget_cutoff, (round_number, operation_id)
                        continue
                    assert record.revision >= revision, (round_number, operation_id)
                    if record.revision == revision:
                        assert record.state is state, (round_number, operation_id)
                    if isinstance(record, Tombstone):
                        plan = "plan-" + "-".join(
                            str(int(part)) for part in operation_id.split("-")[1:]
                        )
                        assert session.begin(operation_id, plan) == (record, False)
                        with pytest.raises(PlanHashConflict):
                            session.begin(operation_id, "another-plan")
                assert sum(not r.state.is_terminal for r in session.records()) <= 1
                buried = max(buried, len(session.tombstones()))
                forgotten = max(
                    forgotten,
                    len(acknowledged) - len(session.records()) - len(session.tombstones()),
                )
    finally:
        forker.close()

    report(
        f"\n{len(acknowledged)} operations, {compactions} acknowledged compactions,"
        f" at most {buried} tombstones, at most {forgotten} ids forgotten"
    )
    assert kills_after_acks >= KILLS * 3 // 4, "the writer must be killed mid-work"
    assert len(acknowledged) > KILLS
    assert compactions > KILLS // 2, "compaction must be in the loop"
    assert buried > 0
    remnants = [n for n in os.listdir(store) if statefile.TEMP_PATTERN.fullmatch(n)]
    assert set(os.listdir(store)) - set(remnants) == {"host.lock", "state.json"}
