"""Browser fixtures: Debian's Chromium driven by Playwright's Python package.

No ``playwright install``: the browser is ``/usr/lib/chromium/chromium`` (or
``/usr/bin/chromium``) from ``apt-get install chromium``. Without it the tests
skip, unless ``OPS_REQUIRE_BROWSER=1`` makes that a failure. Each test gets
fresh gRPC services on SQLite and a gateway served by uvicorn on 127.0.0.1.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Page,
    Request,
    expect,
    sync_playwright,
)

from durable_ops.clock import utc_now
from tests.conftest import MigratedSqlite
from tests.support.gateway import LiveGateway, make_app
from tests.support.grpc_services import Services, running_services

CHROMIUM_CANDIDATES = ("/usr/lib/chromium/chromium", "/usr/bin/chromium")
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
DESKTOP = {"width": 1280, "height": 860}

expect.set_options(timeout=10_000)


def chromium_path() -> str | None:
    for candidate in CHROMIUM_CANDIDATES:
        if Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("chromium")
    return found


# Module scope, not session: sync Playwright keeps an event loop running in the
# main thread while it is open, and asyncio.run() in any later test would fail.
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    path = chromium_path()
    if path is None:
        message = (
            "Chromium not found at /usr/lib/chromium/chromium or /usr/bin/chromium: "
            "`apt-get install -y chromium` (OPS_REQUIRE_BROWSER=1 turns this skip into a failure)"
        )
        if os.environ.get("OPS_REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=path, args=LAUNCH_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def ui_services(tmp_path: Path, migrated_sqlite: MigratedSqlite) -> Iterator[Services]:
    with running_services(migrated_sqlite(tmp_path / "e2e.sqlite3"), utc_now) as running:
        yield running


ServeGateway = Callable[..., LiveGateway]


@pytest.fixture
def serve_ui(ui_services: Services) -> Iterator[ServeGateway]:
    """Start a gateway (dev login on, other settings overridable); all stop when the test ends."""
    started: list[LiveGateway] = []

    def start(**overrides: Any) -> LiveGateway:
        gateway = LiveGateway(make_app(ui_services.target, **{"dev_login": True, **overrides}))
        started.append(gateway.__enter__())
        return gateway

    yield start
    for gateway in reversed(started):
        gateway.__exit__(None, None, None)


@pytest.fixture
def ui_gateway(serve_ui: ServeGateway) -> LiveGateway:
    return serve_ui()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    made = browser.new_context(viewport=DESKTOP)  # type: ignore[arg-type]
    yield made
    made.close()


# Chromium fails the requests in flight when the host's interfaces change (a veth or
# bridge of a network-namespace test, a container's start, in the other test process):
# ERR_NETWORK_CHANGED, the product's part in it none. A browser test that failed after
# its page saw that runs once more (pytest-rerunfailures; it evaluates the condition
# after the failure, with ``config`` in scope); any other failure fails.
NETWORK_CHANGED = "net::ERR_NETWORK_CHANGED"
_SAW_NETWORK_CHANGE = "e2e_page_saw_network_change"
RERUN_WHEN = f"vars(config).get({_SAW_NETWORK_CHANGE!r}, False)"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "page" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.flaky(reruns=1, condition=RERUN_WHEN))


@pytest.fixture
def page(context: BrowserContext, request: pytest.FixtureRequest) -> Iterator[Page]:
    """A tab that fails the test on any uncaught script error. Errors the page logs (a page
    module that failed to load is one) are printed, so a failed test shows them."""
    seen = vars(request.config)
    seen[_SAW_NETWORK_CHANGE] = False
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    opened.on("console", lambda message: _print_error(message))
    opened.on("requestfailed", lambda failed: _note_network_change(seen, failed))
    yield opened
    assert errors == [], f"uncaught errors in the page: {errors}"


def _note_network_change(seen: dict[str, Any], failed: Request) -> None:
    if NETWORK_CHANGED in (failed.failure or ""):
        print(f"the host network changed under {failed.url}: this test may run again")
        seen[_SAW_NETWORK_CHANGE] = True


def _print_error(message: ConsoleMessage) -> None:
    if message.type == "error":
        print(f"page console error: {message.text}")


@pytest.fixture
def screenshot() -> Callable[[Page, str], Path]:
    """Save a full-page PNG to test-artifacts/screenshots/<name>.png."""

    def take(page: Page, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take
