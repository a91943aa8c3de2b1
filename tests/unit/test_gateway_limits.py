"""The gateway's bounds as pure bookkeeping: concurrency per key, token buckets."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from durable_ops.gateway.limits import ConcurrencyLimit, LimitExceeded, Throttle, client_key


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_concurrency_limit_refuses_beyond_the_limit_per_key_and_releases() -> None:
    limit = ConcurrencyLimit(2, retry_after=3)
    with limit.hold("alice"), limit.hold("alice"):
        with pytest.raises(LimitExceeded) as refused, limit.hold("alice"):
            pass
        assert refused.value.retry_after == 3
        assert limit.held("alice") == 2  # the refused one took nothing
        with limit.hold("bob"):
            assert limit.held("bob") == 1
    assert limit.held("alice") == 0
    with pytest.raises(RuntimeError), limit.hold("alice"):
        raise RuntimeError("the wait failed")
    assert limit.held("alice") == 0


def test_concurrency_limit_releases_a_cancelled_holder() -> None:
    limit = ConcurrencyLimit(1)

    async def holder() -> None:
        with limit.hold("alice"):
            await asyncio.sleep(30)

    async def scenario() -> None:
        task = asyncio.ensure_future(holder())
        await asyncio.sleep(0)
        assert limit.held("alice") == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert limit.held("alice") == 0

    asyncio.run(scenario())


def test_a_burst_then_one_attempt_per_refill() -> None:
    clock = Clock()
    throttle = Throttle(10, 6.0, clock=clock)
    for _ in range(10):
        throttle.attempt(["client:1.2.3.4"])
    with pytest.raises(LimitExceeded) as refused:
        throttle.attempt(["client:1.2.3.4"])
    assert refused.value.retry_after == 6
    clock.now += 4.5
    with pytest.raises(LimitExceeded) as refused:
        throttle.attempt(["client:1.2.3.4"])
    assert refused.value.retry_after == 2  # 1.5 s left, rounded up
    clock.now += 1.5
    throttle.attempt(["client:1.2.3.4"])
    with pytest.raises(LimitExceeded):
        throttle.attempt(["client:1.2.3.4"])
    throttle.attempt(["client:5.6.7.8"])  # another address has its own bucket


def test_an_attempt_short_of_a_whole_token_is_refused() -> None:
    """A bucket refilling lets an attempt through once a whole token is back, not before:
    most of a token (a wait under a second) is still a refusal, which takes nothing."""
    clock = Clock()
    throttle = Throttle(10, 6.0, clock=clock)
    for _ in range(10):
        throttle.attempt(["client:1.2.3.4"])
    clock.now += 5.5
    with pytest.raises(LimitExceeded) as refused:
        throttle.attempt(["client:1.2.3.4"])
    assert refused.value.retry_after == 1  # 0.5 s left, rounded up to a whole second
    clock.now += 0.5
    throttle.attempt(["client:1.2.3.4"])


def test_an_idle_bucket_fills_to_its_burst_and_no_further() -> None:
    """A day without attempts buys the burst again, not a day's worth of attempts at once."""
    clock = Clock()
    throttle = Throttle(10, 6.0, clock=clock)
    throttle.attempt(["client:1.2.3.4"])
    clock.now += 24 * 3600
    for _ in range(10):
        throttle.attempt(["client:1.2.3.4"])
    with pytest.raises(LimitExceeded):
        throttle.attempt(["client:1.2.3.4"])


def test_a_minute_of_attempts_allows_far_fewer_than_100() -> None:
    clock = Clock()
    throttle = Throttle(10, 6.0, clock=clock)
    allowed = 0
    for _ in range(600):  # one attempt every 0.1 s for a minute
        try:
            throttle.attempt(["client:1.2.3.4"])
            allowed += 1
        except LimitExceeded:
            pass
        clock.now += 0.1
    assert allowed <= 20


def test_every_named_bucket_must_hold_a_token_and_a_refusal_takes_none() -> None:
    clock = Clock()
    throttle = Throttle(2, 10.0, clock=clock)
    throttle.attempt(["client:a", "user:alice"])
    throttle.attempt(["client:b", "user:alice"])
    with pytest.raises(LimitExceeded):  # alice's bucket is empty, from any address
        throttle.attempt(["client:c", "user:alice"])
    throttle.attempt(["client:c"])  # the refusal took nothing from client:c
    throttle.attempt(["client:c"])
    with pytest.raises(LimitExceeded):
        throttle.attempt(["client:c"])


def test_buckets_are_bounded_in_number() -> None:
    clock = Clock()
    throttle = Throttle(2, 1.0, clock=clock, max_keys=3)
    for index in range(10):
        throttle.attempt([f"user:{index}"])
    assert len(throttle) == 3
    clock.now += 5  # all full again: dropped at the next trim
    throttle.attempt(["user:x"])
    throttle.attempt(["user:y"])
    throttle.attempt(["user:z"])
    throttle.attempt(["user:w"])
    assert len(throttle) <= 3


def test_the_buckets_dropped_are_full_ones_then_the_least_recently_used() -> None:
    """A bucket still counting must outlive the table filling up: a client that keeps
    trying, or a bucket not yet refilled, is kept; its refusals would otherwise start over
    with a full burst (as any bucket dropped does)."""
    clock = Clock()
    throttle = Throttle(2, 10.0, clock=clock, max_keys=3)
    throttle.attempt(["client:a"])
    throttle.attempt(["client:a"])  # empty, the oldest key
    throttle.attempt(["client:b"])
    throttle.attempt(["client:c"])
    clock.now += 10  # b and c are full again; a holds one token of two
    throttle.attempt(["client:d"])  # one key too many: the full ones go, a stays
    throttle.attempt(["client:a"])
    with pytest.raises(LimitExceeded):
        throttle.attempt(["client:a"])

    # Used last, kept: the key that keeps trying outlives newer keys that came once.
    throttle = Throttle(2, 10.0, clock=clock, max_keys=3)
    throttle.attempt(["client:busy"])
    for newcomer in ("client:x", "client:y", "client:z"):
        with contextlib.suppress(LimitExceeded):
            throttle.attempt(["client:busy"])
        throttle.attempt([newcomer])
    with pytest.raises(LimitExceeded):
        throttle.attempt(["client:busy"])
    # The newest key is kept too: its next attempts count against it.
    throttle.attempt(["client:z"])
    with pytest.raises(LimitExceeded):
        throttle.attempt(["client:z"])


def test_client_keys() -> None:
    assert client_key("10.0.0.7") == "client:10.0.0.7"
    assert client_key("2001:db8::1") == client_key("2001:db8::ffff") == "client:2001:db8::/64"
    assert client_key("::ffff:10.0.0.7") == "client:10.0.0.7"
    assert client_key(None) == "client:unknown"
    assert client_key("testclient") == "client:testclient"
