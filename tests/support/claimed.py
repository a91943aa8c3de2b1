"""A claimed attempt made up for tests of the worker SDK that need no service."""

from __future__ import annotations

from datetime import UTC, datetime

from durable_ops.model.routing import Route
from durable_ops.model.states import Privacy
from durable_ops.worker import Claimed, Subject

A_REPORT = Subject("report", "r-1")


def a_claim(
    operation_id: str = "op-1",
    *,
    task_type: str = "report.render",
    subject: Subject = A_REPORT,
    lease_token: str = "t" * 43,
) -> Claimed:
    """Attempt 1 of ``operation_id``, alice's, on the local route."""
    return Claimed(
        operation_id=operation_id,
        owner_id="alice",
        task_type=task_type,
        subject=subject,
        number=1,
        context_ref="",
        route=Route.LOCAL,
        privacy=Privacy.LOCAL_ONLY,
        trace_parent="",
        lease_token=lease_token,
        lease_expires_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
