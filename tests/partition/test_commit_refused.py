"""A COMMIT a Galera node refuses because it just left the primary component (error 1180).

Found by the partition schedules (issue 40): when the other nodes vanish while
a transaction is in flight, the node answers its COMMIT with 1180 ("Error while
appending streaming replication fragment (provider status: Not connected to
Primary Component)"). It escaped ``Database.run`` as a raw ``OperationalError``
(gRPC INTERNAL, a 500 at the gateway); it is now a COMMIT of unknown outcome like
a lost connection, so the call answers UNAVAILABLE (the database away, try again).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from durable_ops.clock import utc_now
from durable_ops.model.errors import Unavailable
from durable_ops.storage import migrate, operations
from durable_ops.storage.db import Database
from durable_ops.storage.tx import Tx
from tests.partition.cluster import Cluster, unavailable
from tests.partition.netns import Network

pytestmark = [pytest.mark.galera, pytest.mark.slow]


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    reason = unavailable()
    if reason is not None:
        if os.environ.get("OPS_REQUIRE_GALERA") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    network = Network("djc", "10.77.3")
    made = Cluster(network)
    try:
        network.up()
        made.start()
        yield made
    finally:
        made.stop()
        network.down()
        made.remove()


def test_a_commit_refused_outside_the_primary_component_is_unavailable(cluster: Cluster) -> None:
    migrate.upgrade(cluster.url(3))
    db = Database(cluster.url(3), pool_size=2)
    killed: list[int] = []

    def create_then_lose_the_others(tx: Tx) -> str:
        request = operations.CreateRequest(
            task_type="jepsen.work", idempotency_key="k1", subject_type="job", subject_id="j"
        )
        row, _ = operations.create(tx, request, utc_now())
        if not killed:  # the other two nodes crash before this transaction's COMMIT
            cluster.kill(1)
            cluster.kill(2)
            killed.append(1)
        return row.id

    try:
        with pytest.raises(Unavailable):
            db.run(create_then_lose_the_others, owner_id="alice")
    finally:
        db.dispose()
