"""Figure 2: statements per operation, counted from the real storage functions (no timing).

One lifecycle goes through the real gRPC servicer; the engine's
``before_cursor_execute`` listener counts the statements of each phase, and
COMMITs (``commit`` event), BEGINs actually sent and pool checkouts (each a
pre-ping round trip on MariaDB when the connection has been idle) are counted
separately.
"""

from __future__ import annotations

from benchmarks.capture import Recording, capture_batch, capture_lifecycle
from benchmarks.context import Context
from benchmarks.databases import mariadb_database, sqlite_database
from benchmarks.table import Row, Target

# Claim and complete each carry one statement of the attempt history (issue 19): the claim
# INSERTs the attempt, the completion UPDATEs it by primary key; heartbeats write none.
# A completion, whatever the batch: the rows read locked (the one guarded writer decides on
# them, ADR 33), the operations' UPDATE, the attempts' UPDATE, the running drafts' DELETE
# (ADR 36) and the notifications' INSERT, in one commit.
BUDGETS: dict[str, Target | None] = {
    "create": None,
    "claim": Target("<=", 3),
    "heartbeat": Target("==", 1),
    "complete": Target("==", 5),
}
SECTION = "2"
BATCH_SIZES = (1, 10)


def _verbs(recording: Recording, phase: str) -> str:
    verbs = []
    for statement in recording.statements(phase):
        words = statement.split()
        verb = words[0].upper()
        if verb in ("SAVEPOINT", "RELEASE", "BEGIN"):
            continue
        if verb == "SELECT" and "FOR UPDATE" in statement.upper():
            verb = "SELECT…FOR UPDATE" + (" SKIP LOCKED" if "SKIP LOCKED" in statement else "")
        verbs.append(verb)
    return " + ".join(verbs) or "-"


def rows_for(engine: str, recording: Recording) -> list[Row]:
    rows = []
    for phase, target in BUDGETS.items():
        counts = recording.counts(phase)
        detail = (
            f"{_verbs(recording, phase)} | COMMIT {counts['commit']}, BEGIN {counts['begin']},"
            f" SAVEPOINT {counts['savepoints']}, checkout {counts['checkouts']}"
        )
        note = ""
        if phase == "complete":
            one_commit = counts["commit"] == 1
            note = (
                f"complete ({engine}): locked read + UPDATE + attempt UPDATE + draft DELETE"
                f" + notification INSERT in "
                f"{'one commit' if one_commit else str(counts['commit']) + ' commits'}"
            )
            if not one_commit:
                target = Target("==", -1)  # cannot be met: the budget says one commit
        rows.append(
            Row(
                SECTION,
                f"{phase} statements ({engine})",
                detail,
                "",
                float(counts["statements"]),
                target,
                note,
            )
        )
    return rows


def batch_rows(engine: str, size: int, recording: Recording) -> list[Row]:
    """Statements and commits per operation when ``size`` are claimed and completed at once."""
    rows = []
    for phase in ("claim", "complete"):
        counts = recording.counts(phase)
        rows.append(
            Row(
                SECTION,
                f"{phase} statements per operation, batch of {size} ({engine})",
                f"{counts['statements']} statements, {counts['commit']} COMMIT for {size}",
                "",
                counts["statements"] / size,
                None,
                f"commits per operation {counts['commit'] / size:.2f}",
            )
        )
    return rows


def run(ctx: Context) -> list[Row]:
    ctx.begin_section("2 statements per operation")
    rows: list[Row] = []
    with mariadb_database() as url:
        rows += rows_for("MariaDB", capture_lifecycle(url))
    with sqlite_database() as url:
        rows += rows_for("SQLite", capture_lifecycle(url))
    for size in BATCH_SIZES:
        with mariadb_database() as url:
            rows += batch_rows("MariaDB", size, capture_batch(url, size))
    return rows
