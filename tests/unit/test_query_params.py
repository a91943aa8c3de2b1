"""Every route's query string is read by one rule (``pagination.query_params``): only
the route's own parameters, each once, each value a line of text."""

from __future__ import annotations

from collections.abc import Collection
from urllib.parse import urlencode

import pytest
from starlette.requests import Request

from durable_ops.gateway import console, operations
from durable_ops.gateway.pagination import query_params
from durable_ops.gateway.problems import Problem

# The routes' own lists, as the routes read them: a parameter added to a route is checked here.
PARAMETERS_OF = {"console": console.LIST_PARAMETERS, "operations": operations.LIST_PARAMETERS}
NAMED = [(route, name) for route, names in PARAMETERS_OF.items() for name in names]


def read(pairs: list[tuple[str, str]], allowed: Collection[str]) -> dict[str, str]:
    request = Request({"type": "http", "query_string": urlencode(pairs).encode()})
    return query_params(request, allowed)


def refused(pairs: list[tuple[str, str]], allowed: Collection[str]) -> Problem:
    with pytest.raises(Problem) as refusal:
        read(pairs, allowed)
    return refusal.value


@pytest.mark.parametrize(("route", "name"), NAMED)
@pytest.mark.parametrize("value", ["\x00", "model\x00error", "a\nb", "\x1b[2J", "x\x85", "x\u2028"])
def test_a_control_character_in_any_query_parameter_is_refused(
    route: str, name: str, value: str
) -> None:
    """SPEC §5: control characters in text are refused, with a stable code, naming the
    parameter; the console's ``?failure_code=%00`` was searched for (200, an empty list)."""
    problem = refused([(name, value)], PARAMETERS_OF[route])
    assert (problem.status, problem.code, problem.field) == (400, "control_character", name)
    assert problem.detail.startswith(f"{name} must not contain control characters")


def test_a_query_value_longer_than_any_has_reason_to_be_is_refused() -> None:
    problem = refused([("failure_code", "x" * 513)], console.LIST_PARAMETERS)
    assert (problem.status, problem.field) == (400, "failure_code")


def test_values_are_given_as_sent_blanks_around_them_included() -> None:
    """A route trims what it trims (the console's filters); line blanks at either end
    are not control characters in a line."""
    assert read([("owner", "\talice \r\n")], console.LIST_PARAMETERS) == {"owner": "\talice \r\n"}


def test_an_unknown_parameter_and_a_repeated_one_are_refused_by_name() -> None:
    unknown = refused([("owner", "bob")], operations.LIST_PARAMETERS)
    assert (unknown.status, unknown.code, unknown.field) == (400, "unknown_parameter", "owner")
    twice = refused([("state", "failed"), ("state", "queued")], console.LIST_PARAMETERS)
    assert (twice.status, twice.code, twice.field) == (400, "invalid_argument", "state")
