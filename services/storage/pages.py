"""Keyset pagination, newest first, with opaque page tokens.

The condition is spelled ``created < :c OR (created = :c AND id < :i)``: the
row-constructor form does not use the (owner, created_at, id) index on
MariaDB and degrades like OFFSET.

A token names the list it continues (``"l"``: a digest of the owner and of the list's
name and filters, ``listing``). Sent with another list (another filter, another kind of
row, another user's) it is a 400 ``page_token_mismatch``: it would otherwise start that
list at a place of another, and a client's page loop that changed its filter half way
would skip or repeat rows without a word. Never another owner's rows: the token holds a
place, and the query is the caller's own. A token without ``"l"`` (issued before it was
written) is read as before.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from sqlalchemy import RowMapping, Select, and_, or_

from durable_ops.model import bounds
from durable_ops.model.errors import InvalidArgument
from durable_ops.storage.tx import Tx

T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    next_token: str | None


def page_size(requested: int) -> int:
    """0 (a protobuf field left unset) asks for the default size."""
    return bounds.PAGE_SIZE_DEFAULT if requested == 0 else bounds.page_size(requested)


PAGE_TOKEN_MISMATCH = "page_token_mismatch"  # noqa: S105 an error code, not a secret


def list_digest(owner_id: str | None, listing: str) -> str:
    """Which list a token continues: not a secret (the token's holder asked for that list),
    a check that it comes back to the same one."""
    named = f"{owner_id or ''}\n{listing}".encode()
    return base64.urlsafe_b64encode(hashlib.sha256(named).digest()[:9]).decode()


def encode_token(created_at: datetime, row_id: str, digest: str = "") -> str:
    fields = {"c": created_at.astimezone(UTC).isoformat(), "i": row_id}
    if digest:
        fields["l"] = digest
    raw = json.dumps(fields).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_token(token: str, digest: str = "") -> tuple[datetime, str]:
    try:
        padded = token + "=" * (-len(token) % 4)
        data: Any = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
        created_at = datetime.fromisoformat(data["c"])
        row_id = data["i"]
        named = data.get("l", digest)
        # An id that is not a string fails could_be_id with a TypeError.
        if created_at.tzinfo is None or not bounds.could_be_id(row_id):
            raise ValueError("malformed")
        if not isinstance(named, str):
            raise TypeError("malformed")
        created_at = created_at.astimezone(UTC)  # may overflow datetime's range
    except (
        ValueError,
        KeyError,
        TypeError,
        AttributeError,  # a JSON value other than an object
        OverflowError,
        binascii.Error,
        UnicodeError,
    ) as exc:
        raise InvalidArgument("page_token", "is not a token this server issued") from exc
    if named != digest:
        raise InvalidArgument(
            "page_token",
            "continues another list (another filter, or another user's): ask for the"
            " first page again, without it",
            code=PAGE_TOKEN_MISMATCH,
        )
    return created_at, row_id


def newest_first_page(
    tx: Tx,
    query: Select[Any],
    size: int,
    token: str,
    item: Callable[[RowMapping], T],
    *,
    listing: str = "",
) -> Page[T]:
    """One page of ``query``, which selects a table's rows, newest first (by their
    ``created_at``, then ``id``), each row made into an ``item``. One row more than the
    page is read: its presence is what makes a next-page token. ``listing`` names the list
    and its filters: its tokens continue it alone (the module's docstring); empty, the
    tokens name no list."""
    size = page_size(size)
    digest = list_digest(tx.owner_id, listing) if listing else ""
    created, row_id = query.selected_columns.created_at, query.selected_columns.id
    if token:
        after_created, after_id = decode_token(token, digest)
        query = query.where(
            or_(created < after_created, and_(created == after_created, row_id < after_id))
        )
    query = query.order_by(created.desc(), row_id.desc()).limit(size + 1)
    rows = [row._mapping for row in tx.execute(query)]
    if len(rows) <= size:
        return Page([item(row) for row in rows], None)
    last = rows[size - 1]
    next_token = encode_token(last["created_at"], last["id"], digest)
    return Page([item(row) for row in rows[:size]], next_token)
