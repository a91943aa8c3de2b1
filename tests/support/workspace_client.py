"""Small helpers to set up a user's workspace over gRPC in tests."""

from __future__ import annotations

from durable_ops.api.ai_admission.v1 import ai_admission_pb2 as admission_pb
from durable_ops.api.workspace.v1 import workspace_pb2 as workspace_pb
from durable_ops.api.workspace.v1 import workspace_pb2_grpc
from durable_ops.clock import utc_now
from durable_ops.model.scope import Role
from durable_ops.storage import workspace
from durable_ops.storage.db import Database
from tests.support.grpc_services import metadata

JOB_TEXT = "Senior Python engineer: gRPC, MariaDB, distributed systems, on-call"
CV_TEXT = "Ten years of Python; built gRPC services on MariaDB; led on-call rotations"
# A strategy snapshot's answer, as the model would give it.
ANSWER = {
    "fit_score": 82,
    "summary": "A strong match on Python and gRPC.",
    "strengths": ["Python"],
    "gaps": ["Kubernetes"],
    "next_steps": ["Mention the on-call rotation"],
}


def entitle(db: Database, owner: str, *, plan: str = "pro", ai_enabled: bool = True) -> None:
    """What `opsctl users set-plan` and the settings page do, straight in the database."""
    db.run(
        lambda tx: workspace.update_ai_settings(tx, utc_now(), ai_enabled=ai_enabled, plan=plan),
        owner_id=owner,
    )


def create_job(
    stub: workspace_pb2_grpc.WorkspaceServiceStub,
    owner: str,
    description: str = JOB_TEXT,
    *,
    title: str = "Engineer",
) -> str:
    job = stub.CreateJob(
        workspace_pb.CreateJobRequest(title=title, company="Acme", description=description),
        metadata=metadata(Role.GATEWAY, owner),
    )
    return str(job.id)


def create_cv(
    stub: workspace_pb2_grpc.WorkspaceServiceStub,
    owner: str,
    text: str = CV_TEXT,
    *,
    filename: str = "cv.txt",
) -> str:
    attachment = stub.CreateAttachment(
        workspace_pb.CreateAttachmentRequest(kind="cv", filename=filename, text=text),
        metadata=metadata(Role.GATEWAY, owner),
    )
    return str(attachment.id)


def snapshot_request(job_id: str, cv_id: str = "", key: str = "") -> admission_pb.AdmitRequest:
    return admission_pb.AdmitRequest(
        task_type="strategy.snapshot", subject_id=job_id, context_ref=cv_id, idempotency_key=key
    )
