"""SPEC §2 at the Operations and Notifications services: credentials, scopes, leases.

Cheap enough to run on both engines.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable, Iterator, Mapping

import grpc
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from google.longrunning import operations_pb2_grpc as lro_grpc
from google.longrunning import operations_proto_pb2 as lro
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from durable_ops.api.notifications.v1 import notifications_pb2 as npb
from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model.scope import Role
from durable_ops.model.tasks import TASKS
from durable_ops.notifications.service import SERVICE_NAME as NOTIFICATIONS
from durable_ops.operations.service import SERVICE_NAME as OPERATIONS
from durable_ops.rpc.credentials import mint_service_token
from durable_ops.rpc.keys import SigningKey
from tests.support.clock import ManualClock
from tests.support.forged import claims, signed, untrusted_key
from tests.support.grpc_services import Services, running_services
from tests.support.keys import credential, signing_key
from tests.support.operations_client import (
    ALICE,
    BOB,
    CANCELLED,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    Lease,
    Metadata,
    OpsClient,
    expect_failure,
    rpc_failure,
)

DENIED = grpc.StatusCode.PERMISSION_DENIED
UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED
NOT_FOUND = grpc.StatusCode.NOT_FOUND
ABORTED = grpc.StatusCode.ABORTED


@pytest.fixture
def services(db_url: str) -> Iterator[Services]:
    with running_services(db_url, ManualClock()) as running:
        yield running


@pytest.fixture
def lease(ops: OpsClient) -> Lease:
    ops.create(ALICE, "k-scope")
    return ops.claim_one()


def _b64(data: Mapping[str, object] | bytes) -> str:
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _worker_key() -> SigningKey:
    return signing_key(Role.WORKER)


def _public_pem(key: SigningKey) -> bytes:
    return key.private_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _mac_signed(alg: str, digest: str) -> str:
    """An HMAC JWT naming the worker key's ``kid``, keyed with that key's public PEM, which
    anyone may read (the algorithm-confusion forgery); PyJWT refuses to sign it."""
    header = {"alg": alg, "typ": "JWT", "kid": _worker_key().kid}
    signing_input = f"{_b64(header)}.{_b64(claims())}"
    mac = hmac.new(_public_pem(_worker_key()), signing_input.encode(), getattr(hashlib, digest))
    return f"{signing_input}.{_b64(mac.digest())}"


def _bearer(token: str, owner: str | None = None) -> Metadata:
    pairs = [("authorization", f"Bearer {token}")]
    if owner is not None:
        pairs.append(("x-owner-id", owner))
    return tuple(pairs)


BAD_CREDENTIALS: dict[str, Callable[[], Metadata]] = {
    "none": lambda: (("x-owner-id", ALICE),),
    "untrusted_key": lambda: _bearer(mint_service_token(untrusted_key(Role.WORKER)), ALICE),
    # A key of the forger's own under the kid of a trusted one: the signature decides.
    "forged_kid": lambda: _bearer(
        signed(untrusted_key(Role.WORKER), claims(), kid=_worker_key().kid), ALICE
    ),
    "no_kid": lambda: _bearer(
        jwt.encode(claims(), _worker_key().private_key, algorithm="EdDSA"), ALICE
    ),
    "alg_none": lambda: _bearer(
        f"{_b64({'alg': 'none', 'typ': 'JWT', 'kid': _worker_key().kid})}.{_b64(claims())}.",
        ALICE,
    ),
    "hs256_public_key": lambda: _bearer(_mac_signed("HS256", "sha256"), ALICE),
    "hs384_public_key": lambda: _bearer(_mac_signed("HS384", "sha384"), ALICE),
    "alg_none_signed": lambda: _bearer(_mac_signed("none", "sha256"), ALICE),
    "wrong_issuer": lambda: _bearer(signed(_worker_key(), claims(iss="someone")), ALICE),
    "expired": lambda: _bearer(signed(_worker_key(), claims(exp=int(time.time()) - 3600)), ALICE),
    # The role is the key's: a claim of another one, known or not, is a forgery.
    "unknown_role": lambda: _bearer(signed(_worker_key(), claims(role="admin")), ALICE),
    "worker_key_claims_gateway": lambda: _bearer(
        signed(_worker_key(), claims(role="gateway")), ALICE
    ),
    "not_bearer": lambda: (
        ("authorization", f"Basic {credential(Role.WORKER)}"),
        ("x-owner-id", ALICE),
    ),
}


@pytest.mark.parametrize("credential", sorted(BAD_CREDENTIALS))
def test_calls_without_a_valid_credential_are_unauthenticated(
    ops: OpsClient, lease: Lease, credential: str
) -> None:
    md = BAD_CREDENTIALS[credential]()
    calls: list[Callable[[], object]] = [
        lambda: ops.stub.GetOperation(pb.GetOperationRequest(operation_id=lease.id), metadata=md),
        lambda: ops.stub.ClaimOperation(
            pb.ClaimOperationRequest(task_types=["strategy.snapshot"], lease_seconds=30),
            metadata=md,
        ),
        lambda: ops.heartbeat_once(lease, md=md),
        lambda: ops.complete(lease, md=md),
        lambda: ops.notices.GetUnreadCount(npb.GetUnreadCountRequest(), metadata=md),
        lambda: ops.stub.CreateOperation(ops.create_request("k-unauth"), metadata=md),
    ]
    for call in calls:
        failure = expect_failure(call, UNAUTHENTICATED)
        assert failure.error_code in ("service_credential_required", "invalid_service_credential")
    assert ops.get(ALICE, lease.id).state == RUNNING
    assert ops.list_page(ALICE).operations[0].id == lease.id


def test_health_needs_no_credential_and_reflection_answers_only_with_one(
    services: Services,
) -> None:
    health = health_pb2_grpc.HealthStub(services.channel)
    for service in ("", OPERATIONS, NOTIFICATIONS):
        answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    reflection = reflection_pb2_grpc.ServerReflectionStub(services.channel)

    def list_services(md: Metadata) -> list[reflection_pb2.ServerReflectionResponse]:
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        return list(reflection.ServerReflectionInfo(iter([request]), metadata=md, timeout=5))

    # Reflection lists every method an attacker could try (issue 35): no credential, no list.
    for md in ((), BAD_CREDENTIALS["untrusted_key"]()):
        failure = expect_failure(lambda md=md: list_services(md), UNAUTHENTICATED)  # type: ignore[misc]
        assert failure.error_code in ("service_credential_required", "invalid_service_credential")
    answers = list_services(_bearer(credential(Role.WORKER)))
    listed = {service.name for service in answers[0].list_services_response.service}
    assert {OPERATIONS, NOTIFICATIONS} <= listed


def test_one_heartbeat_stream_carries_one_lease(ops: OpsClient, lease: Lease) -> None:
    ops.create(ALICE, "k-second-lease")
    second = ops.claim_one()
    first_beat = pb.HeartbeatRequest(
        operation_id=lease.id, lease_token=lease.token, lease_seconds=30
    )
    switch = pb.HeartbeatRequest(operation_id=second.id, lease_token=second.token)
    responses = ops.stub.Heartbeat(iter([first_beat, switch]), metadata=ops.worker_for(ALICE))
    assert next(responses).cancel_requested is False
    failure = expect_failure(lambda: next(responses), grpc.StatusCode.INVALID_ARGUMENT)
    assert failure.error_field == "operation_id"
    missing = pb.HeartbeatRequest(lease_seconds=30)
    expect_failure(
        lambda: list(ops.stub.Heartbeat(iter([missing]), metadata=ops.worker_for(ALICE))),
        grpc.StatusCode.INVALID_ARGUMENT,
        field="lease_token",
    )
    assert ops.complete(second) == SUCCEEDED


def test_claim_only_runs_in_the_neutral_worker_scope(ops: OpsClient, lease: Lease) -> None:
    ops.create(ALICE, "k-scope-2")
    for md in (ops.worker_for(ALICE), ops.gateway(ALICE), ops.md(Role.PRODUCER, ALICE)):
        failure = expect_failure(lambda md=md: ops.claim(md=md), DENIED)  # type: ignore[misc]
        assert failure.error_code == "neutral_scope_required"
    for role in (Role.GATEWAY, Role.PRODUCER):
        expect_failure(
            lambda role=role: ops.claim(md=ops.md(role)),  # type: ignore[misc]
            DENIED,
            "owner_scope_required",
        )
    assert sorted(op.state for op in ops.list_page(ALICE).operations) == [QUEUED, RUNNING]
    assert ops.claim_one().operation.attempt == 1


def test_lease_mutations_are_refused_outside_the_worker_owner_scope(
    ops: OpsClient, lease: Lease
) -> None:
    for md, error_code in (
        (ops.neutral, "owner_scope_required"),
        (ops.gateway(ALICE), "worker_role_required"),
        (ops.md(Role.PRODUCER, ALICE), "worker_role_required"),
    ):
        calls: list[Callable[[], object]] = [
            lambda md=md: ops.heartbeat_once(lease, md=md),  # type: ignore[misc]
            lambda md=md: ops.complete(lease, md=md),  # type: ignore[misc]
            lambda md=md: ops.fail(lease, retryable=False, md=md),  # type: ignore[misc]
            lambda md=md: ops.stub.AcknowledgeCancellation(  # type: ignore[misc]
                pb.AcknowledgeCancellationRequest(operation_id=lease.id, lease_token=lease.token),
                metadata=md,
            ),
            lambda md=md: ops.stub.RequestExternalFallback(  # type: ignore[misc]
                pb.RequestExternalFallbackRequest(operation_id=lease.id, lease_token=lease.token),
                metadata=md,
            ),
        ]
        for call in calls:
            expect_failure(call, DENIED, error_code)
    # owner calls need an owner too
    expect_failure(
        lambda: ops.stub.ListOperations(pb.ListOperationsRequest(), metadata=ops.neutral), DENIED
    )
    expect_failure(
        lambda: ops.notices.GetUnreadCount(npb.GetUnreadCountRequest(), metadata=ops.neutral),
        DENIED,
    )
    current = ops.get(ALICE, lease.id)
    assert (current.state, current.progress_percent) == (RUNNING, 0)
    assert ops.complete(lease) == SUCCEEDED


def test_a_wrong_lease_token_is_aborted(ops: OpsClient, lease: Lease) -> None:
    ops.create(ALICE, "k-other")
    other = ops.claim_one()
    for token in ("not-the-token", other.token, lease.token[:-1], lease.token + "A"):
        expect_failure(
            lambda t=token: ops.complete(lease, token=t),  # type: ignore[misc]
            ABORTED,
            "lease_lost",
        )
        expect_failure(
            lambda t=token: ops.heartbeat_once(lease, token=t),  # type: ignore[misc]
            ABORTED,
            "lease_lost",
        )
    # an empty token on the first heartbeat names no lease at all
    expect_failure(lambda: ops.heartbeat_once(lease, token=""), grpc.StatusCode.INVALID_ARGUMENT)
    assert ops.get(ALICE, lease.id).state == RUNNING
    assert ops.complete(lease) == SUCCEEDED
    assert ops.complete(other) == SUCCEEDED


def test_another_owners_operation_looks_exactly_like_a_missing_one(
    ops: OpsClient, lease: Lease
) -> None:
    missing_id = "0" * 32
    owner_calls: list[Callable[[str], object]] = [
        lambda oid: ops.get(BOB, oid),
        lambda oid: ops.cancel(BOB, oid),
        lambda oid: ops.retry(BOB, oid),
    ]
    for owner_call in owner_calls:
        theirs = rpc_failure(lambda: owner_call(lease.id))  # noqa: B023
        missing = rpc_failure(lambda: owner_call(missing_id))  # noqa: B023
        assert theirs.code == NOT_FOUND
        assert theirs == missing  # status, details and every trailer
        assert theirs.error_code == "operation_not_found"
        assert lease.id not in theirs.details

    # a worker holding Alice's lease cannot use it in Bob's scope either
    bob_worker = ops.worker_for(BOB)
    for call in (
        lambda: ops.complete(lease, md=bob_worker),
        lambda: ops.heartbeat_once(lease, md=bob_worker),
        lambda: ops.fail(lease, retryable=False, md=bob_worker),
    ):
        assert rpc_failure(call) == rpc_failure(
            lambda: ops.stub.CompleteOperation(
                pb.CompleteOperationRequest(operation_id=missing_id, lease_token=lease.token),
                metadata=bob_worker,
            )
        )
    assert ops.list_page(BOB).operations == []
    current = ops.get(ALICE, lease.id)
    assert (current.state, current.cancel_requested) == (RUNNING, False)


def test_owner_header_must_be_well_formed(ops: OpsClient, lease: Lease) -> None:
    token = credential(Role.GATEWAY)
    for md in (
        (("authorization", f"Bearer {token}"), ("x-owner-id", "")),
        (("authorization", f"Bearer {token}"), ("x-owner-id", "a" * 65)),
        (("authorization", f"Bearer {token}"), ("x-owner-id", ALICE), ("x-owner-id", BOB)),
    ):
        expect_failure(
            lambda md=md: ops.stub.GetOperation(  # type: ignore[misc]
                pb.GetOperationRequest(operation_id=lease.id), metadata=md
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
        )


def test_a_worker_changes_only_the_operations_it_holds(ops: OpsClient, lease: Lease) -> None:
    """A worker key with ``x-owner-id`` reads the owner's operations (the AI worker reads the
    one it runs) but creates, cancels and retries none: the gateway (for the user) and
    producers do (google.longrunning's cancel and delete too: test_longrunning). Its lease
    mutations need the token (above)."""
    worker = ops.worker_for(ALICE)
    assert ops.stub.GetOperation(pb.GetOperationRequest(operation_id=lease.id), metadata=worker)
    refused = {
        "create": lambda: ops.stub.CreateOperation(
            pb.CreateOperationRequest(
                task_type="strategy.snapshot",
                idempotency_key="k-by-a-worker",
                subject=pb.Subject(type="job", id="job-1"),
            ),
            metadata=worker,
        ),
        "cancel": lambda: ops.stub.CancelOperation(
            pb.CancelOperationRequest(operation_id=lease.id), metadata=worker
        ),
        "retry": lambda: ops.stub.RetryOperation(
            pb.RetryOperationRequest(operation_id=lease.id), metadata=worker
        ),
    }
    for call in refused.values():
        expect_failure(call, DENIED, "worker_role_refused")
    current = ops.get(ALICE, lease.id)
    assert (current.state, current.cancel_requested) == (RUNNING, False)
    assert [operation.id for operation in ops.list_page(ALICE).operations] == [lease.id]
    assert ops.cancel(ALICE, lease.id).cancel_requested  # as the gateway does for the user


def test_a_producer_starts_no_analysis_and_reads_no_answer(ops: OpsClient) -> None:
    """A producer key creates and retries the task types its own workers run, but an
    analysis (a registered task type) only through admission, which checks the owner's
    plan, budget and capacity: a stolen producer key ran analyses past the global switch
    and the budget. The answer so far quotes the owner's job and CV, which the gateway
    alone reads, in one call or the owner's watch."""
    producer = ops.md(Role.PRODUCER, ALICE)
    for task_type in TASKS.names():
        refused = ops.create_request(f"k-producer-{task_type}", task_type=task_type)
        failure = expect_failure(
            lambda refused=refused: ops.stub.CreateOperation(refused, metadata=producer),  # type: ignore[misc]
            DENIED,
        )
        assert failure.error_code == "admission_required", task_type
    assert ops.list_page(ALICE).operations == []
    own = ops.create_request("k-producer-own", task_type="report.render")
    assert ops.stub.CreateOperation(own, metadata=producer).created

    analysis = ops.create(ALICE, "k-analysis")  # as admission makes it
    ops.cancel(ALICE, analysis.id)
    retry = pb.RetryOperationRequest(operation_id=analysis.id)
    failure = expect_failure(lambda: ops.stub.RetryOperation(retry, metadata=producer), DENIED)
    assert failure.error_code == "admission_required"
    assert ops.get(ALICE, analysis.id).state == CANCELLED


def test_a_producer_ends_no_analysis_but_its_own_operations(
    ops: OpsClient, services: Services
) -> None:
    """Nor does a producer key cancel or delete a user's analysis (a stolen one erased
    them): the task types its own workers run, it does."""
    producer = ops.md(Role.PRODUCER, ALICE)
    standard = lro_grpc.OperationsStub(services.channel)  # type: ignore[no-untyped-call]
    analysis = ops.create(ALICE, "k-analysis")  # as admission makes it
    own = ops.stub.CreateOperation(
        ops.create_request("k-own", task_type="report.render"), metadata=producer
    ).operation
    refused = {
        "cancel": lambda: ops.stub.CancelOperation(
            pb.CancelOperationRequest(operation_id=analysis.id), metadata=producer
        ),
        "google.longrunning cancel": lambda: standard.CancelOperation(
            lro.CancelOperationRequest(name=f"operations/{analysis.id}"), metadata=producer
        ),
    }
    for call in refused.values():
        expect_failure(call, DENIED, "analysis_of_a_user")
    assert ops.get(ALICE, analysis.id).state == QUEUED
    ops.cancel(ALICE, analysis.id)
    expect_failure(
        lambda: standard.DeleteOperation(
            lro.DeleteOperationRequest(name=f"operations/{analysis.id}"), metadata=producer
        ),
        DENIED,
        "analysis_of_a_user",
    )
    assert ops.get(ALICE, analysis.id).state == CANCELLED

    cancel_own = pb.CancelOperationRequest(operation_id=own.id)
    assert ops.stub.CancelOperation(cancel_own, metadata=producer).state == CANCELLED
    standard.DeleteOperation(
        lro.DeleteOperationRequest(name=f"operations/{own.id}"), metadata=producer
    )
    expect_failure(lambda: ops.get(ALICE, own.id), NOT_FOUND)

    draft = pb.GetAnswerDraftRequest(operation_id=analysis.id)
    for role in (Role.PRODUCER, Role.WORKER):
        md = ops.md(role, ALICE)
        failure = expect_failure(
            lambda md=md: ops.stub.GetAnswerDraft(draft, metadata=md),  # type: ignore[misc]
            DENIED,
        )
        assert failure.error_code == "gateway_scope_required", role
        watch = ops.stub.WatchOwner(pb.WatchOwnerRequest(), metadata=md)
        failure = expect_failure(lambda watch=watch: next(watch), DENIED)  # type: ignore[misc]
        assert failure.error_code == "gateway_scope_required", role
