"""Browser-side faults of the gateway's long-poll and event stream, for the pages' fallback
to polling."""

from __future__ import annotations

from playwright.sync_api import Page


def refuse_long_polls(page: Page) -> None:
    """The gateway's long-poll and event stream answer 503 from now on, as during an outage."""
    for pattern in ("**/api/operations/*:wait*", "**/api/events"):
        page.route(
            pattern,
            lambda route: route.fulfill(
                status=503, content_type="application/problem+json", body="{}"
            ),
        )
