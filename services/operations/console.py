"""The operator console's sign-ins as use cases (ADR 0045): one short transaction each.

Links are made in the operator scope (``OperatorTx``: the operator's own key);
opening one, resolving a session and signing out run in the neutral scope,
where the gateway asks with the secret it was handed. A sign-in, a refused
link and a sign-out are logged (``via="console"``). SQL in
``durable_ops.storage.console``, rules in ``durable_ops.model.console``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import structlog

from durable_ops.clock import Clock
from durable_ops.model.errors import Unauthenticated
from durable_ops.storage import console as store
from durable_ops.storage.console import Signed
from durable_ops.storage.db import Database
from durable_ops.storage.tx import OperatorTx, Tx

log = structlog.get_logger(__name__)
T = TypeVar("T")


class ConsoleSignIns:
    def __init__(self, db: Database, clock: Clock) -> None:
        self._db = db
        self._clock = clock

    async def link(self, operator: str) -> Signed:
        now = self._clock()
        return await self._run(lambda tx: store.create_link(OperatorTx(tx), operator, now))

    async def open(self, link: str) -> Signed:
        now = self._clock()
        try:
            signed = await self._run(lambda tx: store.open_link(tx, link, now))
        except Unauthenticated:
            log.info("operator_console_link_refused", via="console")
            raise
        log.info("operator_console_sign_in", operator=signed.operator, via="console")
        return signed

    async def resolve(self, session_id: str) -> Signed:
        now = self._clock()
        return await self._run(lambda tx: store.resolve(tx, session_id, now), write=False)

    async def end(self, session_id: str) -> None:
        """Sign out; a session already ended is fine (the outcome is the same)."""
        now = self._clock()

        def sign_out(tx: Tx) -> str | None:
            try:
                operator = store.resolve(tx, session_id, now).operator
            except Unauthenticated:
                return None
            store.end(tx, session_id)
            return operator

        operator = await self._run(sign_out)
        if operator is not None:
            log.info("operator_console_sign_out", operator=operator, via="console")

    async def end_operator(self, operator: str | None) -> int:
        """End ``operator``'s links and sessions, or everyone's for ``None``."""
        return await self._run(lambda tx: store.end_operator(OperatorTx(tx), operator))

    async def _run(self, work: Callable[[Tx], T], *, write: bool = True) -> T:
        return await self._db.run_async(work, owner_id=None, write=write, short=True)
