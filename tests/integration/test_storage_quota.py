"""What one owner may store (SPEC "stored bytes"; issue 35): jobs, CVs and bytes per owner,
through the real services and gateway on both engines, and exact under concurrent creates."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select, text, update

from durable_ops.model import bounds
from durable_ops.model.admission import Limits
from durable_ops.storage import migrate
from durable_ops.storage.db import Database
from durable_ops.storage.quota import STORAGE, STORAGE_QUOTA_EXCEEDED, utf8_bytes
from durable_ops.storage.schema import Attachment, Job
from tests.integration.test_gateway_workspace_ai import CV, JOB, _problem
from tests.support.clock import ManualClock
from tests.support.gateway import bearer, gateway_client, make_app, run
from tests.support.grpc_services import Services, running_services
from tests.support.stored import scalar


@pytest.fixture
def services(db_url: str) -> Iterator[Services]:
    with running_services(db_url, ManualClock(), Limits(per_user=2, global_=3)) as running:
        yield running


def _held(services: Services, owner: str) -> tuple[int, int, int] | None:
    row = services.db.run(
        lambda tx: (
            tx.across_owners()
            .execute(
                select(STORAGE.c.jobs, STORAGE.c.attachments, STORAGE.c.stored_bytes).where(
                    STORAGE.c.owner_user_id == owner
                )
            )
            .first()
        ),
        owner_id=None,
    )
    return None if row is None else (row.jobs, row.attachments, row.stored_bytes)


def _set_held(services: Services, owner: str, **counts: int) -> None:
    with services.db.engine.begin() as connection:
        connection.execute(update(STORAGE).where(STORAGE.c.owner_user_id == owner).values(**counts))


def _count(services: Services, model: type[Job] | type[Attachment], owner: str) -> int:
    query = select(func.count()).select_from(model).where(model.owner_user_id == owner)
    return int(scalar(services.db, query) or 0)


JOB_BYTES = utf8_bytes(JOB["title"], JOB["company"], JOB["description"])
CV_BYTES = utf8_bytes(CV["filename"], CV["text"])


def test_each_create_counts_its_rows_and_bytes_and_the_last_one_over_is_a_429(
    services: Services,
) -> None:
    app = make_app(services.target)
    for path in ("/api/jobs", "/api/attachments"):  # /openapi.json says so, with Retry-After
        assert (
            "Retry-After" in app.state.openapi["paths"][path]["post"]["responses"]["429"]["headers"]
        )

    async def scenario() -> None:
        async with gateway_client(app) as client:
            assert (await client.post("/api/jobs", json=JOB, headers=bearer("alice"))).is_success
            cv = await client.post("/api/attachments", json=CV, headers=bearer("alice"))
            assert cv.is_success
            assert _held(services, "alice") == (1, 1, JOB_BYTES + CV_BYTES)

            _set_held(services, "alice", jobs=bounds.OWNER_JOBS_MAX)
            over = await client.post("/api/jobs", json=JOB, headers=bearer("alice"))
            body = _problem(over, 429, STORAGE_QUOTA_EXCEEDED)
            assert f"{bounds.OWNER_JOBS_MAX:,} jobs" in body["detail"]
            assert int(over.headers["retry-after"]) > 0
            # A CV still fits; bob, whose account is empty, is not affected.
            assert (
                await client.post("/api/attachments", json=CV, headers=bearer("alice"))
            ).is_success
            assert (await client.post("/api/jobs", json=JOB, headers=bearer("bob"))).is_success

            _set_held(services, "alice", stored_bytes=bounds.OWNER_STORED_BYTES_MAX - CV_BYTES + 1)
            over = await client.post("/api/attachments", json=CV, headers=bearer("alice"))
            assert "MiB of stored text" in _problem(over, 429, STORAGE_QUOTA_EXCEEDED)["detail"]

    run(scenario())
    # The refusals stored nothing: one job and two CVs of alice's, one job of bob's.
    assert _count(services, Job, "alice") == 1
    assert _count(services, Attachment, "alice") == 2
    assert _held(services, "bob") == (1, 0, JOB_BYTES)


def test_concurrent_creates_at_the_edge_never_pass_the_quota(services: Services) -> None:
    """Ten creates at once with room for three: exactly three are stored (the guarded
    UPDATE of the owner's row orders them), on SQLite and MariaDB alike."""

    async def scenario() -> list[int]:
        async with gateway_client(make_app(services.target)) as client:
            assert (await client.post("/api/jobs", json=JOB, headers=bearer("carol"))).is_success
            _set_held(services, "carol", jobs=bounds.OWNER_JOBS_MAX - 3)
            answers = await asyncio.gather(
                *(client.post("/api/jobs", json=JOB, headers=bearer("carol")) for _ in range(10))
            )
            return sorted(answer.status_code for answer in answers)

    statuses = run(scenario())
    assert statuses == [201] * 3 + [429] * 7
    assert _count(services, Job, "carol") == 4
    assert _held(services, "carol") == (bounds.OWNER_JOBS_MAX, 0, 4 * JOB_BYTES)


def test_the_upgrade_counts_what_owners_stored_before_the_quota(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ops.sqlite3'}"
    migrate.upgrade(url, revision="0009_answer_drafts")
    db = Database(url)
    try:
        with db.engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO jobs (id, owner_user_id, title, company, description,"
                    " created_at, updated_at) VALUES ('j1', 'dana', 'Café', '', 'Ünïcode',"
                    " '2026-12-01', '2026-12-01')"
                )
            )
            connection.execute(
                text(
                    "INSERT INTO attachments (id, owner_user_id, kind, filename, text, created_at)"
                    " VALUES ('a1', 'dana', 'cv', 'cv.txt', 'text', '2026-12-01')"
                )
            )
        migrate.upgrade(url)
        with db.engine.begin() as connection:
            held = connection.execute(text("SELECT * FROM owner_storage")).mappings().all()
    finally:
        db.dispose()
    bytes_stored = utf8_bytes("Café", "", "Ünïcode", "cv.txt", "text")
    assert [dict(row) for row in held] == [
        {"owner_user_id": "dana", "jobs": 1, "attachments": 1, "stored_bytes": bytes_stored}
    ]
