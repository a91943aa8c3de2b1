"""``WatchOwner`` sees a change committed on another replica: no event of this process
reports it, so only the owners' shared poll (``owner_changes.newest_among``) can."""

from __future__ import annotations

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.storage.owner_changes import CHANGES_MAX
from tests.support.grpc_services import Services
from tests.support.later import later
from tests.support.operations_client import ALICE, BOB, OpsClient

HANG_GUARD = 20.0


def test_a_change_made_on_another_replica_reaches_the_owners_watch(
    services: Services, other_replica: Services, ops: OpsClient
) -> None:
    elsewhere = OpsClient(other_replica)
    stream = ops.stub.WatchOwner(
        pb.WatchOwnerRequest(), metadata=ops.gateway(ALICE), timeout=HANG_GUARD
    )
    created: list[str] = []

    def create_elsewhere() -> None:
        elsewhere.create(BOB, "not-alices")
        created.append(elsewhere.create(ALICE, "alices").id)

    try:
        with later(create_elsewhere):
            change = next(stream)
        assert [change.operation.id] == created
        assert services.operations_app.owners.polls >= 1  # found by the shared query
    finally:
        stream.cancel()


def test_more_changes_of_one_microsecond_than_a_read_takes_all_reach_the_watch(
    services: Services, ops: OpsClient
) -> None:
    """One UPDATE can move many of an owner's operations at one time (the sweep queues every
    due retry at once; here the test clock stands still). The watch reads ``CHANGES_MAX``
    at a time: it stepped a microsecond past a full read of one time and never sent the
    rest of that time's changes."""
    created = {ops.create(ALICE, f"same-time-{n}").id for n in range(CHANGES_MAX + 20)}
    stream = ops.stub.WatchOwner(
        pb.WatchOwnerRequest(after="0-0"), metadata=ops.gateway(ALICE), timeout=HANG_GUARD
    )
    seen: set[str] = set()
    try:
        while seen != created:
            seen.add(next(stream).operation.id)
    finally:
        stream.cancel()
