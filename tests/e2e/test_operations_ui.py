"""The web UI in a real browser: sign-in, live progress, cancel (and one too late), retry,
the bell and where it leads, errors, and the pace of the polls."""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Callable, Sized
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Locator, Page, Request, Route, expect

from durable_ops.api.operations.v1 import operations_pb2 as ops_pb
from durable_ops.model.scope import Role
from tests.support.gateway import (
    LiveGateway,
    acknowledge_cancel,
    claim,
    complete,
    create_operation,
    fail,
    heartbeat,
    release,
    token,
)
from tests.support.grpc_services import Services, metadata
from tests.support.long_polls import looks_once_a_step, refuse_long_polls
from tests.support.signin import dev_sign_in
from tests.support.visibility import set_visibility
from tests.support.workspace_client import create_cv, create_job, entitle, snapshot_request

pytestmark = pytest.mark.browser
Screenshot = Callable[[Page, str], Path]
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 860}


def sign_in(page: Page, gateway: LiveGateway, user: str) -> None:
    dev_sign_in(page, gateway.url, user)


def named_job(services: Services, title: str) -> tuple[str, str]:
    """An operation's subject: a job of Ada's titled `title` at Acme, as the page names it.
    An id of no job would read as a deleted job (ADR 60)."""
    return ("job", create_job(services.workspace, "ada", title=title))


def named_cv(services: Services, filename: str) -> tuple[str, str]:
    """An operation's subject: a CV of Ada's named `filename`."""
    return ("attachment", create_cv(services.workspace, "ada", filename=filename))


def card(page: Page, operation_id: str) -> Locator:
    return page.locator(f'li.op[data-id="{operation_id}"]')


def bell(page: Page) -> Locator:
    return page.locator("#bell")


def stored(services: Services, owner: str, operation_id: str) -> ops_pb.Operation:
    reply: ops_pb.Operation = services.operations.GetOperation(
        ops_pb.GetOperationRequest(operation_id=operation_id),
        metadata=metadata(Role.GATEWAY, owner),
    )
    return reply


def count_requests(page: Page, path: str) -> list[str]:
    """URLs of finished requests to ``path`` (finished: the page has its answer)."""
    seen: list[str] = []
    page.on(
        "requestfinished",
        lambda request: (
            seen.append(request.url) if request.url.split("?")[0].endswith(path) else None
        ),
    )
    return seen


def timed_requests(page: Page, path: str) -> list[Request]:
    """Finished requests to ``path``, in order; their ``timing`` is the browser's."""
    seen: list[Request] = []
    page.on(
        "requestfinished",
        lambda request: seen.append(request) if request.url.split("?")[0].endswith(path) else None,
    )
    return seen


# Gaps of the idle 2000 ms pace are at least this: far above the live 500 ms (pages/operations.js).
IDLE_GAP_FLOOR_MS = 1500


def gaps_ms(requests: list[Request]) -> list[float]:
    """Milliseconds between the starts of consecutive requests."""
    starts = [request.timing["startTime"] for request in requests]
    return [later - earlier for earlier, later in itertools.pairwise(starts)]


def wait_until_quiet(page: Page, seen: Sized, quiet_ms: int, timeout_ms: int = 8000) -> None:
    """Until ``seen`` has not grown for ``quiet_ms``."""
    count, still = len(seen), 0
    for _ in range(timeout_ms // 50):
        if still >= quiet_ms:
            return
        page.wait_for_timeout(50)
        count, still = len(seen), (still + 50 if len(seen) == count else 0)
    raise AssertionError(f"requests did not stop for {quiet_ms} ms: {len(seen)} seen")


def wait_for_count(page: Page, seen: Sized, expected: int, timeout_ms: int = 5000) -> None:
    for _ in range(timeout_ms // 50):
        if len(seen) >= expected:
            return
        page.wait_for_timeout(50)
    assert len(seen) >= expected, f"saw {len(seen)} requests, expected {expected}"


# ---- sign in ------------------------------------------------------------------------------


def test_sign_in_with_dev_login_then_with_a_token(
    page: Page, ui_gateway: LiveGateway, screenshot: Screenshot
) -> None:
    page.goto(ui_gateway.url + "/")
    expect(page.get_by_role("heading", name="Sign in to durable-ops")).to_be_visible()
    expect(page.get_by_text("opsctl token --user YOUR_ID")).to_be_visible()
    screenshot(page, "01-sign-in")

    user_id = page.get_by_label("User id")
    # What it takes, before a refusal says only "Please match the requested format".
    expect(user_id).to_have_accessible_description(
        re.compile(r"digits and \. _ @ : - \(no spaces\)")
    )
    user_id.fill("ada")
    page.get_by_role("button", name="Sign in as this user").click()
    page.wait_for_url(ui_gateway.url + "/operations")
    expect(page.locator("header .user")).to_have_text("ada")
    expect(bell(page)).to_have_attribute("aria-label", "Notifications, none unread")
    expect(page.get_by_text("No operations yet.")).to_be_visible()
    expect(page.get_by_role("link", name="Operations")).to_have_attribute("aria-current", "page")
    screenshot(page, "02-operations-empty")

    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(ui_gateway.url + "/")
    page.goto(ui_gateway.url + "/operations")
    page.wait_for_url(ui_gateway.url + "/")  # signed out: back to sign-in

    page.get_by_label("Token", exact=True).fill("not-a-token")
    page.get_by_role("button", name="Sign in", exact=True).click()
    expect(page.get_by_role("alert")).to_contain_text("not valid")
    page.get_by_label("Token", exact=True).fill(token("grace"))
    page.get_by_role("button", name="Sign in", exact=True).click()
    page.wait_for_url(ui_gateway.url + "/operations")
    expect(page.locator("header .user")).to_have_text("grace")


# ---- progress -----------------------------------------------------------------------------


def test_progress_moves_while_the_page_polls(
    page: Page, ui_gateway: LiveGateway, ui_services: Services, screenshot: Screenshot
) -> None:
    operation = create_operation(ui_services, "ada", subject=named_job(ui_services, "job-42"))
    queued = create_operation(
        ui_services, "ada", task_type="cv.review", subject=named_cv(ui_services, "cv-7")
    )
    claimed = claim(ui_services, ["strategy.snapshot"])
    # A producer's task type says nothing of a model: running at 0 % is running.
    report = create_operation(ui_services, "ada", task_type="report.render", subject=("job", "r"))
    claim(ui_services, ["report.render"])

    sign_in(page, ui_gateway, "ada")
    running = card(page, operation.id)
    # Each card's heading names its subject: ten "Strategy snapshot" headings tell nothing apart.
    expect(running.get_by_role("heading")).to_have_text("Strategy snapshot: job-42 at Acme")
    expect(card(page, queued.id).get_by_role("heading")).to_have_text("CV review: cv-7")
    # An analysis the model has shown no sign of (it may be down) waits for it: no bar at 0 %.
    expect(running.locator(".state")).to_have_text("Waiting for the model")
    expect(running.locator("progress")).to_have_count(0)
    expect(card(page, report.id).locator(".state")).to_have_text("Running")
    expect(card(page, report.id).locator("progress")).to_have_attribute("value", "0")

    heartbeat(ui_services, claimed, 15)
    expect(running.locator(".state")).to_have_text("Running")
    expect(running.locator(".op__subject")).to_have_text("Job: job-42 at Acme")
    progress = page.get_by_label("Progress of Strategy snapshot for job-42 at Acme")
    expect(progress).to_have_attribute("value", "15")
    expect(card(page, queued.id).locator(".op__subject")).to_have_text("CV: cv-7")
    expect(card(page, queued.id).locator(".state")).to_have_text("Queued")

    heartbeat(ui_services, claimed, 65)
    expect(progress).to_have_attribute("value", "65")
    expect(running.locator(".progress__value")).to_have_text("65%")
    screenshot(page, "03-progress")

    # A stopping worker hands it back: queued again, its progress kept and said to resume.
    release(ui_services, claimed)
    expect(running.locator(".state")).to_have_text("Interrupted, will resume")
    expect(progress).to_have_attribute("value", "65")
    claimed = claim(ui_services, ["strategy.snapshot"])
    complete(ui_services, claimed)
    expect(running.locator(".state")).to_have_text("Succeeded")
    expect(running.locator("progress")).to_have_count(0)
    # The finished operation's notification reaches the list and the bell at once.
    expect(page.locator(".note")).to_have_count(1)
    expect(bell(page)).to_have_attribute("aria-label", "Notifications, 1 unread")


# ---- cancel -------------------------------------------------------------------------------


def test_cancel_asks_first_then_shows_cancel_requested(
    page: Page, ui_gateway: LiveGateway, ui_services: Services, screenshot: Screenshot
) -> None:
    operation = create_operation(ui_services, "ada", subject=named_job(ui_services, "job-1"))
    claimed = claim(ui_services, ["strategy.snapshot"])
    queued = create_operation(
        ui_services, "ada", task_type="cv.review", subject=named_cv(ui_services, "a-9")
    )
    sign_in(page, ui_gateway, "ada")
    running = card(page, operation.id)
    cancel = page.get_by_role("button", name="Cancel Strategy snapshot for job-1 at Acme")

    cancel.click()
    dialog = page.get_by_role("dialog", name="Cancel this operation?")
    expect(dialog).to_be_visible()
    expect(page.get_by_role("button", name="Keep running")).to_be_focused()
    screenshot(page, "04-cancel-dialog")
    page.get_by_role("button", name="Keep running").click()
    expect(dialog).to_have_count(0)
    cancel.click()
    page.keyboard.press("Escape")
    expect(dialog).to_have_count(0)
    assert stored(ui_services, "ada", operation.id).cancel_requested is False

    cancel.click()
    page.get_by_role("button", name="Cancel operation").click()
    expect(running.locator(".state")).to_have_text("Cancelling")
    expect(running.locator(".op__note")).to_contain_text("Cancel requested")
    expect(cancel).to_have_count(0)
    assert stored(ui_services, "ada", operation.id).cancel_requested is True
    screenshot(page, "05-cancel-requested")

    # The worker learns of it on its next heartbeat and stops.
    assert heartbeat(ui_services, claimed, 30) is True
    acknowledge_cancel(ui_services, claimed)
    expect(running.locator(".state")).to_have_text("Cancelled")
    expect(
        page.get_by_role("button", name="Retry Strategy snapshot for job-1 at Acme")
    ).to_be_visible()
    expect(running.locator(".op__note")).to_have_count(0)
    expect(page.get_by_role("status")).to_have_text(
        "Strategy snapshot for job-1 at Acme cancelled."
    )

    page.get_by_role("button", name="Cancel CV review for a-9").click()
    page.get_by_role("button", name="Cancel operation").click()
    expect(card(page, queued.id).locator(".state")).to_have_text("Cancelled")
    expect(bell(page)).to_have_attribute("aria-label", "Notifications, 2 unread")


def test_a_cancel_after_the_work_finished_is_said_to_be_too_late(
    page: Page, ui_gateway: LiveGateway, ui_services: Services, screenshot: Screenshot
) -> None:
    operation = create_operation(ui_services, "ada", subject=named_job(ui_services, "job-late"))
    claimed = claim(ui_services, ["strategy.snapshot"])
    sign_in(page, ui_gateway, "ada")
    late = card(page, operation.id)
    expect(late.locator(".state")).to_have_text("Waiting for the model")

    page.get_by_role("button", name="Cancel Strategy snapshot for job-late at Acme").click()
    page.get_by_role("button", name="Cancel operation").click()
    expect(late.locator(".state")).to_have_text("Cancelling")
    # The worker had already published its result: completing still succeeds.
    complete(ui_services, claimed)

    expect(late.locator(".state")).to_have_text("Succeeded")
    expect(late.locator(".op__note")).to_have_text(
        "The cancel came too late: the work had already finished."
    )
    expect(page.get_by_role("status")).to_have_text(
        "Strategy snapshot for job-late at Acme succeeded: the cancel came too late,"
        " it had already finished."
    )
    expect(late.get_by_role("link", name="View result")).to_be_visible()
    stored_now = stored(ui_services, "ada", operation.id)
    assert stored_now.state == ops_pb.OPERATION_STATE_SUCCEEDED
    assert stored_now.cancel_requested is True
    screenshot(page, "10-cancel-too-late")

    page.reload()  # from the stored state too, not only as it happened
    expect(late.locator(".state")).to_have_text("Succeeded")
    expect(late.locator(".op__note")).to_contain_text("The cancel came too late")


def test_a_cancel_dialog_whose_operation_ends_says_so_and_focus_stays_on_its_card(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    operation = create_operation(ui_services, "ada", subject=named_job(ui_services, "job-ends"))
    claimed = claim(ui_services, ["strategy.snapshot"])
    sign_in(page, ui_gateway, "ada")
    page.get_by_role("button", name="Cancel Strategy snapshot for job-ends at Acme").click()
    dialog = page.get_by_role("dialog", name="Cancel this operation?")
    expect(dialog).to_contain_text("Strategy snapshot for job-ends at Acme will stop.")

    complete(ui_services, claimed)  # it finishes while the question is open
    expect(dialog).to_contain_text(
        "Strategy snapshot for job-ends at Acme has already finished:"
        " there is nothing left to stop."
    )
    expect(dialog.get_by_role("button", name="Cancel operation")).to_have_count(0)
    close = dialog.get_by_role("button", name="Close")
    expect(close).to_be_focused()
    page.keyboard.press("Enter")
    expect(dialog).to_have_count(0)
    # The Cancel button it came from is gone: focus goes to what the card offers now.
    ended = card(page, operation.id)
    expect(ended.get_by_role("link", name=re.compile("^View result"))).to_be_focused()
    expect(ended.locator(".op__error")).to_be_hidden()


def test_an_operation_that_ends_under_the_keyboard_keeps_focus_on_its_card(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    failing = create_operation(
        ui_services, "ada", subject=named_job(ui_services, "job-fails"), max_attempts=1
    )
    claimed = claim(ui_services, ["strategy.snapshot"])
    sign_in(page, ui_gateway, "ada")
    page.get_by_role("button", name="Cancel Strategy snapshot for job-fails at Acme").focus()
    fail(ui_services, claimed)
    expect(card(page, failing.id).locator(".state")).to_have_text("Failed")
    retry = page.get_by_role("button", name="Retry Strategy snapshot for job-fails at Acme")
    expect(retry).to_be_focused()

    done = create_operation(ui_services, "ada", subject=named_job(ui_services, "job-done"))
    claimed = claim(ui_services, ["strategy.snapshot"])
    page.get_by_role("button", name="Cancel Strategy snapshot for job-done at Acme").focus()
    complete(ui_services, claimed)
    link = card(page, done.id).get_by_role("link", name=re.compile("^View result"))
    expect(link).to_be_focused()


def test_each_result_link_names_its_operation(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    for job in ("job-a", "job-b"):
        create_operation(ui_services, "ada", subject=named_job(ui_services, job))
        complete(ui_services, claim(ui_services, ["strategy.snapshot"]))
    sign_in(page, ui_gateway, "ada")
    for job in ("job-a", "job-b"):
        name = f"View result: Strategy snapshot for {job} at Acme"
        expect(page.get_by_role("link", name=name, exact=True)).to_be_visible()


def test_the_page_works_from_the_keyboard_on_a_phone(
    browser: Browser, ui_gateway: LiveGateway, ui_services: Services, screenshot: Screenshot
) -> None:
    operation = create_operation(ui_services, "ada", subject=named_job(ui_services, "job-phone"))
    claim(ui_services, ["strategy.snapshot"])
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    try:
        page = context.new_page()
        sign_in(page, ui_gateway, "ada")
        expect(card(page, operation.id).locator(".state")).to_have_text("Waiting for the model")
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"the page scrolls sideways by {overflow}px"
        screenshot(page, "08-phone")

        label = "Cancel Strategy snapshot for job-phone at Acme"
        for _ in range(40):
            page.keyboard.press("Tab")
            if page.evaluate("document.activeElement.getAttribute('aria-label')") == label:
                break
        else:
            pytest.fail("the cancel button cannot be reached with Tab")
        outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
        assert outline == "solid"  # focus is visible
        page.keyboard.press("Enter")
        expect(page.get_by_role("dialog")).to_be_visible()
        expect(page.get_by_role("button", name="Keep running")).to_be_focused()
        page.keyboard.press("Escape")
        expect(page.get_by_role("dialog")).to_have_count(0)
        expect(page.get_by_role("button", name=label)).to_be_focused()
    finally:
        context.close()


# ---- retry --------------------------------------------------------------------------------


def test_retry_a_failed_operation(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    # An analysis as a page starts one (its retry is admitted again: entitled, its job there).
    entitle(ui_services.db, "ada")
    job = create_job(ui_services.workspace, "ada")
    operation = ui_services.admission.Admit(
        snapshot_request(job), metadata=metadata(Role.GATEWAY, "ada")
    ).operation
    fail(ui_services, claim(ui_services, ["strategy.snapshot"]))
    sign_in(page, ui_gateway, "ada")
    failed = card(page, operation.id)
    expect(failed.locator(".state")).to_have_text("Failed")
    expect(bell(page)).to_have_attribute("aria-label", "Notifications, 1 unread")
    name = "Strategy snapshot for Engineer at Acme"
    expect(page.get_by_role("button", name=f"Cancel {name}")).to_have_count(0)

    retried: list[str] = []
    page.on("request", lambda r: retried.append(r.url) if r.url.endswith("/retry") else None)
    page.get_by_role("button", name=f"Retry {name}").dblclick()
    expect(failed.locator(".state")).to_have_text("Queued")
    # Its new run has not started: not "Attempt 0 of 3".
    expect(failed.locator(".op__meta")).to_contain_text("Not started yet (up to 3 attempts)")
    # Not "scheduled for" the moment of the retry: due at once, it was not scheduled.
    expect(failed.locator(".op__meta")).not_to_contain_text("scheduled")
    expect(failed.locator(".op__error")).to_be_hidden()
    assert len(retried) == 1, f"one retry for a double click: {retried}"
    # Retrying removed the failure notice: bell and list follow without waiting for a poll.
    expect(bell(page)).to_have_attribute("aria-label", "Notifications, none unread")
    expect(page.locator(".note")).to_have_count(0)
    assert stored(ui_services, "ada", operation.id).state == ops_pb.OPERATION_STATE_QUEUED


# ---- more than a page ------------------------------------------------------------------------


def test_the_last_show_more_leaves_focus_on_the_first_card_it_brought(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """The last "Show more" hides itself: focus fell to the page."""
    oldest = create_operation(ui_services, "ada", subject=("job", "job-oldest"))
    for n in range(20):
        create_operation(ui_services, "ada", subject=("job", f"job-{n}"))
    sign_in(page, ui_gateway, "ada")
    expect(page.locator("li.op")).to_have_count(20)
    more = page.get_by_role("button", name="Show more")
    more.focus()
    page.keyboard.press("Enter")
    expect(page.locator("li.op")).to_have_count(21)
    expect(more).to_be_hidden()
    expect(card(page, oldest.id).locator(".op__title")).to_be_focused()


# ---- notifications and the bell -------------------------------------------------------------


def test_bell_follows_read_and_dismiss_at_once(
    page: Page, ui_gateway: LiveGateway, ui_services: Services, screenshot: Screenshot
) -> None:
    for subject in ("job-a", "job-b"):
        create_operation(ui_services, "ada", subject=named_job(ui_services, subject))
        complete(ui_services, claim(ui_services, ["strategy.snapshot"]))
    create_operation(ui_services, "ada", task_type="cv.review", subject=("attachment", "cv-1"))
    counts = count_requests(page, "/api/notifications/unread-count")
    sign_in(page, ui_gateway, "ada")
    badge = page.locator(".bell__badge")
    expect(bell(page)).to_have_attribute("aria-label", "Notifications, 2 unread")
    expect(badge).to_have_text("2")
    expect(page.locator(".note--unread")).to_have_count(2)
    # Each button says which notification it is for; no line sends the reader to this page.
    for job in ("job-a", "job-b"):
        mark = re.compile(rf"^Mark read: Strategy snapshot is ready \({job} at Acme, ")
        expect(page.get_by_role("button", name=mark)).to_have_count(1)
    expect(page.get_by_text("Open your operations to see it.")).to_have_count(0)
    screenshot(page, "06-notifications")
    requests_before = len(counts)

    notes = page.locator(".note")
    notes.first.get_by_role("button", name=re.compile("^Mark read")).click()
    expect(bell(page)).to_have_attribute("aria-label", "Notifications, 1 unread", timeout=3000)
    expect(badge).to_have_text("1")
    expect(page.locator(".note--unread")).to_have_count(1)
    # Focus goes on to the next notification's first control, not back up to the heading.
    expect(notes.nth(1).get_by_role("link").first).to_be_focused()

    notes.nth(1).get_by_role("button", name=re.compile("^Dismiss")).click()
    expect(bell(page)).to_have_attribute("aria-label", "Notifications, none unread", timeout=3000)
    expect(badge).to_be_hidden()
    expect(notes).to_have_count(1)
    expect(notes.first.get_by_role("link").first).to_be_focused()  # the last went: the one before
    # The bell refreshed through the local event (its interval is 60 s), one request each.
    # The event stream may show the new count before the bell's own answer finishes.
    deadline = time.monotonic() + 3
    while len(counts) - requests_before < 2 and time.monotonic() < deadline:
        page.wait_for_timeout(50)
    page.wait_for_timeout(300)  # room for a third request, which would be one too many
    assert len(counts) - requests_before == 2
    screenshot(page, "07-notifications-after")


def _tab_to(page: Page, element_id: str, presses: int = 30) -> None:
    for _ in range(presses):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.id") == element_id:
            return
    pytest.fail(f"#{element_id} cannot be reached with Tab")


@pytest.mark.parametrize("viewport", ["phone", "desktop"])
def test_the_bell_leads_to_the_notifications_by_mouse_and_by_keyboard_alone(
    browser: Browser,
    ui_gateway: LiveGateway,
    ui_services: Services,
    screenshot: Screenshot,
    viewport: str,
) -> None:
    for subject in ("job-done-1", "job-done-2"):
        create_operation(ui_services, "ada", subject=("job", subject))
        complete(ui_services, claim(ui_services, ["strategy.snapshot"]))
    for n in range(8):  # a phone shows these first, far above the notifications
        create_operation(ui_services, "ada", subject=("job", f"job-waiting-{n}"))
    phone = viewport == "phone"
    context = browser.new_context(viewport=PHONE if phone else DESKTOP, is_mobile=phone)  # type: ignore[arg-type]
    try:
        page = context.new_page()
        sign_in(page, ui_gateway, "ada")
        expect(page.locator("li.op")).to_have_count(10)
        heading = page.get_by_role("heading", name="Notifications", exact=True)
        read_all = page.get_by_role("button", name="Mark all read")
        first_link = page.locator(".note").first.get_by_role(
            "link", name=re.compile("^Open the operation")
        )
        if phone:
            expect(heading).not_to_be_in_viewport()  # below every operation

        # By mouse, on this very page: no reload, the list stays.
        bell(page).click()
        expect(page).to_have_url(re.compile(r"/operations#notifications$"))
        expect(heading).to_be_focused()
        for shown in (heading, read_all, first_link):
            expect(shown).to_be_in_viewport()
        expect(page.locator("li.op")).to_have_count(10)
        screenshot(page, f"11-bell-notifications-{viewport}")

        # By keyboard alone, from another page: Tab to the bell, Enter, and on.
        page.goto(ui_gateway.url + "/jobs")
        expect(bell(page)).to_have_accessible_name("Notifications, 2 unread")
        _tab_to(page, "bell")
        page.keyboard.press("Enter")
        page.wait_for_url(re.compile(r"/operations#notifications$"))
        expect(heading).to_be_focused()
        expect(read_all).to_be_visible()  # the list has loaded
        for shown in (heading, read_all, first_link):
            expect(shown).to_be_in_viewport()
        page.keyboard.press("Tab")
        expect(read_all).to_be_focused()
        page.keyboard.press("Tab")
        expect(first_link).to_be_focused()
        page.keyboard.press("Shift+Tab")
        page.keyboard.press("Enter")
        expect(bell(page)).to_have_accessible_name("Notifications, none unread")
        expect(page.locator(".note--unread")).to_have_count(0)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"the page scrolls sideways by {overflow}px"
    finally:
        context.close()


def test_with_the_event_stream_open_the_bell_does_not_poll(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    unread = count_requests(page, "/api/notifications/unread-count")
    streams: list[str] = []
    page.on("response", lambda r: streams.append(r.url) if "/api/events" in r.url else None)
    page.clock.install()
    sign_in(page, ui_gateway, "ada")
    expect(bell(page)).to_have_accessible_name("Notifications, none unread")
    wait_for_count(page, unread, 1)  # the first look, before the stream opened
    wait_for_count(page, streams, 1)  # the stream answered: it is open
    page.clock.run_for(125_000)  # two 60-s polls' time
    page.wait_for_timeout(300)
    assert len(unread) == 1, unread

    # The count comes from the stream, at once. The list's reload is held until the
    # operation is over, so the list sees it new and finished: the bell still waits
    # for the stream rather than asking.
    held: list[Route] = []
    page.route("**/api/operations?*", lambda route: held.append(route))
    create_operation(ui_services, "ada", subject=("job", "job-streamed"))
    complete(ui_services, claim(ui_services, ["strategy.snapshot"]))
    wait_for_count(page, held, 1)
    for route in held:
        route.continue_()
    page.unroute("**/api/operations?*")
    expect(bell(page)).to_have_accessible_name("Notifications, 1 unread", timeout=2000)
    expect(page.locator("li.op")).to_have_count(1)
    page.wait_for_timeout(300)
    assert len(unread) == 1, unread


# ---- the shell ------------------------------------------------------------------------------


def test_an_unknown_page_is_a_page_while_the_api_keeps_its_problem_json(
    page: Page, ui_gateway: LiveGateway, screenshot: Screenshot
) -> None:
    answer = page.goto(f"{ui_gateway.url}/nope")
    assert answer is not None
    assert answer.status == 404
    assert answer.headers["content-type"].startswith("text/html")
    expect(page.get_by_role("heading", name="Page not found")).to_be_visible()
    expect(page.get_by_role("link", name="Go to durable-ops")).to_have_attribute("href", "/")
    screenshot(page, "15-page-not-found")

    html_asked = {"Accept": "text/html"}
    api = page.request.get(f"{ui_gateway.url}/api/nope", headers=html_asked)
    assert api.status == 404
    assert api.headers["content-type"].startswith("application/problem+json")
    assert api.json()["code"] == "not_found"

    icon = page.request.get(f"{ui_gateway.url}/favicon.ico")
    assert icon.status == 200
    assert icon.headers["content-type"].startswith("image/svg+xml")


# ---- loading, empty and error states ------------------------------------------------------


def test_error_state_offers_a_retry(
    page: Page, ui_gateway: LiveGateway, screenshot: Screenshot
) -> None:
    problem = {
        "type": "urn:durable-ops:problem:unavailable",
        "title": "Service Unavailable",
        "status": 503,
        "detail": "backend unavailable",
        "code": "unavailable",
    }

    def unavailable(route: Route) -> None:
        route.fulfill(status=503, content_type="application/problem+json", body=json.dumps(problem))

    page.route("**/api/operations?*", unavailable)
    sign_in(page, ui_gateway, "ada")
    alert = page.locator(".placeholder--error")
    expect(alert).to_contain_text("Operations could not be loaded")
    expect(alert).to_contain_text("not reachable")
    screenshot(page, "09-error")

    page.unroute("**/api/operations?*")
    alert.get_by_role("button", name="Retry").click()
    expect(page.get_by_text("No operations yet.")).to_be_visible()
    expect(alert).to_have_count(0)


def test_loading_state_then_a_stopped_backend(
    page: Page, serve_ui: Callable[..., LiveGateway], ui_services: Services
) -> None:
    create_operation(ui_services, "ada")
    gateway = serve_ui()
    held: list[Route] = []
    page.route("**/api/operations?*", lambda route: held.append(route))
    sign_in(page, gateway, "ada")
    expect(page.get_by_text("Loading operations…")).to_be_visible()
    expect(page.locator("section[aria-busy='true']")).to_have_count(1)
    for _ in range(100):
        if held:
            break
        page.wait_for_timeout(50)
    held[0].continue_()
    page.unroute("**/api/operations?*")
    expect(page.locator("li.op")).to_have_count(1)

    down = serve_ui(operations_target="127.0.0.1:9", notifications_target="127.0.0.1:9")
    sign_in(page, down, "ada")
    expect(page.locator(".placeholder--error")).to_contain_text("Operations could not be loaded")
    expect(bell(page)).to_have_attribute("aria-label", "Notifications")


# ---- polling rhythm -----------------------------------------------------------------------


def test_the_bell_polls_only_the_unread_count_every_60_seconds(
    page: Page, ui_gateway: LiveGateway
) -> None:
    refuse_long_polls(page)  # the poll is the fallback while no event stream is open
    unread = count_requests(page, "/api/notifications/unread-count")
    lists = count_requests(page, "/api/notifications")
    page.clock.install()
    sign_in(page, ui_gateway, "ada")
    expect(bell(page)).to_have_accessible_name("Notifications, none unread")
    wait_for_count(page, unread, 1)
    wait_for_count(page, lists, 1)

    page.clock.run_for(55_000)
    page.wait_for_timeout(300)
    assert len(unread) == 1
    page.clock.run_for(6_000)
    wait_for_count(page, unread, 2)
    page.clock.run_for(65_000)
    wait_for_count(page, unread, 3)
    page.wait_for_timeout(300)
    assert len(unread) == 3
    assert len(lists) == 1  # the list is not polled; only the unread count is


def test_the_unread_poll_interval_is_configurable(
    page: Page, serve_ui: Callable[..., LiveGateway]
) -> None:
    gateway = serve_ui(ui_unread_poll_ms=5000)
    refuse_long_polls(page)
    unread = count_requests(page, "/api/notifications/unread-count")
    page.clock.install()
    sign_in(page, gateway, "ada")
    wait_for_count(page, unread, 1)
    page.clock.run_for(5_500)
    wait_for_count(page, unread, 2)
    page.clock.run_for(5_500)
    wait_for_count(page, unread, 3)


def test_operations_poll_only_while_the_page_is_shown(page: Page, ui_gateway: LiveGateway) -> None:
    refuse_long_polls(page)  # the bell polls too: no event stream tells it the count
    polls = count_requests(page, "/api/operations")
    unread = count_requests(page, "/api/notifications/unread-count")
    page.clock.install()
    sign_in(page, ui_gateway, "ada")
    wait_for_count(page, polls, 1)
    page.clock.run_for(2_100)
    wait_for_count(page, polls, 2)

    set_visibility(page, "hidden")
    page.wait_for_timeout(300)
    hidden_at, unread_at = len(polls), len(unread)
    for _ in range(5):
        page.clock.run_for(30_000)
    page.wait_for_timeout(300)
    assert len(polls) == hidden_at
    assert len(unread) == unread_at

    set_visibility(page, "visible")
    wait_for_count(page, polls, hidden_at + 1)  # shown again: refreshed at once
    wait_for_count(page, unread, unread_at + 1)
    page.clock.run_for(2_100)
    wait_for_count(page, polls, hidden_at + 2)


def test_a_live_operation_is_followed_by_the_event_stream_while_the_list_polls_slowly(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    operation = create_operation(ui_services, "ada", subject=named_job(ui_services, "job-follow"))
    claimed = claim(ui_services, ["strategy.snapshot"])
    polls = timed_requests(page, "/api/operations")
    streams: list[Request] = []
    page.on("request", lambda r: streams.append(r) if "/api/events" in r.url else None)
    sign_in(page, ui_gateway, "ada")
    running = card(page, operation.id)
    expect(running.locator(".state")).to_have_text("Waiting for the model")
    wait_for_count(page, polls, 3, timeout_ms=8000)
    paced = gaps_ms(polls[:3])
    # Followed, so the list keeps its idle 2000 ms although one is live.
    assert all(gap >= 1900 for gap in paced), f"gaps while followed: {paced}"
    assert streams, "no event stream"

    heartbeat(ui_services, claimed, 65)
    progress = page.get_by_label("Progress of Strategy snapshot for job-follow at Acme")
    expect(progress).to_have_attribute("value", "65", timeout=1000)  # before the next list poll
    complete(ui_services, claimed)
    expect(running.locator(".state")).to_have_text("Succeeded", timeout=1000)


def test_with_the_stream_open_and_nothing_live_the_list_does_not_poll(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    finished = create_operation(ui_services, "ada", subject=("job", "job-quiet"))
    complete(ui_services, claim(ui_services, ["strategy.snapshot"]))
    polls = count_requests(page, "/api/operations")
    streams: list[str] = []
    page.on("response", lambda r: streams.append(r.url) if "/api/events" in r.url else None)
    page.clock.install()
    sign_in(page, ui_gateway, "ada")
    expect(card(page, finished.id).locator(".state")).to_have_text("Succeeded")
    wait_for_count(page, streams, 1)  # the stream answered: it is open
    page.wait_for_timeout(300)
    settled = len(polls)
    page.clock.run_for(10_000)  # five idle polls' time
    page.wait_for_timeout(300)
    assert len(polls) == settled, polls

    # What the stream tells still shows at once.
    queued = create_operation(ui_services, "ada", subject=("job", "job-new"))
    expect(card(page, queued.id).locator(".state")).to_have_text("Queued", timeout=2000)


def wait_until_heard(page: Page, progress: int) -> None:
    """Until the page's stream told it of this progress (``window.heard``). Asked from here:
    the page's CSP refuses the evaluated predicate ``wait_for_function`` polls with."""
    for _ in range(100):
        if progress in page.evaluate("window.heard"):
            return
        page.wait_for_timeout(50)
    raise AssertionError(f"the stream never told of {progress} %")


def test_a_change_the_stream_tells_while_the_list_loads_is_not_loaded_twice(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """The stream opens as the list's first load is on its way: the changes it tells then,
    which that load shows (or a later one), ask for no second load (only one it does not
    show would), and the older one does not set the card back."""
    operation = create_operation(ui_services, "ada", subject=named_job(ui_services, "job-early"))
    claimed = claim(ui_services, ["strategy.snapshot"])
    page.add_init_script(
        "window.heard = [];"
        " addEventListener('live:operation', (e) => {"
        " window.heard.push(e.detail.operation.progress_percent); });"
    )
    held: list[Route] = []
    page.route(
        "**/api/operations?*", lambda route: held.append(route) if not held else route.continue_()
    )
    polls = timed_requests(page, "/api/operations")
    sign_in(page, ui_gateway, "ada")  # lands on /operations
    wait_for_count(page, held, 1)
    heartbeat(ui_services, claimed, 40)
    wait_until_heard(page, 40)
    heartbeat(ui_services, claimed, 60)
    wait_until_heard(page, 60)
    held[0].continue_()  # reads 60, with 40 and 60 heard on its way
    running = card(page, operation.id)
    progress = page.get_by_label("Progress of Strategy snapshot for job-early at Acme")
    expect(progress).to_have_attribute("value", "60")
    expect(running.locator(".state")).to_have_text("Running")
    page.wait_for_timeout(1000)
    assert progress.get_attribute("value") == "60"  # not set back by the older 40
    assert len(polls) == 1, f"loads: {[request.url for request in polls]}"


def test_when_the_long_poll_fails_the_list_polls_fast_while_one_is_live(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    refuse_long_polls(page)
    operation = create_operation(ui_services, "ada", subject=named_job(ui_services, "job-pace"))
    claimed = claim(ui_services, ["strategy.snapshot"])
    polls = timed_requests(page, "/api/operations")
    page.clock.install()
    sign_in(page, ui_gateway, "ada")
    running = card(page, operation.id)
    expect(running.locator(".state")).to_have_text("Waiting for the model")
    looks_once_a_step(page, polls, 600)  # every 500 ms while one runs (idle: 2000 ms)
    page.clock.resume()

    heartbeat(ui_services, claimed, 55)
    expect(
        page.get_by_label("Progress of Strategy snapshot for job-pace at Acme")
    ).to_have_attribute("value", "55")
    complete(ui_services, claimed)
    expect(running.locator(".state")).to_have_text("Succeeded")
    settled = len(polls)
    wait_for_count(page, polls, settled + 2, timeout_ms=8000)
    idle = gaps_ms(polls[settled - 1 : settled + 2])
    # Nothing live is shown any more: back to every 2000 ms. The page's clock, installed and
    # resumed, fires a timer up to some 130 ms early by the browser's own timing: a floor far
    # from the live 500 ms, not at the 2000 ms.
    assert all(gap >= IDLE_GAP_FLOOR_MS for gap in idle), f"gaps once finished: {idle}"


def test_the_pace_slows_once_the_last_live_operation_is_cancelled(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    refuse_long_polls(page)  # else it is followed and the list never polls fast
    finished = create_operation(ui_services, "ada", subject=named_job(ui_services, "job-done"))
    complete(ui_services, claim(ui_services, ["strategy.snapshot"]))
    queued = create_operation(ui_services, "ada", subject=named_job(ui_services, "job-waiting"))
    polls = timed_requests(page, "/api/operations")
    page.clock.install()
    sign_in(page, ui_gateway, "ada")
    expect(card(page, finished.id).locator(".state")).to_have_text("Succeeded")
    expect(card(page, queued.id).locator(".state")).to_have_text("Queued")
    looks_once_a_step(page, polls, 600)  # every 500 ms while one is queued (idle: 2000 ms)
    page.clock.resume()

    page.get_by_role("button", name="Cancel Strategy snapshot for job-waiting at Acme").click()
    page.get_by_role("button", name="Cancel operation").click()
    expect(card(page, queued.id).locator(".state")).to_have_text("Cancelled")
    # The poll the cancel asked for has answered once no request starts for longer than the
    # live pace and its slowest answer (a fixed 300 ms was too short on two busy cores).
    wait_until_quiet(page, polls, quiet_ms=1200)
    settled = len(polls)
    wait_for_count(page, polls, settled + 2, timeout_ms=8000)
    idle = gaps_ms(polls[settled - 1 : settled + 2])
    assert all(gap >= IDLE_GAP_FLOOR_MS for gap in idle), f"gaps once nothing is live: {idle}"
