"""One statement for many rows, each with values of its own (``CASE id WHEN … THEN …``).

Batched leases (ADR 0022) update or insert up to 100 rows in one statement;
what differs per row (a token hash, a result, a notification id) is chosen by
the row's id. Statements are built once per batch size (callers cache them),
with bind parameters named ``{name}_{n}`` for the n-th row.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BindParameter, ColumnElement, bindparam, case
from sqlalchemy.types import TypeEngine


def row_ids(name: str, count: int) -> list[BindParameter[str]]:
    """The bind parameters ``{name}_0`` … of ``count`` rows' ids."""
    return [bindparam(f"{name}_{n}") for n in range(count)]


def per_row(
    id_column: ColumnElement[str],
    ids: list[BindParameter[str]],
    name: str,
    type_: TypeEngine[Any] | None = None,
) -> ColumnElement[Any]:
    """Each row's own ``{name}_{n}``, chosen by its id: the value for ``ids[n]``'s row.

    ``type_`` binds the values as the column they are compared with or written to
    (a datetime must be stored by the column's rules, e.g. SQLite's text form).
    """
    return case(
        *(
            (id_column == row_id, bindparam(f"{name}_{n}", type_=type_))
            for n, row_id in enumerate(ids)
        )
    )
