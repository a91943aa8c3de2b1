"""Sessions that end (issue 35, point 5): logout, revocation, expiry, a hashed id.

On both engines: the gateway resolves every credential through the Workspace
service over the test's database.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from datetime import UTC, datetime
from functools import partial
from typing import Any

import grpc
import httpx
import jwt
import pytest
from sqlalchemy import inspect, select, text

from durable_ops import cli
from durable_ops.api.workspace.v1 import workspace_pb2 as wpb
from durable_ops.gateway.auth import SESSION_COOKIE
from durable_ops.model.errors import InvalidArgument, Unauthenticated
from durable_ops.model.scope import Role
from durable_ops.storage import migrate, sessions
from durable_ops.storage.db import create_db_engine
from durable_ops.storage.schema import UserSession
from durable_ops.storage.tx import Tx
from tests.support.clock import ManualClock
from tests.support.gateway import (
    JWT_SECRET,
    bearer,
    create_operation,
    dev_login,
    gateway_client,
    make_app,
    run,
    sign_in,
    token,
)
from tests.support.grpc_services import Services, metadata
from tests.support.operations_client import expect_failure
from tests.support.ports import free_port
from tests.support.stored import rows

PATH = "/api/notifications/unread-count"


def _unauthenticated(response: httpx.Response) -> None:
    assert response.status_code == 401, response.text
    assert response.json()["code"] == "unauthenticated"
    assert response.headers["www-authenticate"].startswith("Bearer")


def _with_cookie(session_id: str) -> dict[str, str]:
    return {"Cookie": f"{SESSION_COOKIE}={session_id}"}


def _stored(services: Services) -> list[UserSession]:
    return [UserSession(**row._mapping) for row in rows(services.db, select(UserSession))]


def test_a_logged_out_cookie_gets_401(services: Services) -> None:
    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            session_id = await sign_in(client, "alice")
            assert (await client.get(PATH)).status_code == 200
            assert (await client.post("/auth/logout")).status_code == 204
            client.cookies.clear()
            _unauthenticated(await client.get(PATH, headers=_with_cookie(session_id)))
            # A page treats it as signed out; logging out again is harmless.
            page = await client.get("/operations", headers=_with_cookie(session_id))
            assert page.status_code == 303
            again = await client.post("/auth/logout", headers=_with_cookie(session_id))
            assert again.status_code == 204

    run(scenario())
    assert _stored(services) == []


def test_the_session_id_is_stored_only_hashed(services: Services) -> None:
    async def scenario() -> str:
        async with gateway_client(make_app(services.target, dev_login=True)) as client:
            response = await dev_login(client, "alice")
            assert response.status_code == 303
            return str(client.cookies[SESSION_COOKIE])

    session_id = run(scenario())
    assert len(session_id) >= 43  # 256 bits, URL-safe base64
    (row,) = _stored(services)
    assert row.id == hashlib.sha256(session_id.encode()).hexdigest()
    assert row.owner_user_id == "alice"
    raw = rows(services.db, text("SELECT * FROM user_sessions"))
    assert session_id not in repr(raw)


def test_an_expired_session_gets_401_and_is_pruned_at_a_later_sign_in(
    services: Services, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with gateway_client(make_app(services.target)) as client:
            signed = await client.post("/auth/login", json={"token": token("alice", 600)})
            assert signed.status_code == 200
            session_id = str(client.cookies[SESSION_COOKIE])
            clock.advance(599)
            assert (await client.get(PATH)).status_code == 200
            clock.advance(1)
            _unauthenticated(await client.get(PATH))
            client.cookies.clear()
            await sign_in(client, "bob")  # prunes alice's expired session
            assert [row.owner_user_id for row in _stored(services)] == ["bob"]
            _unauthenticated(await client.get(PATH, headers=_with_cookie(session_id)))

    run(scenario())


def _signed(user: str, issued_at: int) -> str:
    """A token issued at ``issued_at`` (the mint always says now), living 10 minutes."""
    claims: dict[str, Any] = {"sub": user, "iat": issued_at, "exp": issued_at + 600}
    return jwt.encode(claims, JWT_SECRET, algorithm="HS256")


def test_revoking_a_user_ends_their_sessions_and_tokens_only(
    services: Services,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    alice_token = token("alice")
    app = make_app(services.target)

    async def before() -> tuple[str, str]:
        async with gateway_client(app) as client:
            alice = await sign_in(client, "alice")
            client.cookies.clear()
            bob = await sign_in(client, "bob")
            return alice, bob

    alice_session, bob_session = run(before())
    monkeypatch.delenv("OPS_DATABASE_URL", raising=False)
    assert (
        cli.main(["sessions", "revoke", "--user", "alice", "--database-url", services.db.url]) == 0
    )
    # The last line: the services' log lines of this process come before it.
    said = capsys.readouterr().out.splitlines()[-1]
    assert said == "alice: 1 session(s) ended; tokens issued until now are refused"
    assert [row.owner_user_id for row in _stored(services)] == ["bob"]

    async def after() -> None:
        async with gateway_client(app) as client:
            revoked = {"Authorization": f"Bearer {alice_token}"}
            _unauthenticated(await client.get(PATH, headers=_with_cookie(alice_session)))
            _unauthenticated(await client.get(PATH, headers=revoked))
            login = await client.post("/auth/login", json={"token": alice_token})
            assert login.status_code == 401
            assert SESSION_COOKIE not in client.cookies
            # Bob is served, by cookie and by token.
            assert (await client.get(PATH, headers=_with_cookie(bob_session))).status_code == 200
            assert (await client.get(PATH, headers=bearer("bob"))).status_code == 200
            # A token issued after the revocation signs alice in again.
            fresh = _signed("alice", int(time.time()) + 2)
            headers = {"Authorization": f"Bearer {fresh}"}
            assert (await client.get(PATH, headers=headers)).status_code == 200
            assert (await client.post("/auth/login", json={"token": fresh})).status_code == 200
            assert (await client.get(PATH)).status_code == 200

    run(after())


def test_a_second_revocation_refuses_the_tokens_issued_since_the_first(services: Services) -> None:
    """Each revocation moves the user's floor up to its own time (a later one to a later
    time, an earlier one never down): a token issued after the first revocation and leaked
    in turn is refused once the user is revoked again."""
    now = int(time.time())
    between = {"Authorization": f"Bearer {_signed('alice', now - 60)}"}
    app = make_app(services.target)

    def revoke_at(seconds: int) -> None:
        at = datetime.fromtimestamp(seconds, UTC)
        services.db.run(lambda tx: sessions.revoke_user(tx, at), owner_id="alice")

    async def get() -> httpx.Response:
        async with gateway_client(app) as client:
            return await client.get(PATH, headers=between)

    revoke_at(now - 120)
    assert run(get()).status_code == 200  # issued after the first revocation
    revoke_at(now - 30)
    _unauthenticated(run(get()))
    revoke_at(now - 120)  # a revocation with an older time lowers nothing
    _unauthenticated(run(get()))


def _revoke(services: Services, user: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPS_DATABASE_URL", raising=False)
    revoke = ["sessions", "revoke", "--user", user, "--database-url", services.db.url]
    assert cli.main(revoke) == 0


def test_a_revoked_token_reads_nothing_though_its_check_runs_beside_the_read(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read's revocation check runs beside the read (``gateway.standing``): whatever the
    route would have answered, a revoked token gets 401 and only that, at once."""
    revoked = {"Authorization": f"Bearer {token('alice')}"}
    queued = create_operation(services, "alice").id
    _revoke(services, "alice", monkeypatch)
    app = make_app(services.target)

    async def scenario() -> None:
        async with gateway_client(app) as client:
            for path in (
                f"/api/operations/{queued}",  # a backend's answer: 200 otherwise
                "/api/operations/not*an*id",  # the route's own: 404 otherwise
                f"/api/operations/{queued}:wait?timeout=30",  # a long-poll, dropped at once
                "/api/events",  # a stream, never opened
                "/api/operations",
            ):
                answer = await asyncio.wait_for(client.get(path, headers=revoked), 10)
                _unauthenticated(answer)
            # A change is sent only once its token stands: the cancel never reached the service.
            _unauthenticated(await client.post(f"/api/operations/{queued}/cancel", headers=revoked))
            assert app.state.long_polls.held("alice") == 0
            fresh = {"Authorization": f"Bearer {_signed('alice', int(time.time()) + 2)}"}
            mine = await client.get(f"/api/operations/{queued}", headers=fresh)
            assert mine.json()["state"] == "queued"

    run(scenario())


def test_a_read_whose_check_cannot_be_asked_answers_503_not_the_data(services: Services) -> None:
    """The Workspace down: the read's answer was there, but it never leaves."""
    queued = create_operation(services, "alice").id
    app = make_app(services.target, workspace_target=f"127.0.0.1:{free_port()}")

    async def scenario() -> None:
        async with gateway_client(app) as client:
            for path in (f"/api/operations/{queued}", "/api/operations/not*an*id"):
                answer = await client.get(path, headers=bearer("alice"))
                assert answer.status_code == 503, answer.text
                assert answer.json()["code"] == "unavailable"

    run(scenario())


def test_opsctl_sessions_revoke_refuses_a_malformed_user(
    services: Services, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(
        ["sessions", "revoke", "--user", "not valid!", "--database-url", services.db.url]
    )
    assert code == 2
    assert "owner" in capsys.readouterr().err


def test_a_session_request_with_a_bad_ttl_or_id_is_refused_not_a_fault(
    services: Services, clock: ManualClock
) -> None:
    with pytest.raises(InvalidArgument, match="ttl_seconds"):
        services.db.run(
            lambda tx: sessions.create_session(tx, clock(), sessions.SESSION_MAX_SECONDS + 1),
            owner_id="alice",
        )
    for bad in ("", "x" * 65, "%%%"):
        with pytest.raises(Unauthenticated, match="session is unknown"):
            services.db.run(partial(_resolve, session_id=bad, now=clock()), owner_id=None)


def test_an_issued_at_past_any_date_is_the_callers_error_not_a_fault(services: Services) -> None:
    """The gateway's word for a token's ``iat``: a number of seconds past any date a clock
    holds is INVALID_ARGUMENT on the field, for a session made or a token checked."""
    past_any_date = 2**62
    calls = (
        lambda: services.workspace.CreateSession(
            wpb.CreateSessionRequest(ttl_seconds=60, token_issued_at=past_any_date),
            metadata=metadata(Role.GATEWAY, "alice"),
        ),
        lambda: services.workspace.ResolveSession(
            wpb.ResolveSessionRequest(
                token=wpb.VerifiedToken(user_id="alice", issued_at=past_any_date)
            ),
            metadata=metadata(Role.GATEWAY),
        ),
    )
    for call in calls:
        expect_failure(
            call, grpc.StatusCode.INVALID_ARGUMENT, "invalid_argument", field="issued_at"
        )
    assert _stored(services) == []


def _resolve(tx: Tx, *, session_id: str, now: datetime) -> str:
    return sessions.resolve_session(tx, session_id, now)


def test_the_revision_goes_down_and_up(db_url: str) -> None:
    def tables() -> set[str]:
        engine = create_db_engine(db_url)
        try:
            return set(inspect(engine).get_table_names())
        finally:
            engine.dispose()

    assert {"user_sessions", "user_token_floors"} <= tables()
    migrate.migrate_to(db_url, "0007_operation_tombstones")
    assert not {"user_sessions", "user_token_floors"} & tables()
    migrate.upgrade(db_url)
    assert {"user_sessions", "user_token_floors"} <= tables()
