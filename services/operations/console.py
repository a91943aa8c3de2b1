"""The operator console's sign-ins as use cases (ADR 0045): one short transaction each.

Links are made in the operator scope (``OperatorTx``: the operator's own key);
opening one, resolving a session and signing out run in the neutral scope,
where the gateway asks with the secret it was handed. SQL in
``durable_ops.storage.console``, rules in ``durable_ops.model.console``.
"""

from __future__ import annotations

from durable_ops.clock import Clock
from durable_ops.storage import console as store
from durable_ops.storage.console import Signed
from durable_ops.storage.db import Database
from durable_ops.storage.tx import OperatorTx


class ConsoleSignIns:
    def __init__(self, db: Database, clock: Clock) -> None:
        self._db = db
        self._clock = clock

    async def link(self, operator: str) -> Signed:
        now = self._clock()
        return await self._db.run_async(
            lambda tx: store.create_link(OperatorTx(tx), operator, now), owner_id=None, short=True
        )

    async def open(self, link: str) -> Signed:
        now = self._clock()
        return await self._db.run_async(
            lambda tx: store.open_link(tx, link, now), owner_id=None, short=True
        )

    async def resolve(self, session_id: str) -> Signed:
        now = self._clock()
        return await self._db.run_async(
            lambda tx: store.resolve(tx, session_id, now), owner_id=None, write=False, short=True
        )

    async def end(self, session_id: str) -> bool:
        return await self._db.run_async(
            lambda tx: store.end(tx, session_id), owner_id=None, short=True
        )

    async def end_operator(self, operator: str | None) -> int:
        """End ``operator``'s links and sessions, or everyone's for ``None``."""
        return await self._db.run_async(
            lambda tx: store.end_operator(OperatorTx(tx), operator), owner_id=None, short=True
        )
