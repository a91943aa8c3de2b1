"""Core transactions in a scope: the one way every service reaches the database.

Every aggregate's statements are Core statements, most built once at import,
executed through a ``Tx`` (ADR 0008).

The owner scope holds by construction, in one place: ``Tx.execute`` in an
owner scope refuses any statement that touches an owner-bearing table without
binding ``SCOPE_OWNER`` (checked once per statement object), and the scope,
never the caller, supplies that parameter's value: a row inserted with
``owner_user_id=SCOPE_OWNER`` is the scope's owner's. In the neutral scope a
statement naming ``SCOPE_OWNER`` is refused, since there is no owner.

The operator scope (``OperatorTx``, ADR 19) is entered explicitly from the
neutral one: it reads across owners, and acts on one operation only in its
owner's scope (``as_owner``), where the owner rules hold as for the owner.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache, lru_cache
from typing import Any

from sqlalchemy import BindParameter, Column, CursorResult, Executable, Insert, Table, bindparam
from sqlalchemy.engine import Connection
from sqlalchemy.sql import visitors

from durable_ops.storage.schema import Base

SCOPE_OWNER_KEY = "scope_owner"
SCOPE_OWNER: BindParameter[str] = bindparam(SCOPE_OWNER_KEY)


class ScopeViolation(RuntimeError):
    """A statement that would cross the scope it runs in: a programming error."""


@cache
def _owner_tables() -> frozenset[str]:
    return frozenset(
        table.name for table in Base.metadata.tables.values() if "owner_user_id" in table.c
    )


# Keyed by the statement object (identity): the hot statements are module constants or
# built once per batch size, so a few hundred entries hold them all.
@lru_cache(maxsize=512)
def _shape(statement: Executable) -> tuple[bool, bool]:
    """(touches an owner-bearing table, binds SCOPE_OWNER)."""
    owned = _owner_tables()
    touches = binds = False
    for element in visitors.iterate(statement):  # type: ignore[arg-type]
        if isinstance(element, Table) and element.name in owned:
            touches = True
        elif isinstance(element, Column) and isinstance(element.table, Table):
            touches = touches or element.table.name in owned
        elif isinstance(element, BindParameter) and element.key == SCOPE_OWNER_KEY:
            binds = True
    return touches, binds


class Tx:
    """One open transaction on a Core connection, in an owner scope or the neutral one."""

    __slots__ = ("connection", "owner_id")

    def __init__(self, connection: Connection, owner_id: str | None) -> None:
        self.connection = connection
        self.owner_id = owner_id

    def across_owners(self) -> Tx:
        """The same transaction in the neutral scope, for the few statements that span
        owners by design (a count over the table, a prune by expiry); each caller says why."""
        return self if self.owner_id is None else Tx(self.connection, None)

    @property
    def dialect(self) -> str:
        return self.connection.dialect.name

    def execute(
        self, statement: Executable, parameters: Mapping[str, Any] | None = None
    ) -> CursorResult[Any]:
        return self.connection.execute(statement, {**(parameters or {}), **self._scope(statement)})

    def write(self, statement: Executable, parameters: Mapping[str, Any]) -> int:
        """An INSERT or UPDATE under the same scope rule; the rows it matched."""
        return self.execute(statement, parameters).rowcount

    def _scope(self, statement: Executable) -> dict[str, Any]:
        """The parameters the scope adds to ``statement`` (its owner for ``SCOPE_OWNER``),
        once the statement is known to keep to the scope."""
        touches, binds = _shape(statement)
        if self.owner_id is None:
            if binds:
                raise ScopeViolation("the neutral scope has no owner to bind")
            return {}
        if touches and not binds:
            raise ScopeViolation("an owner-scoped statement must filter by SCOPE_OWNER")
        return {SCOPE_OWNER_KEY: self.owner_id} if binds else {}

    def insert_if_absent(self, statement: Insert, parameters: Mapping[str, Any]) -> int:
        """``statement`` as an INSERT that leaves a row with the same key as it is: two
        first writers of one row may race, and the loser's insert is a no-op. The rows
        it inserted (0 or 1)."""
        return self.write(_ignoring_duplicates(statement, self.dialect), parameters)

    def execute_many(
        self, statement: Executable, rows: Sequence[Mapping[str, Any]]
    ) -> CursorResult[Any]:
        """``statement`` once per row, under the same scope rule (an INSERT of many rows
        goes to the database as one multi-row statement)."""
        scope = self._scope(statement)
        return self.connection.execute(statement, [{**row, **scope} for row in rows])


@cache
def _ignoring_duplicates(statement: Insert, dialect: str) -> Insert:
    # One statement object per dialect, so the scope check's cache keeps recognising it.
    return statement.prefix_with("OR IGNORE" if dialect == "sqlite" else "IGNORE")


class OperatorTx(Tx):
    """The operator scope: a neutral transaction its caller entered on purpose (ADR 19).

    ``durable_ops.storage.operator`` takes only this type, so a cross-owner read is
    never what a neutral-scope caller (a claim, the sweeper) gets by mistake.
    """

    __slots__ = ()

    def __init__(self, tx: Tx) -> None:
        if tx.owner_id is not None:
            raise ScopeViolation("the operator scope is not entered from an owner scope")
        super().__init__(tx.connection, None)

    def as_owner(self, owner_id: str) -> Tx:
        """The same transaction in ``owner_id``'s scope: the operator acts as the owner would."""
        if not owner_id:
            raise ScopeViolation("an owner scope needs an owner id")
        return Tx(self.connection, owner_id)
