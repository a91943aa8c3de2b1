"""Run the gateway against the gRPC harness, and play the worker that moves operations.

``make_app`` builds the app for a harness target; ``gateway_client`` drives it
in-process with httpx (closing its gRPC channels at the end); ``LiveGateway``
serves it with uvicorn on 127.0.0.1:0 in a thread, for the browser. The
worker helpers use the harness's synchronous stubs with a worker credential.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

import httpx
from starlette.applications import Starlette

from durable_ops.api.operations.v1 import operations_pb2 as ops_pb
from durable_ops.api.workspace.v1 import workspace_pb2 as workspace_pb
from durable_ops.gateway.app import create_app
from durable_ops.gateway.auth import mint_user_token
from durable_ops.gateway.backends import Backends
from durable_ops.gateway.connections import server_config
from durable_ops.gateway.stopping import GatewayServer
from durable_ops.model.scope import Role
from durable_ops.settings import Settings
from tests.support.grpc_services import Services, metadata
from tests.support.keys import keys_dir

JWT_SECRET = "test-user-jwt-secret-" + "0123456789abcdef" * 4
BASE_URL = "http://localhost"
# The Operation DTO's keys, all of them (SPEC §5): never the idempotency key, lease,
# provider, failure code or text, nor the result reference the gRPC message carries.
OPERATION_FIELDS = frozenset(
    {
        "id",
        "task_type",
        "state",
        "progress_percent",
        "attempt",
        "max_attempts",
        "cancel_requested",
        "subject",
        "status_url",
        "created_at",
        "updated_at",
        "started_at",
        "finished_at",
        "deadline_at",
        "next_attempt_at",
        "not_before",
        "usage",
    }
)


def gateway_settings(target: str, **overrides: Any) -> Settings:
    settings = Settings(
        jwt_secret=JWT_SECRET,
        service_keys_dir=str(keys_dir()),
        operations_target=target,
        notifications_target=target,
        workspace_target=target,
        ai_admission_target=target,
        gateway_bind="127.0.0.1:0",
        log_json="true",
    )
    return replace(settings, **overrides)


def make_app(target: str, **overrides: Any) -> Starlette:
    settings = gateway_settings(target, **overrides)
    return create_app(settings, Backends.from_settings(settings))


def token(user: str, ttl_seconds: int = 600, **kwargs: Any) -> str:
    return mint_user_token(JWT_SECRET, user, ttl_seconds, **kwargs)


def bearer(user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(user)}"}


@asynccontextmanager
async def gateway_client(
    app: Starlette, *, peer: tuple[str, int] = ("127.0.0.1", 123)
) -> AsyncIterator[httpx.AsyncClient]:
    """An in-process client connecting from ``peer``; the app's gRPC channels close at the end."""
    transport = httpx.ASGITransport(app=app, client=peer)
    try:
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
            yield client
    finally:
        backends: Backends = app.state.backends
        await backends.close()


async def dev_login(client: httpx.AsyncClient, user: str) -> httpx.Response:
    """What the sign-in page's development form sends: a same-origin POST of ``user``."""
    return await client.post("/auth/dev-login", data={"user": user}, headers={"Origin": BASE_URL})


async def sign_in(client: httpx.AsyncClient, user: str) -> str:
    """Sign ``user`` in with a fresh token, as the sign-in page does; the session cookie's id."""
    response = await client.post("/auth/login", json={"token": token(user)})
    assert response.status_code == 200, response.text
    return str(client.cookies["ops_session"])


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


# ---- a live server for the browser ------------------------------------------------------


class LiveGateway:
    """uvicorn serving ``app`` on a free loopback port in a daemon thread."""

    def __init__(self, app: Starlette) -> None:
        self.app = app
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        # The process's server (gateway.main): its streams and long-polls end as the stop
        # begins; anything else a page left running is cut short after a second.
        config = server_config(app, lifespan="on", timeout_graceful_shutdown=1)
        self._server = GatewayServer(config, app.state.draining)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    def __enter__(self) -> LiveGateway:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the gateway did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *_exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._socket.close()


# ---- the worker side --------------------------------------------------------------------


@dataclass(frozen=True)
class Claimed:
    operation_id: str
    owner: str
    lease_token: str
    subject_id: str = ""
    context_ref: str = ""


def create_operation(
    services: Services,
    owner: str,
    *,
    task_type: str = "strategy.snapshot",
    key: str | None = None,
    subject: tuple[str, str] = ("job", "job-1"),
    max_attempts: int = 3,
) -> ops_pb.Operation:
    reply = services.operations.CreateOperation(
        ops_pb.CreateOperationRequest(
            task_type=task_type,
            idempotency_key=key or f"key-{time.monotonic_ns()}",
            subject=ops_pb.Subject(type=subject[0], id=subject[1]),
            max_attempts=max_attempts,
            retry_delay_seconds=1,
        ),
        metadata=metadata(Role.GATEWAY, owner),  # as admission would make it for the user
    )
    operation: ops_pb.Operation = reply.operation
    return operation


# A page's click returns before its request lands: the claim waits for the work to arrive.
CLAIM_WAIT_SECONDS = 10


def claim(services: Services, task_types: list[str]) -> Claimed:
    request = ops_pb.ClaimOperationRequest(task_types=task_types, lease_seconds=60)
    request.wait.seconds = CLAIM_WAIT_SECONDS
    reply = services.operations.ClaimOperation(request, metadata=metadata(Role.WORKER))
    if not reply.HasField("claimed"):
        raise AssertionError(f"nothing to claim for {task_types}")
    claimed = reply.claimed
    return Claimed(
        claimed.operation.id,
        claimed.owner_id,
        claimed.lease_token,
        claimed.operation.subject.id,
        claimed.context_ref,
    )


def heartbeat(services: Services, claimed: Claimed, progress: int) -> bool:
    """Report progress; answers whether a cancel was requested."""
    beat = ops_pb.HeartbeatRequest(
        operation_id=claimed.operation_id,
        lease_token=claimed.lease_token,
        progress_percent=progress,
    )
    replies = list(
        services.operations.Heartbeat(iter([beat]), metadata=metadata(Role.WORKER, claimed.owner))
    )
    return bool(replies[-1].cancel_requested)


def complete(services: Services, claimed: Claimed) -> None:
    services.operations.CompleteOperation(
        ops_pb.CompleteOperationRequest(
            operation_id=claimed.operation_id, lease_token=claimed.lease_token
        ),
        metadata=metadata(Role.WORKER, claimed.owner),
    )


def fail(services: Services, claimed: Claimed, *, retryable: bool = False) -> None:
    services.operations.FailOperation(
        ops_pb.FailOperationRequest(
            operation_id=claimed.operation_id,
            lease_token=claimed.lease_token,
            retryable=retryable,
            failure_code="test_failure",
            failure_message="secret details that must never reach a client",
        ),
        metadata=metadata(Role.WORKER, claimed.owner),
    )


def release(services: Services, claimed: Claimed) -> None:
    """What a stopping worker does: hand the lease back, the operation queued again."""
    item = ops_pb.SettleOperationsRequest.Item(owner_id=claimed.owner)
    item.release.operation_id, item.release.lease_token = claimed.operation_id, claimed.lease_token
    reply = services.operations.SettleOperations(
        ops_pb.SettleOperationsRequest(items=[item]), metadata=metadata(Role.WORKER)
    )
    assert not reply.outcomes[0].status_code, reply.outcomes[0].error_code


def acknowledge_cancel(services: Services, claimed: Claimed) -> None:
    services.operations.AcknowledgeCancellation(
        ops_pb.AcknowledgeCancellationRequest(
            operation_id=claimed.operation_id, lease_token=claimed.lease_token
        ),
        metadata=metadata(Role.WORKER, claimed.owner),
    )


def publish(
    services: Services,
    claimed: Claimed,
    body: Any,
    *,
    kind: str = "strategy.snapshot",
    subject: str = "job",
    provenance: tuple[str, str, str] = ("", "", ""),
) -> None:
    """The worker's last step before it completes: the validated answer, with its lease
    and the (provider, model, route) that produced it."""
    provider, model, route = provenance
    note = services.workspace.PublishNote(
        workspace_pb.PublishNoteRequest(
            kind=kind,
            subject_type=subject,
            subject_id=claimed.subject_id,
            operation_id=claimed.operation_id,
            lease_token=claimed.lease_token,
            body_json=json.dumps(body),
            provider=provider,
            model=model,
            route=route,
        ),
        metadata=metadata(Role.WORKER, claimed.owner),
    )
    assert note.published


PROBLEM_JSON = "application/problem+json"


def expect_problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The problem+json body of ``response``, asserted to answer ``status`` with ``code``."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    body: dict[str, Any] = response.json()
    assert body["code"] == code, body
    return body
