"""The soak's two-minute version (``benchmarks.soak``, issue 40 point 5) on MariaDB.

Every service a real process, the SDK worker one of its own, two minutes of
the same steady mix as the nightly soak (creates over gRPC and HTTP, claims,
heartbeats over held leases, long-polls, one ``/api/events`` stream per owner,
notifications read and marked), then the audit. Asserted: the product's
invariants (no acknowledged create lost, a repeated create names the same
operation, every terminal operation has exactly one notification and no other
has one, no process died), that the mix really ran every minute, and that the
series has one row a minute for every process. Not asserted: any timing or
growth target; those are the benchmark's (``python -m benchmarks.soak``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.soak import CI_LOAD, TERMINAL, run_soak, save
from tests.conftest import MakeDatabase

pytestmark = [pytest.mark.slow, pytest.mark.mariadb, pytest.mark.timeout(480)]

MINUTES = 2
PROCESSES = {
    "operations-1",
    "operations-2",
    "notifications",
    "workspace",
    "ai-admission",
    "dev-model",
    "ai-worker",
    "gateway",
    "sdk-worker",
}


def test_two_minutes_of_mixed_load_keep_every_invariant(
    copy_of_migrated_mariadb: MakeDatabase, tmp_path: Path
) -> None:
    lines: list[str] = []
    run = run_soak(MINUTES, CI_LOAD, say=lines.append, database_url=copy_of_migrated_mariadb())
    save(run, tmp_path / "soak.json", tmp_path / "soak.png", lines.append)
    print("\n".join(lines))  # the table of the minutes, shown by -s or on a failure

    audit = run.audit
    assert audit.died == {}
    assert audit.lost == []
    assert audit.repeat_mismatches == []
    assert audit.notifications_wrong == {}
    terminal = sum(audit.outcomes.get(state, 0) for state in TERMINAL)
    assert terminal >= 0.9 * audit.acknowledged, audit.outcomes
    assert audit.outcomes.get("succeeded", 0) > 0
    assert audit.outcomes.get("failed", 0) > 0  # the planned permanent failures

    assert set(run.processes) == PROCESSES
    assert [row.minute for row in run.series] == list(range(1, MINUTES + 1))
    for row in run.series:
        assert set(row.rss_kib) == PROCESSES, f"minute {row.minute}: {row.rss_kib}"
        assert set(row.fds) == PROCESSES
        assert all(kib > 0 for kib in row.rss_kib.values())
        assert row.db_ours > 0
        assert row.db_held["operations-1"] > 0  # its pool, seen from /proc
        assert row.db_held["gateway"] == 0  # the gateway has no database
        # the whole mix ran in every minute
        assert row.create_grpc.count > 0
        assert row.create_http.count > 0
        assert row.pickup.count > 0
        counts = row.counts
        assert counts.get("long-poll 200", 0) > 0, counts
        assert counts.get("event operation", 0) > 0, counts
        assert counts.get("notifications 200/200", 0) > 0, counts
        assert not [kind for kind in counts if kind.startswith("error")], counts

    assert sum(row.counts.get("read 200", 0) for row in run.series) > 0  # marked read
    assert sum(row.counts.get("attempt started", 0) for row in run.series) > audit.acknowledged / 2

    saved = json.loads((tmp_path / "soak.json").read_text())
    assert len(saved["series"]) == MINUTES
    assert (tmp_path / "soak.png").stat().st_size > 10_000
