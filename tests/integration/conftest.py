"""Fixtures of the integration tests: every gRPC service on one server, time moved by hand."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.clock import ManualClock
from tests.support.grpc_services import Services, running_services


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def services(db_url: str, clock: ManualClock) -> Iterator[Services]:
    with running_services(db_url, clock) as running:
        yield running
