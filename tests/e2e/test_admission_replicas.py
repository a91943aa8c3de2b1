"""Four admission processes on one MariaDB never exceed the capacity limits or a daily
token budget together."""

from __future__ import annotations

import contextlib
import itertools
import random
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from sqlalchemy import func, select

from durable_ops.api.ai_admission.v1 import ai_admission_pb2_grpc
from durable_ops.clock import utc_now
from durable_ops.model import budgets, subjects
from durable_ops.model.scope import Role
from durable_ops.model.states import ACTIVE_STATES
from durable_ops.stack.children import Stack
from durable_ops.storage import budgets as budget_store
from durable_ops.storage.db import Database
from durable_ops.storage.schema import TokenBudgetDay, UserOperation
from tests.conftest import EmptyDatabase
from tests.support import stored
from tests.support.clock import ManualClock
from tests.support.grpc_services import Services, running_services
from tests.support.keys import credential, key_env
from tests.support.ports import free_port
from tests.support.workspace_client import JOB_TEXT, create_job, entitle, snapshot_request

REPLICAS = 4
USERS = 12
JOBS_PER_USER = 4
PER_USER, GLOBAL = 2, 15
# The first users' daily token budgets leave room for one analysis each (ADR 0041).
BUDGETED = 4
ONE_ANALYSIS = budgets.expected_tokens(
    budgets.input_tokens(
        subjects.JOB, {"title": "Engineer", "company": "Acme", "description": JOB_TEXT}
    )
)
DAY_SPENT = TokenBudgetDay.spent


@pytest.fixture
def replicas(migrated_mariadb_url: str) -> Iterator[list[str]]:
    ports = [free_port() for _ in range(REPLICAS)]
    stack = Stack(
        env={
            "OPS_DATABASE_URL": migrated_mariadb_url,
            **key_env(),
            "OPS_AI_USER_LIMIT": str(PER_USER),
            "OPS_AI_GLOBAL_LIMIT": str(GLOBAL),
            "OPS_LOG_LEVEL": "warning",
        },
        specs=[],
    )
    try:
        for index, port in enumerate(ports):
            stack.start_one(
                "ai-admission",
                label=f"ai-admission-{index}",
                extra_env={"OPS_AI_ADMISSION_BIND": f"127.0.0.1:{port}"},
            )
        stack.wait_healthy(checks=[f"grpc:127.0.0.1:{port}" for port in ports])
        yield [f"127.0.0.1:{port}" for port in ports]
    finally:
        stack.stop()


@pytest.fixture
def workspace(empty_mariadb: EmptyDatabase) -> Iterator[Services]:
    with running_services(empty_mariadb(), ManualClock()) as services:
        yield services


def test_replicas_admitting_at_once_never_exceed_the_limits(
    replicas: list[str], workspace: Services
) -> None:
    users = [f"user{i}" for i in range(USERS)]
    jobs: dict[str, list[str]] = {}
    for user in users:
        entitle(workspace.db, user)
        jobs[user] = [create_job(workspace.workspace, user) for _ in range(JOBS_PER_USER)]
    for user in users[:BUDGETED]:
        workspace.db.run(
            lambda tx: budget_store.set_override(
                tx, ONE_ANALYSIS + 10, set_by="test", now=utc_now()
            ),
            owner_id=user,
        )
    requests = [(user, job) for user in users for job in jobs[user]]
    random.Random(7).shuffle(requests)
    channels = [grpc.insecure_channel(target) for target in replicas]
    stubs = itertools.cycle([ai_admission_pb2_grpc.AiAdmissionServiceStub(c) for c in channels])
    token = credential(Role.GATEWAY)
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()
    start = threading.Barrier(16)

    def admit(item: tuple[tuple[str, str], ai_admission_pb2_grpc.AiAdmissionServiceStub]) -> None:
        (user, job), stub = item
        with contextlib.suppress(threading.BrokenBarrierError):
            start.wait(timeout=10)
        try:
            stub.Admit(
                snapshot_request(job),
                metadata=(("authorization", f"Bearer {token}"), ("x-owner-id", user)),
                timeout=30,
            )
            outcome = "admitted"
        except grpc.RpcError as error:
            outcome = error.code().name
        with lock:
            outcomes[outcome] += 1

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(admit, zip(requests, stubs, strict=False)))  # stubs cycle forever
    for channel in channels:
        channel.close()

    db = Database(workspace.db.url, pool_size=1)
    try:
        active = [state.value for state in ACTIVE_STATES]
        per_user = dict(
            stored.rows(
                db,
                select(UserOperation.owner_user_id, func.count())
                .where(UserOperation.state.in_(active))
                .group_by(UserOperation.owner_user_id),
            )
        )
        used = dict(
            stored.rows(
                db,
                select(TokenBudgetDay.owner_user_id, TokenBudgetDay.reserved + DAY_SPENT),
            )
        )
    finally:
        db.dispose()
    assert set(outcomes) <= {"admitted", "RESOURCE_EXHAUSTED"}, outcomes
    assert sum(per_user.values()) == outcomes["admitted"]
    assert max(per_user.values()) <= PER_USER
    assert sum(per_user.values()) == GLOBAL  # saturated, and never beyond
    for user in users[:BUDGETED]:  # their budgets held: one analysis each at most
        assert per_user.get(user, 0) <= 1
        assert used.get(user, 0) <= ONE_ANALYSIS + 10
    assert sum(used.values()) == ONE_ANALYSIS * outcomes["admitted"]
