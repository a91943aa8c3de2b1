"""A worker reads only what it holds (ADR 62), through the real servers on both engines.

A worker key reads a job, a CV or the owner's AI settings only under the live lease of
an operation it runs: without one it is refused (PERMISSION_DENIED ``lease_required``);
a job or CV that operation does not refer to, as its subject or its second reference,
answers exactly like a missing one (NOT_FOUND); once the lease has ended (completed,
run out, taken by another attempt) it is ABORTED ``lease_lost``. The gateway reads as
before, with no lease.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from durable_ops.api.workspace.v1 import workspace_pb2 as wpb
from durable_ops.model.scope import Role
from tests.support.clock import ManualClock
from tests.support.grpc_services import Services
from tests.support.operations_client import (
    ALICE,
    BOB,
    LEASE_SECONDS,
    TASK,
    Lease,
    OpsClient,
    RpcFailure,
    expect_failure,
    rpc_failure,
)
from tests.support.workspace_client import CV_TEXT, JOB_TEXT, create_cv, create_job, entitle

NOT_FOUND = grpc.StatusCode.NOT_FOUND
DENIED = grpc.StatusCode.PERMISSION_DENIED
ABORTED = grpc.StatusCode.ABORTED
NO_LEASE: tuple[str, str] = ("", "")
RETRY_DELAY = 30


@dataclass(frozen=True)
class Analysis:
    """A strategy snapshot of one of alice's jobs with one of her CVs beside it."""

    job: str
    cv: str
    operation_id: str


def _analysis(services: Services, ops: OpsClient, key: str) -> Analysis:
    job = create_job(services.workspace, ALICE, f"{JOB_TEXT} ({key})")
    cv = create_cv(services.workspace, ALICE, f"{CV_TEXT} ({key})")
    request = ops.create_request(
        key, task_type=TASK, subject_type="job", subject_id=job, retry_delay_seconds=RETRY_DELAY
    )
    request.context_ref = cv
    return Analysis(job, cv, ops.create_raw(ALICE, request).operation.id)


def _claim(ops: OpsClient, analysis: Analysis) -> Lease:
    lease = ops.claim_one()
    assert lease.id == analysis.operation_id
    return lease


def _held(lease: Lease) -> tuple[str, str]:
    return lease.id, lease.token


class Reads:
    """The three reads, as a caller of ``role`` speaking for ``owner``."""

    def __init__(self, services: Services, ops: OpsClient, role: Role, owner: str = ALICE):
        self._workspace = services.workspace
        self._md = ops.md(role, owner)

    def job(self, job_id: str, lease: tuple[str, str] = NO_LEASE) -> wpb.Job:
        operation_id, token = lease
        request = wpb.GetJobRequest(job_id=job_id, operation_id=operation_id, lease_token=token)
        found: wpb.Job = self._workspace.GetJob(request, metadata=self._md)
        return found

    def cv(self, cv_id: str, lease: tuple[str, str] = NO_LEASE) -> wpb.Attachment:
        operation_id, token = lease
        request = wpb.GetAttachmentRequest(
            attachment_id=cv_id, operation_id=operation_id, lease_token=token
        )
        found: wpb.Attachment = self._workspace.GetAttachment(request, metadata=self._md)
        return found

    def settings(self, lease: tuple[str, str] = NO_LEASE) -> wpb.AiSettings:
        operation_id, token = lease
        request = wpb.GetAiSettingsRequest(operation_id=operation_id, lease_token=token)
        found: wpb.AiSettings = self._workspace.GetAiSettings(request, metadata=self._md)
        return found


def _same_answer(one: RpcFailure, other: RpcFailure) -> None:
    """Nothing tells the two apart: status, message, error code and field."""
    assert (one.code, one.details, one.trailers) == (other.code, other.details, other.trailers)


def _each_read(
    reads: Reads, analysis: Analysis, lease: tuple[str, str]
) -> tuple[Callable[[], object], ...]:
    """The analysis's job, its CV and the owner's settings, each read under ``lease``."""
    return (
        lambda: reads.job(analysis.job, lease),
        lambda: reads.cv(analysis.cv, lease),
        lambda: reads.settings(lease),
    )


def test_a_worker_reads_nothing_without_a_lease(services: Services, ops: OpsClient) -> None:
    analysis = _analysis(services, ops, "snapshot")
    _claim(ops, analysis)  # held, but not named by the reads
    worker = Reads(services, ops, Role.WORKER)
    half = (analysis.operation_id, "")  # an operation, no token
    for lease in (NO_LEASE, half):
        for read in _each_read(worker, analysis, lease):
            expect_failure(read, DENIED, "lease_required")


def test_a_worker_reads_the_job_and_cv_of_the_operation_it_holds_and_no_other(
    services: Services, ops: OpsClient
) -> None:
    """The lease of one analysis opens its job, its CV (the second reference) and the
    owner's settings; another of the owner's jobs or CVs, which exists, answers exactly as
    one that does not."""
    entitle(services.db, ALICE)
    first = _analysis(services, ops, "first")
    second = _analysis(services, ops, "second")
    held = _held(_claim(ops, first))
    _claim(ops, second)  # running too: its own lease is not the one named
    worker = Reads(services, ops, Role.WORKER)
    assert worker.job(first.job, held).description == f"{JOB_TEXT} (first)"
    assert worker.cv(first.cv, held).text == f"{CV_TEXT} (first)"
    settings = worker.settings(held)
    assert (settings.ai_enabled, settings.plan) == (True, "pro")

    def refused(read: Callable[[str, tuple[str, str]], object], row_id: str) -> RpcFailure:
        return rpc_failure(lambda: read(row_id, held))

    for read, row_id, code in (
        (worker.job, second.job, "job_not_found"),
        (worker.cv, second.cv, "attachment_not_found"),
        # The subject is no CV and the CV no job: each is read where it is kept only.
        (worker.cv, first.job, "attachment_not_found"),
        (worker.job, first.cv, "job_not_found"),
    ):
        existing = refused(read, row_id)
        assert (existing.code, existing.error_code) == (NOT_FOUND, code)
        _same_answer(existing, refused(read, uuid.uuid4().hex))


def test_a_producers_own_operation_naming_a_users_rows_opens_none(
    services: Services, ops: OpsClient
) -> None:
    """A stolen producer key reads alice's operations, so their job and CV ids; it makes an
    operation of its own task type naming them, which a stolen worker key claims: only an
    analysis (the registry's, which admission alone starts) refers to a user's rows."""
    analysis = _analysis(services, ops, "alices")
    producer = ops.md(Role.PRODUCER, ALICE)
    request = ops.create_request(
        "named", task_type="report.render", subject_type="job", subject_id=analysis.job
    )
    request.context_ref = analysis.cv
    own = ops.stub.CreateOperation(request, metadata=producer).operation
    lease = ops.claim_one(("report.render",))
    assert lease.id == own.id
    worker = Reads(services, ops, Role.WORKER)
    expect_failure(lambda: worker.job(analysis.job, _held(lease)), NOT_FOUND, "job_not_found")
    expect_failure(lambda: worker.cv(analysis.cv, _held(lease)), NOT_FOUND, "attachment_not_found")


def test_a_lease_of_another_owners_operation_reads_nothing(
    services: Services, ops: OpsClient
) -> None:
    """A worker speaking for bob under alice's live lease: alice's operation answers as a
    missing one in bob's scope, so none of bob's rows open either."""
    analysis = _analysis(services, ops, "alices")
    alices = _held(_claim(ops, analysis))
    bobs_job = create_job(services.workspace, BOB)
    as_bob = Reads(services, ops, Role.WORKER, BOB)
    for read in (
        lambda: as_bob.job(bobs_job, alices),
        lambda: as_bob.job(analysis.job, alices),
        lambda: as_bob.cv(analysis.cv, alices),
        lambda: as_bob.settings(alices),
    ):
        expect_failure(read, NOT_FOUND, "operation_not_found")


def test_a_lease_that_ended_reads_nothing(services: Services, ops: OpsClient) -> None:
    analysis = _analysis(services, ops, "snapshot")
    lease = _claim(ops, analysis)
    worker = Reads(services, ops, Role.WORKER)
    wrong_token = (lease.id, "w" * 43)
    for read in _each_read(worker, analysis, wrong_token):
        expect_failure(read, ABORTED, "lease_lost")
    assert worker.job(analysis.job, _held(lease)).id == analysis.job  # still held
    ops.complete(lease)
    for read in _each_read(worker, analysis, _held(lease)):
        expect_failure(read, ABORTED, "lease_lost")


def test_a_lease_that_ran_out_reads_nothing(
    services: Services, ops: OpsClient, clock: ManualClock
) -> None:
    analysis = _analysis(services, ops, "snapshot")
    lease = _claim(ops, analysis)
    worker = Reads(services, ops, Role.WORKER)
    assert worker.cv(analysis.cv, _held(lease)).id == analysis.cv
    clock.advance(LEASE_SECONDS + 1)  # not swept yet: the row still says running
    for read in _each_read(worker, analysis, _held(lease)):
        expect_failure(read, ABORTED, "lease_lost")
    # The next attempt's lease reads again; the first's does not.
    assert services.sweep().expired_leases == 1
    clock.advance(4 * RETRY_DELAY)  # past the first retry's jittered delay (at most 4 times)
    assert services.sweep().promoted == 1
    retried = ops.claim_one()
    assert retried.id == analysis.operation_id
    assert worker.job(analysis.job, _held(retried)).id == analysis.job
    expect_failure(lambda: worker.job(analysis.job, _held(lease)), ABORTED, "lease_lost")


def test_only_the_gateway_reads_without_a_lease(services: Services, ops: OpsClient) -> None:
    """The gateway reads its user's rows as before; the same reads by a worker key are
    refused, and a producer key reads none, even under a live lease."""
    analysis = _analysis(services, ops, "snapshot")
    gateway = Reads(services, ops, Role.GATEWAY)
    assert gateway.job(analysis.job).id == analysis.job
    assert gateway.cv(analysis.cv).text == f"{CV_TEXT} (snapshot)"
    assert gateway.settings().plan == "free"
    as_bob = Reads(services, ops, Role.GATEWAY, BOB)
    expect_failure(lambda: as_bob.job(analysis.job), NOT_FOUND, "job_not_found")
    expect_failure(lambda: as_bob.cv(analysis.cv), NOT_FOUND, "attachment_not_found")
    for read in _each_read(Reads(services, ops, Role.WORKER), analysis, NO_LEASE):
        expect_failure(read, DENIED, "lease_required")
    lease = _held(_claim(ops, analysis))
    for read in _each_read(Reads(services, ops, Role.PRODUCER), analysis, lease):
        expect_failure(read, DENIED, "gateway_scope_required")
