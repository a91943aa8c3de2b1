"""The worker SDK's options are checked before a worker starts."""

from __future__ import annotations

import pytest

from durable_ops.model.errors import InvalidArgument
from durable_ops.model.routing import Route
from durable_ops.worker import WorkerOptions


def test_the_defaults_are_valid() -> None:
    assert WorkerOptions().validated() == WorkerOptions()


@pytest.mark.parametrize(
    "options",
    [
        {"concurrency": 0},
        {"batch_size": 101},
        {"lease_seconds": 1},
        {"routes": (Route.LOCAL, Route.LOCAL)},
    ],
)
def test_out_of_range_options_are_refused(options: dict[str, object]) -> None:
    with pytest.raises((ValueError, InvalidArgument)):
        WorkerOptions(**options).validated()  # type: ignore[arg-type]


@pytest.mark.parametrize("seconds", [-0.01, 1.5])
def test_a_claim_gather_outside_zero_to_a_second_is_refused(seconds: float) -> None:
    with pytest.raises(ValueError, match="claim_gather_seconds"):
        WorkerOptions(claim_gather_seconds=seconds).validated()
