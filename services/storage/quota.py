"""What each owner stores, held under the per-owner quota (SPEC "stored bytes"; issue 35).

One row per owner (``owner_storage``) counts its jobs, its CVs and the UTF-8 bytes
of their texts. A create takes its share with one guarded UPDATE in the create's
own transaction, so the quota holds exactly under concurrent creates: the row
lock orders them on MariaDB, SQLite has one writer, and on Galera two nodes'
takes of one owner's row fail certification and one is retried (``db``).

A delete gives its row's share back (``give_back``) in the delete's own transaction,
with one UPDATE of the same row that never takes a count below zero: the quota does
not renew by itself, deleting is how a user at the bound makes room.
"""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import Table, bindparam, case, insert, select, update

from durable_ops.model import bounds
from durable_ops.model.errors import CapacityExceeded
from durable_ops.storage.schema import OwnerStorage
from durable_ops.storage.tx import SCOPE_OWNER, Tx

STORAGE = cast(Table, OwnerStorage.__table__)
# The code of the refusal. The quota does not renew by itself (a delete gives a row's share
# back): the Retry-After of the 429 (SPEC) is a day, the soonest asking again is worth it
# unless the user deletes something (a release may raise the bound).
STORAGE_QUOTA_EXCEEDED = "storage_quota_exceeded"
RETRY_AFTER_SECONDS = 86_400

_LIMITS = {  # what is counted, and its bound
    "jobs": bounds.OWNER_JOBS_MAX,
    "attachments": bounds.OWNER_ATTACHMENTS_MAX,
    "stored_bytes": bounds.OWNER_STORED_BYTES_MAX,
}
_TAKE = (
    update(STORAGE)
    .where(
        STORAGE.c.owner_user_id == SCOPE_OWNER,
        *(STORAGE.c[name] + bindparam(name) <= limit for name, limit in _LIMITS.items()),
    )
    .values({name: STORAGE.c[name] + bindparam(name) for name in _LIMITS})
)
# Each count less the share, held at zero: a count that disagreed with the rows (it never
# should) is not made negative, which would let a later take pass the bound.
_GIVE_BACK = (
    update(STORAGE)
    .where(STORAGE.c.owner_user_id == SCOPE_OWNER)
    .values(
        {
            name: case(
                (STORAGE.c[name] > bindparam(name), STORAGE.c[name] - bindparam(name)), else_=0
            )
            for name in _LIMITS
        }
    )
)
_READ = select(*(STORAGE.c[name] for name in _LIMITS)).where(STORAGE.c.owner_user_id == SCOPE_OWNER)
_FIRST = insert(STORAGE).values(owner_user_id=SCOPE_OWNER, jobs=0, attachments=0, stored_bytes=0)


def utf8_bytes(*texts: str) -> int:
    return sum(len(text.encode()) for text in texts)


def take(tx: Tx, *, jobs: int = 0, attachments: int = 0, stored_bytes: int) -> None:
    """Count a create's rows and bytes against the owner's quota, or refuse it (429)."""
    share: dict[str, Any] = {"jobs": jobs, "attachments": attachments, "stored_bytes": stored_bytes}
    if tx.write(_TAKE, share):
        return
    held = tx.execute(_READ).first()
    if held is None:  # the owner's first create
        tx.insert_if_absent(_FIRST, {})  # two first creates of one owner may race
        if tx.write(_TAKE, share):
            return
        held = tx.execute(_READ).one()
    raise _refusal(dict(held._mapping), share)


def give_back(tx: Tx, *, jobs: int = 0, attachments: int = 0, stored_bytes: int) -> None:
    """Uncount a deleted row's share (its kind's count and its texts' UTF-8 bytes)."""
    share = {"jobs": jobs, "attachments": attachments, "stored_bytes": stored_bytes}
    tx.write(_GIVE_BACK, share)


def _refusal(held: dict[str, int], share: dict[str, int]) -> CapacityExceeded:
    if held["jobs"] + share["jobs"] > bounds.OWNER_JOBS_MAX:
        what = f"You have {bounds.OWNER_JOBS_MAX:,} jobs stored, the most an account keeps."
        room = "a job"
    elif held["attachments"] + share["attachments"] > bounds.OWNER_ATTACHMENTS_MAX:
        what = f"You have {bounds.OWNER_ATTACHMENTS_MAX:,} CVs stored, the most an account keeps."
        room = "a CV"
    else:
        limit = bounds.OWNER_STORED_BYTES_MAX // (1024 * 1024)
        what = f"This would take your account past its {limit} MiB of stored text."
        room = "a job or a CV"
    message = f"{what} Nothing was stored; delete {room} you no longer need to make room."
    error = CapacityExceeded(message, retry_after_seconds=RETRY_AFTER_SECONDS)
    error.code = STORAGE_QUOTA_EXCEEDED
    return error
