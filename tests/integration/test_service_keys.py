"""A key per role (issue 35, ADR 42) at the real services, on both engines.

The role is the key's: the gateway's key claiming ``operator`` is refused, and a
worker's key cannot do what only the gateway does (sessions). A key issued with
``opsctl keys issue`` is trusted by the running services without a restart, and
the README's SDK producer and worker run with theirs. Deadlines only keep a broken build from
hanging; nothing is timed.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from structlog.testing import capture_logs

from durable_ops import cli
from durable_ops.api.notifications.v1 import notifications_pb2 as npb
from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.api.operations.v1.operations_pb2_grpc import OperationsServiceStub
from durable_ops.api.operator.v1 import operator_pb2 as opb
from durable_ops.api.workspace.v1 import workspace_pb2 as wpb
from durable_ops.model.scope import Role
from durable_ops.rpc.client import ServiceCaller, open_channel
from durable_ops.rpc.credentials import mint_service_token
from durable_ops.rpc.keys import PUBLIC_DIR, RESCAN_SECONDS, SigningKey
from durable_ops.worker import Attempt, PermanentFailure, Worker, WorkerOptions
from tests.support.forged import claims, signed, untrusted_key
from tests.support.grpc_services import Services, metadata
from tests.support.keys import keys_dir, signing_key
from tests.support.operations_client import ALICE, SUCCEEDED, Metadata, OpsClient, expect_failure

UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED
DENIED = grpc.StatusCode.PERMISSION_DENIED
NOT_FOUND = grpc.StatusCode.NOT_FOUND
# The services read the keys folder again each RESCAN_SECONDS; far more only for a slow host.
TRUSTED_WITHIN_SECONDS = RESCAN_SECONDS + 20
HANG_GUARD = 30.0


def _bearer(token: str, owner: str | None = None) -> Metadata:
    pairs = [("authorization", f"Bearer {token}")]
    if owner is not None:
        pairs.append(("x-owner-id", owner))
    return tuple(pairs)


# ---- the role is the key's -------------------------------------------------------------------


def test_the_gateways_key_claiming_the_operator_role_is_refused_by_the_operator_service(
    services: Services,
) -> None:
    def list_all(md: Metadata) -> opb.ListOperationsResponse:
        found: opb.ListOperationsResponse = services.operator.ListOperations(
            opb.ListOperationsRequest(), metadata=md, timeout=5
        )
        return found

    gateway = signing_key(Role.GATEWAY)
    operator_kid = signing_key(Role.OPERATOR).kid
    for forged in (
        signed(gateway, claims(role="operator")),  # the gateway's own key and kid
        signed(gateway, claims(role="operator"), kid=operator_kid),  # the operator's kid
        signed(untrusted_key(Role.OPERATOR), claims(role="operator")),
    ):
        failure = expect_failure(lambda token=forged: list_all(_bearer(token)), UNAUTHENTICATED)  # type: ignore[misc]
        assert failure.error_code == "invalid_service_credential"
    # Its honest credential is the gateway's, and the operator service is not the gateway's.
    expect_failure(lambda: list_all(_bearer(mint_service_token(gateway))), DENIED)
    expect_failure(
        lambda: list_all(_bearer(mint_service_token(gateway), ALICE)),
        DENIED,
        "operator_scope_required",
    )
    assert list_all(metadata(Role.OPERATOR, subject="carol")).operations is not None


def _sessions(services: Services) -> dict[str, Callable[[Metadata], object]]:
    """Every session call, each with a session of Alice's the gateway made."""
    made: wpb.CreateSessionResponse = services.workspace.CreateSession(
        wpb.CreateSessionRequest(ttl_seconds=600), metadata=metadata(Role.GATEWAY, ALICE)
    )
    session = made.session_id
    return {
        "create": lambda md: services.workspace.CreateSession(
            wpb.CreateSessionRequest(ttl_seconds=600), metadata=md, timeout=5
        ),
        "resolve": lambda md: services.workspace.ResolveSession(
            wpb.ResolveSessionRequest(session_id=session), metadata=md, timeout=5
        ),
        "delete": lambda md: services.workspace.DeleteSession(
            wpb.DeleteSessionRequest(session_id=session), metadata=md, timeout=5
        ),
    }


@pytest.mark.parametrize("role", [Role.WORKER, Role.PRODUCER])
def test_a_worker_or_producer_key_cannot_act_as_the_gateway(services: Services, role: Role) -> None:
    """Sessions are the gateway's: the one who makes or resolves them signs users in."""
    calls = _sessions(services)
    key = signing_key(role)
    as_alice, as_nobody = _bearer(mint_service_token(key), ALICE), _bearer(mint_service_token(key))
    for name, md in (
        ("create", as_alice),  # a session for Alice: a cookie that signs anyone in as her
        ("resolve", as_alice),
        ("resolve", as_nobody),
        ("delete", as_alice),
        ("delete", as_nobody),
    ):
        failure = expect_failure(lambda name=name, md=md: calls[name](md), DENIED)  # type: ignore[misc]
        assert failure.error_code == "gateway_scope_required", (name, md)
    forged = _bearer(signed(key, claims(role="gateway")), ALICE)
    for name, call in calls.items():
        failure = expect_failure(lambda call=call: call(forged), UNAUTHENTICATED)  # type: ignore[misc]
        assert failure.error_code == "invalid_service_credential", name
    # Nothing was ended on the way: the gateway still resolves Alice's session.
    resolved = calls["resolve"](metadata(Role.GATEWAY))
    assert isinstance(resolved, wpb.ResolveSessionResponse)
    assert resolved.user_id == ALICE


def test_workers_and_producers_reach_no_users_workspace(services: Services) -> None:
    """Least privilege per role: a user's jobs, CVs, results, notifications and admissions
    are the gateway's to act on; a worker reads the subject and AI settings of what it
    runs, only under its lease (test_worker_reads.py), so none without one; a producer
    none of them."""
    user_calls: dict[str, Callable[[Metadata], object]] = {
        "list jobs": lambda md: services.workspace.ListJobs(wpb.ListRequest(), metadata=md),
        "create job": lambda md: services.workspace.CreateJob(
            wpb.CreateJobRequest(title="t", description="d"), metadata=md
        ),
        "list CVs": lambda md: services.workspace.ListAttachments(wpb.ListRequest(), metadata=md),
        "AI settings": lambda md: services.workspace.UpdateAiSettings(
            wpb.UpdateAiSettingsRequest(), metadata=md
        ),
        "notifications": lambda md: services.notifications.ListNotifications(
            npb.ListNotificationsRequest(), metadata=md
        ),
        "unread": lambda md: services.notifications.GetUnreadCount(
            npb.GetUnreadCountRequest(), metadata=md
        ),
    }
    subject_reads: dict[str, Callable[[Metadata], object]] = {
        "read a job": lambda md: services.workspace.GetJob(
            wpb.GetJobRequest(job_id="0" * 32), metadata=md
        ),
        "read settings": lambda md: services.workspace.GetAiSettings(
            wpb.GetAiSettingsRequest(), metadata=md
        ),
    }
    # A user's results: the gateway's to read (none yet: NOT_FOUND), no worker's.
    result_reads: dict[str, Callable[[Metadata], object]] = {
        "newest result": lambda md: services.workspace.GetNote(
            wpb.GetNoteRequest(kind="strategy.snapshot", subject_type="job", subject_id="0" * 32),
            metadata=md,
        ),
        "a past result": lambda md: services.workspace.GetOperationNote(
            wpb.GetOperationNoteRequest(operation_id="0" * 32), metadata=md
        ),
    }
    for role in (Role.WORKER, Role.PRODUCER):
        md = metadata(role, ALICE)
        refused = user_calls | result_reads | (subject_reads if role is Role.PRODUCER else {})
        for name, call in refused.items():
            failure = expect_failure(lambda call=call, md=md: call(md), DENIED)  # type: ignore[misc]
            assert failure.error_code == "gateway_scope_required", (role, name)
    worker = metadata(Role.WORKER, ALICE)
    for name, call in subject_reads.items():
        failure = expect_failure(lambda call=call: call(worker), DENIED)  # type: ignore[misc]
        assert failure.error_code == "lease_required", name
    gateway = metadata(Role.GATEWAY, ALICE)
    for call in user_calls.values():
        assert call(gateway) is not None
    for call in result_reads.values():
        expect_failure(lambda call=call: call(gateway), NOT_FOUND)  # type: ignore[misc]


# ---- a key issued while the services run -----------------------------------------------------


@pytest.fixture
def issue(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[Callable[..., Path]]:
    """``opsctl keys issue LABEL [--role ROLE]`` into the keys folder the running services
    read; the keys it made are removed afterwards (the folder is the whole test process's)."""
    monkeypatch.setenv("OPS_SERVICE_KEYS_DIR", str(keys_dir()))
    monkeypatch.delenv("OPS_SERVICE_KEY", raising=False)
    made: list[str] = []

    def run(label: str, role: str = "worker") -> Path:
        capsys.readouterr()
        assert cli.main(["keys", "issue", label, "--role", role]) == 0
        made.append(f"{role}-{label}")
        return Path(capsys.readouterr().out.strip())

    yield run
    for name in made:
        shutil.rmtree(keys_dir() / name, ignore_errors=True)
        (keys_dir() / PUBLIC_DIR / f"{name}.pub").unlink(missing_ok=True)


def _owner_call(services: Services, key: SigningKey) -> grpc.StatusCode:
    """One owner-scope call a worker may make, signed with ``key``: OK once the services
    trust it."""
    try:
        services.operations.ListOperations(
            pb.ListOperationsRequest(),
            metadata=_bearer(mint_service_token(key), ALICE),
            timeout=5,
        )
    except grpc.RpcError as error:
        return error.code()
    return grpc.StatusCode.OK


def _until_trusted(services: Services, key: SigningKey) -> list[grpc.StatusCode]:
    """The answers to ``key``'s calls until one is OK."""
    answers = [_owner_call(services, key)]
    deadline = time.monotonic() + TRUSTED_WITHIN_SECONDS
    while answers[-1] != grpc.StatusCode.OK and time.monotonic() < deadline:
        time.sleep(0.05)
        answers.append(_owner_call(services, key))
    return answers


def test_a_key_from_opsctl_keys_issue_is_trusted_without_a_restart(
    services: Services, issue: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _owner_call(services, signing_key(Role.WORKER)) == grpc.StatusCode.OK  # serving
    label = f"batch-{secrets.token_hex(4)}"
    path = issue(label)
    assert path == keys_dir() / f"worker-{label}" / f"worker-{label}.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    key = SigningKey.load(path)
    assert (key.name, key.role) == (f"worker-{label}", Role.WORKER)
    answers = _until_trusted(services, key)
    # Refused only while the services had not read the folder again, then trusted.
    assert answers[-1] == grpc.StatusCode.OK, answers
    assert set(answers[:-1]) <= {UNAUTHENTICATED}
    # The same name twice is a mistake, not a second key.
    assert cli.main(["keys", "issue", label]) == 2
    assert "has a key already" in capsys.readouterr().err
    assert SigningKey.load(path).kid == key.kid


async def _readme_producer(target: str, key: Path) -> pb.CreateOperationResponse:
    """The README's producer, on this test's server, its key given as the printed path."""
    caller = ServiceCaller(SigningKey.load(key))
    async with open_channel(target, ca=None) as channel:
        reply: pb.CreateOperationResponse = await OperationsServiceStub(channel).CreateOperation(
            pb.CreateOperationRequest(
                task_type="report.render",
                idempotency_key="report-q3",
                subject=pb.Subject(type="report", id="q3"),
            ),
            metadata=caller.metadata("alice"),
        )
    return reply


def test_the_readme_producer_and_worker_run_with_issued_keys(
    services: Services, ops: OpsClient, issue: Callable[..., Path]
) -> None:
    label = f"reports-{secrets.token_hex(4)}"
    producer_key = issue(label, "producer")
    key = issue(label)  # trusted in the same reading of the folder as the producer's, or after
    assert _until_trusted(services, SigningKey.load(key))[-1] == grpc.StatusCode.OK
    created = asyncio.run(_readme_producer(services.target, producer_key))
    assert created.created
    assert ops.get(ALICE, created.operation.id).task_type == "report.render"  # alice's
    again = asyncio.run(_readme_producer(services.target, producer_key))
    assert (again.created, again.operation.id) == (False, created.operation.id)
    # The README's example, on this test's server, its key given as the printed path.
    worker = Worker(services.target, str(key), WorkerOptions(concurrency=8), until_empty=True)

    @worker.handler("report.render")
    async def render(attempt: Attempt) -> str:
        if attempt.subject.type != "report":
            raise PermanentFailure("unknown_subject", "only reports are rendered")
        await attempt.progress(50)  # the owner sees 50 %
        return f"reports/{attempt.subject.id}.pdf"  # the result's reference

    with capture_logs():
        asyncio.run(asyncio.wait_for(worker.run(), HANG_GUARD))
    assert worker.completed == 1
    assert ops.get(ALICE, created.operation.id).state == SUCCEEDED
    assert ops.row(created.operation.id).result_ref == "reports/q3.pdf"


@pytest.mark.parametrize("role", list(Role))
def test_a_missing_key_names_a_command_that_makes_it(
    role: Role, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from durable_ops.rpc.keys import own_key
    from durable_ops.settings import Settings, SettingsError

    keys = tmp_path / "keys"
    monkeypatch.setenv("OPS_SERVICE_KEYS_DIR", str(keys))
    monkeypatch.delenv("OPS_SERVICE_KEY", raising=False)
    settings = Settings.from_env()
    with pytest.raises(SettingsError) as missing:
        own_key(settings, role)
    hinted = [part for part in str(missing.value).split("`") if part.startswith("opsctl keys")]
    assert len(hinted) == 1, missing.value
    assert cli.main(hinted[0].split()[1:]) == 0  # the hinted command, as a user would type it
    assert own_key(settings, role).role is role


@pytest.mark.parametrize(
    ("holds", "needed", "said"),
    [
        (Role.GATEWAY, Role.OPERATOR, "is a gateway key; this process needs an operator key"),
        (Role.OPERATOR, Role.WORKER, "is an operator key; this process needs a worker key"),
    ],
)
def test_another_roles_key_is_refused_naming_both_roles(
    holds: Role, needed: Role, said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from durable_ops.rpc.keys import create_key_pair, own_key
    from durable_ops.settings import Settings, SettingsError

    monkeypatch.setenv("OPS_SERVICE_KEYS_DIR", str(tmp_path / "keys"))
    monkeypatch.setenv("OPS_SERVICE_KEY", str(create_key_pair(tmp_path / "keys", holds.value)))
    with pytest.raises(SettingsError) as refused:
        own_key(Settings.from_env(), needed)
    assert str(refused.value).endswith(said)


def test_keys_init_of_a_role_there_is_none_of_is_a_usage_error_making_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """No ``choices`` on ROLE (argparse 3.11 refuses an empty list against them): the
    command checks the names itself, before any key is made."""
    monkeypatch.setenv("OPS_SERVICE_KEYS_DIR", str(tmp_path / "keys"))
    assert cli.main(["keys", "init", "worker", "wrker"]) == 2
    assert capsys.readouterr().err == "opsctl keys init: no role wrker\n"
    assert not (tmp_path / "keys" / "worker").exists()
