"""The web UI as a heavy user keeps it: the same user in several tabs at once, hidden and
shown again, marking notifications while the tab's event stream is open."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest
from playwright.sync_api import BrowserContext, Page, Request, Response, Route, expect

from durable_ops.clock import utc_now
from durable_ops.storage import budgets
from tests.e2e.conftest import ServeGateway
from tests.support.gateway import LiveGateway, claim, complete, create_operation
from tests.support.grpc_services import Services
from tests.support.long_polls import RequestsInFlight
from tests.support.signin import dev_sign_in
from tests.support.visibility import SET_VISIBILITY, set_visibility
from tests.support.workspace_client import create_job, entitle

pytestmark = pytest.mark.browser

# bell.js: how soon a forced look at the unread count that failed is asked again.
BELL_RETRY_MS = 5000
# Chromium's connections per server over HTTP/1.1: each open event stream holds one.
CONNECTIONS_PER_SERVER = 6
# live.js: how long a tab stays hidden before it closes its event stream.
PARK_AFTER_MS = 20000
# operations/app.py: how far before its start a new stream's first read looks (WATCH_OVERLAP).
WATCH_OVERLAP_MS = 2000


def streams_answered(page: Page) -> list[Response]:
    """The page's event streams that answered (so stand open), in order."""
    seen: list[Response] = []
    page.on("response", lambda r: seen.append(r) if "/api/events" in r.url else None)
    return seen


def wait_for(page: Page, seen: list[Response], count: int) -> None:
    for _ in range(200):
        if len(seen) >= count:
            return
        page.wait_for_timeout(50)
    raise AssertionError(f"{len(seen)} event streams answered, expected {count}")


def streams_asked(context: BrowserContext) -> list[Request]:
    """Every event stream the browser asks the server for, whichever tab asks."""
    asked: list[Request] = []
    context.on("request", lambda r: asked.append(r) if "/api/events" in r.url else None)
    return asked


def long_polls_asked(context: BrowserContext) -> list[Request]:
    """Every long-poll (`…:wait`) the browser sends: what a tab follows a live operation
    with when it hears no stream."""
    asked: list[Request] = []
    context.on("request", lambda r: asked.append(r) if ":wait" in r.url else None)
    return asked


# live.js's own word on whether the tab hears a stream: its own, or the one another tab of
# the browser holds and passes on.
LIVE_OPEN = "async () => (await import('/static/live.js')).liveOpen()"


def wait_live(tab: Page) -> None:
    for _ in range(200):
        if tab.evaluate(LIVE_OPEN):
            return
        tab.wait_for_timeout(50)
    raise AssertionError("the tab hears no event stream")


def wait_count(tab: Page, seen: list[Request], count: int) -> None:
    for _ in range(200):
        if len(seen) >= count:
            return
        tab.wait_for_timeout(50)
    raise AssertionError(f"{len(seen)} event streams asked for, expected {count}")


def open_operations(context: BrowserContext, gateway: LiveGateway) -> tuple[Page, list[Response]]:
    """One more tab of the operations page, once its list is shown and it hears the stream
    (its own, or another tab's passed on); its clock is the page's (so `hide` can park it)."""
    tab = context.new_page()
    tab.clock.install()
    streams = streams_answered(tab)
    tab.goto(gateway.url + "/operations")
    expect(tab.locator("section.panel--operations")).to_have_attribute("aria-busy", "false")
    wait_live(tab)
    return tab, streams


def open_windows(page: Page, context: BrowserContext, gateway: LiveGateway) -> list[Page]:
    """Ada signed in, and more shown tabs of the operations page than the browser keeps
    connections to the server (windows side by side: no tab hides another)."""
    page.clock.install()
    dev_sign_in(page, gateway.url, "ada")
    expect(page.locator("section.panel--operations")).to_have_attribute("aria-busy", "false")
    wait_live(page)
    return [page] + [open_operations(context, gateway)[0] for _ in range(CONNECTIONS_PER_SERVER)]


def pause_clocks(page: Page) -> None:
    """The tabs' clock stops: no poll runs, and what a tab shows next came by the stream."""
    page.clock.pause_at(datetime.now() + timedelta(seconds=1))


def one_run_ends(services: Services, owner: str = "ada") -> None:
    job = create_job(services.workspace, owner, title="Platform engineer")
    create_operation(services, owner, subject=("job", job))
    complete(services, claim(services, ["strategy.snapshot"]))


def hide(tab: Page) -> None:
    """The tab hidden long enough to close its event stream."""
    set_visibility(tab, "hidden")
    tab.clock.fast_forward(PARK_AFTER_MS)


def test_hidden_tabs_hold_no_stream_so_a_tab_more_than_six_still_loads(
    page: Page, context: BrowserContext, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """A window of many tabs shows one: the others' streams held every connection the
    browser keeps to the server, and the sixth tab never loaded. A tab shown again opens
    its stream anew and shows what changed while it was hidden; a glance away and back
    keeps it."""
    page.clock.install()
    streams = [streams_answered(page)]
    dev_sign_in(page, ui_gateway.url, "ada")
    expect(page.locator("section.panel--operations")).to_have_attribute("aria-busy", "false")
    wait_for(page, streams[0], 1)
    tabs = [page]
    for _ in range(CONNECTIONS_PER_SERVER - 2):
        tab, opened = open_operations(context, ui_gateway)
        tabs.append(tab)
        streams.append(opened)
    set_visibility(page, "hidden")
    page.clock.fast_forward(PARK_AFTER_MS - 1000)
    set_visibility(page, "visible")
    page.wait_for_timeout(300)
    assert len(streams[0]) == 1, "a glance away reopened the stream"
    for tab in tabs:  # another tab of the window is chosen: these are hidden
        hide(tab)

    more = [open_operations(context, ui_gateway)[0] for _ in range(3)]
    for tab in more:
        expect(tab.get_by_text("No operations yet.")).to_be_visible()

    # Hidden, the first tab heard nothing of an operation that ran meanwhile.
    job = create_job(ui_services.workspace, "ada", title="Platform engineer")
    create_operation(ui_services, "ada", subject=("job", job))
    complete(ui_services, claim(ui_services, ["strategy.snapshot"]))
    for tab in more:
        expect(tab.locator("li.op")).to_have_count(1)
        tab.close()
    first = tabs[0]
    expect(first.locator("li.op")).to_have_count(0)
    answered = len(streams[0])
    set_visibility(first, "visible")
    expect(first.locator("li.op")).to_have_count(1)
    expect(first.locator("#bell")).to_have_accessible_name("Notifications, 1 unread")
    wait_for(first, streams[0], answered + 1)  # its stream open again


def test_many_shown_windows_share_one_stream_and_each_shows_a_change(
    page: Page, context: BrowserContext, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """Windows side by side, each shown: each tab held an event stream of its own, and with
    six open the seventh never loaded its page. One tab holds the browser's stream and passes
    on what it hears; each tab shows an operation that ends as it ends, none polling for it
    nor following it with a long-poll."""
    streams = streams_asked(context)
    long_polls = long_polls_asked(context)
    tabs = open_windows(page, context, ui_gateway)
    assert len(tabs) > CONNECTIONS_PER_SERVER
    pause_clocks(page)

    one_run_ends(ui_services)
    for tab in tabs:
        expect(tab.locator("li.op .state")).to_have_text("Succeeded")
        expect(tab.locator("#bell")).to_have_accessible_name("Notifications, 1 unread")
        assert tab.evaluate(LIVE_OPEN)
    assert len(streams) == 1
    assert long_polls == []


def test_closing_the_tab_that_holds_the_stream_hands_it_to_another(
    page: Page, context: BrowserContext, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """The tab holding the browser's one stream is closed: another shown tab opens its own
    and passes it on. What ended while no stream was open shows in every tab as the new one
    opens (it tells only what changes from then on), and what changes after it shows too."""
    streams = streams_asked(context)
    page.clock.install()
    dev_sign_in(page, ui_gateway.url, "ada")
    wait_live(page)
    tabs = [open_operations(context, ui_gateway)[0] for _ in range(3)]
    assert len(streams) == 1
    pause_clocks(page)
    held: list[Route] = []
    context.route("**/api/events*", lambda route: held.append(route))

    page.close()
    wait_count(tabs[0], streams, 2)
    one_run_ends(ui_services)  # while the new stream is on its way
    tabs[0].wait_for_timeout(WATCH_OVERLAP_MS + 500)  # too long ago for the new stream to tell
    for route in held:
        route.continue_()
    for tab in tabs:
        expect(tab.locator("li.op .state")).to_have_text("Succeeded")
        expect(tab.locator("#bell")).to_have_accessible_name("Notifications, 1 unread")
        wait_live(tab)

    one_run_ends(ui_services)
    for tab in tabs:
        expect(tab.locator("li.op .state")).to_have_text(["Succeeded", "Succeeded"])
        expect(tab.locator("#bell")).to_have_accessible_name("Notifications, 2 unread")
    assert len(streams) == 2


def test_a_sign_out_in_the_tab_holding_the_stream_reaches_every_other_tab(
    page: Page, context: BrowserContext, ui_gateway: LiveGateway
) -> None:
    """The tab that holds the browser's stream signs out, closing the stream as it begins: the
    stream tells no tab `signed_out`, yet every tab hears of it. A tab holding typed text keeps
    it and says the session ended; the others go to the sign-in page."""
    tabs = open_windows(page, context, ui_gateway)
    typing = tabs[-1]
    typing.goto(ui_gateway.url + "/jobs")
    form = typing.get_by_role("form", name="Add a job posting")
    form.get_by_label("Title").fill("Typed, not sent")
    wait_live(typing)
    pause_clocks(page)

    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(ui_gateway.url + "/")
    expect(typing.get_by_role("alert").filter(has_text="Your session ended")).to_be_visible()
    expect(form.get_by_label("Title")).to_have_value("Typed, not sent")
    for tab in tabs[1:-1]:
        tab.wait_for_url(re.compile(r"/\?expired=1"))


def test_tabs_for_another_user_share_a_stream_of_their_own(
    page: Page, context: BrowserContext, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """The browser signed in as bob while a tab rendered for ada stays open, its stream
    opened as ada: bob's tabs neither follow it (they would hear ada's changes, and none of
    bob's) nor pass theirs on to it."""
    page.clock.install()
    dev_sign_in(page, ui_gateway.url, "ada")
    wait_live(page)
    bell = page.locator("#bell")
    expect(bell).to_have_accessible_name("Notifications, none unread")
    # Its lists read before bob's sign-in clears the cookies (a read then is a 401).
    expect(page.locator("[aria-busy='true']")).to_have_count(0)
    bobs = context.new_page()
    dev_sign_in(bobs, ui_gateway.url, "bob")
    another, _ = open_operations(context, ui_gateway)
    wait_live(bobs)
    pause_clocks(page)

    one_run_ends(ui_services, "bob")
    for tab in (bobs, another):
        expect(tab.locator("li.op .state")).to_have_text("Succeeded")
        expect(tab.locator("#bell")).to_have_accessible_name("Notifications, 1 unread")
    # Ada's tab heard none of it. Its clock ran until bob's tabs were open: a read it made
    # meanwhile went with bob's cookie, and the tab has left for the sign-in page (the
    # browser is bob's now), which is as right.
    quiet = page.locator("#bell[aria-label='Notifications, none unread']")
    expect(quiet.or_(page.get_by_role("heading", name="Sign in to durable-ops"))).to_be_visible()


def test_without_web_locks_each_tab_holds_its_own_stream(
    page: Page, context: BrowserContext, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """A browser without the Web Locks API (or a page that is no secure context: plain HTTP
    to another host) shares no stream: each tab holds its own and shows changes by it."""
    context.add_init_script("Object.defineProperty(navigator, 'locks', { value: undefined })")
    streams = streams_asked(context)
    page.clock.install()
    dev_sign_in(page, ui_gateway.url, "ada")
    wait_live(page)
    tabs = [page] + [open_operations(context, ui_gateway)[0] for _ in range(2)]
    wait_count(page, streams, len(tabs))
    pause_clocks(page)

    one_run_ends(ui_services)
    for tab in tabs:
        expect(tab.locator("li.op .state")).to_have_text("Succeeded")
        expect(tab.locator("#bell")).to_have_accessible_name("Notifications, 1 unread")
    assert len(streams) == len(tabs)


def test_a_forced_bell_look_that_failed_is_asked_again_with_the_stream_open(
    page: Page, serve_ui: ServeGateway, ui_services: Services
) -> None:
    """The tab marks a notification read through another gateway replica (whose marks this
    gateway's stream hears only at its 30-s refresh); the bell's own look that follows
    fails. It is asked again, not dropped because the stream is open."""
    here = serve_ui()
    there = serve_ui()
    for title in ("Platform engineer", "Site reliability engineer"):
        job = create_job(ui_services.workspace, "ada", title=title)
        create_operation(ui_services, "ada", subject=("job", job))
        complete(ui_services, claim(ui_services, ["strategy.snapshot"]))
    streams = streams_answered(page)
    page.clock.install()
    dev_sign_in(page, here.url, "ada")
    bell = page.locator("#bell")
    expect(bell).to_have_accessible_name("Notifications, 2 unread")
    wait_for(page, streams, 1)

    def through_the_other_replica(route: Route) -> None:
        # Behind one address the replicas share an origin; here each has its own port.
        headers = {**route.request.headers, "origin": there.url}
        url = route.request.url.replace(here.url, there.url)
        route.fulfill(response=route.fetch(url=url, headers=headers))

    page.route(re.compile(r"/api/notifications/[^/]+/read$"), through_the_other_replica)
    failed: list[str] = []

    def fail_once(route: Route) -> None:
        if failed:
            route.continue_()
        else:
            failed.append(route.request.url)
            route.abort("connectionreset")

    page.route("**/api/notifications/unread-count", fail_once)
    in_flight = RequestsInFlight(page)
    page.locator(".note").first.get_by_role("button", name=re.compile("^Mark read")).click()
    expect(page.locator(".note--unread")).to_have_count(1)  # the list read it again
    in_flight.wait_quiet()
    assert failed, "the bell did not look after its page's change"
    expect(bell).to_have_accessible_name("Notifications, 2 unread")  # its look failed
    page.clock.run_for(BELL_RETRY_MS)
    expect(bell).to_have_accessible_name("Notifications, 1 unread")


def sign_in_here(tab: Page, user: str) -> None:
    """The sign-in form of a tab that signed out: no cookie to clear, no session left behind."""
    tab.get_by_label("User id").fill(user)
    tab.get_by_role("button", name="Sign in as this user").click()
    tab.wait_for_url(re.compile(r"/operations$"))


def test_a_tab_left_behind_by_a_sign_out_shows_nothing_of_the_user_but_typed_text(
    page: Page, context: BrowserContext, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """A tab kept for the text typed in it, and a tab hidden while the browser signed out and
    in as someone else, showed the first user's jobs, operations and notifications to the
    next one. The tab of typed text shows the notice and the forms (the typed text kept),
    nothing else, until the first user signs in again; the hidden tabs, parked or opened in
    the background, hear the sign-out and leave for the sign-in page before anyone shows
    them (they showed her page for a round trip once shown)."""
    job = create_job(ui_services.workspace, "ada", title="Secret posting")
    create_operation(ui_services, "ada", subject=("job", job))
    complete(ui_services, claim(ui_services, ["strategy.snapshot"]))
    dev_sign_in(page, ui_gateway.url, "ada")
    typing = page
    typing.goto(ui_gateway.url + "/jobs")
    expect(typing.get_by_text("Secret posting").first).to_be_visible()
    form = typing.get_by_role("form", name="Add a job posting")
    form.get_by_label("Title").fill("Typed, not sent")
    hidden, _ = open_operations(context, ui_gateway)
    expect(hidden.locator("li.op")).to_have_count(1)
    hide(hidden)
    background = context.new_page()
    background.add_init_script(f"({SET_VISIBILITY})('hidden')")
    background.goto(ui_gateway.url + "/operations")  # it reads its list when first shown
    expect(background.locator("header .user")).to_have_text("ada")

    other = context.new_page()
    other.goto(ui_gateway.url + "/operations")
    other.get_by_role("button", name="Sign out").click()
    other.wait_for_url(ui_gateway.url + "/")
    ended = typing.get_by_role("alert").filter(has_text="Your session ended")
    expect(ended).to_be_visible()
    expect(form.get_by_label("Title")).to_have_value("Typed, not sent")
    expect(form).to_be_visible()
    for shown in (
        typing.get_by_text("Secret posting"),
        typing.locator("#bell"),
        typing.locator("header .user"),
    ):
        expect(shown.first).to_be_hidden()

    for left in (hidden, background):
        left.wait_for_url(re.compile(r"/\?expired=1&next=%2Foperations$"))
        expect(left.locator("li.op")).to_have_count(0)

    sign_in_here(other, "bob")
    typing.evaluate("window.dispatchEvent(new Event('focus'))")  # back to this tab
    another = typing.get_by_role("alert").filter(has_text="now signed in as another user")
    expect(another).to_be_visible()
    expect(form.get_by_label("Title")).to_have_value("Typed, not sent")
    for shown in (typing.get_by_text("Secret posting"), typing.locator("#bell")):
        expect(shown.first).to_be_hidden()

    # Ada again: the tab she typed in shows her page again once she is back on it.
    other.get_by_role("button", name="Sign out").click()
    other.wait_for_url(ui_gateway.url + "/")
    sign_in_here(other, "ada")
    typing.evaluate("window.dispatchEvent(new Event('focus'))")  # back to this tab
    expect(ended).to_have_count(0)
    expect(typing.get_by_text("Secret posting").first).to_be_visible()
    expect(typing.locator("#bell")).to_be_visible()


def test_an_analysis_started_in_another_tab_moves_this_tabs_token_line(
    page: Page, context: BrowserContext, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """The token line read again only when this tab started or saw an end: another tab's
    start showed here as "0 of 100,000 used" while it held its reservation."""
    entitle(ui_services.db, "ada")
    create_job(ui_services.workspace, "ada", title="Platform engineer")
    dev_sign_in(page, ui_gateway.url, "ada", then="/jobs")
    budget = page.locator("#ai-budget")
    expect(budget).to_have_text(re.compile(r"^0 of 100,000 tokens used today"))
    other = context.new_page()
    other.goto(ui_gateway.url + "/jobs")
    other.get_by_role("button", name="Start strategy snapshot").click()
    expect(other.locator(".analysis .state")).to_have_text("Queued")

    expect(page.locator(".analysis .state")).to_have_text("Queued")  # the stream told it
    expect(budget).to_have_text(re.compile(r"^0 used and [1-9][\d,]* reserved of 100,000 tokens"))


def test_a_user_of_hundreds_of_operations_is_offered_the_older_ones_past_100(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """ "Show more" went at the hundredth operation with nothing said: the older ones looked
    like none. "Show older" takes its place, and the list keeps no duplicate when one more
    arrives (paging past 100: tests/e2e/test_long_history_ui.py)."""
    for _ in range(101):
        create_operation(ui_services, "ada", subject=("job", "job-1"))
    dev_sign_in(page, ui_gateway.url, "ada")
    cards = page.locator("li.op")
    more = page.get_by_role("button", name="Show more")
    for shown in (40, 60, 80, 100):
        more.click()
        expect(cards).to_have_count(shown)
    expect(more).to_be_hidden()
    expect(page.get_by_role("button", name="Show older")).to_be_visible()

    newest = create_operation(ui_services, "ada", subject=("job", "job-1"))
    expect(cards.first).to_have_attribute("data-id", newest.id)
    ids = cards.evaluate_all("cards => cards.map(card => card.dataset.id)")
    assert len(ids) == len(set(ids)) == 100


def test_a_notification_dismissed_in_one_tab_goes_from_the_others(
    page: Page, context: BrowserContext, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """Dismissing a read notification moves no count, and the other tabs' lists kept it until
    reloaded; its Dismiss there said "Notification not found"."""
    for title in ("Platform engineer", "Site reliability engineer", "Data engineer"):
        job = create_job(ui_services.workspace, "ada", title=title)
        create_operation(ui_services, "ada", subject=("job", job))
        complete(ui_services, claim(ui_services, ["strategy.snapshot"]))
    dev_sign_in(page, ui_gateway.url, "ada")
    notes = page.locator(".note")
    expect(notes).to_have_count(3)
    other, _ = open_operations(context, ui_gateway)
    elsewhere = other.locator(".note")
    expect(elsewhere).to_have_count(3)
    hidden, _ = open_operations(context, ui_gateway)
    expect(hidden.locator(".note")).to_have_count(3)
    hide(hidden)

    dismissed = notes.first.get_attribute("data-id")
    assert dismissed
    notes.first.get_by_role("button", name=re.compile("^Mark read")).click()
    expect(other.locator(".note--unread")).to_have_count(2)
    # Its own answer too: the other tab may hear of the change before this tab's request
    # returns, and a notification's second action while its first is on its way asks nothing.
    expect(page.locator("#notifications .status")).to_have_text("Notification marked as read.")
    notes.first.get_by_role("button", name=re.compile("^Dismiss")).click()
    expect(notes).to_have_count(2)
    expect(elsewhere).to_have_count(2)  # the same unread count: the stream told it anyway
    expect(other.locator("#bell")).to_have_accessible_name("Notifications, 2 unread")

    # A tab that heard nothing (hidden, it held no stream) and acts on the one gone.
    gone = hidden.locator(".note").first
    expect(gone).to_have_attribute("data-id", dismissed)
    gone.get_by_role("button", name=re.compile("^Dismiss")).click()
    expect(hidden.locator("#notifications .status")).to_have_text(
        "That notification had already been dismissed."
    )
    expect(hidden.locator(".note")).to_have_count(2)


def test_the_token_line_of_a_tab_kept_open_overnight_renews_with_the_budget(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """The line was read again only at a start or an end: at 00:00 UTC it went on saying
    yesterday's figures. It is read again as the budget renews (`renews_at`)."""
    entitle(ui_services.db, "ada")
    page.clock.install()
    dev_sign_in(page, ui_gateway.url, "ada", then="/jobs")
    budget = page.locator("#ai-budget")
    expect(budget).to_have_text(re.compile(r"^0 of 100,000 tokens used today"))
    renews_at = page.evaluate(
        """async () => (await (await fetch("/api/settings/ai")).json()).budget.renews_at"""
    )
    ui_services.db.run(
        lambda tx: budgets.set_override(tx, 50_000, set_by="test", now=utc_now()), owner_id="ada"
    )
    page.clock.fast_forward(renews_at_ms(renews_at) - page.evaluate("Date.now()") - 1000)
    page.wait_for_timeout(300)
    expect(budget).to_have_text(re.compile(r"^0 of 100,000 tokens used today"))  # not yet
    page.clock.fast_forward(10_000)
    expect(budget).to_have_text(re.compile(r"^0 of 50,000 tokens used today"))


def renews_at_ms(stamp: str) -> int:
    return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)


def test_the_notifications_of_many_operations_name_them_without_a_read_each(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """Each notification's operation was read apart: /operations sent one request per
    notification listed (50) as it opened."""
    job = create_job(ui_services.workspace, "ada", title="Platform engineer")
    for _ in range(30):
        create_operation(ui_services, "ada", subject=("job", job))
        complete(ui_services, claim(ui_services, ["strategy.snapshot"]))
    reads: list[str] = []
    one_operation = re.compile(r"/api/operations/[^/?:]+$")
    page.on("request", lambda r: reads.append(r.url) if one_operation.search(r.url) else None)
    dev_sign_in(page, ui_gateway.url, "ada")
    notes = page.locator(".note")
    expect(notes).to_have_count(30)
    expect(notes.get_by_text("Platform engineer at Acme")).to_have_count(30)
    assert reads == []


def test_back_and_reload_keep_how_far_the_list_was_shown_and_scrolled(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """Left for another page and come back to (or reloaded), the list showed its first 20
    from the top: a user deep in their operations paged down again to find their place."""
    for _ in range(45):
        create_operation(ui_services, "ada", subject=("job", "job-1"))
    dev_sign_in(page, ui_gateway.url, "ada")
    cards = page.locator("li.op")
    expect(cards).to_have_count(20)
    page.get_by_role("button", name="Show more").click()
    expect(cards).to_have_count(40)
    cards.nth(35).scroll_into_view_if_needed()
    scrolled = page.evaluate("window.scrollY")
    assert scrolled > 0

    page.goto(ui_gateway.url + "/jobs")
    page.go_back()
    expect(cards).to_have_count(40)
    scrolled_to(page, scrolled)
    page.reload()
    expect(cards).to_have_count(40)
    scrolled_to(page, scrolled)


def scrolled_to(page: Page, y: float) -> None:
    """Waits for the page to be scrolled to ``y`` (the page's CSP forbids a string
    predicate in the page: each look is an evaluate)."""
    for _ in range(100):
        if abs(page.evaluate("window.scrollY") - y) < 2:
            return
        page.wait_for_timeout(50)
    raise AssertionError(f"scrolled to {page.evaluate('window.scrollY')}, not {y}")
