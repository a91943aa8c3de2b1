"""The web UI on a bad mobile connection: the connection drops and comes back, requests
are slow, and the user clicks twice because nothing seemed to happen. What the page says
must stay true once the connection is back, and a second click must not act twice."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from playwright.sync_api import Locator, Page, Request, Route, expect

from durable_ops.api.operations.v1 import operations_pb2 as ops_pb
from durable_ops.model.scope import Role
from durable_ops.operations.app import WATCH_OVERLAP
from tests.support.gateway import LiveGateway, claim, complete, create_operation, fail
from tests.support.grpc_services import Services, metadata
from tests.support.jobs_page import open_jobs
from tests.support.long_polls import RequestsInFlight, refuse_long_polls
from tests.support.signin import dev_sign_in
from tests.support.visibility import set_visibility
from tests.support.workspace_client import create_job, entitle

pytestmark = pytest.mark.browser

# notifications-view.js: how long a list that could not load waits before it asks again.
NOTIFICATIONS_RETRY_MS = 5000
# api.js: how long a request may go unanswered before it reads as the server not reached.
REQUEST_TIMEOUT_MS = 20000


def failed_operation(services: Services, owner: str) -> str:
    """An operation of `owner`'s that failed, so it can be retried, with its notification."""
    job = create_job(services.workspace, owner, title="Platform engineer")
    operation = create_operation(services, owner, subject=("job", job))
    fail(services, claim(services, ["strategy.snapshot"]))
    return operation.id


def notifications_of_a_failure(page: Page, gateway: LiveGateway, services: Services) -> Locator:
    """Ada signed in, with one failed operation and its notification: her notifications."""
    failed_operation(services, "ada")
    dev_sign_in(page, gateway.url, "ada")
    return page.locator("#notifications")


def card(page: Page, operation_id: str) -> Locator:
    return page.locator(f'li.op[data-id="{operation_id}"]')


def posts_to(page: Page, suffix: str) -> list[Request]:
    """POSTs the page sends whose path ends with `suffix`, as they are sent."""
    sent: list[Request] = []
    page.on(
        "request",
        lambda request: (
            sent.append(request)
            if request.method == "POST" and request.url.split("?")[0].endswith(suffix)
            else None
        ),
    )
    return sent


def first_only(page: Page, pattern: str, fault: Callable[[Route], None]) -> list[Route]:
    """The first request matching `pattern` meets `fault`; later ones go through."""
    met: list[Route] = []

    def handle(route: Route) -> None:
        if met:
            route.continue_()
        else:
            met.append(route)
            fault(route)

    page.route(pattern, handle)
    return met


def hold_first(page: Page, pattern: str) -> list[Route]:
    """The first request matching `pattern` waits until the test continues it (a slow
    connection); later ones go through."""
    return first_only(page, pattern, lambda _: None)


def cut_first(page: Page, pattern: str) -> None:
    """The first request matching `pattern` is cut off (the connection dropped); later ones
    go through."""
    first_only(page, pattern, lambda route: route.abort("internetdisconnected"))


def never_answer(page: Page, pattern: str) -> list[Route]:
    """Requests matching `pattern` are sent and never answered, nor refused (a connection
    gone dead without a word): the page gives up on them, or waits for good."""
    held: list[Route] = []

    def handle(route: Route) -> None:
        held.append(route)

    page.route(pattern, handle)
    return held


def wait_for(page: Page, held: list[Route]) -> Route:
    for _ in range(100):
        if held:
            return held[0]
        page.wait_for_timeout(50)
    raise AssertionError("the request was never sent")


def test_a_retry_sent_offline_stops_saying_the_server_is_unreachable_once_it_is_back(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    operation_id = failed_operation(ui_services, "ada")
    dev_sign_in(page, ui_gateway.url, "ada")
    failed = card(page, operation_id)
    expect(failed.locator(".state")).to_have_text("Failed")

    page.context.set_offline(True)
    failed.get_by_role("button", name="Retry").click()
    error = failed.locator(".op__error")
    expect(error).to_have_text("The server could not be reached.")

    # Back online, the page's next poll is answered: the card must not go on saying that the
    # server cannot be reached (it stayed until the next action on that card).
    page.context.set_offline(False)
    expect(page.locator(".banner")).to_be_hidden()
    expect(error).to_be_hidden()
    expect(failed.get_by_role("button", name="Retry")).to_be_visible()  # still to be done


def test_notifications_that_could_not_load_load_once_the_connection_is_back(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    page.clock.install()
    notes = notifications_of_a_failure(page, ui_gateway, ui_services)
    expect(notes.get_by_text("Strategy snapshot could not be completed")).to_be_visible()

    # The list's load is cut off once (the bell's count, loaded apart, is fine and never
    # moves: nothing it says would ask for the list again).
    cut_first(page, "**/api/notifications?page_size=*")
    page.reload()
    expect(notes.get_by_text("Notifications could not be loaded.")).to_be_visible()
    expect(page.locator("#bell")).to_have_attribute("aria-label", "Notifications, 1 unread")

    page.clock.run_for(NOTIFICATIONS_RETRY_MS)
    expect(notes.get_by_text("Strategy snapshot could not be completed")).to_be_visible()
    expect(notes.get_by_text("Notifications could not be loaded.")).to_have_count(0)


def test_a_double_clicked_dismiss_or_mark_all_read_acts_once_and_says_it_did(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    notes = notifications_of_a_failure(page, ui_gateway, ui_services)
    status = notes.locator(".status")
    mark_all = notes.get_by_role("button", name="Mark all read")
    expect(mark_all).to_be_visible()

    # A slow answer: the second click lands while the first one's request is on its way.
    marks = posts_to(page, "/read-all")
    held = hold_first(page, "**/read-all")
    mark_all.dblclick()
    with page.expect_response("**/read-all"):
        wait_for(page, held).continue_()
    expect(status).to_have_text("One notification marked as read.")
    assert len(marks) == 1, [request.url for request in marks]

    dismisses = posts_to(page, "/dismiss")
    held = hold_first(page, "**/dismiss")
    notes.get_by_role("button", name="Dismiss").dblclick()
    with page.expect_response("**/dismiss"):
        wait_for(page, held).continue_()
    expect(notes.get_by_text("No notifications.")).to_be_visible()
    # A second dismiss found it gone (404) and said "could not be updated".
    expect(status).to_have_text("Notification dismissed.")
    assert len(dismisses) == 1, [request.url for request in dismisses]


def switch_away_and_back(page: Page) -> None:
    """What the browser does when the user leaves the tab (the phone sleeps) and comes back."""
    set_visibility(page, "hidden")
    set_visibility(page, "visible")


def test_an_event_stream_refused_on_a_bad_connection_opens_again_when_it_is_back(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """A dropped stream the browser reopens by itself; one answered with an HTTP error (a
    proxy's 502 in a bad spell) it closed for good, and the tab polled until reloaded. Opened
    again, the stream tells only what changes from then on: the list reads what it missed."""
    answers: list[int] = []
    refusing = [True]

    def stream(route: Route) -> None:
        if refusing[0]:
            answers.append(502)
            route.fulfill(status=502, content_type="text/html", body="<p>Bad gateway</p>")
        else:
            answers.append(200)
            route.continue_()

    page.route("**/api/events*", stream)  # ?page_user=
    requests = RequestsInFlight(page)
    page.clock.install()
    dev_sign_in(page, ui_gateway.url, "ada")
    expect(page.get_by_text("No operations yet.")).to_be_visible()
    for _ in range(100):
        if answers:
            break
        page.wait_for_timeout(50)
    assert answers == [502]

    # Still refused when the user comes back to the tab: asked once more, refused again.
    with page.expect_response("**/api/events*", timeout=3000):
        switch_away_and_back(page)
    assert answers == [502, 502]

    # The page's timers stop (its polls with them): a change made now, after its last poll,
    # and more than the stream's look back (WATCH_OVERLAP) before it opens, as on a slow
    # connection, is one the stream will not tell.
    page.clock.pause_at(datetime.now() + timedelta(seconds=1))
    requests.wait_quiet()
    missed = create_operation(ui_services, "ada", subject=("job", "job-missed"))
    page.wait_for_timeout(WATCH_OVERLAP.total_seconds() * 1000 + 300)

    # The connection comes back: the stream opens again, and the list reads what it missed.
    refusing[0] = False
    page.context.set_offline(True)
    with page.expect_response("**/api/events*", timeout=3000) as reopened:
        page.context.set_offline(False)
    assert reopened.value.status == 200
    assert answers == [502, 502, 200]
    expect(card(page, missed.id).locator(".state")).to_have_text("Queued")


def test_the_second_click_of_a_double_clicked_retry_does_not_ask_to_cancel(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """The retry's answer came between the two clicks: Cancel had taken Retry's place under
    the pointer, and the second click opened "Cancel this operation?"."""
    entitle(ui_services.db, "ada")  # a retry is admitted again: the Pro plan
    operation_id = failed_operation(ui_services, "ada")
    dev_sign_in(page, ui_gateway.url, "ada")
    failed = card(page, operation_id)
    retry = failed.get_by_role("button", name="Retry")
    box = retry.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.down(click_count=1)
    page.mouse.up(click_count=1)
    expect(failed.locator(".state")).to_have_text("Queued")
    expect(failed.get_by_role("button", name="Cancel")).to_be_visible()
    page.mouse.down(click_count=2)  # the same double click's second press
    page.mouse.up(click_count=2)
    expect(page.get_by_role("dialog")).to_have_count(0)
    # A click of its own still asks.
    failed.get_by_role("button", name="Cancel").click()
    expect(page.get_by_role("dialog")).to_contain_text("Cancel this operation?")


def test_a_slow_answer_for_a_filter_left_is_not_shown_under_the_one_chosen(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    failed_id = failed_operation(ui_services, "ada")
    succeeded = create_operation(ui_services, "ada", subject=("job", "job-done"))
    complete(ui_services, claim(ui_services, ["strategy.snapshot"]))
    dev_sign_in(page, ui_gateway.url, "ada")
    cards = page.locator("li.op")
    expect(cards).to_have_count(2)

    # Every read of the list waits until the test lets it through (a slow connection).
    held: list[Route] = []

    def hold(route: Route) -> None:
        held.append(route)

    page.route(lambda url: "/api/operations?" in url, hold)
    page.get_by_label("Show").select_option("failed")
    wait_for(page, held)
    page.get_by_label("Show").select_option("")  # changed their mind: all operations
    held.pop().continue_()  # the answer for "Failed", late
    wait_for(page, held)  # the read for "All operations" is on its way
    # Not the failed one alone under "All operations": the list shown before stays.
    expect(cards).to_have_count(2)
    held.pop().continue_()
    expect(card(page, succeeded.id)).to_be_visible()
    expect(card(page, failed_id)).to_be_visible()


def test_retry_pressed_while_the_connection_is_still_down_keeps_its_focus(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    operation_id = failed_operation(ui_services, "ada")
    page.route("**/api/operations?*", lambda route: route.abort("internetdisconnected"))
    dev_sign_in(page, ui_gateway.url, "ada")
    error = page.locator(".placeholder--error")
    expect(error).to_contain_text("Operations could not be loaded.")
    retry = error.get_by_role("button", name="Retry")

    # Pressed with the keyboard, still offline: it fails again, and the next press must
    # still reach a Retry (its focus fell to the page, and Enter did nothing).
    failures: list[str] = []
    page.on("requestfailed", lambda request: failures.append(request.url))
    retry.focus()
    page.keyboard.press("Enter")
    for _ in range(100):
        if failures:
            break
        page.wait_for_timeout(50)
    expect(retry).to_be_focused()

    page.unroute("**/api/operations?*")
    page.keyboard.press("Enter")
    expect(card(page, operation_id)).to_be_visible()


def test_a_captive_portals_page_instead_of_the_list_reads_as_the_server_not_reached(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """A hotel's or a train's Wi-Fi answers the page's reads with its sign-in page (HTML,
    200): the page said "Unexpected token '<', "<!DOCTYPE "... is not valid JSON"."""
    operation_id = failed_operation(ui_services, "ada")
    portal = "<!DOCTYPE html><p>Sign in to the Wi-Fi to continue</p>"
    page.route(
        "**/api/operations?*",
        lambda route: route.fulfill(status=200, content_type="text/html", body=portal),
    )
    dev_sign_in(page, ui_gateway.url, "ada")
    error = page.locator(".placeholder--error")
    expect(error).to_contain_text(
        "Operations could not be loaded. The service is not reachable right now."
    )
    expect(error).not_to_contain_text("JSON")

    page.unroute("**/api/operations?*")  # signed in to the Wi-Fi
    error.get_by_role("button", name="Retry").click()
    expect(card(page, operation_id)).to_be_visible()


def test_a_notification_read_while_its_operation_could_not_be_is_completed_later(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """The list came, but the read of what a notification is about was cut off: it showed
    no subject and no "View the result" for good, though the connection came back."""
    job = create_job(ui_services.workspace, "ada", title="Platform engineer")
    operation = create_operation(ui_services, "ada", subject=("job", job))
    complete(ui_services, claim(ui_services, ["strategy.snapshot"]))
    operation_read = f"**/api/operations/{operation.id}"
    page.route(operation_read, lambda route: route.abort("internetdisconnected"))
    page.clock.install()
    dev_sign_in(page, ui_gateway.url, "ada")
    notes = page.locator("#notifications")
    expect(notes.get_by_text("Strategy snapshot is ready")).to_be_visible()
    expect(notes.get_by_role("link", name=re.compile("^Open the operation"))).to_be_visible()
    result = notes.get_by_role("link", name=re.compile("^View the result"))
    expect(result).to_have_count(0)

    page.unroute(operation_read)
    page.clock.run_for(NOTIFICATIONS_RETRY_MS)
    expect(result).to_be_visible()
    expect(notes.get_by_text("Strategy snapshot for Platform engineer at Acme")).to_be_visible()


def test_an_opened_operation_that_could_not_be_read_is_read_again(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """A link to an operation the list does not hold (an older one) reads it apart. That
    read cut off, the page said it "could not be loaded" for good: with the event stream
    open and nothing live in the list, the list polls no more."""
    job = create_job(ui_services.workspace, "ada", title="Platform engineer")
    oldest = create_operation(ui_services, "ada", subject=("job", job), key="oldest")
    for index in range(20):  # one page is 20, none of them live: the oldest is not on it
        newer = create_operation(ui_services, "ada", subject=("job", job), key=f"newer-{index}")
        ui_services.operations.CancelOperation(
            ops_pb.CancelOperationRequest(operation_id=newer.id),
            metadata=metadata(Role.GATEWAY, "ada"),
        )
    # Cut off until the page said so: a read again soon after (the stream opening) would
    # otherwise take the message away before the test saw it.
    read = f"**/api/operations/{oldest.id}"
    page.route(read, lambda route: route.abort("internetdisconnected"))
    dev_sign_in(page, ui_gateway.url, "ada", then=f"/operations#operation-{oldest.id}")
    opened = page.get_by_role("list", name="The operation you opened")
    expect(opened.get_by_role("alert")).to_have_text(
        "The operation you opened could not be loaded. The server could not be reached."
    )
    page.unroute(read)
    expect(opened.locator(f'li.op[data-id="{oldest.id}"] .state')).to_have_text("Queued")


def test_a_start_whose_answer_was_lost_shows_the_analysis_it_started(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """The start reached the server and its answer did not reach the page: the card reads
    what is there at once, rather than saying no analysis runs while one is queued."""
    entitle(ui_services.db, "alice")
    create_job(ui_services.workspace, "alice")
    lost: list[Route] = []

    def lose_the_answer(route: Route) -> None:
        if route.request.method != "POST" or lost:
            route.continue_()
            return
        lost.append(route)
        route.fetch()  # the server starts it
        route.abort("internetdisconnected")

    page.route(re.compile(r"/strategy-snapshot$"), lose_the_answer)
    open_jobs(page, ui_gateway.url, "alice")
    job = page.locator("ol[aria-label='Your jobs'] li.item")
    job.get_by_role("button", name="Start strategy snapshot").click()
    expect(job.locator(".analysis .state")).to_have_text("Queued")
    expect(job.get_by_text("The server could not be reached.")).to_have_count(0)
    assert len(lost) == 1


def test_a_list_read_never_answered_says_the_server_was_not_reached(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """A request sent on a connection gone dead without a word is never answered: the page
    said "Loading operations…" until TCP gave up, minutes later."""
    never_answered = never_answer(page, "**/api/operations?*")
    page.clock.install()
    dev_sign_in(page, ui_gateway.url, "ada")
    expect(page.get_by_text("Loading operations…")).to_be_visible()
    wait_for(page, never_answered)

    page.clock.run_for(REQUEST_TIMEOUT_MS)
    error = page.locator(".placeholder--error")
    expect(error).to_contain_text(
        "Operations could not be loaded. The service is not reachable right now."
    )
    expect(page.get_by_text("Loading operations…")).to_have_count(0)


def test_a_long_poll_is_not_cut_off_by_the_bound_of_ordinary_requests(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """A long-poll waits for the server by design, longer than an ordinary request may."""
    create_operation(ui_services, "ada", subject=("job", "job-live"))
    refuse_long_polls(page)  # the stream: the list follows its live operation by long-poll
    waiting = never_answer(page, "**/api/operations/*:wait*")  # answers when it moves: never
    failed: list[str] = []
    page.on("requestfailed", lambda request: failed.append(request.url))
    page.clock.install()
    dev_sign_in(page, ui_gateway.url, "ada")
    wait_for(page, waiting)

    page.clock.run_for(REQUEST_TIMEOUT_MS + 1000)
    page.wait_for_timeout(300)  # lets Playwright deliver a failure, were there one
    assert [url for url in failed if ":wait" in url] == []


def test_a_notification_status_saying_the_server_was_not_reached_goes_once_it_is_back(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """It stayed until the next action, though the list had loaded again since."""
    page.clock.install()
    notes = notifications_of_a_failure(page, ui_gateway, ui_services)
    status = notes.locator(".status")
    mark_read = notes.get_by_role("button", name=re.compile("^Mark read"))
    expect(mark_read).to_be_visible()

    page.context.set_offline(True)
    mark_read.click()
    expect(status).to_have_text(
        "The notification could not be updated. The server could not be reached."
    )

    page.context.set_offline(False)
    page.clock.run_for(NOTIFICATIONS_RETRY_MS)  # the list reads again
    expect(status).to_have_text("")
    expect(mark_read).to_be_visible()  # it was never sent: still to be done


def test_a_double_clicked_show_more_shows_one_page_more(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    for index in range(45):  # more than two pages more than the first
        create_operation(ui_services, "ada", subject=("job", "job-many"), key=f"many-{index}")
    dev_sign_in(page, ui_gateway.url, "ada")
    cards = page.locator("li.op")
    expect(cards).to_have_count(20)
    requests = RequestsInFlight(page)
    sizes: list[str] = []
    page.on(
        "request",
        lambda request: (
            sizes.append(request.url.split("page_size=")[1].split("&")[0])
            if "/api/operations?" in request.url
            else None
        ),
    )

    # A slow answer: the double click, and one more click, land while the page is on its way.
    held = hold_first(page, "**/api/operations?page_size=40*")
    more = page.get_by_role("button", name="Show more")
    more.dblclick()
    route = wait_for(page, held)
    more.click(force=True)  # it says it is busy (aria-disabled), but a click still lands on it
    route.continue_()
    expect(cards).to_have_count(40)
    requests.wait_quiet()
    assert "60" not in sizes, sizes
    expect(cards).to_have_count(40)
    expect(more).not_to_have_attribute("aria-disabled", "true")


def test_a_slow_retry_or_cancel_says_it_is_busy_until_it_is_answered(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    entitle(ui_services.db, "ada")  # a retry is admitted again: the Pro plan
    operation_id = failed_operation(ui_services, "ada")
    dev_sign_in(page, ui_gateway.url, "ada")
    shown = card(page, operation_id)

    held = hold_first(page, "**/retry")
    retry = shown.get_by_role("button", name="Retry")
    retry.click()
    route = wait_for(page, held)
    expect(retry).to_have_attribute("aria-disabled", "true")
    expect(retry).to_be_focused()
    route.continue_()
    expect(shown.locator(".state")).to_have_text("Queued")

    held = hold_first(page, "**/cancel")
    cancel = shown.get_by_role("button", name="Cancel")
    cancel.click()
    page.get_by_role("dialog").get_by_role("button", name="Cancel operation").click()
    route = wait_for(page, held)
    expect(cancel).to_have_attribute("aria-disabled", "true")
    route.continue_()
    expect(shown.locator(".state")).not_to_have_text("Queued")
    expect(shown.locator(".op__actions [aria-disabled]")).to_have_count(0)
