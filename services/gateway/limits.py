"""Per-user and per-client bounds of the gateway: pure bookkeeping, no I/O.

* ``ConcurrencyLimit`` counts what a key (a user) holds open at once, e.g. the
  long-polls of ``GET /api/operations/{id}:wait``; ``hold(key)`` is a context
  manager that takes a slot or raises ``LimitExceeded`` and gives it back
  however the block ends (answer, error or cancellation).
* ``TokenBucket`` / ``Throttle`` rate-limit attempts per key (a client address,
  a user): a burst of ``capacity`` attempts, then one more every
  ``refill_seconds``. A refusal names the keys due a log line (``reported``): a
  key's first refusal, then at most one a window (the time an emptied bucket
  takes to fill), with the attempts refused since, so a throttled client makes
  a line a minute, not one per request. The clock is injected (seconds,
  monotonic), so the tests move it by hand.

Both live in the memory of one gateway process: several gateway processes
each apply the bounds on their own, and a restart forgets them.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass


class LimitExceeded(Exception):
    """A bound refused an attempt; ``retry_after`` is whole seconds, at least 1.

    ``reported``: each throttled key due a log line, with the attempts it refused since
    its previous line (this one included); the other throttled keys stay quiet.
    """

    def __init__(self, retry_after: int, reported: Mapping[str, int] | None = None) -> None:
        super().__init__(f"retry after {retry_after} s")
        self.retry_after = retry_after
        self.reported: Mapping[str, int] = reported or {}


class ConcurrencyLimit:
    """At most ``limit`` slots held at once per key."""

    def __init__(self, limit: int, *, retry_after: int = 1) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.limit = limit
        self.retry_after = max(1, retry_after)
        self._held: dict[str, int] = {}

    def held(self, key: str) -> int:
        return self._held.get(key, 0)

    @contextmanager
    def hold(self, key: str) -> Iterator[None]:
        held = self._held.get(key, 0)
        if held >= self.limit:
            raise LimitExceeded(self.retry_after)
        self._held[key] = held + 1
        try:
            yield
        finally:
            remaining = self._held[key] - 1
            if remaining:
                self._held[key] = remaining
            else:
                del self._held[key]  # no entry per user who once waited


@dataclass
class TokenBucket:
    """``tokens`` (at most ``capacity``) as of ``at``; one more every ``refill_seconds``."""

    capacity: float
    refill_seconds: float
    tokens: float
    at: float
    refused: int = 0  # attempts refused since the key's last log line
    reported_at: float | None = None  # when the key was last due one

    def level(self, now: float) -> float:
        elapsed = max(0.0, now - self.at)
        return min(self.capacity, self.tokens + elapsed / self.refill_seconds)

    def wait_for_one(self, now: float) -> float:
        """Seconds until a token is there (0 when one is)."""
        return max(0.0, (1 - self.level(now)) * self.refill_seconds)

    def take(self, now: float) -> None:
        self.tokens = self.level(now) - 1
        self.at = now

    def refuse(self, now: float) -> int | None:
        """Count a refusal; the refusals to report when a line is due (the first refusal,
        then at most one a fill-up), else None."""
        self.refused += 1
        window = self.capacity * self.refill_seconds
        if self.reported_at is not None and now - self.reported_at < window:
            return None
        refused, self.refused, self.reported_at = self.refused, 0, now
        return refused


class Throttle:
    """A token bucket per key; an attempt names its keys and takes a token from each.

    An attempt is refused (``LimitExceeded``, with the wait for the emptiest
    bucket) unless every one of its buckets holds a token, and a refused attempt
    takes none. At most ``max_keys`` buckets are kept: beyond, full buckets
    (as good as none) are dropped, then the least recently used.
    """

    def __init__(
        self,
        capacity: int,
        refill_seconds: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 10_000,
    ) -> None:
        if capacity < 1 or not refill_seconds > 0 or max_keys < 1:
            raise ValueError("capacity, refill_seconds and max_keys must be positive")
        self.capacity = capacity
        self.refill_seconds = refill_seconds
        self._clock = clock
        self._max_keys = max_keys
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()

    def __len__(self) -> int:
        return len(self._buckets)

    def attempt(self, keys: Sequence[str]) -> None:
        """Take a token from the bucket of each key, or raise ``LimitExceeded``."""
        now = self._clock()
        buckets = {key: self._bucket(key, now) for key in keys}
        wait = max((bucket.wait_for_one(now) for bucket in buckets.values()), default=0.0)
        if wait > 0:
            reported = {}
            for key, bucket in buckets.items():
                if bucket.wait_for_one(now) > 0 and (refused := bucket.refuse(now)) is not None:
                    reported[key] = refused
            raise LimitExceeded(max(1, math.ceil(wait)), reported)
        for bucket in buckets.values():
            bucket.take(now)
        self._trim(now)

    def _bucket(self, key: str, now: float) -> TokenBucket:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = TokenBucket(self.capacity, self.refill_seconds, self.capacity, now)
            self._buckets[key] = bucket
        self._buckets.move_to_end(key)
        return bucket

    def _trim(self, now: float) -> None:
        if len(self._buckets) <= self._max_keys:
            return
        for key in [k for k, b in self._buckets.items() if b.level(now) >= b.capacity]:
            del self._buckets[key]
        while len(self._buckets) > self._max_keys:
            self._buckets.popitem(last=False)


def client_key(host: str | None) -> str:
    """The throttle key of a client address: IPv6 by its /64 (one site's), else as given."""
    if not host:
        return "client:unknown"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return f"client:{host}"
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is None:
        return f"client:{ipaddress.IPv6Network(f'{address}/64', strict=False)}"
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return f"client:{mapped or address}"
