"""What the gateway tells an operator: refused and throttled sign-ins, backend outages.

Ten bad ``/auth/login`` then 429s, or 503s while a backend was down, wrote no gateway line
at all (only metrics). Now each refused sign-in is one ``login_refused`` (client address,
reason code; never the token, nor the user an unverified token claims), a throttled key
one ``login_throttled`` a window, and an outage of a backend two lines: as calls start to
find nothing there and as it answers again.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import MutableMapping
from typing import Any

import httpx
import jwt
import pytest
from structlog.testing import capture_logs

from durable_ops import cli
from durable_ops.api.notifications.v1 import notifications_pb2_grpc
from durable_ops.gateway import login
from durable_ops.gateway.auth import mint_user_token
from durable_ops.gateway.limits import Throttle
from durable_ops.notifications.service import SERVICE_NAME as NOTIFICATIONS
from durable_ops.notifications.service import NotificationsService
from durable_ops.rpc.server import build_server, start, stop
from tests.support.gateway import JWT_SECRET, bearer, gateway_client, make_app, run, token
from tests.support.grpc_services import Services
from tests.support.keys import trusted
from tests.support.ports import free_port

WINDOW_SECONDS = login.SIGN_IN_BURST * login.SIGN_IN_REFILL_SECONDS  # an emptied bucket fills


class _Seconds:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _told(lines: list[MutableMapping[str, Any]], *events: str) -> list[MutableMapping[str, Any]]:
    return [line for line in lines if line["event"] in events]


def test_refused_and_throttled_sign_ins_are_logged_once_each_without_user_content(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(services.target, gateway_trusted_proxies="127.0.0.1")
    seconds = _Seconds()
    app.state.sign_in_throttle = Throttle(
        login.SIGN_IN_BURST, login.SIGN_IN_REFILL_SECONDS, clock=seconds
    )
    garbage = "hunter2-is-not-a-token"
    forged = mint_user_token("not-the-secret-" + "x" * 40, "mallory", 600)
    now = int(time.time())
    expired = jwt.encode({"sub": "mallory", "iat": now - 7200, "exp": now - 3600}, JWT_SECRET)
    revoked = token("bob")
    monkeypatch.delenv("OPS_DATABASE_URL", raising=False)
    assert cli.main(["sessions", "revoke", "--user", "bob", "--database-url", services.db.url]) == 0

    async def scenario() -> list[int]:
        async with gateway_client(app) as client:

            async def attempt(address: str, sample: str) -> int:
                answer = await client.post(
                    "/auth/login", json={"token": sample}, headers={"X-Forwarded-For": address}
                )
                return answer.status_code

            statuses = [await attempt("198.51.100.1", sample) for sample in (garbage, forged)]
            statuses.append(await attempt("198.51.100.1", expired))
            statuses.append(await attempt("198.51.100.1", revoked))
            statuses += [await attempt("198.51.100.1", garbage) for _ in range(11)]
            seconds.now += login.SIGN_IN_REFILL_SECONDS  # one token: one more try, refused
            statuses += [await attempt("198.51.100.1", garbage) for _ in range(2)]
            seconds.now += WINDOW_SECONDS  # the window is over, the bucket full again
            statuses += [await attempt("198.51.100.1", garbage) for _ in range(11)]
            # A user's own bucket: alice's good token from ten addresses, then an eleventh.
            statuses += [await attempt(f"203.0.113.{n}", token("alice")) for n in range(11)]
            return statuses

    with capture_logs() as lines:
        statuses = run(scenario())
    assert statuses[:15] == [401] * 10 + [429] * 5
    assert statuses[15:17] == [401, 429]
    assert statuses[17:28] == [401] * 10 + [429]
    assert statuses[28:] == [200] * 10 + [429]

    refused = _told(lines, "login_refused")
    assert [line["reason"] for line in refused[:4]] == [
        "token_invalid",
        "token_signature_invalid",
        "token_expired",
        "token_revoked",
    ]
    assert {line["client"] for line in refused} == {"198.51.100.1"}
    assert {line["log_level"] for line in refused} == {"warning"}
    assert len(refused) == 10 + 1 + 10  # one per refused sign-in, none per throttled one
    assert refused[3]["owner"] == "bob"  # verified, then found revoked
    assert all("owner" not in line for line in refused[:3])

    throttled = _told(lines, "login_throttled")
    assert [(t["throttled"], t["client"], t["refused_attempts"]) for t in throttled] == [
        ("client", "198.51.100.1", 1),  # the first refusal of the key
        # quiet within the window (4 + 1 more); then the first refusal after it, counted
        ("client", "198.51.100.1", 4 + 1 + 1),
        ("user", "203.0.113.10", 1),
    ]
    assert throttled[-1]["owner"] == "alice"
    assert all(t["log_level"] == "warning" and t["retry_after_seconds"] >= 1 for t in throttled)

    written = json.dumps([dict(line) for line in lines])
    for secret in (garbage, forged, expired, revoked, token("alice"), "mallory"):
        assert secret not in written


def test_a_backend_outage_is_one_line_as_it_begins_and_one_as_it_ends(
    sqlite_services: Services,
) -> None:
    port = free_port()
    app = make_app(sqlite_services.target, notifications_target=f"127.0.0.1:{port}")

    def register(server: Any) -> None:
        notifications_pb2_grpc.add_NotificationsServiceServicer_to_server(
            NotificationsService(sqlite_services.db, sqlite_services.clock), server
        )

    async def scenario() -> tuple[int, list[int]]:
        async with gateway_client(app) as client:

            async def unread() -> httpx.Response:
                return await client.get("/api/notifications/unread-count", headers=bearer("alice"))

            failed = 0
            for _ in range(5):  # nothing listens there yet
                assert (await unread()).status_code == 503
                failed += 1
            server, _ = build_server(
                f"127.0.0.1:{port}", register, [NOTIFICATIONS], trusted=trusted()
            )
            await start(server)
            try:
                deadline = time.monotonic() + 30
                while (answer := await unread()).status_code != 200:
                    assert answer.status_code == 503
                    assert time.monotonic() < deadline, "the gateway never reached it"
                    failed += 1
                    await asyncio.sleep(0.1)
                later = [(await unread()).status_code for _ in range(3)]
            finally:
                await stop(server, 0)
        return failed, later

    with capture_logs() as lines:
        failed, later = run(scenario())
    assert later == [200] * 3
    told = _told(lines, "backend_unavailable", "backend_recovered")
    assert [(line["event"], line["backend"]) for line in told] == [
        ("backend_unavailable", "notifications"),
        ("backend_recovered", "notifications"),
    ], told
    unavailable, recovered = told
    assert unavailable["log_level"] == "warning"
    assert recovered["failed_calls"] == failed
    assert recovered["unavailable_seconds"] >= 0
