"""Figure 3: ``ListOperations`` for one owner, first and deep pages, small vs large table.

Two MariaDB databases are bulk-loaded (``benchmarks.bulk``): a small one
(10k rows) and a large one (1M rows; 100k in quick mode). In both, one owner
holds the same number of rows and the rest is spread over 1,000 owners, so
the owner's pages are the same and only the table around them grows. Each
database gets its own ``opsctl serve operations`` process; one client asks,
one request at a time, for the first page and for a deep page (its token is
the one the server would have issued for the row just before it). Rounds
alternate the order of the four (size, page) combinations.

Controls: the same deep page fetched with ``LIMIT … OFFSET`` (raw SQL, same
driver), which must degrade, and ``EXPLAIN`` of the query the server runs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from datetime import UTC
from functools import partial
from typing import Any

from benchmarks import bulk
from benchmarks.client import OpsClient
from benchmarks.context import Context
from benchmarks.databases import mariadb_connect, mariadb_database
from benchmarks.processes import operations_server
from benchmarks.stats import median, percentile
from benchmarks.table import Row, Target
from durable_ops.storage import operations
from durable_ops.storage.db import Database
from durable_ops.storage.pages import encode_token

OWNER = "bench-lister"
OWNER_ROWS = 5000
PAGE_SIZE = 20
DEPTH = OWNER_ROWS - 5 * PAGE_SIZE  # rows before the deep page
SCALE_TARGET = Target("<=", 1.5)
OFFSET_TARGET = Target(">=", 1.5)  # the control must degrade
OFFSET_SQL = (
    "SELECT * FROM user_operations WHERE owner_user_id = %s"
    " ORDER BY created_at DESC, id DESC LIMIT %s OFFSET %s"
)


@dataclass
class Table:
    label: str
    url: str
    target: str = ""
    deep_token: str = ""


def deep_token(url: str) -> str:
    """The page token the server issues for the row just before the deep page."""
    connection = mariadb_connect(url)
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT created_at, id FROM user_operations WHERE owner_user_id = %s"
                " ORDER BY created_at DESC, id DESC LIMIT 1 OFFSET %s",
                (OWNER, DEPTH - 1),
            )
            created_at, row_id = cursor.fetchone()
    finally:
        connection.close()
    return encode_token(created_at.replace(tzinfo=UTC), row_id)


def explain(url: str, token: str) -> dict[str, Any]:
    """EXPLAIN of the statement ``list_page`` issues for the deep page."""
    db = Database(url, pool_size=1)
    seen: list[tuple[str, Any]] = []

    def record(*args: Any) -> None:
        seen.append((args[2], args[3]))

    db.listen("before_cursor_execute", record)
    try:
        db.run(
            lambda tx: operations.list_page(tx, size=PAGE_SIZE, token=token),
            owner_id=OWNER,
            write=False,
        )
    finally:
        db.dispose()
    statement, parameters = next(s for s in seen if s[0].lstrip().upper().startswith("SELECT"))
    connection = mariadb_connect(url)
    try:
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN " + statement, parameters)
            columns = [c[0] for c in cursor.description or ()]
            plan = dict(zip(columns, cursor.fetchone() or (), strict=False))
    finally:
        connection.close()
    return plan


async def _latencies(call: Callable[[], Awaitable[Any]], count: int) -> list[float]:
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return samples


def _offset_latencies(url: str, offset: int, count: int) -> list[float]:
    connection = mariadb_connect(url)
    samples = []
    try:
        with connection.cursor() as cursor:
            for _ in range(count):
                started = time.perf_counter()
                cursor.execute(OFFSET_SQL, (OWNER, PAGE_SIZE + 1, offset))
                cursor.fetchall()
                samples.append(time.perf_counter() - started)
    finally:
        connection.close()
    return samples


Combo = tuple[str, str]  # (table label, "first" | "deep")


async def _rounds(ctx: Context, tables: list[Table], count: int) -> dict[Combo, list[list[float]]]:
    """Per combination, the latency samples of each round."""
    clients = {t.label: OpsClient(t.target) for t in tables}
    combos: list[tuple[Combo, Callable[[], Awaitable[Any]]]] = []
    for table in tables:
        lister = clients[table.label]
        combos.append(((table.label, "first"), partial(lister.list, OWNER, PAGE_SIZE)))
        combos.append(
            ((table.label, "deep"), partial(lister.list, OWNER, PAGE_SIZE, table.deep_token))
        )
    try:
        for _combo, call in combos:  # warm-up: connections, buffer pool, statement caches
            await _latencies(call, max(count // 4, 10))
        results: dict[Combo, list[list[float]]] = {combo: [] for combo, _ in combos}
        for index in range(ctx.rounds):
            order = combos if index % 2 == 0 else list(reversed(combos))
            for combo, call in order:
                results[combo].append(await _latencies(call, count))
        return results
    finally:
        for each in clients.values():
            await each.close()


def _ratio_rows(
    results: dict[Combo, list[list[float]]], small: str, large: str, rounds: int
) -> list[Row]:
    def stat(combo: Combo, p: float, index: int) -> float:
        return percentile(results[combo][index], p)

    rows = []
    for page in ("first", "deep"):
        for p in (50, 95):
            ratios = [stat((large, page), p, i) / stat((small, page), p, i) for i in range(rounds)]
            rows.append(
                Row(
                    "3",
                    f"ListOperations {page} page p{p}: {large} ÷ {small}",
                    f"{median([stat((large, page), p, i) for i in range(rounds)]) * 1e3:.2f} ms",
                    f"{median([stat((small, page), p, i) for i in range(rounds)]) * 1e3:.2f} ms",
                    median(ratios),
                    SCALE_TARGET,
                )
            )
    for p in (50, 95):
        ratios = [stat((large, "deep"), p, i) / stat((large, "first"), p, i) for i in range(rounds)]
        rows.append(
            Row(
                "3",
                f"ListOperations deep ÷ first page p{p} at {large}",
                f"{median([stat((large, 'deep'), p, i) for i in range(rounds)]) * 1e3:.2f} ms",
                f"{median([stat((large, 'first'), p, i) for i in range(rounds)]) * 1e3:.2f} ms",
                median(ratios),
                SCALE_TARGET,
            )
        )
    return rows


def _offset_row(ctx: Context, table: Table, count: int) -> Row:
    ratios, deeps, firsts = [], [], []
    _offset_latencies(table.url, DEPTH, max(count // 4, 10))  # warm-up
    for index in range(ctx.rounds):
        if index % 2 == 0:
            first = median(_offset_latencies(table.url, 0, count))
            deep = median(_offset_latencies(table.url, DEPTH, count))
        else:
            deep = median(_offset_latencies(table.url, DEPTH, count))
            first = median(_offset_latencies(table.url, 0, count))
        ratios.append(deep / first)
        deeps.append(deep)
        firsts.append(first)
    return Row(
        "3",
        f"control: LIMIT/OFFSET deep ÷ first p50 at {table.label} (must degrade)",
        f"{median(deeps) * 1e3:.2f} ms",
        f"{median(firsts) * 1e3:.2f} ms",
        median(ratios),
        OFFSET_TARGET,
        f"OFFSET {DEPTH:,} of one owner's {OWNER_ROWS:,} rows, raw SQL with PyMySQL",
    )


def _explain_row(table: Table) -> Row:
    plan = explain(table.url, table.deep_token)
    uses_range = plan.get("type") == "range" and plan.get("key") == (
        "ix_user_operations_owner_listing"
    )
    return Row(
        "3",
        f"EXPLAIN deep page at {table.label}: index range scan",
        f"type={plan.get('type')} key={plan.get('key')} rows={plan.get('rows')}",
        f"Extra: {plan.get('Extra') or '-'}",
        1.0 if uses_range else 0.0,
        Target("==", 1),
    )


def _label(rows: int) -> str:
    return f"{rows // 1_000_000}M" if rows >= 1_000_000 else f"{rows // 1000}k"


def run(ctx: Context) -> list[Row]:
    small_rows, large_rows = 10_000, ctx.pick(100_000, 1_000_000)
    count = ctx.pick(60, 300)
    ctx.begin_section("3 listing at scale")
    with ExitStack() as stack:
        tables = []
        for rows in (small_rows, large_rows):
            url = stack.enter_context(mariadb_database())
            started = time.perf_counter()
            bulk.load(url, rows, hot_owner=OWNER, hot_rows=OWNER_ROWS, say=ctx.say)
            ctx.say(f"  loaded {rows:,} rows in {time.perf_counter() - started:.0f} s")
            table = Table(_label(rows), url)
            table.deep_token = deep_token(url)
            table.target = stack.enter_context(operations_server(url))
            tables.append(table)
        if not ctx.quick:
            ctx.begin_section("3 listing at scale (measuring)")
        results = asyncio.run(_rounds(ctx, tables, count))
        small, large = tables
        figures = _ratio_rows(results, small.label, large.label, ctx.rounds)
        figures.append(_offset_row(ctx, large, max(count // 3, 20)))
        figures.append(_explain_row(large))
        note = (
            f"one owner holds {OWNER_ROWS:,} rows in both tables; deep page = rows"
            f" {DEPTH + 1:,}-{DEPTH + PAGE_SIZE:,}; {count} sequential requests per"
            " combination per round"
        )
        figures[0] = replace(figures[0], note=note)
        return figures
