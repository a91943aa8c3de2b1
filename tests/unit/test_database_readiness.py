"""The cached readiness behind the gRPC health of every service (ADR 16), without a database.

The probe and the clock are the test's: the database "answers" when the probe
returns and is "away" when it raises.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, cast

from sqlalchemy.exc import OperationalError

from durable_ops.storage.availability import DatabaseReadiness, worth_waiting_for
from durable_ops.storage.db import Database

NO_DATABASE = cast(Database, None)  # the probes below never touch it


class FakeDatabase:
    """A probe whose answers the test switches, counting how often it is asked."""

    def __init__(self) -> None:
        self.up = True
        self.asked = 0
        self.release = threading.Event()
        self.release.set()

    def probe(self, _db: Database) -> None:
        self.asked += 1
        self.release.wait(10)
        if not self.up:
            raise OperationalError("SELECT 1", {}, Exception("(2003, 'Connection refused')"))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def readiness(database: FakeDatabase, clock: Clock, **options: Any) -> DatabaseReadiness:
    return DatabaseReadiness(NO_DATABASE, monotonic=clock, probe=database.probe, **options)


def test_an_answer_is_reused_for_a_second_then_asked_again() -> None:
    database, clock = FakeDatabase(), Clock()
    ready = readiness(database, clock)

    async def scenario() -> None:
        assert await ready() is True
        clock.now += 0.5
        assert await ready() is True
        assert database.asked == 1
        clock.now += 0.5  # one second old: stale
        assert await ready() is True
        assert database.asked == 2

    asyncio.run(scenario())


def test_it_turns_false_while_the_database_is_away_and_true_when_it_is_back() -> None:
    database, clock = FakeDatabase(), Clock()
    ready = readiness(database, clock)

    async def scenario() -> None:
        assert await ready() is True
        database.up = False
        assert await ready() is True  # the cached answer still holds
        clock.now += 1.0
        assert await ready() is False
        clock.now += 0.2
        database.up = True
        assert await ready() is False  # cached for its second too
        clock.now += 1.0
        assert await ready() is True

    asyncio.run(scenario())


def test_many_checks_at_once_ask_the_database_once() -> None:
    database, clock = FakeDatabase(), Clock()
    ready = readiness(database, clock)

    async def scenario() -> None:
        database.release.clear()
        checks = [asyncio.create_task(ready()) for _ in range(20)]
        await asyncio.sleep(0.05)
        database.release.set()
        assert await asyncio.gather(*checks) == [True] * 20
        assert database.asked == 1

    asyncio.run(scenario())


def test_a_probe_that_hangs_answers_false_and_no_second_probe_piles_up() -> None:
    database, clock = FakeDatabase(), Clock()
    ready = readiness(database, clock, answer_within=0.05)

    async def scenario() -> None:
        database.release.clear()
        assert await ready() is False
        clock.now += 5.0
        assert await ready() is False
        assert database.asked == 1  # the hanging probe is waited on, not repeated
        database.release.set()
        await asyncio.sleep(0.1)
        assert await ready() is True  # its answer, now in
        assert database.asked == 1

    asyncio.run(scenario())


def test_the_wait_at_start_waits_only_for_an_absent_database() -> None:
    def error(code: int) -> OperationalError:
        return OperationalError("SELECT 1", {}, Exception(code, "..."))

    assert worth_waiting_for(error(2003))  # cannot connect
    assert worth_waiting_for(error(2013))  # lost during the query
    assert worth_waiting_for(error(1040))  # too many connections, for now
    assert worth_waiting_for(error(1047))  # a Galera node not in the primary component yet
    assert not worth_waiting_for(error(1045))  # access denied
    assert not worth_waiting_for(error(1049))  # no such database
    assert not worth_waiting_for(ValueError("not a database error"))
