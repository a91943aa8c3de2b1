"""The worker SDK's public surface: what a worker imports, all from ``durable_ops.worker``."""

from __future__ import annotations

import pytest

import durable_ops.worker
from durable_ops.model import errors, provenance, routing, states
from durable_ops.model.scope import Role
from durable_ops.worker import Attempt, Worker, lease
from tests.support.keys import signing_key


def test_the_types_the_sdk_takes_and_raises_are_exported_by_it() -> None:
    # Completed, the failures and used() take a Provenance (the SDK's checks its bounds as
    # an InvalidHandlerCall; the model's is taken too); WorkerOptions.routes holds Routes;
    # hold() returns a Lease and, like fenced(), raises LeaseLost (cancel_requested: the
    # owner's cancel); Claimed.privacy is a Privacy.
    from durable_ops.worker import (
        CANCEL_REQUESTED,
        Lease,
        LeaseLost,
        Privacy,
        Provenance,
        Route,
    )

    assert issubclass(Provenance, provenance.Provenance)
    assert (Route, LeaseLost, Lease, Privacy, CANCEL_REQUESTED) == (
        routing.Route,
        errors.LeaseLost,
        lease.Lease,
        states.Privacy,
        errors.CANCEL_REQUESTED,
    )
    exported = set(durable_ops.worker.__all__)
    assert {"Provenance", "Route", "LeaseLost", "Lease", "Privacy", "CANCEL_REQUESTED"} <= exported
    assert all(hasattr(durable_ops.worker, name) for name in exported)


def test_a_second_handler_for_a_task_type_is_refused_and_the_first_kept() -> None:
    worker = Worker("127.0.0.1:1", signing_key(Role.WORKER))

    @worker.handler("report.render")
    async def first(attempt: Attempt) -> str:
        return "first"

    async def second(attempt: Attempt) -> str:
        return "second"

    with pytest.raises(ValueError, match=r"'report\.render'"):
        worker.handler("report.render")(second)
    worker.handler("report.other")(second)  # another task type is another handler
    assert worker._handlers == {"report.render": first, "report.other": second}


@pytest.mark.parametrize("kind", [Worker, Attempt])
def test_every_public_method_and_property_says_what_it_does(kind: type) -> None:
    undocumented = [
        name
        for name, member in vars(kind).items()
        if not name.startswith("_")
        and callable(getattr(member, "fget", member))
        and not getattr(member, "__doc__", None)
    ]
    assert undocumented == []
