"""Hot writes run straight on the DB-API cursor, compiled once per statement and dialect.

``Connection.execute`` spends about 0.1 ms of Python on each statement around
the driver's own work (an execution context, events, a result object), which
on the lease path is as much as PyMySQL itself. The hot INSERTs and UPDATEs
need none of it: their SQL and parameter order are fixed once compiled, and
their answer is a row count. ``write`` does what SQLAlchemy would do for such a
statement, in order: the parameters as ``construct_params`` fills them (bound
values, then the caller's), each through its type's bind processor, then the
driver's ``execute``; a driver error goes through the connection's own error
handling, so it arrives wrapped as ``IntegrityError``/``OperationalError``
and a lost connection is invalidated, as from ``Connection.execute``.

A statement takes the usual path when this cannot hold for it (expanding or
literal parameters, Python-side column defaults, RETURNING, a schema
translation), and every statement does while anyone listens to
``before_cursor_execute`` (the benchmarks' statement counters), so they see
every statement as before. ``execute_sql`` does the same for a fixed statement
without parameters (SQLite's ``BEGIN IMMEDIATE``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

from sqlalchemy import Executable
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.sql.compiler import SQLCompiler

from durable_ops.storage.statement_cache import StatementCache


class _Prepared:
    """One statement compiled for one dialect."""

    __slots__ = ("compiled", "names", "positions", "processors", "sql")

    def __init__(self, compiled: SQLCompiler) -> None:
        self.compiled = compiled
        self.sql = compiled.string
        # The DB-API wants a sequence (qmark: SQLite) or a mapping (pyformat: PyMySQL).
        self.positions = tuple(compiled.positiontup or ()) if compiled.positional else None
        self.names = dict(compiled.escaped_bind_names or {})
        # Callables only: _direct turned away the tuple types' sequences of processors.
        self.processors = cast(Mapping[str, Callable[[Any], Any]], compiled._bind_processors)

    def parameters(self, values: Mapping[str, Any]) -> Any:
        bound = self.compiled.construct_params(values, escape_names=False)
        processors = self.processors
        ready = {
            key: processors[key](value) if key in processors else value
            for key, value in bound.items()
        }
        if self.positions is not None:
            return tuple(ready[key] for key in self.positions)
        if self.names:
            return {self.names.get(key, key): value for key, value in ready.items()}
        return ready


def _direct(compiled: SQLCompiler) -> bool:
    """Whether the driver gets exactly ``compiled.string`` with plain bound values."""
    return not (
        compiled.literal_execute_params
        or compiled.post_compile_params
        or compiled.insert_prefetch
        or compiled.update_prefetch
        or compiled.effective_returning
        or compiled.schema_translate_map
        or not all(callable(processor) for processor in compiled._bind_processors.values())
    )


def _prepare(statement: Executable, dialect: Dialect) -> _Prepared | None:
    """``statement`` compiled for ``dialect``; ``None`` when it takes the usual path."""
    compiled = statement.compile(dialect=dialect)  # type: ignore[attr-defined]
    writes = isinstance(compiled, SQLCompiler) and (compiled.isinsert or compiled.isupdate)
    return _Prepared(compiled) if writes and _direct(compiled) else None


_statements: StatementCache[_Prepared | None] = StatementCache()


def _listened(connection: Connection) -> bool:
    dispatch = connection.engine.dispatch
    return bool(dispatch.before_cursor_execute or dispatch.after_cursor_execute)


def write(connection: Connection, statement: Executable, values: Mapping[str, Any]) -> int:
    """Run an INSERT or UPDATE in ``connection``'s transaction; the rows it matched."""
    dialect = connection.dialect
    prepared = (
        None
        if _listened(connection)
        else _statements.get(statement, lambda: _prepare(statement, dialect), dialect.name)
    )
    if prepared is None:
        return connection.execute(statement, values).rowcount
    return _on_cursor(connection, prepared.sql, prepared.parameters(values))


def execute_sql(connection: Connection, sql: str) -> None:
    """Run a fixed statement without parameters (``BEGIN IMMEDIATE``) on ``connection``."""
    if _listened(connection):
        connection.exec_driver_sql(sql)
    else:
        _on_cursor(connection, sql, ())


def _on_cursor(connection: Connection, sql: str, parameters: Any) -> int:
    cursor = connection.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(sql, parameters)
        return int(cursor.rowcount)
    except Exception as error:
        # Raises it wrapped (IntegrityError, OperationalError …), invalidating a lost
        # connection, as a failed Connection.execute does.
        connection._handle_dbapi_exception(error, sql, parameters, cursor, None)
        raise  # unreachable: the handler always raises
    finally:
        cursor.close()
