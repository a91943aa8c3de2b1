"""The operator console's pure parts (ADR 0045): link and session lifetimes, secrets,
the search a query string asks for, and the secret of a pasted link."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.gateway.console import link_secret, list_request
from durable_ops.gateway.problems import Problem
from durable_ops.model import console
from durable_ops.model.console import Kind
from durable_ops.model.operator import parse_duration

NOW = datetime(2026, 12, 5, 6, 0, tzinfo=UTC)


def test_a_link_lives_ten_minutes_and_a_session_eight_hours() -> None:
    assert console.expires(Kind.LINK, NOW) == NOW + timedelta(minutes=10)
    assert console.expires(Kind.SESSION, NOW) == NOW + timedelta(hours=8)


@pytest.mark.parametrize(("value", "plausible"), [("", False), ("a" * 43, True), ("a" * 65, False)])
def test_only_a_value_as_long_as_a_secret_is_looked_up(value: str, plausible: bool) -> None:
    assert console.plausible_secret(value) is plausible


def test_an_ended_session_and_an_unusable_link_each_have_one_answer() -> None:
    assert console.session_ended().code == console.SESSION_ENDED
    assert console.link_unusable().code == console.LINK_UNUSABLE
    assert "opsctl console link" in console.link_unusable().message


@pytest.mark.parametrize(
    "pasted",
    [
        "SECRET",
        "  SECRET ",
        "http://127.0.0.1:8080/console/sign-in#link=SECRET",
        "https://ops.example/console/sign-in#link=SECRET\n",
    ],
)
def test_a_pasted_link_or_its_bare_secret_is_the_secret(pasted: str) -> None:
    assert link_secret(pasted) == "SECRET"


def test_the_search_becomes_the_operator_services_filters() -> None:
    request = list_request(
        {
            "owner": " alice ",
            "state": "failed",
            "task_type": "cv.review",
            "older_than": "1d12h",
            "failure_code": "model_error",
            "page_size": "50",
        }
    )
    assert (request.owner_id, request.task_type, request.failure_code) == (
        "alice",
        "cv.review",
        "model_error",
    )
    assert request.state == pb.OPERATION_STATE_FAILED
    assert request.older_than.ToTimedelta() == timedelta(hours=36)
    assert request.page_size == 50
    empty = list_request({})
    assert not empty.HasField("older_than")
    assert empty.state == pb.OPERATION_STATE_UNSPECIFIED


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"state": "done"}, "state"),
        ({"older_than": "soon"}, "older_than"),
        ({"older_than": "0m"}, "older_than"),
        ({"page_size": "1000"}, "page_size"),
    ],
)
def test_a_bad_search_is_a_400_naming_its_field(params: dict[str, str], field: str) -> None:
    with pytest.raises(Problem) as refused:
        list_request(params)
    assert (refused.value.status, refused.value.field) == (400, field)


@pytest.mark.parametrize("text", ["0s", "0m", "0d0h", "soon", "-5m", "5", "9999d"])
def test_a_bad_older_than_is_worded_as_the_cli_words_it(text: str) -> None:
    """One rule, one wording: the console's 400 says what ``opsctl operations list
    --older-than`` says (``'0s' is not a positive duration``, not the general rule)."""
    with pytest.raises(ValueError, match=re.escape(repr(text))) as cli:
        parse_duration(text)
    with pytest.raises(Problem) as refused:
        list_request({"older_than": text})
    assert (refused.value.status, refused.value.field) == (400, "older_than")
    assert refused.value.detail.rstrip(".") == f"older_than {cli.value}"


def test_a_zero_older_than_is_refused_as_not_positive() -> None:
    with pytest.raises(Problem) as refused:
        list_request({"older_than": "0s"})
    assert refused.value.detail == "older_than '0s' is not a positive duration."


def test_blanks_around_a_filter_are_trimmed_not_refused() -> None:
    assert list_request({"owner": "\talice \r\n"}).owner_id == "alice"
