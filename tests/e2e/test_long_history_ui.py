"""A user with a long history on /operations: past the newest 100, "Show older" pages on
by the API's page token to the very oldest, each operation once, while new ones arrive;
and the looks that keep the list fresh read only its head."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.test_many_tabs_ui import scrolled_to
from tests.support.gateway import LiveGateway, create_operation
from tests.support.grpc_services import Services
from tests.support.history import seed_history, seed_notifications
from tests.support.signin import dev_sign_in
from tests.support.workspace_client import create_job, entitle

pytestmark = pytest.mark.browser
HISTORY = 230  # past the newest 100: one page of 100 older, then the last 30


def shown_ids(page: Page) -> list[str]:
    ids: list[str] = page.locator("li.op").evaluate_all("cards => cards.map(c => c.dataset.id)")
    return ids


def shown_to_the_newest_hundred(page: Page) -> None:
    """Press "Show more" until the newest 100 show: the page shows 20 more each time."""
    cards = page.locator("li.op")
    for shown in (40, 60, 80, 100):
        page.get_by_role("button", name="Show more").click()
        expect(cards).to_have_count(shown)


def test_show_older_pages_to_the_oldest_once_each_while_new_ones_arrive(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """The list stopped at the newest 100: a year of history could not be reached."""
    job = create_job(ui_services.workspace, "ada", title="Platform engineer")
    newest = datetime.now(UTC) - timedelta(hours=1)
    history = seed_history(ui_services.db, "ada", HISTORY, newest, subject=("job", job))
    reads: list[dict[str, list[str]]] = []
    page.on(
        "request",
        lambda request: (
            reads.append(parse_qs(urlsplit(request.url).query))
            if urlsplit(request.url).path == "/api/operations"
            else None
        ),
    )
    dev_sign_in(page, ui_gateway.url, "ada")
    cards = page.locator("li.op")
    shown_to_the_newest_hundred(page)

    older = page.get_by_role("button", name="Show older")
    older.focus()
    page.keyboard.press("Enter")
    expect(cards).to_have_count(200)
    assert shown_ids(page) == history[:200]
    # As after "Show more": focus on the first card it brought.
    expect(cards.nth(100).locator(".op__title")).to_be_focused()

    # New ones arrive while the user pages: the list's head takes them, and what they push
    # past its end stays shown, once.
    arrived = [create_operation(ui_services, "ada", subject=("job", job)).id for _ in range(3)]
    expect(cards.first).to_have_attribute("data-id", arrived[-1])
    expect(cards).to_have_count(203)
    older.focus()
    page.keyboard.press("Enter")
    expect(cards).to_have_count(HISTORY + 3)
    assert shown_ids(page) == [*reversed(arrived), *history]
    expect(older).to_be_hidden()  # nothing older: the oldest is shown
    expect(cards.nth(203).locator(".op__title")).to_be_focused()

    # Each look read one page, of at most 100, and "Show older" alone asked past it, once
    # for each press.
    assert all(int(query["page_size"][0]) <= 100 for query in reads), reads
    assert [query["page_token"] != [] for query in reads if "page_token" in query] == [
        True,
        True,
    ]


def test_a_change_to_an_older_operation_shows_on_its_card(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """The looks do not read the older pages again: a retry there must still show."""
    entitle(ui_services.db, "ada")  # a retry is admitted again: the Pro plan
    job = create_job(ui_services.workspace, "ada", title="Platform engineer")
    newest = datetime.now(UTC) - timedelta(hours=1)
    history = seed_history(ui_services.db, "ada", 120, newest, subject=("job", job))
    looks: list[str] = []
    page.on(
        "requestfinished",
        lambda request: (
            looks.append(request.url) if urlsplit(request.url).path == "/api/operations" else None
        ),
    )
    dev_sign_in(page, ui_gateway.url, "ada")
    cards = page.locator("li.op")
    shown_to_the_newest_hundred(page)
    page.get_by_role("button", name="Show older").click()
    expect(cards).to_have_count(120)

    failed = history[100]  # the states go in turn: succeeded, failed, cancelled
    retried = page.locator(f'li.op[data-id="{failed}"]')
    expect(retried.locator(".state")).to_have_text("Failed")
    looked = len(looks)
    retried.get_by_role("button", name="Retry").click()
    expect(retried.locator(".state")).to_have_text("Queued")
    for _ in range(100):  # the look the retry asks for, once it is shown
        if len(looks) > looked:
            break
        page.wait_for_timeout(50)
    assert len(looks) > looked
    expect(retried.locator(".state")).to_have_text("Queued")
    expect(cards).to_have_count(120)


def test_back_and_reload_keep_the_older_ones_shown_and_the_scroll(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """Come back from a result (or reloaded), the list showed its newest 100 from the top:
    a user a year deep paged down again from there."""
    job = create_job(ui_services.workspace, "ada", title="Platform engineer")
    history = seed_history(ui_services.db, "ada", 260, datetime.now(UTC), subject=("job", job))
    dev_sign_in(page, ui_gateway.url, "ada")
    cards = page.locator("li.op")
    shown_to_the_newest_hundred(page)
    older = page.get_by_role("button", name="Show older")
    for shown in (200, 260):
        older.click()
        expect(cards).to_have_count(shown)
    cards.nth(230).scroll_into_view_if_needed()
    scrolled = page.evaluate("window.scrollY")

    page.goto(ui_gateway.url + "/jobs")
    page.go_back()
    expect(cards).to_have_count(260)
    scrolled_to(page, scrolled)
    page.reload()
    expect(cards).to_have_count(260)
    scrolled_to(page, scrolled)
    assert shown_ids(page) == history


def test_older_notifications_are_shown_and_read_all_is_offered_for_them(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """The list read its newest 50 alone, and offered "Mark all read" only for an unread one
    among them: with the newest 55 read, the bell said 5 unread and nothing reached them."""
    newest = datetime.now(UTC) - timedelta(minutes=5)
    seed_notifications(ui_services.db, "ada", 60, newest, read=55)
    dev_sign_in(page, ui_gateway.url, "ada")
    notes = page.locator("li.note")
    expect(notes).to_have_count(50)
    expect(page.locator(".note--unread")).to_have_count(0)
    read_all = page.get_by_role("button", name="Mark all read")
    expect(read_all).to_be_visible()

    page.get_by_role("button", name="Show older notifications").click()
    expect(notes).to_have_count(60)
    expect(page.locator(".note--unread")).to_have_count(5)
    expect(notes.nth(50).get_by_role("button").first).to_be_focused()
    expect(page.get_by_role("button", name="Show older notifications")).to_be_hidden()

    read_all.click()
    expect(page.get_by_role("status").filter(has_text="marked as read")).to_have_text(
        "5 notifications marked as read."
    )
    expect(page.locator(".note--unread")).to_have_count(0)
    expect(notes).to_have_count(60)  # the older ones stay listed
    expect(read_all).to_be_hidden()
