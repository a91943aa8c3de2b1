"""The pure pieces of the live page (issue 39): event ids, answer budgets, partial JSON."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from durable_ops.gateway.partial import fields_so_far
from durable_ops.model.drafts import clipped
from durable_ops.model.errors import InvalidArgument
from durable_ops.model.event_ids import BAD_EVENT_ID, event_id, event_time


def test_an_event_id_names_its_time_to_the_microsecond_and_reads_back() -> None:
    at = datetime(2026, 12, 4, 18, 0, 0, 123456, tzinfo=UTC)
    assert event_id(at, 7) == "1796407200123456-7"
    assert event_time(event_id(at, 7)) == at


@pytest.mark.parametrize("value", ["", "1", "1-", "-1", "a-1", "1-1-1", "1_000-1", "٣-1"])
def test_anything_else_is_not_an_event_id(value: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        event_time(value)
    assert refused.value.code == BAD_EVENT_ID


def test_the_answer_so_far_is_cut_to_its_budget_never_inside_a_character() -> None:
    assert clipped("abc", 3) == "abc"
    assert clipped("aé", 2) == "a"  # é is two bytes: cut before it, not through it
    assert clipped("aé", 3) == "aé"


@pytest.mark.parametrize(
    ("text", "fields"),
    [
        ("", None),
        ("not json", None),
        ("[1, 2", None),  # not an object
        ('{"fit_score": 8', {"fit_score": 8}),
        ('{"summary": "Strong fi', {"summary": "Strong fi"}),
        (
            '{"summary": "Strong fit", "strengths": ["Py',
            {"summary": "Strong fit", "strengths": ["Py"]},
        ),
        ('{"summary": "Strong fit", "gap', {"summary": "Strong fit"}),
    ],
)
def test_a_json_prefix_gives_the_fields_written_so_far(
    text: str, fields: dict[str, object] | None
) -> None:
    assert fields_so_far(text) == fields
