"""Pausing a task type (issue 37 point 4, ADR 0047) through the real services, both engines.

``opsctl tasks pause|resume|list`` against the running Operations service: a paused
type is never claimed (its queued work waits, a running one finishes), a resumed one is
claimed again (a waiting claim within a poll), admission refuses a new analysis of a
paused type with 503 ``task_paused`` and a sentence, and the service logs who did it.
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import pytest

from durable_ops.ai_admission.admit import TASK_PAUSED
from durable_ops.storage import operations, task_pauses
from durable_ops.storage.db import Database
from durable_ops.storage.events import Committed, Requeued
from tests.integration.test_gateway_wording import reads_as_a_sentence
from tests.support.gateway import bearer, gateway_client, make_app, run
from tests.support.grpc_services import Services
from tests.support.operations_client import ALICE, BOB, OTHER_TASK, RUNNING, TASK, OpsClient
from tests.support.opsctl import Logs, Opsctl, in_process_opsctl
from tests.support.workspace_client import JOB_TEXT, entitle

OPERATOR_NAME = "ops-dana"
WAIT_SECONDS = 10.0


@pytest.fixture
def tasks(
    services: Services, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Opsctl:
    """``opsctl tasks …`` as ``OPERATOR_NAME``."""
    return in_process_opsctl(
        services, monkeypatch, capsys, before=("tasks",), after=("--as", OPERATOR_NAME)
    )


def _logged(logs: Logs, event: str) -> dict[str, object]:
    """The one line the service logged for ``event``: who, what, whether it changed."""
    (line,) = [line for line in logs if line["event"] == event]
    return {key: line[key] for key in ("operator", "task_type", "changed")}


def test_a_paused_type_is_not_claimed_and_a_resumed_one_is(
    ops: OpsClient, tasks: Opsctl, pool: ThreadPoolExecutor
) -> None:
    running = ops.create(ALICE, "running")
    lease = ops.claim_one()
    assert lease.id == running.id
    waiting = ops.create(ALICE, "waiting")
    other = ops.create(BOB, "other", task_type=OTHER_TASK, subject_type="attachment")

    code, out, err, logs = tasks("pause", TASK)
    assert (code, err) == (0, "")  # a registered type: no warning
    assert f"{TASK}: paused by {OPERATOR_NAME}" in out
    assert _logged(logs, "operator_pause_task_type") == {
        "operator": OPERATOR_NAME,
        "task_type": TASK,
        "changed": True,
    }

    assert ops.claim((TASK,)) is None  # queued work of a paused type waits
    assert ops.claim_one((TASK, OTHER_TASK)).id == other.id  # other types go on
    assert ops.get(ALICE, running.id).state == RUNNING  # a running one finishes
    ops.complete(lease)

    code, out, _, _ = tasks("list", "--json")
    assert code == 0
    listed = {row["task_type"]: row for row in json.loads(out)}
    assert (listed[TASK]["state"], listed[TASK]["paused"]) == ("paused", True)
    assert listed[TASK]["paused_by"] == OPERATOR_NAME
    assert (listed[OTHER_TASK]["state"], listed[OTHER_TASK]["paused"]) == ("active", False)
    code, out, _, _ = tasks("list")
    assert [line.split()[:2] for line in out.splitlines()] == [
        ["TASK", "STATE"],
        [OTHER_TASK, "active"],  # never "running": that is an operation's state
        [TASK, "paused"],
    ]
    assert tasks("pause", TASK)[1].endswith(
        "(already paused); queued operations wait, running ones finish\n"
    )

    claim = pool.submit(ops.claim, (TASK,), wait_seconds=WAIT_SECONDS)
    code, out, _, logs = tasks("resume", TASK)
    assert (code, out) == (0, f"{TASK}: resumed; claims take it again\n")
    assert _logged(logs, "operator_resume_task_type")["operator"] == OPERATOR_NAME
    resumed = claim.result(timeout=WAIT_SECONDS)
    assert resumed is not None
    assert resumed.id == waiting.id
    code, out, _, _ = tasks("list")
    assert [line.split()[:2] for line in out.splitlines()[1:]] == [
        [OTHER_TASK, "active"],
        [TASK, "active"],
    ]


def test_the_claim_poll_finds_no_work_of_a_paused_type(services: Services, ops: OpsClient) -> None:
    """Waiting claims are woken only for work they may take: a paused type's queue wakes
    none of them (each would try, take nothing, and wait again)."""
    ops.create(ALICE, "waiting")
    kinds = {("queued", TASK)}

    def poll() -> set[tuple[str, str]]:
        now = services.clock()
        return services.db.run(lambda tx: operations.claimable_kinds(tx, now, kinds), owner_id=None)

    assert poll() == kinds
    services.db.run(
        lambda tx: task_pauses.pause(tx, TASK, OPERATOR_NAME, services.clock()), owner_id=None
    )
    assert poll() == set()


def test_a_resume_wakes_this_replicas_claims_and_a_pause_does_not(database: Database) -> None:
    """A resume says, after COMMIT, that work became claimable (``Requeued``): a claim
    waiting in this process takes the type's queue at once rather than at its next poll.
    A pause, or a resume of a type that was not paused, wakes nobody."""
    heard: list[Committed] = []
    database.events.subscribe(heard.extend)
    now = datetime.now(UTC)

    async def operator() -> list[list[Committed]]:
        said = []
        for work in (
            lambda tx: task_pauses.pause(tx, TASK, OPERATOR_NAME, now),
            lambda tx: task_pauses.resume(tx, TASK),
            lambda tx: task_pauses.resume(tx, TASK),
        ):
            await database.run_async(work, owner_id=None)
            said.append(list(heard))
            heard.clear()
        return said

    assert asyncio.run(operator()) == [[], [Requeued()], []]


def test_any_task_type_may_be_paused_and_a_bad_name_is_refused(
    ops: OpsClient, tasks: Opsctl
) -> None:
    created = ops.create(ALICE, "sdk", task_type="report.render")
    code, _, err, _ = tasks("pause", "report.render")
    assert code == 0  # paused, with a warning: the registry does not know it
    assert err == (
        "opsctl tasks pause: warning: report.render is not a registered task type;"
        " paused anyway (check the spelling: opsctl tasks list shows the registered ones)\n"
    )
    assert ops.claim(("report.render",)) is None
    code, out, _, _ = tasks("list", "--json")
    assert {"task_type": "report.render", "paused": True}.items() <= json.loads(out)[1].items()
    assert tasks("resume", "report.render")[0] == 0
    assert tasks("resume", "report.render")[1] == "report.render: was not paused\n"
    assert ops.claim_one(("report.render",)).id == created.id
    code, _, err, logs = tasks("pause", "Not A Type")
    assert code == 2  # refused before any call
    assert "task_type: may contain only" in err
    assert not [line for line in logs if line["event"] == "operator_pause_task_type"]


def test_admission_refuses_a_new_analysis_of_a_paused_type_in_a_sentence(
    services: Services, tasks: Opsctl
) -> None:
    entitle(services.db, "alice")
    job = {"title": "Engineer", "company": "Acme", "description": JOB_TEXT}
    assert tasks("pause", TASK)[0] == 0

    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            created = await client.post("/api/jobs", json=job, headers=bearer("alice"))
            path = f"/api/jobs/{created.json()['id']}/strategy-snapshot"
            refused = await client.post(path, headers=bearer("alice"))
            assert refused.status_code == 503, refused.text
            problem = refused.json()
            assert problem["code"] == TASK_PAUSED
            assert "paused" in problem["detail"]
            assert reads_as_a_sentence(problem), problem
            assert tasks("resume", TASK)[0] == 0
            admitted = await client.post(path, headers=bearer("alice"))
            assert admitted.status_code == 202, admitted.text

    run(scenario())
