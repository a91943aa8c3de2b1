"""``opsctl status``'s verdicts (``model.health``): what each reading means, in words, and
the worst of them, which the exit code says. No I/O: the readings are made up here."""

from __future__ import annotations

import pytest

from durable_ops.cli import EXIT_DEGRADED, EXIT_UNHEALTHY
from durable_ops.model import health
from durable_ops.model.health import (
    LEASE_OVERDUE_SECONDS,
    Check,
    DatabaseReading,
    GatewayAnswer,
    Health,
    PausedType,
    Queue,
    Unread,
)

WHERE = "sqlite:///var/ops.sqlite3 (from the default)"
HEAD = "0025_filtered_listings"
MAX_WAIT = 300


def _queue(task_type: str = "cv.review", **counts: int | bool | None) -> Queue:
    fields: dict[str, int | bool | None] = {
        "paused": False,
        "queued": 0,
        "running": 0,
        "waiting_for_retry": 0,
        "waiting_for_external_fallback": 0,
        "oldest_queued_seconds": None,
        "running_past_lease": 0,
        "longest_past_lease_seconds": None,
    }
    fields.update(counts)
    return Queue(task_type, **fields)  # type: ignore[arg-type]


# ---- the database ---------------------------------------------------------------------------


def test_a_database_at_head_is_ok_and_names_its_engine_and_revision() -> None:
    check = health.database(WHERE, DatabaseReading("MariaDB", "10.11.6", HEAD, HEAD, []))
    assert check.health is Health.OK
    assert check.reason == f"MariaDB 10.11.6 at {WHERE}: schema at head ({HEAD})"
    assert check.details["engine"] == "MariaDB"


def test_a_schema_behind_is_down_and_says_by_how_much_and_what_to_run() -> None:
    reading = DatabaseReading("SQLite", "3.40.1", "0021_owner_open_work", HEAD, ["0022", "0023"])
    check = health.database(WHERE, reading)
    assert check.health is Health.DOWN
    assert "schema at 0021_owner_open_work, behind this release's" in check.reason
    assert "by 2 revisions" in check.reason
    assert check.reason.endswith("run `opsctl migrate`")


def test_a_schema_a_newer_release_wrote_is_ok_and_says_so() -> None:
    check = health.database(WHERE, DatabaseReading("SQLite", "3.40.1", "0099_later", HEAD, []))
    assert check.health is Health.OK
    assert "schema at 0099_later, newer than this release's" in check.reason


def test_an_empty_database_is_down() -> None:
    check = health.database(WHERE, DatabaseReading("SQLite", "3.40.1", None, HEAD, [HEAD]))
    assert (check.health, check.reason.endswith("has no schema: run `opsctl migrate`")) == (
        Health.DOWN,
        True,
    )


def test_a_database_that_did_not_answer_is_down_in_its_own_words() -> None:
    check = health.database(WHERE, Unread(f"the database {WHERE} did not answer: refused"))
    assert (check.health, check.reason) == (
        Health.DOWN,
        f"the database {WHERE} did not answer: refused",
    )


# ---- the services and the gateway -----------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "expected", "said"),
    [
        ("serving", Health.OK, "serving at 127.0.0.1:50054"),
        ("not_serving", Health.DOWN, "answers at 127.0.0.1:50054 but is not serving"),
        ("unreachable", Health.DOWN, "nothing answers at 127.0.0.1:50054 (OPS_WORKSPACE_TARGET)"),
        ("unknown_service", Health.DOWN, "serves no workspace"),
        (Unread("a bad target"), Health.DOWN, "cannot ask 127.0.0.1:50054"),
    ],
)
def test_each_service_health_state_reads_as_plain_words(
    state: str | Unread, expected: Health, said: str
) -> None:
    check = health.service("workspace", "127.0.0.1:50054", "OPS_WORKSPACE_TARGET", state)
    assert check.health is expected
    assert said in check.reason


def test_a_ready_gateway_is_ok() -> None:
    answer = GatewayAnswer(200, {"operations": "serving"})
    assert health.gateway("http://h/readyz", answer).health is Health.OK


def test_a_gateway_not_ready_is_down_naming_the_backends_it_lacks() -> None:
    answer = GatewayAnswer(503, {"operations": "serving", "workspace": "unreachable"})
    check = health.gateway("http://h/readyz", answer)
    assert check.health is Health.DOWN
    assert check.reason == "answers at http://h/readyz but is not ready: workspace unreachable"


def test_another_answer_than_the_gateways_asks_whether_it_is_the_gateway() -> None:
    check = health.gateway("http://h/readyz", GatewayAnswer(404, {}))
    assert check.health is Health.DOWN
    assert "answered HTTP 404: is the gateway at that address?" in check.reason


def test_a_gateway_that_does_not_answer_is_down() -> None:
    check = health.gateway("http://h/readyz", Unread("no answer within 3.5 s"))
    assert (check.health, check.reason) == (Health.DOWN, "http://h/readyz: no answer within 3.5 s")


# ---- the switch, the pauses, the queues, the workers ----------------------------------------


def test_ai_switched_off_is_degraded_and_says_how_to_turn_it_on() -> None:
    assert health.ai_switch(True).health is Health.OK
    off = health.ai_switch(False)
    assert off.health is Health.DEGRADED
    assert "`opsctl ai enable`" in off.reason
    assert health.ai_switch(Unread("the database could not be read")).health is Health.UNKNOWN


def test_a_paused_task_type_is_degraded_naming_who_paused_it() -> None:
    assert health.task_types([]).reason == "none paused"
    check = health.task_types([PausedType("cv.review", "carol", "2026-12-01T10:00:00+00:00")])
    assert check.health is Health.DEGRADED
    assert check.reason.startswith("paused: cv.review (by carol at 2026-12-01T10:00:00+00:00)")
    assert check.details["paused"][0]["paused_by"] == "carol"


def test_a_queue_is_a_line_of_its_own_degraded_once_it_waits_past_the_limit() -> None:
    waiting = _queue(queued=12, running=3, waiting_for_retry=1, oldest_queued_seconds=65)
    [check] = health.queues([waiting], MAX_WAIT)
    assert check.name == "queue cv.review"
    assert check.health is Health.OK
    assert check.reason == "12 queued (the oldest due for 1m 5s), 3 running, 1 waiting to retry"
    assert check.details["queued"] == 12

    [late] = health.queues([_queue(queued=1, oldest_queued_seconds=MAX_WAIT + 1)], MAX_WAIT)
    assert late.health is Health.DEGRADED
    assert late.reason.endswith("; waiting longer than 5m 0s")
    [on_time] = health.queues([_queue(queued=1, oldest_queued_seconds=MAX_WAIT)], MAX_WAIT)
    assert on_time.health is Health.OK


def test_no_unfinished_work_is_one_ok_line_and_unread_queues_are_unknown() -> None:
    assert health.queues([], MAX_WAIT) == [Check("queues", Health.OK, "no unfinished operations")]
    [unread] = health.queues(Unread("no operator key"), MAX_WAIT)
    assert (unread.health, unread.reason) == (Health.UNKNOWN, "no operator key")


def test_workers_count_the_live_leases() -> None:
    check = health.workers([_queue(running=3), _queue("strategy.snapshot", running=2)], MAX_WAIT)
    assert (check.health, check.reason) == (Health.OK, "5 running under a live lease")
    assert check.details["live_leases"] == 5


def test_a_lease_just_run_out_is_the_sweepers_to_end_not_a_fault() -> None:
    just = _queue(running=2, running_past_lease=1, longest_past_lease_seconds=LEASE_OVERDUE_SECONDS)
    check = health.workers([just], MAX_WAIT)
    assert check.health is Health.OK
    assert (
        check.reason == "1 running under a live lease; 1 just past its lease (the sweeper ends it)"
    )


def test_leases_long_past_say_the_sweeper_is_not_keeping_up() -> None:
    overdue = _queue(
        running=4, running_past_lease=2, longest_past_lease_seconds=LEASE_OVERDUE_SECONDS + 1
    )
    check = health.workers([overdue], MAX_WAIT)
    assert check.health is Health.DEGRADED
    assert check.reason.startswith(
        "2 running under a live lease; 2 running past their lease, the longest by 31s:"
        " the sweeper is not keeping up"
    )
    assert check.details["running_past_lease"] == 2


def test_work_waiting_past_the_limit_with_none_of_its_type_running_asks_for_a_worker() -> None:
    starved = _queue("cv.review", queued=3, oldest_queued_seconds=MAX_WAIT + 60)
    paused = _queue("report.render", paused=True, queued=3, oldest_queued_seconds=MAX_WAIT + 60)
    busy = _queue("strategy.snapshot", queued=3, running=1, oldest_queued_seconds=MAX_WAIT + 60)
    check = health.workers([starved, paused, busy], MAX_WAIT)
    assert check.health is Health.DEGRADED
    assert "nothing of cv.review runs while its queued work waits (the oldest due for 6m 0s)" in (
        check.reason
    )
    assert check.details["waiting_with_none_running"] == ["cv.review"]


# ---- the verdict ----------------------------------------------------------------------------


def _check(name: str, health_: Health) -> Check:
    return Check(name, health_, "why")


def test_the_worst_check_is_the_installs_down_before_unknown_before_degraded() -> None:
    ok, degraded = _check("a", Health.OK), _check("b", Health.DEGRADED)
    unknown, down = _check("c", Health.UNKNOWN), _check("d", Health.DOWN)
    assert health.overall([ok]) is Health.OK
    assert health.overall([ok, degraded]) is Health.DEGRADED
    assert health.overall([unknown, degraded, ok]) is Health.UNKNOWN
    assert health.overall([degraded, down, unknown]) is Health.DOWN


def test_the_exit_codes_of_status_are_distinct_from_every_other_of_opsctl() -> None:
    from durable_ops import cli, operator_cli

    others = {
        cli.EXIT_UNFORESEEN,
        cli.EXIT_USAGE,
        cli.EXIT_REFUSED,
        cli.EXIT_DATABASE_UNAVAILABLE,
        operator_cli.EXIT_FAILED,
        operator_cli.EXIT_NOT_CONFIRMED,
    }
    assert len({EXIT_UNHEALTHY, EXIT_DEGRADED, 0} | others) == len(others) + 3


def test_lines_are_columns_then_the_verdict() -> None:
    checks = [
        Check("database", Health.OK, "at head"),
        Check("workspace", Health.DOWN, "nothing answers"),
        Check("ai-switch", Health.DEGRADED, "off"),
        Check("queues", Health.UNKNOWN, "no key"),
    ]
    assert health.lines(checks) == [
        "ok        database   at head",
        "down      workspace  nothing answers",
        "degraded  ai-switch  off",
        "unknown   queues     no key",
        "down: workspace; unknown: queues; degraded: ai-switch",
    ]
    assert health.lines(checks[:1])[-1] == "all 1 checks ok"


def test_json_has_the_status_and_each_check() -> None:
    checks = [Check("database", Health.OK, "at head", {"engine": "SQLite"})]
    assert health.as_json(checks) == {
        "status": "ok",
        "checks": [
            {
                "name": "database",
                "status": "ok",
                "reason": "at head",
                "details": {"engine": "SQLite"},
            }
        ],
    }
