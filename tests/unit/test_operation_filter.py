"""The google.longrunning list filter: what it takes and how it refuses."""

from __future__ import annotations

import pytest

from durable_ops.model.errors import InvalidArgument
from durable_ops.model.operation_filter import OperationFilter, parse_filter
from durable_ops.model.states import OperationState


@pytest.mark.parametrize(
    ("raw", "parsed"),
    [
        ("", OperationFilter()),
        ("   ", OperationFilter()),
        ("state=running", OperationFilter(state=OperationState.RUNNING)),
        ('state = "failed"', OperationFilter(state=OperationState.FAILED)),
        (
            "task_type=cv.review and state=queued",
            OperationFilter(state=OperationState.QUEUED, task_type="cv.review"),
        ),
    ],
)
def test_accepted(raw: str, parsed: OperationFilter) -> None:
    assert parse_filter(raw) == parsed


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("owner=bob", "'owner' is not a filter key"),
        ("state=sleeping", "'sleeping' is not a state"),
        ("state=queued OR state=running", "is not a term"),
        ("state=queued AND state=running", "'state' is given twice"),
        ("state", "is not a term"),
        ("x" * 201, "at most 200 characters"),
    ],
)
def test_refused_with_a_reason(raw: str, says: str) -> None:
    with pytest.raises(InvalidArgument) as raised:
        parse_filter(raw)
    assert raised.value.field == "filter"
    assert says in raised.value.reason
