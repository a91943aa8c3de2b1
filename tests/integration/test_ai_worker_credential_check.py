"""The AI worker's start asks the Operations service whether it accepts its key
(``ai_worker.clients.OperationsClient.check_credential``): a stop while the service is
still away is a stop, not a refused key."""

from __future__ import annotations

import asyncio

from structlog.testing import capture_logs

from durable_ops.ai_worker.clients import OperationsClient
from durable_ops.model.scope import Role
from durable_ops.rpc.client import ServiceCaller, open_channel
from tests.support.keys import signing_key
from tests.support.ports import free_port


def test_a_stop_while_the_service_is_away_ends_the_check_without_blaming_the_key() -> None:
    async def scenario() -> list[str]:
        channel = open_channel(f"127.0.0.1:{free_port()}", None)  # nothing listens there
        client = OperationsClient(channel, ServiceCaller(signing_key(Role.WORKER)))
        stopping = asyncio.Event()
        try:
            with capture_logs() as logs:
                checking = asyncio.create_task(client.check_credential(stopping, 0.05))
                async with asyncio.timeout(10):  # a guard
                    while not any(log["event"] == "operations_waiting" for log in logs):
                        await asyncio.sleep(0.01)
                stopping.set()
                await asyncio.wait_for(checking, 10)  # no SettingsError: the worker just stops
        finally:
            await channel.close()
        return [log["event"] for log in logs]

    assert asyncio.run(scenario()) == ["operations_waiting"]
