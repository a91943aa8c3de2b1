"""Fault drills in the suite: crashes on a schedule, a MariaDB of the test's own, the audit.

``Chaos`` SIGKILLs a random child of a ``Stack`` every few seconds and starts
it again as it was first started, never the last replica of a service that is
up. ``audit`` reads what the database holds after a drill and says
what went wrong with the operations the clients were told were created: lost,
stuck, done twice, without their one notification, with more than one note,
or past their attempt budget.
"""

from __future__ import annotations

import collections
import random
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select

from durable_ops.model.states import TERMINAL_STATES
from durable_ops.stack.children import Stack, healthy
from durable_ops.storage.db import Database
from durable_ops.storage.schema import AiWorkspaceNote, UserNotification, UserOperation
from durable_ops.storage.tx import Tx
from tests.support.ai_stack import LogTee

TERMINAL = frozenset(state.value for state in TERMINAL_STATES)


class KeptLog(LogTee):
    """Every line the children print, kept for the audit and not echoed (thousands of them)."""

    def write(self, text: str) -> int:
        with self._lock:
            self.lines.append(text)
        return len(text)

    def save(self, path: Path) -> Path:
        with self._lock:
            path.write_text("".join(self.lines))
        return path


# ---- crashes on a schedule ------------------------------------------------------------------


@dataclass(frozen=True)
class Kill:
    at: float  # seconds since the chaos started
    label: str


@dataclass
class Chaos:
    """SIGKILL one of ``labels`` (chosen at random) every few seconds, then start it again.

    Only a child that is up is chosen: alive, and answering its health check
    in ``checks`` (label -> ``grpc:HOST:PORT`` or ``http:URL``) if it has one.
    Of ``keep_one_of`` (the replicas of a service) the last one up is never
    killed. The first kills take ``opening`` in order, so that every kind of
    child is surely hit. A killed child stays dead ``down_for`` seconds and is
    started again as it was first started; the next kill does not wait for it
    to be back.
    Run it in a thread (``run``) until ``stop`` is set or ``seconds`` have
    passed; ``wait_all_up`` then waits for every child to be back.
    """

    stack: Stack
    labels: list[str]
    seconds: float
    every: tuple[float, float] = (2.0, 4.0)  # the pause before each kill, drawn uniformly
    down_for: float = 0.5
    checks: Mapping[str, str] = field(default_factory=dict)
    keep_one_of: Sequence[str] = ()
    opening: Sequence[str] = ()
    seed: int = 20
    kills: list[Kill] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as error:  # reported by the test, not lost in the thread
            self.error = error

    def _up(self, label: str) -> bool:
        check = self.checks.get(label)
        alive = self.stack.children[label].poll() is None
        return alive and (check is None or healthy(check))

    def _run(self) -> None:
        rng = random.Random(self.seed)
        started = time.monotonic()
        while not self.stop.wait(rng.uniform(*self.every)):
            if time.monotonic() - started >= self.seconds:
                return
            up = [label for label in self.labels if self._up(label)]
            kept = [label for label in self.keep_one_of if label in up]
            candidates = [label for label in up if kept != [label]]
            if not candidates:
                continue
            planned = self.opening[len(self.kills)] if len(self.kills) < len(self.opening) else ""
            label = planned if planned in candidates else rng.choice(candidates)
            self.kills.append(Kill(time.monotonic() - started, label))
            self.stack.kill(label)
            time.sleep(self.down_for)
            self.stack.restart(label)

    def wait_all_up(self, timeout: float = 90.0) -> float:
        """Seconds until every child is up again; fails after ``timeout``."""
        began = time.monotonic()
        while down := [label for label in self.labels if not self._up(label)]:
            exited = [label for label in down if self.stack.children[label].poll() is not None]
            assert not exited, f"{exited} exited after a restart"
            assert time.monotonic() - began < timeout, f"{down} not back in {timeout:.0f} s"
            time.sleep(0.1)
        return time.monotonic() - began

    def by_label(self) -> dict[str, int]:
        return dict(collections.Counter(kill.label for kill in self.kills))


# ---- the audit --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Audit:
    """What the database says about the operations the clients were told were created."""

    acknowledged: int
    outcomes: dict[str, int]
    lost: list[str]  # acknowledged, but no row
    unacknowledged: list[str]  # rows of these task types nobody was told about
    stuck: list[str]  # not terminal
    succeeded_twice: list[str]  # more than one successful completion in the workers' logs
    notifications_wrong: dict[str, int]  # terminal without exactly one notification, or live with
    notes_wrong: dict[str, int]  # more than one note, or a success without its note
    over_attempts: list[str]  # attempt > max_attempts
    retried: int  # operations that needed more than one attempt
    failure_codes: dict[str, int]  # of the operations that did not succeed
    noted_without_success: list[str]  # a published note, yet the operation did not succeed

    @property
    def problems(self) -> dict[str, object]:
        found: dict[str, object] = {
            "lost": self.lost,
            "unacknowledged": self.unacknowledged,
            "stuck": self.stuck,
            "succeeded_twice": self.succeeded_twice,
            "notifications_wrong": self.notifications_wrong,
            "notes_wrong": self.notes_wrong,
            "over_attempts": self.over_attempts,
        }
        return {name: value for name, value in found.items() if value}


def audit(
    db: Database,
    acknowledged: Iterable[str],
    *,
    task_types: Iterable[str],
    successes: Mapping[str, int],
) -> Audit:
    """Read every row of ``task_types`` and judge it; ``successes`` counts, per operation id,
    the successful completions the workers logged."""
    acknowledged = set(acknowledged)
    queries = (
        select(
            UserOperation.id,
            UserOperation.state,
            UserOperation.attempt,
            UserOperation.max_attempts,
            UserOperation.result_ref,
            UserOperation.failure_code,
        ).where(UserOperation.task_type.in_(list(task_types))),
        select(UserNotification.operation_id),
        select(AiWorkspaceNote.id, AiWorkspaceNote.operation_id),
    )

    def read(tx: Tx) -> list[list[Any]]:  # one transaction: one moment of the database
        return [list(tx.execute(query)) for query in queries]

    rows, notified, noted = db.run(read, owner_id=None, write=False)
    notifications = collections.Counter(str(operation_id) for (operation_id,) in notified)
    notes: dict[str, list[str]] = collections.defaultdict(list)
    for note_id, operation_id in noted:
        notes[str(operation_id)].append(str(note_id))
    by_id = {str(row.id): row for row in rows}
    notifications_wrong: dict[str, int] = {}
    notes_wrong: dict[str, int] = {}
    for operation_id, row in by_id.items():
        terminal = row.state in TERMINAL
        if notifications[operation_id] != (1 if terminal else 0):
            notifications_wrong[operation_id] = notifications[operation_id]
        published = notes.get(operation_id, [])
        if len(published) > 1 or (row.state == "succeeded" and published != [str(row.result_ref)]):
            notes_wrong[operation_id] = len(published)
    return Audit(
        acknowledged=len(acknowledged),
        outcomes=dict(collections.Counter(str(row.state) for row in rows)),
        lost=sorted(acknowledged - set(by_id)),
        unacknowledged=sorted(set(by_id) - acknowledged),
        stuck=sorted(i for i, row in by_id.items() if row.state not in TERMINAL),
        succeeded_twice=sorted(i for i, count in successes.items() if count > 1),
        notifications_wrong=notifications_wrong,
        notes_wrong=notes_wrong,
        over_attempts=sorted(i for i, row in by_id.items() if row.attempt > row.max_attempts),
        retried=sum(1 for row in rows if row.attempt > 1),
        failure_codes=dict(
            collections.Counter(
                str(row.failure_code) for row in rows if row.state in TERMINAL - {"succeeded"}
            )
        ),
        noted_without_success=sorted(
            i for i, row in by_id.items() if row.state != "succeeded" and notes.get(i)
        ),
    )
