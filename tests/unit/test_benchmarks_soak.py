"""The pure parts of the soak (``benchmarks.soak``): its plans, its pickups, its verdicts
and its audit, without a process or a database."""

from __future__ import annotations

import math
import random

from benchmarks.soak import (
    CI_LOAD,
    Latency,
    Load,
    Minute,
    Tally,
    judge,
    plan_subject,
    verdict_rows,
)
from benchmarks.soak_worker import parse_subject


def _minute(
    minute: int, rss: int, p99: float, fds: int = 20, db: int = 30, died: bool = False
) -> Minute:
    latency = Latency(100, p99 / 4, p99)
    return Minute(
        minute=minute,
        ended_at="2026-12-05T00:00:00+00:00",
        rss_kib={} if died else {"gateway": rss},
        fds={} if died else {"gateway": fds},
        create_grpc=latency,
        create_http=latency,
        pickup=latency,
        db_threads_connected=db + 5,
        db_by_user={"root": db + 5},
        db_ours=db,
        counts={},
        cpu_percent={"gateway": 2.0},
        db_held={"gateway": 0},
        load=1.0,
    )


def _verdicts(series: list[Minute]) -> dict[str, tuple[float, str]]:
    return {
        row.figure.split(" (")[0]: (row.value, row.verdict)
        for row in verdict_rows(series, ["gateway"])
    }


def test_every_planned_subject_is_one_the_worker_reads() -> None:
    rng = random.Random(7)
    for load in (Load(), CI_LOAD):
        plans = [plan_subject(rng, load) for _ in range(2000)]
        holds = [parse_subject(plan) for plan in plans]
        assert {ending for _, ending in holds} == {"ok", "fail", "retry"}
        assert max(ms for ms, _ in holds) == load.long_hold_ms
        assert all(len(plan) <= 64 for plan in plans)  # a subject id's bound


def test_a_pickup_is_counted_whichever_of_start_and_acknowledgement_comes_first() -> None:
    tally = Tally()
    tally.acknowledged_grpc("a", 10.0)
    tally.started("a", 10.25)
    tally.started("b", 20.0)  # the worker began before the create's answer reached us
    tally.acknowledged_grpc("b", 20.01)
    assert [round(s, 3) for s in tally.pickup] == [0.25, -0.01]
    assert tally.waiting_pickup == {}
    assert tally.early_starts == {}
    _, _, pickups, _ = tally.take_minute()
    assert len(pickups) == 2
    assert tally.pickup == []


def test_a_flat_run_meets_every_target() -> None:
    series = [_minute(m, 100_000, 50.0) for m in range(1, 11)]
    verdicts = _verdicts(series)
    assert verdicts["RSS growth, gateway"] == (1.0, "MET")
    assert verdicts["p99 drift, pickup"] == (1.0, "MET")
    assert verdicts["open fds, gateway"] == (1.0, "MET")
    assert verdicts["database connections to the run's schema"] == (1.0, "MET")


def test_growth_and_drift_are_judged_on_medians_of_the_windows() -> None:
    # minutes 4-6 at 100 MiB and 50 ms; the last three grow past the bounds
    series = [_minute(m, 100_000, 50.0) for m in range(1, 8)]
    series += [_minute(m, 120_000, 70.0, fds=25, db=31) for m in range(8, 11)]
    verdicts = _verdicts(series)
    assert verdicts["RSS growth, gateway"] == (1.2, "NOT MET")
    assert verdicts["p99 drift, gRPC create"] == (1.4, "NOT MET")
    assert verdicts["open fds, gateway"] == (1.25, "NOT MET")
    assert verdicts["database connections to the run's schema"][1] == "NOT MET"
    # one odd minute at the end does not move a median of three
    spike = [_minute(m, 100_000, 50.0) for m in range(1, 10)] + [_minute(10, 300_000, 900.0)]
    assert _verdicts(spike)["RSS growth, gateway"] == (1.0, "MET")
    assert _verdicts(spike)["p99 drift, HTTP create"] == (1.0, "MET")


def test_a_short_run_has_no_drift_verdicts() -> None:
    rows = verdict_rows([_minute(m, 1, 1.0) for m in range(1, 4)], ["gateway"])
    assert len(rows) == 1
    assert math.isnan(rows[0].value)


def test_the_audit_finds_lost_creates_and_wrong_notifications() -> None:
    states = {"a": "succeeded", "b": "running", "c": "failed", "d": "cancelled"}
    notified = {"a": 1, "b": 1, "d": 2, "gone": 1}
    audit = judge(states, notified, {"a", "b", "c", "d", "lost"}, [], {"ai-worker": -9})
    assert audit.lost == ["lost"]
    # b is not terminal yet notified; c is terminal without one; d has two; "gone" has none
    assert audit.notifications_wrong == {"b": 1, "c": 0, "d": 2, "gone": 1}
    assert audit.not_terminal == ["b"]
    assert audit.died == {"ai-worker": -9}
    clean = judge({"a": "succeeded", "b": "queued"}, {"a": 1}, {"a", "b"}, [], {})
    assert (clean.lost, clean.notifications_wrong) == ([], {})
