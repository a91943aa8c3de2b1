"""Migration 0010 on both engines: a note written before it names its CV and model after it
(filled from its operation and the CV's row), two results of one subject may then live side
by side, and a downgrade keeps each subject's newest only (the old unique key holds again)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

from durable_ops.storage import migrate
from durable_ops.storage.db import create_db_engine

BEFORE = "0011_attempt_usage"
AFTER = "0012_results_history"
OPERATION = "o" * 32
OTHER_OPERATION = "p" * 32

OPERATION_ROW = """
INSERT INTO user_operations (id, owner_user_id, task_type, idempotency_key, request_hash,
    subject_type, subject_id, context_ref, state, priority, attempt, max_attempts,
    retry_delay_seconds, privacy, progress_percent, cancel_requested, created_at, updated_at,
    provider, model, route)
VALUES (:id, 'alice', 'strategy.snapshot', :id, :hash, 'job', 'job-1', :context, 'succeeded',
    0, 1, 3, 30, 'local_only', 100, :no, :at, :at, '127.0.0.1', 'qwen2.5-3b', 'local')
"""
ATTACHMENT_ROW = """
INSERT INTO attachments (id, owner_user_id, kind, filename, text, created_at)
VALUES ('cv-1', 'alice', 'cv', 'cv.txt', 'text', :at)
"""
NOTE_ROW = """
INSERT INTO ai_workspace_notes (id, owner_user_id, kind, subject_type, subject_id,
    operation_id, body, created_at, updated_at)
VALUES (:id, 'alice', 'strategy.snapshot', 'job', 'job-1', :operation, :body, :at, :at)
"""
AT = "2026-12-01 12:00:00"
LATER = "2026-12-02 12:00:00"


@pytest.fixture
def url(fresh_url: str) -> str:
    """An empty database of the test's engine (the integration conftest's)."""
    return fresh_url


@pytest.fixture
def engine(url: str) -> Iterator[Engine]:
    made = create_db_engine(url)
    yield made
    made.dispose()


def _note_columns(connection: Connection) -> tuple[object, ...]:
    row = connection.execute(
        text(
            "SELECT context_ref, context_name, provider, model, route FROM ai_workspace_notes"
            " WHERE operation_id = :operation"
        ),
        {"operation": OPERATION},
    ).one()
    return tuple(row)


def test_notes_from_before_name_their_cv_and_model_and_a_downgrade_keeps_the_newest(
    url: str, engine: Engine
) -> None:
    migrate.upgrade(url, BEFORE)
    with engine.begin() as connection:
        connection.execute(text(ATTACHMENT_ROW), {"at": AT})
        for operation, context in ((OPERATION, "cv-1"), (OTHER_OPERATION, None)):
            connection.execute(
                text(OPERATION_ROW),
                {"id": operation, "hash": "h" * 64, "context": context, "no": False, "at": AT},
            )
        connection.execute(
            text(NOTE_ROW), {"id": "n1", "operation": OPERATION, "body": "{}", "at": AT}
        )

    migrate.upgrade(url, AFTER)
    with engine.begin() as connection:
        assert migrate.current_revision(engine) == AFTER
        assert _note_columns(connection) == ("cv-1", "cv.txt", "127.0.0.1", "qwen2.5-3b", "local")
        # A second result of the same subject, by another operation: history, not a clash.
        connection.execute(
            text(NOTE_ROW),
            {"id": "n2", "operation": OTHER_OPERATION, "body": '{"newer": 1}', "at": LATER},
        )

    migrate.downgrade(url, BEFORE)
    with engine.begin() as connection:
        kept = connection.execute(text("SELECT id FROM ai_workspace_notes")).scalars().all()
        assert kept == ["n2"]  # the subject's newest
    migrate.upgrade(url, AFTER)  # and up again, from the one-per-subject table
    with engine.begin() as connection:
        assert migrate.current_revision(engine) == AFTER
