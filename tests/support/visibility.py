"""The tab hidden or shown again, as the browser tells a page."""

from __future__ import annotations

from playwright.sync_api import Page

SET_VISIBILITY = """state => {
  const property = (name, value) =>
    Object.defineProperty(document, name, { configurable: true, get: () => value });
  property("visibilityState", state);
  property("hidden", state === "hidden");
  document.dispatchEvent(new Event("visibilitychange"));
}"""


def set_visibility(page: Page, state: str) -> None:
    """What the browser does when the tab is hidden or shown again."""
    page.evaluate(SET_VISIBILITY, state)
