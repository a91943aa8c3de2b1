"""Bulk-loading ``user_operations`` rows straight into MariaDB (multi-row INSERTs).

Rows look like finished operations made by the product: uuid4-hex ids, owners,
idempotency keys, times spread over 30 days. They are inserted in primary-key
order (the ids stay random uuid4 values, only the insert order is sorted), so
the clustered index is appended to rather than split.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

from benchmarks.databases import mariadb_connect

COLUMNS = (
    "id",
    "owner_user_id",
    "task_type",
    "idempotency_key",
    "request_hash",
    "subject_type",
    "subject_id",
    "state",
    "priority",
    "attempt",
    "max_attempts",
    "retry_delay_seconds",
    "privacy",
    "progress_percent",
    "cancel_requested",
    "created_at",
    "not_before",
    "fair_tag",
    "updated_at",
    "started_at",
    "finished_at",
)
BATCH_ROWS = 5000
SPAN = timedelta(days=30)
REQUEST_HASH = "0" * 64


def _owners(total: int, hot_owner: str, hot_rows: int, owners: int) -> Iterator[str]:
    """``hot_rows`` rows of ``hot_owner``, the rest spread over ``owners`` others, shuffled."""
    rng = random.Random(7)
    pool = [hot_owner] * hot_rows + [
        f"bench-owner-{rng.randrange(owners)}" for _ in range(total - hot_rows)
    ]
    rng.shuffle(pool)
    return iter(pool)


def load(
    url: str,
    total: int,
    *,
    hot_owner: str,
    hot_rows: int,
    owners: int = 1000,
    task_type: str = "bench.listed",
    say: Callable[[str], None] = lambda _m: None,
) -> None:
    """Insert ``total`` succeeded operations, ``hot_rows`` of them owned by ``hot_owner``."""
    rng = random.Random(11)
    ids = sorted(uuid.UUID(int=rng.getrandbits(128), version=4).hex for _ in range(total))
    owner_of = _owners(total, hot_owner, hot_rows, owners)
    end = datetime.now(UTC).replace(tzinfo=None)
    placeholders = ", ".join(["%s"] * len(COLUMNS))
    statement = f"INSERT INTO user_operations ({', '.join(COLUMNS)}) VALUES ({placeholders})"  # noqa: S608
    connection = mariadb_connect(url, autocommit=False)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SET SESSION unique_checks = 0")
            for start in range(0, total, BATCH_ROWS):
                batch = []
                for index in range(start, min(start + BATCH_ROWS, total)):
                    created = end - SPAN * rng.random()
                    batch.append(
                        (
                            ids[index],
                            next(owner_of),
                            task_type,
                            f"key-{index}",
                            REQUEST_HASH,
                            "bench",
                            f"subject-{index % 997}",
                            "succeeded",
                            0,
                            1,
                            3,
                            30,
                            "local_only",
                            100,
                            0,
                            created,
                            created,
                            int(created.replace(tzinfo=UTC).timestamp() * 1_000_000),
                            created,
                            created,
                            created + timedelta(seconds=1),
                        )
                    )
                cursor.executemany(statement, batch)
                connection.commit()
                if (start // BATCH_ROWS) % 40 == 39:
                    say(f"  loaded {start + len(batch):,} / {total:,} rows")
            cursor.execute("ANALYZE TABLE user_operations")
            cursor.fetchall()
        connection.commit()
    finally:
        connection.close()
