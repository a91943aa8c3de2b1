"""Browser-side faults of the gateway's long-poll and event stream, for the pages' fallback
to polling, and a wait for such a page to fall quiet."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from playwright.sync_api import Page, Request


def refuse_long_polls(page: Page) -> None:
    """The gateway's long-poll and event stream answer 503 from now on, as during an outage."""
    for pattern in ("**/api/operations/*:wait*", "**/api/events*"):
        page.route(
            pattern,
            lambda route: route.fulfill(
                status=503, content_type="application/problem+json", body="{}"
            ),
        )


class RequestsInFlight:
    """The page's requests under way, counted from construction (so before the page sends
    any): with the page's clock paused and its stream refused, a page that sent nothing for
    a while sends nothing more until the test acts. A failed long-poll makes the page read
    at once, and that read's answer may start another, so "nothing in flight" alone is not
    quiet: it must last."""

    def __init__(self, page: Page) -> None:
        self._page = page
        self._open: set[Request] = set()
        self._changed = time.monotonic()
        page.on("request", self._sent)
        page.on("requestfinished", self._ended)
        page.on("requestfailed", self._ended)

    def _sent(self, request: Request) -> None:
        self._open.add(request)
        self._changed = time.monotonic()

    def _ended(self, request: Request) -> None:
        self._open.discard(request)
        self._changed = time.monotonic()

    def wait_quiet(self, quiet_ms: int = 750, timeout_ms: int = 15_000) -> None:
        """Returns once nothing was in flight or sent for ``quiet_ms``."""
        deadline = time.monotonic() + timeout_ms / 1000
        while time.monotonic() < deadline:
            self._page.wait_for_timeout(50)  # lets Playwright deliver the page's events
            if not self._open and time.monotonic() - self._changed >= quiet_ms / 1000:
                return
        raise AssertionError(f"the page kept sending for {timeout_ms} ms: {self._open}")


def looks_once_a_step(
    page: Page, seen: list[Request], step_ms: int, *, steps: int = 3, timeout_ms: int = 5000
) -> None:
    """With the page's clock installed: from a quiet page, each ``step_ms`` of the page's
    time brings one more request into ``seen``. The page's time moves only as this moves
    it, so a pace is checked without measuring gaps, which a loaded machine stretches."""
    in_flight = RequestsInFlight(page)
    page.clock.pause_at(datetime.now() + timedelta(seconds=1))
    in_flight.wait_quiet()
    for _ in range(steps):
        looked = len(seen)
        page.clock.run_for(step_ms)
        deadline = time.monotonic() + timeout_ms / 1000
        while len(seen) <= looked and time.monotonic() < deadline:
            page.wait_for_timeout(50)
        assert len(seen) > looked, f"no request in {step_ms} ms of the page's time"
        in_flight.wait_quiet()
