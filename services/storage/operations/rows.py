"""The operation table's shared vocabulary: rows, facts, the guards, recognition.

Every writer of the aggregate builds on these, so each is said once:

- ``lease_live``: the row is running under a lease that has not run out;
- ``deadline_open``: the row has no deadline or it lies ahead;
- ``in_line``: the row is not held out of the claim's line until its time;
- ``of_type``: the row is of a task type the statement names, not paused;
- ``recognise``: how a writer tells ``db.on_unknown_commit`` what its COMMIT
  left behind, should the COMMIT's connection be lost (ADR 0017).
"""

from __future__ import annotations

import hashlib
import hmac
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import cache
from typing import Any, TypeVar, cast

from sqlalchemy import (
    ColumnElement,
    CompoundSelect,
    Row,
    Select,
    String,
    Table,
    bindparam,
    select,
    union_all,
)
from sqlalchemy.orm import ClassManager, configure_mappers
from sqlalchemy.orm.attributes import manager_of_class

from durable_ops.model import bounds
from durable_ops.model.errors import LeaseLost, NotFound
from durable_ops.model.lifecycle import Facts
from durable_ops.model.states import ACTIVE_STATES, OperationState
from durable_ops.storage.db import on_unknown_commit
from durable_ops.storage.schema import ID_LENGTH, OperationAttempt, UserOperation
from durable_ops.storage.task_pauses import unless_paused
from durable_ops.storage.tx import SCOPE_OWNER, ScopeViolation, Tx

S = OperationState
OPS = cast(Table, UserOperation.__table__)
ATTEMPTS = cast(Table, OperationAttempt.__table__)
OWNED = OPS.c.owner_user_id == SCOPE_OWNER
# At most this many rows per batched statement (a claim, a beat, a settlement, a sweep).
ROWS_MAX = 100
T = TypeVar("T")
Query = Select[Any] | CompoundSelect[Any]  # one SELECT, or several joined


def batches(items: Sequence[T], size: int = ROWS_MAX) -> Iterator[Sequence[T]]:
    """``items`` in parts of at most ``size``, one batched statement each."""
    return (items[first : first + size] for first in range(0, len(items), size))


def numbered(rows: Iterable[Mapping[str, Any]], **shared: Any) -> dict[str, Any]:
    """A batched statement's parameters: ``shared`` as they are, and each row's own values
    named ``{name}_{n}`` for the ``n``-th row (``per_row``)."""
    own = {f"{name}_{n}": value for n, row in enumerate(rows) for name, value in row.items()}
    return {**shared, **own}


def lease_live() -> ColumnElement[bool]:
    """Running, under a lease that has not run out at ``:now``."""
    return (OPS.c.state == S.RUNNING) & (OPS.c.lease_expires_at > bindparam("now"))


def of_type(n: int) -> ColumnElement[bool]:
    """Of the ``n``-th task type a statement names (``of_type_n``), unless an operator
    paused it: the key of a seek of the claim index (ADR 0051)."""
    return OPS.c.task_type == unless_paused(bindparam(f"of_type_{n}", type_=String))


def one_statement(parts: Sequence[Select[Any]]) -> Query:
    """These SELECTs as one statement: the only one itself, else their ``UNION ALL``, each
    a derived table: SQLite takes no parenthesised member of a UNION, and only so does
    each keep its own ORDER BY and LIMIT."""
    if len(parts) == 1:
        return parts[0]
    return union_all(*(select(part.subquery(f"part_{n}")) for n, part in enumerate(parts)))


def in_line() -> ColumnElement[bool]:
    """Not held out of the claim's line as scheduled for later (ADR 0050)."""
    return OPS.c.held_until.is_(None)


def each_active_state(part: Callable[[str], Select[Any]]) -> CompoundSelect[Any]:
    """``part(state)`` for each unfinished state, joined by ``UNION ALL``.

    An equality on ``state`` is a seek on both engines. MariaDB reads ``state IN (…)``
    over a table it thinks small as a scan of the whole index, finished rows too
    (ADR 0052; tests/integration/test_read_costs.py counts the reads).
    """
    return union_all(*(part(state) for state in sorted(ACTIVE_STATES)))


def deadline_open() -> ColumnElement[bool]:
    """No deadline, or one after ``:now``."""
    return OPS.c.deadline_at.is_(None) | (OPS.c.deadline_at > bindparam("now"))


def new_id() -> str:
    return uuid.uuid4().hex


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def attempt_id(token_hash: str) -> str:
    """The attempt row's key, derived one way from its lease token's hash: an end finds
    its row by primary key, and the key tells nothing of the token or its hash."""
    return hashlib.sha256(f"attempt:{token_hash}".encode()).hexdigest()[:ID_LENGTH]


def facts(op: UserOperation | Mapping[Any, Any]) -> Facts:
    """The facts ``decide`` needs, from a row or a detached operation."""
    get = op.__getitem__ if isinstance(op, Mapping) else op.__getattribute__
    values = {name: get(name) for name in Facts.__dataclass_fields__}
    values.update(state=S(values["state"]), cancel_requested=bool(values["cancel_requested"]))
    return Facts(**values)


@cache
def _operation_class() -> ClassManager[UserOperation]:
    configure_mappers()  # what the constructor's first call does, and new_instance does not
    return manager_of_class(UserOperation)


def detached(values: Mapping[Any, Any]) -> UserOperation:
    """A detached ``UserOperation`` holding ``values`` (column keys).

    Filled the way the ORM fills a loaded row, straight into the instance's
    dict: the constructor instead sets each of some thirty attributes through
    its instrumentation, which cost more than the INSERT of a create.
    """
    operation = _operation_class().new_instance()
    operation.__dict__.update(values)
    return operation


def operation(row: Row[Any]) -> UserOperation:
    return detached(row._mapping)


def one(tx: Tx, statement: Select[Any], parameters: dict[str, Any]) -> UserOperation | None:
    row = tx.execute(statement, parameters).one_or_none()
    return None if row is None else operation(row)


def not_found() -> NotFound:
    """What a missing operation, or another owner's, answers."""
    return NotFound("operation not found", code="operation_not_found")


def by_id(tx: Tx, statement: Select[Any], operation_id: str, **parameters: Any) -> Row[Any]:
    """The row ``statement`` reads by ``:operation_id``, or ``not_found``: an id no
    operation was ever issued is not looked up."""
    issuable = 0 < len(operation_id) <= bounds.ID_MAX
    found = {"operation_id": operation_id, **parameters}
    row = tx.execute(statement, found).one_or_none() if issuable else None
    if row is None:
        raise not_found()
    return row


def neutral(tx: Tx, owners: list[str]) -> Tx:
    """The neutral side of ``tx`` for a batched statement that binds each row's owner.

    In an owner scope every row must be the scope's owner's: the batch writers
    guard each row on its owner, and this is where the scope supplies it.
    """
    if tx.owner_id is not None and any(owner != tx.owner_id for owner in owners):
        raise ScopeViolation("an owner scope writes only its owner's rows")
    return tx if tx.owner_id is None else Tx(tx.connection, None)


# The rows a batch names, locked in one lock order for every batch (fewer deadlocks).
LOCKED = (
    select(OPS)
    .where(OPS.c.id.in_(bindparam("ids", expanding=True)))
    .order_by(OPS.c.id)
    .with_for_update()
)


def held_row(row: Mapping[Any, Any] | None, owner_id: str, token_hash: str) -> Mapping[Any, Any]:
    """``row`` when it is ``owner_id``'s and carries the lease token of ``token_hash``:
    another owner's answers as a missing one, another lease's as a lost one."""
    if row is None or row["owner_user_id"] != owner_id:
        raise not_found()
    held = row["lease_token_hash"]
    if held is None or not hmac.compare_digest(held, token_hash):
        raise LeaseLost("the lease token does not match this operation's lease")
    return row


def _row_is(tx: Tx, operation_id: str, columns: dict[str, Any]) -> bool:
    owned = [] if tx.owner_id is None else [OWNED]  # the owner criterion of an owner scope
    query = select(OPS.c.id).where(
        OPS.c.id == operation_id, *owned, *(OPS.c[name] == value for name, value in columns.items())
    )
    return tx.execute(query).first() is not None


def recognise(operation_id: str, **columns: Any) -> None:
    """Should this transaction's COMMIT be lost: it committed iff the row reads like this.

    Each writer names what only its own write leaves: a create its fresh id, a
    claim its lease token's hash, a beat the exact expiry it wrote, a decided
    transition its state and the ``updated_at`` it stamped.
    """
    on_unknown_commit(lambda tx: _row_is(tx, operation_id, columns))
