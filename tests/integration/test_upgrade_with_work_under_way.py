"""An upgrade needs no drain: work left under way by a release at ``0007`` (this round's
first) is carried on by this one once ``opsctl migrate`` has run, on both engines.

The rows are written as that release wrote them (its columns only): an analysis queued,
one running whose worker went away with the old release (its lease runs out), one
waiting for its retry, and one that had succeeded with its notification. After the
upgrade the sweeper hands the lost attempt back, every unfinished analysis is claimed
once and settles with one notification, and the old lease token is worth nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import TextClause, bindparam, func, select, text

from durable_ops.model.errors import LeaseLost
from durable_ops.model.lifecycle import LEASE_FAILURE_CODE, Event
from durable_ops.model.states import OperationState
from durable_ops.model.usage import Usage
from durable_ops.storage import budgets, migrate, operations
from durable_ops.storage.db import Database
from durable_ops.storage.operations.rows import attempt_id, hash_token
from durable_ops.storage.schema import UserNotification, UserOperation, UtcDateTime
from tests.support.stored import rows, scalar

S = OperationState
OLD_RELEASE = "0007_operation_tombstones"
TASK = "strategy.snapshot"
OWNER = "alice"
# When the old release stopped; the new one runs from a minute later.
STOPPED = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
NOW = STOPPED + timedelta(minutes=1)
OLD_TOKEN = "the old worker's lease token"

OPERATION = """
INSERT INTO user_operations (id, owner_user_id, task_type, idempotency_key, request_hash,
    subject_type, subject_id, state, priority, attempt, max_attempts, retry_delay_seconds,
    privacy, progress_percent, cancel_requested, lease_token_hash, lease_expires_at,
    next_attempt_at, deadline_at, created_at, updated_at, started_at, finished_at, route)
VALUES (:id, :owner, :task, :id, :hash, 'job', :id, :state, 0, :attempt, 3, 30,
    'local_only', :progress, :no, :token_hash, :lease_expires_at, :next_attempt_at,
    :deadline_at, :created_at, :created_at, :started_at, :finished_at, :route)
"""
ATTEMPT = """
INSERT INTO operation_attempts (id, operation_id, owner_user_id, attempt, route, started_at,
    lease_expires_at)
VALUES (:id, :operation_id, :owner, 1, 'local', :started_at, :lease_expires_at)
"""
NOTIFICATION = """
INSERT INTO user_notifications (id, operation_id, owner_user_id, task_type, outcome, title,
    body, created_at)
VALUES (:id, :operation_id, :owner, :task, 'succeeded', 'Strategy snapshot is ready',
    'Open it from your operations page.', :at)
"""


def _as_written(sql: str) -> TextClause:
    """A statement whose times are bound as the old release bound them (naive UTC)."""
    statement = text(sql)
    times = [name for name in statement.compile().params if name.endswith("_at")]
    return statement.bindparams(*(bindparam(name, type_=UtcDateTime()) for name in times))


def _operation(id: str, state: OperationState, **fields: object) -> dict[str, object]:
    row: dict[str, object] = {
        "id": id,
        "owner": OWNER,
        "task": TASK,
        "hash": "h" * 64,
        "state": state.value,
        "attempt": 0,
        "progress": 0,
        "no": False,
        "token_hash": None,
        "lease_expires_at": None,
        "next_attempt_at": None,
        "deadline_at": STOPPED + timedelta(minutes=30),
        "created_at": STOPPED - timedelta(minutes=2),
        "started_at": None,
        "finished_at": None,
        "route": None,
    }
    return row | fields


QUEUED, RUNNING, WAITING, SUCCEEDED = ("a" * 32, "b" * 32, "c" * 32, "d" * 32)
OLD_ROWS = [
    _operation(QUEUED, S.QUEUED),
    _operation(
        RUNNING,
        S.RUNNING,
        attempt=1,
        progress=40,
        token_hash=hash_token(OLD_TOKEN),
        lease_expires_at=STOPPED + timedelta(seconds=30),
        started_at=STOPPED - timedelta(minutes=1),
        route="local",
    ),
    _operation(WAITING, S.WAITING_FOR_RETRY, attempt=1, next_attempt_at=STOPPED),
    _operation(
        SUCCEEDED,
        S.SUCCEEDED,
        attempt=1,
        progress=100,
        started_at=STOPPED - timedelta(minutes=2),
        finished_at=STOPPED - timedelta(minutes=1),
        route="local",
    ),
]


@pytest.fixture
def upgraded(fresh_url: str) -> Iterator[Database]:
    """A database the old release left work in, migrated to this release's head."""
    migrate.upgrade(fresh_url, OLD_RELEASE)
    old = Database(fresh_url)
    with old.engine.begin() as connection:
        connection.execute(_as_written(OPERATION), OLD_ROWS)
        connection.execute(
            _as_written(ATTEMPT),
            {
                "id": attempt_id(hash_token(OLD_TOKEN)),
                "operation_id": RUNNING,
                "owner": OWNER,
                "started_at": STOPPED - timedelta(minutes=1),
                "lease_expires_at": STOPPED + timedelta(seconds=30),
            },
        )
        connection.execute(
            _as_written(NOTIFICATION),
            {"id": "n" * 32, "operation_id": SUCCEEDED, "owner": OWNER, "task": TASK, "at": NOW},
        )
    old.dispose()
    migrate.upgrade(fresh_url)
    db = Database(fresh_url)
    yield db
    db.dispose()


def _state(db: Database, operation_id: str) -> OperationState:
    return S(db.run(lambda tx: operations.get(tx, operation_id), owner_id=OWNER).state)


def _notifications(db: Database, operation_id: str) -> int:
    of_it = UserNotification.operation_id == operation_id
    return int(scalar(db, select(func.count()).where(of_it)) or 0)


def test_work_left_by_the_old_release_is_carried_on_after_the_upgrade(
    upgraded: Database,
) -> None:
    db = upgraded
    db.run(lambda tx: operations.sweep(tx, NOW), owner_id=None)
    lost = db.run(lambda tx: operations.get(tx, RUNNING), owner_id=OWNER)
    assert (lost.state, lost.failure_code) == (S.WAITING_FOR_RETRY, LEASE_FAILURE_CODE)
    (ended,) = db.run(lambda tx: operations.attempts(tx, RUNNING), owner_id=OWNER)
    assert ended.outcome == "expired"

    # Once the lost attempt's retry is due, each unfinished analysis is claimed once.
    later = NOW + timedelta(minutes=10)
    db.run(lambda tx: operations.sweep(tx, later), owner_id=None)
    claims = db.run(lambda tx: operations.claim(tx, [TASK], 30, later, limit=10), owner_id=None)
    assert sorted(claim.operation.id for claim in claims) == [QUEUED, RUNNING, WAITING]

    old = operations.Settlement(OWNER, RUNNING, OLD_TOKEN, Event.COMPLETE, result_ref="old")
    (refused,) = db.run(lambda tx: operations.settle(tx, [old], later), owner_id=None)
    assert isinstance(refused, LeaseLost)

    usage = Usage(prompt_tokens=180, completion_tokens=170, model_ms=3000)
    settled = [
        operations.Settlement(
            OWNER, claim.operation.id, claim.lease_token, Event.COMPLETE, usage=usage
        )
        for claim in claims
    ]
    answers = db.run(lambda tx: operations.settle(tx, settled, later), owner_id=None)
    assert answers == [S.SUCCEEDED] * 3
    for operation_id in (QUEUED, RUNNING, WAITING, SUCCEEDED):
        assert _state(db, operation_id) == S.SUCCEEDED
        assert _notifications(db, operation_id) == 1

    # Admitted before budgets, they reserved nothing; what they used is spent all the same,
    # on the day of the upgrade. The analysis that had ended is history: no day.
    days = {id: day for id, day in rows(db, select(UserOperation.id, UserOperation.budget_day))}
    (upgraded_on,) = {days[QUEUED], days[RUNNING], days[WAITING]}
    assert upgraded_on is not None
    assert days[SUCCEEDED] is None
    used = db.run(lambda tx: budgets.day_use(tx, upgraded_on), owner_id=OWNER)
    assert (used.reserved, used.spent) == (0, 3 * usage.tokens)
