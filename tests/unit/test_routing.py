"""Local-first route decisions: external only with consent, allowlist and configuration."""

from __future__ import annotations

import itertools

import pytest

from durable_ops.model.bounds import ROUTE_MAX
from durable_ops.model.routing import (
    LocalUnavailableAction,
    Route,
    external_route_permitted,
    route_plan,
)
from durable_ops.model.states import Privacy


def test_route_names_fit_the_provenance_column() -> None:
    assert [route.value for route in Route] == ["local", "external"]
    assert all(len(route.value) <= ROUTE_MAX for route in Route)


@pytest.mark.parametrize(
    ("privacy", "task_allowed", "configured", "circuit_allows"),
    list(itertools.product(Privacy, (True, False), (True, False), (True, False))),
)
def test_every_combination(
    privacy: Privacy, task_allowed: bool, configured: bool, circuit_allows: bool
) -> None:
    plan = route_plan(
        privacy,
        task_external_allowed=task_allowed,
        external_configured=configured,
        local_circuit_allows=circuit_allows,
    )
    external = privacy == "external_allowed" and task_allowed and configured
    assert plan.try_local is circuit_allows
    assert plan.external_permitted is external
    expected_action = "fallback_to_external" if external else "retry_later"
    assert plan.on_local_unavailable == expected_action
    expected_routes = (["local"] if circuit_allows else []) + (["external"] if external else [])
    assert list(plan.routes) == expected_routes


def test_local_only_privacy_never_permits_external() -> None:
    assert not external_route_permitted(
        Privacy.LOCAL_ONLY, task_external_allowed=True, external_configured=True
    )


def test_task_off_the_allowlist_retries_locally_even_with_consent() -> None:
    plan = route_plan(
        Privacy.EXTERNAL_ALLOWED,
        task_external_allowed=False,  # strategy.snapshot
        external_configured=True,
        local_circuit_allows=False,
    )
    assert plan.on_local_unavailable is LocalUnavailableAction.RETRY_LATER
    assert plan.routes == ()


def test_local_comes_first_when_both_routes_are_open() -> None:
    plan = route_plan(
        Privacy.EXTERNAL_ALLOWED,
        task_external_allowed=True,
        external_configured=True,
        local_circuit_allows=True,
    )
    assert plan.routes == (Route.LOCAL, Route.EXTERNAL)
    assert plan.on_local_unavailable is LocalUnavailableAction.FALLBACK_TO_EXTERNAL
