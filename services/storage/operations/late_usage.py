"""The usage of a lease lost to an outage, charged all the same (ADR 0038, amended).

A worker whose settlement could not reach the service before its lease ran out (an
outage longer than the lease) made its model calls all the same: the tokens are
spent. Offered again once the service is back, the settlement is refused as a lost
lease, but the usage it carries is kept on the attempt it names (found by its token's
hash, as every end finds its attempt), added to the operation's totals and charged to
the owner's budget day, in the settlement's transaction. Once: only an attempt that
ended with nothing recorded takes it, and a repeat that finds its own figures there is
answered as charged (its first COMMIT may have been lost).
"""

from __future__ import annotations

from sqlalchemy import bindparam, select, update

from durable_ops.model import budgets
from durable_ops.model.usage import Usage
from durable_ops.storage import budgets as budget_store
from durable_ops.storage.operations.rows import ATTEMPTS, OPS, attempt_id, hash_token
from durable_ops.storage.tx import Tx

_FIGURES = ("prompt_tokens", "completion_tokens", "model_ms")
_BUDGET = ("budget_day", "reserved_tokens")
_THE_ATTEMPT = (
    ATTEMPTS.c.id == bindparam("attempt_id"),
    ATTEMPTS.c.operation_id == bindparam("of_operation"),
)
_RECORD = (
    update(ATTEMPTS)
    .where(
        *_THE_ATTEMPT,
        *(ATTEMPTS.c[name].is_(None) for name in _FIGURES),
    )
    .values({name: bindparam(f"used_{name}") for name in _FIGURES})
)
_RECORDED = select(*(ATTEMPTS.c[name] for name in _FIGURES)).where(*_THE_ATTEMPT)
_OPERATION = select(OPS.c.owner_user_id, *(OPS.c[name] for name in _BUDGET)).where(
    OPS.c.id == bindparam("of_operation")
)
_ADD_TO_TOTALS = (
    update(OPS)
    .where(OPS.c.id == bindparam("of_operation"))
    .values(
        reserved_tokens=bindparam("outstanding"),
        **{name: OPS.c[name] + bindparam(f"used_{name}") for name in _FIGURES},
    )
)


def charge(tx: Tx, operation_id: str, token: str, usage: Usage) -> bool:
    """Charge ``usage`` to the attempt of ``token`` on the operation (its row locked by the
    settlement; neutral scope): whether it is charged, now or before. A lease refused as
    lost has ended its attempt (the operation left running, or is held by another lease)."""
    named = {"attempt_id": attempt_id(hash_token(token)), "of_operation": operation_id}
    used = {f"used_{name}": getattr(usage, name) for name in _FIGURES}
    if not tx.write(_RECORD, {**named, **used}):
        recorded = tx.execute(_RECORDED, named).first()
        return recorded is not None and tuple(recorded) == tuple(used.values())
    row = tx.execute(_OPERATION, named).one()
    outstanding = row.reserved_tokens
    if row.budget_day is not None:
        # Drawn from what is left of the reservation: nothing once the operation has ended.
        settled = budgets.settle(outstanding=outstanding, tokens=usage.tokens, ends=False)
        outstanding = settled.outstanding
        spent_on = budget_store.Charge(
            row.owner_user_id, row.budget_day, settled.reserved, settled.spent
        )
        budget_store.charge(tx, [spent_on])
    tx.write(_ADD_TO_TOTALS, {**named, **used, "outstanding": outstanding})
    return True
