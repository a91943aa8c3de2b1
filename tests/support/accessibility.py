"""Accessibility checks of a browser page: axe-core's WCAG 2.1 A and AA rules and its best
practices (landmarks, heading order, one main), over the page as it is shown now; and checks
axe does not make, in accessibility.js: of WCAG 1.4.11 (non-text contrast), the edge of every
text field, select and text area (``control-border``) and the focus ring of every control Tab
reaches (``focus-ring``, which also fails a control that shows none), each 3:1 against what is
around it; of WCAG 3.3.2 and 2.5.3, a label on the screen for each of those fields, whose words
its accessible name says (``visible-label``).

axe-core comes bundled in the ``axe-playwright-python`` wheel (MPL-2.0, from PyPI): its
source stays out of this tree. The scripts go into each document once; a scan covers the
whole document, an open ``<dialog>`` included.

``Scans`` keeps what every check of a test found, by the view it was made in, so one run
reports every violation of a page and fails at its end. The light theme is checked with
every rule, the dark one (``prefers-color-scheme``) where asked, for colours only; where
asked, the same page again at a phone's width (PHONE), with every rule: its layout is
another (the panels stacked, lines wrapped), loaded once.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from axe_playwright_python.base import AXE_SCRIPT
from playwright.sync_api import Page, ViewportSize

BEYOND_AXE = (Path(__file__).parent / "accessibility.js").read_text(encoding="utf-8")
WCAG_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"]
EVERY_RULE: dict[str, Any] = {
    "runOnly": {"type": "tag", "values": WCAG_TAGS},
    "resultTypes": ["violations"],
}
CONTRAST_ONLY: dict[str, Any] = {
    "runOnly": {"type": "rule", "values": ["color-contrast"]},
    "resultTypes": ["violations"],
}
RUN_AXE = """async (options) => {
  const results = await window.axe.run(document, options);
  return results.violations.map((violation) => ({
    rule: violation.id,
    impact: violation.impact ?? "",
    nodes: violation.nodes.map((node) => node.target.join(" ")),
  }));
}"""
SHOWN_NODES = 6
PHONE: ViewportSize = {"width": 390, "height": 844}


@dataclass(frozen=True)
class Violation:
    rule: str
    impact: str
    view: str
    nodes: tuple[str, ...]

    def line(self) -> str:
        shown = "; ".join(self.nodes[:SHOWN_NODES])
        more = f" and {len(self.nodes) - SHOWN_NODES} more" if len(self.nodes) > SHOWN_NODES else ""
        return f"{self.rule} ({self.impact}), {len(self.nodes)} in {self.view}: {shown}{more}"


@contextmanager
def dark_theme(page: Page) -> Iterator[None]:
    page.emulate_media(color_scheme="dark")
    try:
        yield
    finally:
        page.emulate_media(color_scheme="light")


@contextmanager
def phone_width(page: Page) -> Iterator[None]:
    """The page laid out again at the phone's width, then at its own again."""
    own = page.viewport_size
    page.set_viewport_size(PHONE)
    try:
        yield
    finally:
        if own is not None:
            page.set_viewport_size(own)


def _scripts_in(page: Page) -> None:
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(AXE_SCRIPT)
    if not page.evaluate("() => typeof window.beyondAxe === 'object'"):
        page.evaluate(BEYOND_AXE)


def scan(page: Page, view: str, *, colours_only: bool = False) -> list[Violation]:
    """axe's violations in the page as it is now, the fields whose edges do not show and,
    unless ``colours_only``, those without a label shown."""
    _scripts_in(page)
    found: list[dict[str, Any]] = page.evaluate(
        RUN_AXE, CONTRAST_ONLY if colours_only else EVERY_RULE
    )
    violations = [
        Violation(item["rule"], item["impact"], view, tuple(item["nodes"])) for item in found
    ]
    borders: list[str] = page.evaluate("() => window.beyondAxe.controlBorders()")
    if borders:
        violations.append(Violation("control-border", "serious", view, tuple(borders)))
    if not colours_only:
        unlabelled: list[str] = page.evaluate("() => window.beyondAxe.visibleLabels()")
        if unlabelled:
            violations.append(Violation("visible-label", "serious", view, tuple(unlabelled)))
    return violations


def focus_rings(page: Page, view: str, *, most: int = 200) -> list[Violation]:
    """Tab from the top of the page through every control it reaches, once round: each
    shows a ring of 3:1 (WCAG 2.4.7 and 1.4.11)."""
    _scripts_in(page)
    page.evaluate("() => window.beyondAxe.startAtTheTop()")
    problems: list[str] = []
    for _ in range(most):
        page.keyboard.press("Tab")
        found: dict[str, Any] = page.evaluate("() => window.beyondAxe.focusRing()")
        if found["again"]:
            break
        if found["problem"]:
            problems.append(found["problem"])
    page.evaluate("() => window.beyondAxe.done()")
    return [Violation("focus-ring", "serious", view, tuple(problems))] if problems else []


@dataclass
class Scans:
    """Every violation a test's checks found; ``check`` fails listing all of them."""

    found: list[Violation] = field(default_factory=list)
    views: list[str] = field(default_factory=list)

    def __call__(self, page: Page, view: str, *, dark: bool = True, phone: bool = False) -> None:
        """axe and the fields' edges and labels in ``view`` (and the colours of its dark
        theme; and, with ``phone``, all of it again at a phone's width)."""
        self.views.append(view)
        self.found.extend(scan(page, view))
        if dark:
            with dark_theme(page):
                self.found.extend(scan(page, f"{view} (dark)", colours_only=True))
        if phone:
            self.views.append(f"{view} ({PHONE['width']} px wide)")
            with phone_width(page):
                self.found.extend(scan(page, self.views[-1]))

    def focus(self, page: Page, view: str, *, dark: bool = False) -> None:
        """The focus ring of every control Tab reaches in ``view`` (and in its dark theme)."""
        self.found.extend(focus_rings(page, view))
        if dark:
            with dark_theme(page):
                self.found.extend(focus_rings(page, f"{view} (dark)"))

    def report(self) -> str:
        return "\n".join(violation.line() for violation in self.found)

    def check(self) -> None:
        assert not self.found, (
            f"{len(self.found)} violations in {len(self.views)} views:\n{self.report()}"
        )
