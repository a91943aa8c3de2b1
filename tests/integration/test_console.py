"""The operator console (issue 37, point 5; ADR 0045) through the real servers, on both engines.

Sign-in: a link from the operator's own key opens one console session, once,
within ten minutes; the session ends after eight hours, at sign-out, or by
``opsctl console revoke``. The gateway's key reaches the operator service only
with a live console session, and then only the console's calls, each logged
with the operator's name. Over HTTP: an owner's cookie or token, or no
session, gets a 401 and no data; a cross-origin write is refused; a bulk retry
retries exactly the operations named.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from sqlalchemy import select, text
from structlog.testing import capture_logs

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.api.operator.v1 import operator_pb2 as opb
from durable_ops.gateway import console as gateway_console
from durable_ops.gateway import login
from durable_ops.gateway.limits import Throttle
from durable_ops.model import console
from durable_ops.model.errors import Unauthenticated
from durable_ops.model.scope import Role
from durable_ops.rpc.scope import OPERATOR_SESSION
from durable_ops.storage import console as console_store
from durable_ops.storage.console import Signed
from durable_ops.storage.db import Database
from durable_ops.storage.schema import OperatorConsoleSession
from durable_ops.storage.tx import OperatorTx, Tx
from tests.conftest import EmptyDatabase
from tests.support.clock import ManualClock
from tests.support.gateway import BASE_URL, gateway_client, make_app, run, sign_in
from tests.support.grpc_services import Services, metadata
from tests.support.operations_client import (
    ALICE,
    BOB,
    FAILED,
    OTHER_TASK,
    QUEUED,
    TASK,
    Lease,
    Metadata,
    OpsClient,
    expect_failure,
    rpc_failure,
)
from tests.support.stored import rows as stored_rows
from tests.support.workspace_client import create_job

OPERATOR_NAME = "ops-carol"
SAME_ORIGIN = {"Origin": BASE_URL}
DENIED = grpc.StatusCode.PERMISSION_DENIED
UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED
WAIT_SECONDS = 30.0  # for another connection to get where the test needs it


def _link(services: Services, operator_md: Metadata, operator: str = OPERATOR_NAME) -> str:
    made: opb.CreateConsoleLinkResponse = services.operator.CreateConsoleLink(
        opb.CreateConsoleLinkRequest(), metadata=operator_md
    )
    assert made.operator == operator
    return made.link_secret


def _open(services: Services, link: str) -> opb.ConsoleSession:
    opened: opb.ConsoleSession = services.operator.OpenConsoleSession(
        opb.OpenConsoleSessionRequest(link_secret=link), metadata=metadata(Role.GATEWAY)
    )
    return opened


def _console_md(session_id: str, role: Role = Role.GATEWAY) -> Metadata:
    return (*metadata(role), (OPERATOR_SESSION, session_id))


def _session(services: Services, operator_md: Metadata) -> str:
    return _open(services, _link(services, operator_md)).session_id


def _failed(ops: OpsClient, owner: str, key: str, **fields: Any) -> str:
    """An operation that failed for good, with a failure code and message, of a real job:
    an operator's retry of an analysis of a missing one is refused (ADR 65)."""
    fields.setdefault("subject_id", create_job(ops.services.workspace, owner))
    created = ops.create(owner, key, max_attempts=1, **fields)
    lease = ops.claim_one(task_types=(created.task_type,))
    assert ops.fail(lease, retryable=False, code="model_error", message=f"{key} broke") == FAILED
    return created.id


def _settle_with_usage(ops: OpsClient, lease: Lease, *, retryable: bool, message: str) -> None:
    """Fail the lease's attempt on the settlement channel, reporting its tokens."""
    item = pb.SettleOperationsRequest.Item(
        owner_id=lease.owner,
        usage=pb.Usage(prompt_tokens=1200, completion_tokens=345, model_ms=2500),
    )
    item.fail.CopyFrom(
        pb.FailOperationRequest(
            operation_id=lease.id,
            lease_token=lease.token,
            retryable=retryable,
            failure_code="model_timeout",
            failure_message=message,
        )
    )
    reply: pb.LeaseMutationsResponse = ops.stub.SettleOperations(
        pb.SettleOperationsRequest(items=[item]), metadata=ops.neutral
    )
    assert not reply.outcomes[0].status_code, reply.outcomes[0].error_code


# ---- sign-in over gRPC -------------------------------------------------------------------


def test_a_link_opens_one_session_once_and_sessions_end(
    services: Services, clock: ManualClock, operator_md: Metadata
) -> None:
    link = _link(services, operator_md)
    opened = _open(services, link)
    assert opened.operator == OPERATOR_NAME
    assert len(opened.session_id) >= 43
    again = rpc_failure(lambda: _open(services, link))
    assert (again.code, again.error_code) == (UNAUTHENTICATED, console.LINK_UNUSABLE)

    who: opb.ConsoleSession = services.operator.GetConsoleSession(
        opb.GetConsoleSessionRequest(), metadata=_console_md(opened.session_id)
    )
    assert (who.operator, who.session_id) == (OPERATOR_NAME, "")  # the id is handed out once

    late = _link(services, operator_md)
    clock.advance(console.LINK_SECONDS + 1)
    expired = rpc_failure(lambda: _open(services, late))
    assert (expired.code, expired.error_code) == (UNAUTHENTICATED, console.LINK_UNUSABLE)

    clock.advance(console.SESSION_SECONDS)
    ended = rpc_failure(
        lambda: services.operator.ListOperations(
            opb.ListOperationsRequest(), metadata=_console_md(opened.session_id)
        )
    )
    assert (ended.code, ended.error_code) == (UNAUTHENTICATED, console.SESSION_ENDED)


def test_a_link_and_a_session_end_at_their_very_instant(
    services: Services, clock: ManualClock, operator_md: Metadata
) -> None:
    link, session_id = _link(services, operator_md), _session(services, operator_md)
    clock.advance(console.LINK_SECONDS)
    assert rpc_failure(lambda: _open(services, link)).error_code == console.LINK_UNUSABLE
    listing = opb.ListOperationsRequest()
    services.operator.ListOperations(listing, metadata=_console_md(session_id))  # still live
    clock.advance(console.SESSION_SECONDS - console.LINK_SECONDS)
    ended = rpc_failure(
        lambda: services.operator.ListOperations(listing, metadata=_console_md(session_id))
    )
    assert (ended.code, ended.error_code) == (UNAUTHENTICATED, console.SESSION_ENDED)


def test_a_link_is_no_session_and_a_session_no_link(
    services: Services, operator_md: Metadata
) -> None:
    """Both are 256-bit secrets in one table, told apart by their kind: an unopened link
    signs no console in (it would never be spent), and a session opens no new one (it
    would outlive its eight hours, one new session after another)."""
    link = _link(services, operator_md)
    listing = opb.ListOperationsRequest()
    as_session = rpc_failure(
        lambda: services.operator.ListOperations(listing, metadata=_console_md(link))
    )
    assert (as_session.code, as_session.error_code) == (UNAUTHENTICATED, console.SESSION_ENDED)
    session_id = _open(services, link).session_id
    as_link = rpc_failure(lambda: _open(services, session_id))
    assert (as_link.code, as_link.error_code) == (UNAUTHENTICATED, console.LINK_UNUSABLE)
    services.operator.ListOperations(listing, metadata=_console_md(session_id))  # unspent


def test_sign_out_and_revoke_end_sessions_at_once(
    services: Services, operator_md: Metadata
) -> None:
    first, second = _session(services, operator_md), _session(services, operator_md)
    services.operator.EndConsoleSession(opb.EndConsoleSessionRequest(), metadata=_console_md(first))
    list_request = opb.ListOperationsRequest()
    gone = rpc_failure(
        lambda: services.operator.ListOperations(list_request, metadata=_console_md(first))
    )
    assert gone.error_code == console.SESSION_ENDED
    services.operator.ListOperations(list_request, metadata=_console_md(second))  # still live

    pending_link = _link(services, operator_md)
    revoked: opb.EndOperatorSessionsResponse = services.operator.EndOperatorSessions(
        opb.EndOperatorSessionsRequest(), metadata=operator_md
    )
    assert revoked.ended == 2  # the second session and the unopened link
    assert (
        rpc_failure(
            lambda: services.operator.ListOperations(list_request, metadata=_console_md(second))
        ).error_code
        == console.SESSION_ENDED
    )
    assert rpc_failure(lambda: _open(services, pending_link)).error_code == console.LINK_UNUSABLE


def test_only_the_operator_key_makes_links_and_revokes(
    services: Services, operator_md: Metadata
) -> None:
    session_id = _session(services, operator_md)
    for md in (
        metadata(Role.GATEWAY),
        metadata(Role.WORKER),
        metadata(Role.PRODUCER, ALICE),
        _console_md(session_id),
    ):
        link_call = partial(
            services.operator.CreateConsoleLink, opb.CreateConsoleLinkRequest(), metadata=md
        )
        expect_failure(link_call, DENIED)
        revoke_call = partial(
            services.operator.EndOperatorSessions, opb.EndOperatorSessionsRequest(), metadata=md
        )
        expect_failure(revoke_call, DENIED)
    # Only the gateway opens a link: not the operator's key, not a worker's.
    link = _link(services, operator_md)
    for md in (operator_md, metadata(Role.WORKER), metadata(Role.GATEWAY, ALICE)):
        open_call = partial(
            services.operator.OpenConsoleSession,
            opb.OpenConsoleSessionRequest(link_secret=link),
            metadata=md,
        )
        expect_failure(open_call, DENIED)
    assert _open(services, link).operator == OPERATOR_NAME  # still unspent


def test_the_gateway_key_reaches_the_operator_scope_only_with_a_live_session(
    services: Services, ops: OpsClient, operator_md: Metadata
) -> None:
    failed = _failed(ops, ALICE, "k-gate")
    session_id = _session(services, operator_md)
    listing = opb.ListOperationsRequest()
    expect_failure(
        lambda: services.operator.ListOperations(listing, metadata=metadata(Role.GATEWAY)), DENIED
    )
    unknown = rpc_failure(
        lambda: services.operator.ListOperations(listing, metadata=_console_md("x" * 43))
    )
    assert (unknown.code, unknown.error_code) == (UNAUTHENTICATED, console.SESSION_ENDED)
    # Beside an owner, or from another role, the header means nothing.
    with_owner = (*metadata(Role.GATEWAY, ALICE), (OPERATOR_SESSION, session_id))
    expect_failure(lambda: services.operator.ListOperations(listing, metadata=with_owner), DENIED)
    for role in (Role.WORKER, Role.PRODUCER):
        other_role = partial(
            services.operator.ListOperations, listing, metadata=_console_md(session_id, role)
        )
        expect_failure(other_role, DENIED)
    # Two sessions named: neither is taken, as for two x-owner-id.
    twice = (*_console_md(session_id), (OPERATOR_SESSION, "x" * 43))
    two = rpc_failure(lambda: services.operator.ListOperations(listing, metadata=twice))
    assert two.code == grpc.StatusCode.INVALID_ARGUMENT
    # A console session reaches the console's calls, and not prune.
    found: opb.ListOperationsResponse = services.operator.ListOperations(
        listing, metadata=_console_md(session_id)
    )
    assert [item.operation.id for item in found.operations] == [failed]
    prune = opb.PruneOperationsRequest(dry_run=True)
    prune.older_than.FromTimedelta(timedelta(days=1))
    expect_failure(
        lambda: services.operator.PruneOperations(prune, metadata=_console_md(session_id)), DENIED
    )


def test_every_console_action_is_logged_with_the_operators_name(
    services: Services, ops: OpsClient, operator_md: Metadata
) -> None:
    failed = _failed(ops, BOB, "k-log")
    session_id = _session(services, operator_md)
    md = _console_md(session_id)
    with capture_logs() as logs:
        services.operator.ListOperations(opb.ListOperationsRequest(owner_id=BOB), metadata=md)
        services.operator.GetOperation(opb.GetOperationRequest(operation_id=failed), metadata=md)
        services.operator.RetryOperation(
            opb.RetryOperationRequest(operation_id=failed), metadata=md
        )
        services.operator.CancelOperation(
            opb.CancelOperationRequest(operation_id=failed), metadata=md
        )
        services.operator.GetQueueDepths(opb.GetQueueDepthsRequest(), metadata=md)
        services.operator.EndConsoleSession(opb.EndConsoleSessionRequest(), metadata=md)
    events = {entry["event"]: entry for entry in logs if entry["event"].startswith("operator_")}
    for name in (
        "operator_list",
        "operator_show",
        "operator_retry",
        "operator_cancel",
        "operator_queues",
        "operator_console_sign_out",
    ):
        assert events[name]["operator"] == OPERATOR_NAME, name
        assert events[name]["via"] == "console", name
    assert events["operator_retry"]["operation_id"] == failed
    assert events["operator_retry"]["owner"] == BOB


def test_revoking_one_operators_sign_ins_leaves_the_others_and_is_logged(
    services: Services, operator_md: Metadata
) -> None:
    """``opsctl console revoke --operator dan`` ends dan's links and sessions, not carol's;
    naming an operator and everyone at once is refused, nothing ended. Making a link,
    signing in, a refused link and each revoke are logged with who and how many."""
    dans_md = metadata(Role.OPERATOR, subject="ops-dan")
    with capture_logs() as logs:
        mine = _session(services, operator_md)
        dans_link = _link(services, dans_md, "ops-dan")
        dans = _open(services, dans_link).session_id
        assert rpc_failure(lambda: _open(services, dans_link)).error_code == console.LINK_UNUSABLE
        both = opb.EndOperatorSessionsRequest(operator="ops-dan", everyone=True)
        expect_failure(
            lambda: services.operator.EndOperatorSessions(both, metadata=operator_md),
            grpc.StatusCode.INVALID_ARGUMENT,
        )
        revoked: opb.EndOperatorSessionsResponse = services.operator.EndOperatorSessions(
            opb.EndOperatorSessionsRequest(operator="ops-dan"), metadata=operator_md
        )
    assert revoked.ended == 1
    session = opb.GetConsoleSessionRequest()
    ended = rpc_failure(
        lambda: services.operator.GetConsoleSession(session, metadata=_console_md(dans))
    )
    assert ended.error_code == console.SESSION_ENDED
    still: opb.ConsoleSession = services.operator.GetConsoleSession(
        session, metadata=_console_md(mine)
    )
    assert still.operator == OPERATOR_NAME
    lines = [
        {key: entry.get(key) for key in ("event", "operator", "via", "whose", "ended")}
        for entry in logs
        if str(entry["event"]).startswith("operator_console")
    ]
    assert lines == [
        _line("operator_console_link", OPERATOR_NAME, "opsctl"),
        _line("operator_console_sign_in", OPERATOR_NAME, "console"),
        _line("operator_console_link", "ops-dan", "opsctl"),
        _line("operator_console_sign_in", "ops-dan", "console"),
        _line("operator_console_link_refused", None, "console"),
        _line("operator_console_revoke", OPERATOR_NAME, "opsctl", whose="ops-dan", ended=1),
    ]


def _line(event: str, operator: str | None, via: str, **fields: object) -> dict[str, object]:
    return {"event": event, "operator": operator, "via": via, "whose": None, "ended": None} | fields


def test_only_the_gateway_reads_or_ends_a_console_session(
    services: Services, operator_md: Metadata
) -> None:
    """A session id is the gateway's to resolve: from any other credential the header is
    not read, and the call is refused as not the gateway's, not answered "ended"."""
    session_id = _session(services, operator_md)
    for role in (Role.OPERATOR, Role.WORKER, Role.PRODUCER):
        md = _console_md(session_id, role)
        for call in (
            partial(services.operator.GetConsoleSession, opb.GetConsoleSessionRequest()),
            partial(services.operator.EndConsoleSession, opb.EndConsoleSessionRequest()),
        ):
            refused = expect_failure(partial(call, metadata=md), DENIED)
            assert refused.error_code == "gateway_scope_required", role
    who: opb.ConsoleSession = services.operator.GetConsoleSession(
        opb.GetConsoleSessionRequest(), metadata=_console_md(session_id)
    )
    assert who.operator == OPERATOR_NAME  # still live


def test_a_new_link_prunes_the_expired_sign_ins(
    services: Services, clock: ManualClock, operator_md: Metadata
) -> None:
    """Links never opened and sessions never signed out of are deleted by the next link
    made after they expired, so the table holds what is live (and a little more)."""
    _link(services, operator_md)
    _session(services, operator_md)
    clock.advance(console.SESSION_SECONDS)  # both expired, at their very instant
    live = _link(services, operator_md)
    stored = stored_rows(services.db, select(OperatorConsoleSession.kind))
    assert [kind for (kind,) in stored] == ["link"]
    assert _open(services, live).operator == OPERATOR_NAME


def _open_in_a_thread(
    db: Database, link: str, now: datetime, connection_ids: queue.Queue[int], said: list[object]
) -> None:
    """Open ``link`` on a connection of its own, first telling which one it is."""

    def work(tx: Tx) -> Signed:
        connection_ids.put(tx.connection.exec_driver_sql("SELECT CONNECTION_ID()").scalar_one())
        return console_store.open_link(tx, link, now)

    try:
        said.append(db.run(work, owner_id=None))
    except Unauthenticated as refused:
        said.append(refused)


def _waits_for_a_lock(db: Database, connection_id: int) -> bool:
    """Whether that connection's transaction is waiting for a row lock (polled: it gets
    there within moments, or something else is wrong)."""
    query = text(
        "SELECT COUNT(*) FROM information_schema.INNODB_TRX"
        " WHERE trx_mysql_thread_id = :id AND trx_state = 'LOCK WAIT'"
    )
    deadline = time.monotonic() + WAIT_SECONDS
    with db.engine.connect() as watcher:
        while time.monotonic() < deadline:
            if watcher.execute(query, {"id": connection_id}).scalar():
                return True
            watcher.rollback()  # the next read sees the latest
            time.sleep(0.01)
    return False


def test_two_openings_of_one_link_at_once_make_one_session(empty_mariadb: EmptyDatabase) -> None:
    """Two presses of one link (its operator's and a thief's) at once: the second reads the
    link before the first's delete commits, and its own delete, waiting on the first's,
    then finds nothing. The row count decides: one session, the other refused as used."""
    db = Database(empty_mariadb(), pool_size=3)
    now = datetime.now(UTC)
    said: list[object] = []
    connection_ids: queue.Queue[int] = queue.Queue()
    try:
        link = db.run(
            lambda tx: console_store.create_link(OperatorTx(tx), OPERATOR_NAME, now), owner_id=None
        ).secret
        second = threading.Thread(
            target=_open_in_a_thread, args=(db, link, now, connection_ids, said)
        )
        with db.engine.connect() as connection, connection.begin():
            console_store.open_link(Tx(connection, None), link, now)  # not committed yet
            second.start()
            assert _waits_for_a_lock(db, connection_ids.get(timeout=WAIT_SECONDS))
        second.join(WAIT_SECONDS)
        (refused,) = said
        assert isinstance(refused, Unauthenticated)
        assert refused.code == console.LINK_UNUSABLE
        stored = stored_rows(db, select(OperatorConsoleSession.kind))
        assert [kind for (kind,) in stored] == ["session"]
    finally:
        db.dispose()


# ---- search and queues ------------------------------------------------------------------


def test_failure_code_search_and_queue_depths(
    services: Services, ops: OpsClient, clock: ManualClock, operator_md: Metadata
) -> None:
    failed = _failed(ops, ALICE, "k-failed")
    # Queued before the others, but not waiting: it is due only tomorrow.
    ops.create(ALICE, "k-tomorrow", task_type=OTHER_TASK, not_before=clock() + timedelta(days=1))
    clock.advance(60)
    queued_old = ops.create(BOB, "k-queued-old", task_type=OTHER_TASK)
    clock.advance(60)
    ops.create(ALICE, "k-queued-new", task_type=OTHER_TASK)
    running = ops.create(BOB, "k-running")
    ops.claim_one()

    found: opb.ListOperationsResponse = services.operator.ListOperations(
        opb.ListOperationsRequest(failure_code="model_error"), metadata=operator_md
    )
    assert [item.operation.id for item in found.operations] == [failed]
    none: opb.ListOperationsResponse = services.operator.ListOperations(
        opb.ListOperationsRequest(failure_code="other_code"), metadata=operator_md
    )
    assert list(none.operations) == []
    expect_failure(
        lambda: services.operator.ListOperations(
            opb.ListOperationsRequest(failure_code="x" * 65), metadata=operator_md
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )

    depths: opb.GetQueueDepthsResponse = services.operator.GetQueueDepths(
        opb.GetQueueDepthsRequest(), metadata=operator_md
    )
    by_type = {depth.task_type: depth for depth in depths.queues}
    assert set(by_type) == {TASK, OTHER_TASK}  # the failed one is finished: not counted
    assert (by_type[OTHER_TASK].queued, by_type[OTHER_TASK].running) == (3, 0)
    assert by_type[OTHER_TASK].oldest_queued_at == queued_old.created_at
    assert (by_type[TASK].queued, by_type[TASK].running) == (0, 1)
    assert not by_type[TASK].HasField("oldest_queued_at")
    assert running.id


# ---- over HTTP ---------------------------------------------------------------------------


async def _console_client(client: httpx.AsyncClient, link: str) -> httpx.Response:
    return await client.post("/console/sign-in", json={"link": link}, headers=SAME_ORIGIN)


CONSOLE_READS = (
    "/console/api/session",
    "/console/api/operations",
    "/console/api/operations/" + "0" * 32,
    "/console/api/queues",
)


def test_an_owner_session_or_token_or_nothing_gets_no_console_data(
    services: Services, ops: OpsClient
) -> None:
    failed = _failed(ops, ALICE, "k-owner")
    app = make_app(services.target)

    async def scenario() -> None:
        async with gateway_client(app) as client:
            for path in CONSOLE_READS:  # no session at all
                answer = await client.get(path)
                assert answer.status_code == 401, path
                assert answer.json()["code"] == "operator_sign_in_required"
            await sign_in(client, ALICE)  # the owner's own session cookie
            assert client.cookies.get("ops_session")
            for path in (*CONSOLE_READS, f"/console/api/operations/{failed}"):
                answer = await client.get(path)
                assert answer.status_code == 401, path
                assert failed not in answer.text
                assert ALICE not in answer.text
            page = await client.get("/console")
            assert page.status_code == 200
            assert "Operator console sign-in" in page.text
            assert failed not in page.text
            retried = await client.post(
                "/console/api/retry", json={"ids": [failed]}, headers=SAME_ORIGIN
            )
            assert retried.status_code == 401
            bearer = {"Authorization": f"Bearer {client.cookies['ops_session']}"}
            assert (await client.get("/console/api/operations", headers=bearer)).status_code == 401

    run(scenario())
    assert ops.get(ALICE, failed).state == FAILED  # nothing was retried


def test_sign_in_sets_a_console_cookie_that_sign_out_ends(
    services: Services, operator_md: Metadata
) -> None:
    link = _link(services, operator_md)
    app = make_app(services.target)

    async def scenario() -> None:
        async with gateway_client(app) as client:
            refused = await client.post("/console/sign-in", json={"link": link})
            assert refused.status_code == 403  # no Origin: a forged sign-in is refused
            signed = await _console_client(client, f"http://x/console/sign-in#link={link}")
            assert signed.status_code == 200, signed.text
            assert signed.json()["operator"] == OPERATOR_NAME
            cookie = signed.headers["set-cookie"]
            assert "ops_console=" in cookie
            assert "Path=/console" in cookie
            assert "HttpOnly" in cookie
            assert "SameSite=strict" in cookie
            assert "Secure" not in cookie  # plain http: a Secure cookie would never come back
            assert "ops_session" not in client.cookies
            session_id = client.cookies["ops_console"]
            assert (await client.get("/console/api/session")).json()["operator"] == OPERATOR_NAME
            page = await client.get("/console")
            assert "Queues" in page.text
            assert OPERATOR_NAME in page.text
            assert (await _console_client(client, link)).status_code == 401  # used once

            forged = await client.post("/console/sign-out", headers={"Origin": "http://evil"})
            assert forged.status_code == 403
            out = await client.post("/console/sign-out", headers=SAME_ORIGIN)
            assert out.status_code == 204
            assert _clears_the_cookie(out)
            client.cookies.set("ops_console", session_id, path="/console")  # a kept copy
            after = await client.get("/console/api/operations")
            assert after.status_code == 401

    run(scenario())


def test_a_console_write_naming_no_origin_is_not_offered_a_bearer_token(
    services: Services,
) -> None:
    """The console takes no bearer token: its 403 names the Origin header alone."""
    app = make_app(services.target)
    writes = [
        ("/console/sign-in", {"link": "a" * 43}),
        ("/console/sign-out", None),
        ("/console/api/cancel", {"ids": ["a" * 32]}),
        ("/console/api/retry", {"ids": ["a" * 32]}),
    ]

    async def scenario() -> None:
        async with gateway_client(app) as client:
            for path, body in writes:
                refused = await client.post(path, json=body)
                assert refused.status_code == 403, path
                problem = refused.json()
                assert problem["code"] == "origin_required", path
                assert "Origin" in problem["detail"], path
                assert "bearer" not in problem["detail"].lower(), path

    run(scenario())


def test_bulk_retry_retries_exactly_the_operations_named_and_refuses_cross_origin(
    services: Services, ops: OpsClient, operator_md: Metadata
) -> None:
    chosen = [_failed(ops, ALICE, "k-a1"), _failed(ops, BOB, "k-b1"), _failed(ops, ALICE, "k-a2")]
    left_alone = _failed(ops, BOB, "k-b2")
    still_queued = ops.create(BOB, "k-queued").id
    link = _link(services, operator_md)
    app = make_app(services.target)

    async def scenario() -> dict[str, Any]:
        async with gateway_client(app) as client:
            assert (await _console_client(client, link)).status_code == 200
            body = {"ids": [*chosen, still_queued]}
            evil = await client.post(
                "/console/api/retry", json=body, headers={"Origin": "http://evil.example"}
            )
            assert evil.status_code == 403
            nameless = await client.post("/console/api/retry", json=body)
            assert nameless.status_code == 403
            assert nameless.json()["code"] == "origin_required"
            too_many = {"ids": [f"{n:032x}" for n in range(console.BULK_MAX + 1)]}
            over = await client.post("/console/api/retry", json=too_many, headers=SAME_ORIGIN)
            assert over.status_code == 400
            assert over.json()["field"] == "ids"
            answer = await client.post("/console/api/retry", json=body, headers=SAME_ORIGIN)
            assert answer.status_code == 200, answer.text
            result: dict[str, Any] = answer.json()
            return result

    result = run(scenario())
    assert (result["succeeded"], result["failed"]) == (3, 1)
    assert [item["id"] for item in result["results"]] == [*chosen, still_queued]
    assert [item["ok"] for item in result["results"]] == [True, True, True, False]
    assert result["results"][3]["code"]  # why: a queued operation is not retryable
    owners = {chosen[0]: ALICE, chosen[1]: BOB, chosen[2]: ALICE}
    for operation_id in chosen:
        assert ops.get(owners[operation_id], operation_id).state == QUEUED
    assert ops.get(BOB, left_alone).state == FAILED
    assert ops.get(BOB, still_queued).state == QUEUED


def test_a_bulk_action_naming_what_cannot_be_an_id_is_refused_whole(
    services: Services, ops: OpsClient, operator_md: Metadata
) -> None:
    """An id that could never have been issued was tried, and answered per id as
    ``operation_not_found``, echoing it (a NUL). It is bad input: a 400 naming ``ids``,
    with nothing done to the others."""
    failed = _failed(ops, ALICE, "k-a1")
    queued = ops.create(BOB, "k-queued").id
    link = _link(services, operator_md)
    app = make_app(services.target)
    bad = ["\u0000", "", "../x", "a" * 65, "a b", "é", "\ud800"]

    async def scenario() -> None:
        async with gateway_client(app) as client:
            assert (await _console_client(client, link)).status_code == 200
            for path in ("/console/api/retry", "/console/api/cancel"):
                for item in bad:
                    # json.dumps escapes the lone surrogate, which httpx's json= cannot send.
                    body = json.dumps({"ids": [failed, queued, item]})
                    headers = {**SAME_ORIGIN, "Content-Type": "application/json"}
                    response = await client.post(path, content=body, headers=headers)
                    assert response.status_code == 400, (item, response.text)
                    problem = response.json()
                    assert (problem["code"], problem["field"]) == ("invalid_argument", "ids")
                    assert "item 3" in problem["detail"], problem

    run(scenario())
    assert ops.get(ALICE, failed).state == FAILED
    assert ops.get(BOB, queued).state == QUEUED


def test_bulk_cancel_and_search_and_attempt_history_over_http(
    services: Services, ops: OpsClient, clock: ManualClock, operator_md: Metadata
) -> None:
    old_failed = _failed(ops, ALICE, "k-old")
    clock.advance(1)
    created = ops.create(BOB, "k-history", max_attempts=2)
    lease = ops.claim_one()
    _settle_with_usage(ops, lease, retryable=True, message="the model took too long")
    clock.advance(3600)
    services.sweep()  # waiting_for_retry -> queued, its first attempt in the history
    clock.advance(2 * 3600)
    fresh = ops.create(ALICE, "k-fresh", task_type=OTHER_TASK).id
    link = _link(services, operator_md)
    app = make_app(services.target)

    async def scenario() -> None:
        async with gateway_client(app) as client:
            assert (await _console_client(client, link)).status_code == 200

            async def ids(**params: str) -> list[str]:
                answer = await client.get("/console/api/operations", params=params)
                assert answer.status_code == 200, answer.text
                return [item["id"] for item in answer.json()["items"]]

            assert await ids() == [fresh, created.id, old_failed]
            assert await ids(owner=ALICE) == [fresh, old_failed]
            assert await ids(state="failed") == [old_failed]
            assert await ids(task_type=OTHER_TASK) == [fresh]
            assert await ids(failure_code="model_error") == [old_failed]
            assert await ids(older_than="2h") == [created.id, old_failed]
            bad = await client.get("/console/api/operations", params={"older_than": "soon"})
            assert bad.status_code == 400
            assert bad.json()["field"] == "older_than"
            bad_state = await client.get("/console/api/operations", params={"state": "done"})
            assert bad_state.status_code == 400
            for name in gateway_console.LIST_PARAMETERS:
                nul = await client.get("/console/api/operations", params={name: "model\x00error"})
                assert nul.status_code == 400, (name, nul.text)
                assert (nul.json()["code"], nul.json()["field"]) == ("control_character", name)
            zero = await client.get("/console/api/operations", params={"older_than": "0s"})
            assert zero.json()["detail"] == "older_than '0s' is not a positive duration."

            shown = (await client.get(f"/console/api/operations/{created.id}")).json()
            assert shown["owner_id"] == BOB
            (first,) = shown["attempts"]
            assert first["failure_code"] == "model_timeout"
            assert first["failure_message"] == "the model took too long"
            assert first["usage"]["prompt_tokens"] == 1200
            assert first["usage"]["completion_tokens"] == 345
            missing = await client.get("/console/api/operations/" + "0" * 32)
            assert missing.status_code == 404

            cancelled = await client.post(
                "/console/api/cancel", json={"ids": [fresh]}, headers=SAME_ORIGIN
            )
            assert cancelled.json()["succeeded"] == 1
            queues = (await client.get("/console/api/queues")).json()
            assert queues["paused_task_types"] == []
            services.operator.PauseTaskType(
                opb.PauseTaskTypeRequest(task_type="report.render"), metadata=operator_md
            )
            queues = (await client.get("/console/api/queues")).json()
            assert queues["paused_task_types"] == ["report.render"]
            assert [queue["task_type"] for queue in queues["queues"]] == [TASK]
            assert queues["queues"][0]["queued"] == 1

    run(scenario())
    assert ops.get(ALICE, fresh).state == pb.OPERATION_STATE_CANCELLED


def _clears_the_cookie(response: httpx.Response) -> bool:
    """Whether ``response`` deletes the ``ops_console`` cookie where it was set."""
    return any(
        header.startswith("ops_console=") and "Max-Age=0" in header and "Path=/console" in header
        for header in response.headers.get_list("set-cookie")
    )


def test_an_ended_session_is_told_to_sign_in_again_and_its_cookie_cleared(
    services: Services, ops: OpsClient, operator_md: Metadata
) -> None:
    """Revoked (or expired) while the page is open: every console route answers as to no
    session (401 ``operator_sign_in_required``, the page with its notice) and deletes the
    stale cookie, so the browser stops sending it; nothing is done."""
    failed = _failed(ops, ALICE, "k-ended")
    link = _link(services, operator_md)
    app = make_app(services.target)

    async def scenario() -> None:
        async with gateway_client(app) as client:
            first = await client.get("/console")
            assert "Your console session ended" not in first.text  # never signed in: no notice
            assert not _clears_the_cookie(first)
            assert (await _console_client(client, link)).status_code == 200
            session_id = client.cookies["ops_console"]
            services.operator.EndOperatorSessions(
                opb.EndOperatorSessionsRequest(), metadata=operator_md
            )
            calls = [
                *(("GET", path, None) for path in CONSOLE_READS),
                ("POST", "/console/api/retry", {"ids": [failed]}),
                ("POST", "/console/api/cancel", {"ids": [failed]}),
            ]
            for method, path, body in calls:
                client.cookies.set("ops_console", session_id, path="/console")
                answer = await client.request(method, path, json=body, headers=SAME_ORIGIN)
                assert answer.status_code == 401, (path, answer.text)
                assert answer.json()["code"] == "operator_sign_in_required", path
                assert _clears_the_cookie(answer), path
            client.cookies.set("ops_console", session_id, path="/console")
            page = await client.get("/console")
            assert page.status_code == 200
            assert "Your console session ended" in page.text
            assert _clears_the_cookie(page)
            client.cookies.set("ops_console", session_id, path="/console")
            out = await client.post("/console/sign-out", headers=SAME_ORIGIN)
            assert out.status_code == 204  # signing out of an ended session is fine
            assert _clears_the_cookie(out)

    run(scenario())
    assert ops.get(ALICE, failed).state == FAILED


def test_the_console_cookie_is_secure_under_https_and_outlives_no_session(
    services: Services, clock: ManualClock, operator_md: Metadata
) -> None:
    """Over https the cookie is ``Secure``. Its ``Max-Age`` is counted on the gateway's
    clock from the session's end on the Operations service's: with the two a month apart,
    it is still at most the eight hours of a session."""
    clock.advance(30 * 86400)
    link = _link(services, operator_md)
    app = make_app(services.target)
    origin = "https://localhost"

    async def scenario() -> str:
        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 123))
        try:
            async with httpx.AsyncClient(transport=transport, base_url=origin) as client:
                answer = await client.post(
                    "/console/sign-in", json={"link": link}, headers={"Origin": origin}
                )
                assert answer.status_code == 200, answer.text
                return answer.headers["set-cookie"]
        finally:
            await app.state.backends.close()

    cookie = run(scenario())
    assert "Secure" in cookie
    assert f"Max-Age={console.SESSION_SECONDS};" in cookie


def test_a_bulk_action_takes_a_list_of_strings_and_answers_only_a_session(
    services: Services, ops: OpsClient, operator_md: Metadata
) -> None:
    """``ids`` must be a JSON list of strings: a string is not read as its letters, nor a
    number passed on; either is a 400 naming ``ids`` with nothing done. Without a console
    session the body is not read at all: a 401, even for one that is not JSON."""
    failed = _failed(ops, ALICE, "k-typed")
    link = _link(services, operator_md)
    app = make_app(services.target)

    async def scenario() -> None:
        async with gateway_client(app) as client:
            headers = {**SAME_ORIGIN, "Content-Type": "application/json"}
            stranger = await client.post("/console/api/retry", content="{", headers=headers)
            assert stranger.status_code == 401
            assert (await _console_client(client, link)).status_code == 200
            for ids in ("abc", failed, [1, 2], [failed, None], {"a": failed}):
                for path in ("/console/api/retry", "/console/api/cancel"):
                    answer = await client.post(path, json={"ids": ids}, headers=SAME_ORIGIN)
                    assert answer.status_code == 400, (ids, answer.text)
                    assert answer.json()["field"] == "ids", ids

    run(scenario())
    assert ops.get(ALICE, failed).state == FAILED


@pytest.mark.parametrize("link", ["", "x" * 300, "not-a-link"])
def test_a_bad_link_is_a_clear_refusal(services: Services, link: str) -> None:
    app = make_app(services.target)

    async def scenario() -> httpx.Response:
        async with gateway_client(app) as client:
            return await _console_client(client, link)

    answer = run(scenario())
    assert answer.status_code in (400, 401)
    assert answer.json()["code"] in ("invalid_argument", console.LINK_UNUSABLE)
    assert "ops_console" not in answer.headers.get("set-cookie", "")


def test_console_sign_ins_are_throttled_as_the_users_are(services: Services) -> None:
    """A burst of ``SIGN_IN_BURST`` attempts from one address, then 429 before any link is
    looked up."""
    app = make_app(services.target)
    app.state.sign_in_throttle = Throttle(  # time stands still: no refill during the test
        login.SIGN_IN_BURST, login.SIGN_IN_REFILL_SECONDS, clock=lambda: 0.0
    )

    async def scenario() -> None:
        async with gateway_client(app) as client:
            for _ in range(login.SIGN_IN_BURST):
                refused = await _console_client(client, "x" * 43)
                assert refused.json()["code"] == console.LINK_UNUSABLE
            throttled = await _console_client(client, "x" * 43)
            assert throttled.status_code == 429
            assert throttled.json()["code"] == "too_many_sign_ins"
            assert "ops_console" not in throttled.headers.get("set-cookie", "")

    run(scenario())


# ---- opsctl console ----------------------------------------------------------------------


def test_opsctl_console_link_prints_a_link_that_signs_in_once_and_revoke_ends_it(
    services: Services,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    opsctl: Callable[..., tuple[int, str, str]],  # the operator's key and the target, set
) -> None:
    from durable_ops import cli

    def console_cli(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        with capture_logs():
            code = cli.main(["console", *args])
        out, err = capsys.readouterr()
        return code, out, err

    monkeypatch.chdir(tmp_path)  # no var/stack.json here: the default gateway address
    code, out, err = console_cli(
        "link", "--as", "ops-dan", "--json", "--url", "https://ops.example"
    )
    assert (code, err) == (0, "")
    printed = json.loads(out)
    assert printed.keys() == {"link", "operator", "expires_at"}
    assert printed["operator"] == "ops-dan"
    expires = datetime.fromisoformat(printed["expires_at"])
    assert services.clock() < expires <= services.clock() + timedelta(minutes=10)
    prefix = "https://ops.example/console/sign-in#link="
    assert printed["link"].startswith(prefix)
    opened = _open(services, printed["link"].removeprefix(prefix))
    assert opened.operator == "ops-dan"

    code, out, _ = console_cli("link", "--as", "ops-dan")
    assert code == 0
    assert "http://127.0.0.1:8080/console/sign-in#link=" in out
    assert "works once" in out
    monkeypatch.setenv("OPS_GATEWAY_BIND", "0.0.0.0:23080")  # reached on loopback
    code, out, _ = console_cli("link", "--as", "ops-dan")
    assert code == 0
    assert "http://127.0.0.1:23080/console/sign-in#link=" in out
    monkeypatch.delenv("OPS_GATEWAY_BIND")

    code, out, _ = console_cli("revoke", "--as", "ops-erin", "--operator", "ops-dan")
    assert code == 0
    assert "Ended 3 console sign-in(s) of ops-dan" in out  # the session and the unopened links
    ended = rpc_failure(
        lambda: services.operator.GetConsoleSession(
            opb.GetConsoleSessionRequest(), metadata=_console_md(opened.session_id)
        )
    )
    assert ended.error_code == console.SESSION_ENDED

    others = [
        _open(services, _link(services, metadata(Role.OPERATOR, subject=name), name)).session_id
        for name in ("ops-a", "ops-b")
    ]
    code, out, _ = console_cli("revoke", "--all")
    assert code == 0
    assert "Ended 2 console sign-in(s) of every operator" in out
    for session_id in others:
        asking = partial(
            services.operator.GetConsoleSession,
            opb.GetConsoleSessionRequest(),
            metadata=_console_md(session_id),
        )
        gone = rpc_failure(asking)
        assert gone.error_code == console.SESSION_ENDED
    with pytest.raises(SystemExit) as usage:
        console_cli("revoke", "--all", "--operator", "ops-dan")
    assert usage.value.code == 2  # one or the other

    code, _, err = console_cli("link", "--url", "ftp://nowhere")
    assert code == 2
    assert "not an http(s) address" in err
