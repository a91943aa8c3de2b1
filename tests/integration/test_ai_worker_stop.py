"""A stopping AI worker does not wait for services that stop with it.

``opsctl up`` killed outright sends every child SIGTERM at once: Workspace goes
while the worker may be publishing a note. The publish, asked again while
Workspace is away, is given up at the stop (one last ask), so the worker's
stop, and its ports, are not held for the settlements' 30 s. The SDK's own
settlements do the same (``tests/unit/test_worker_completer.py``; the whole
kill: ``tests/e2e/test_opsctl_up_killed.py``).
"""

from __future__ import annotations

import asyncio

import pytest

from durable_ops.ai_worker.clients import WorkspaceClient
from durable_ops.model.errors import Unavailable
from durable_ops.model.scope import Role
from durable_ops.rpc.client import ServiceCaller, open_channel
from durable_ops.worker import Attempt, Subject
from durable_ops.worker.completer import RETRY_SECONDS
from durable_ops.worker.lease import HoldLeasesCall, LeaseStream
from tests.support.claimed import a_claim
from tests.support.keys import signing_key
from tests.support.ports import free_port

ASKING_AGAIN_SECONDS = 0.3  # a few asks into the retries, far from their end


def _attempt() -> Attempt:
    claimed = a_claim(task_type="strategy.snapshot", subject=Subject("job", "job-1"))
    return Attempt(claimed, LeaseStream(_no_stream), lease_seconds=30)


def _no_stream() -> HoldLeasesCall:
    raise AssertionError("publishing opens no lease stream")


def test_a_publish_to_a_workspace_gone_is_given_up_when_the_worker_stops() -> None:
    async def scenario() -> None:
        stopping = asyncio.Event()
        gone = open_channel(f"127.0.0.1:{free_port()}", None)  # nothing listens there
        try:
            client = WorkspaceClient(
                gone, ServiceCaller(signing_key(Role.WORKER)), stopping=stopping
            )
            publishing = asyncio.create_task(client.publish_note(_attempt(), "{}", None))
            await asyncio.sleep(ASKING_AGAIN_SECONDS)
            assert not publishing.done()  # Workspace away: asked again, as before
            stopping.set()
            # Well before the retries' bound: the stop's last ask is refused at once.
            async with asyncio.timeout(RETRY_SECONDS / 3):
                with pytest.raises(Unavailable):
                    await publishing
        finally:
            await gone.close()

    asyncio.run(scenario())
