"""Workspace rows ⇄ protobuf messages."""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp

from durable_ops.api.workspace.v1 import workspace_pb2 as pb
from durable_ops.storage.budgets import BudgetView
from durable_ops.storage.schema import AiWorkspaceNote, Attachment, Job
from durable_ops.storage.workspace import AiSettingsView


def _stamp(value: datetime) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(value.astimezone(UTC))
    return stamp


def job(row: Job) -> pb.Job:
    return pb.Job(
        id=row.id,
        title=row.title,
        company=row.company,
        description=row.description,
        created_at=_stamp(row.created_at),
        updated_at=_stamp(row.updated_at),
    )


def attachment(row: Attachment, *, with_text: bool) -> pb.Attachment:
    return pb.Attachment(
        id=row.id,
        kind=row.kind,
        filename=row.filename,
        text=row.text if with_text else "",
        text_length=len(row.text),
        created_at=_stamp(row.created_at),
    )


def ai_settings(view: AiSettingsView, budget: BudgetView) -> pb.AiSettings:
    return pb.AiSettings(
        ai_enabled=view.ai_enabled,
        privacy=view.privacy,
        plan=view.plan,
        budget=pb.TokenBudget(
            limit=budget.limit,
            spent=budget.spent,
            reserved=budget.reserved,
            renews_at=_stamp(budget.renews_at),
        ),
    )


def note(row: AiWorkspaceNote) -> pb.AiWorkspaceNote:
    return pb.AiWorkspaceNote(
        id=row.id,
        kind=row.kind,
        subject_type=row.subject_type,
        subject_id=row.subject_id,
        operation_id=row.operation_id or "",
        body_json=row.body,
        created_at=_stamp(row.created_at),
        updated_at=_stamp(row.updated_at),
        context_ref=row.context_ref or "",
        context_name=row.context_name or "",
        model=row.model or "",
        route=row.route or "",
    )
