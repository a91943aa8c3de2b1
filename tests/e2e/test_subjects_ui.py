"""What each operation is about, in a real browser: the subject by its name (the job's
title and company, the CV's filename) on the operations page and in the cancel dialog;
notifications that name their task and subject and link to the operation and its
result; "Mark all read"; and the bell, which follows at once (within 2 s, while its
own poll waits 60 s)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.support.gateway import (
    LiveGateway,
    claim,
    complete,
    create_operation,
    fail,
    publish,
)
from tests.support.grpc_services import Services
from tests.support.signin import dev_sign_in
from tests.support.workspace_client import ANSWER, create_cv, create_job, entitle

pytestmark = pytest.mark.browser
Screenshot = Callable[[Page, str], Path]
BELL_MS = 2000  # the bar: the bell changes within 2 s (its own poll is 60 s)
IDLE_POLL_MS = 2000  # OPERATIONS_POLL_MS of pages/operations.js: the pace while nothing is live


def sign_in(page: Page, gateway: LiveGateway, user: str, path: str = "/operations") -> None:
    dev_sign_in(page, gateway.url, user, then=path)


def card(page: Page, operation_id: str) -> Locator:
    return page.locator(f'li.op[data-id="{operation_id}"]')


def bell(page: Page) -> Locator:
    return page.locator("#bell")


def test_operations_and_the_cancel_dialog_name_the_subject(
    page: Page, ui_gateway: LiveGateway, ui_services: Services, screenshot: Screenshot
) -> None:
    job_id = create_job(ui_services.workspace, "ada")  # "Engineer" at "Acme"
    cv_id = create_cv(ui_services.workspace, "ada")  # "cv.txt"
    other_job = create_job(ui_services.workspace, "bob")  # not Ada's: never named to her
    snapshot = create_operation(ui_services, "ada", subject=("job", job_id))
    review = create_operation(
        ui_services, "ada", task_type="cv.review", subject=("attachment", cv_id)
    )
    foreign = create_operation(ui_services, "ada", subject=("job", other_job))

    sign_in(page, ui_gateway, "ada")
    expect(card(page, snapshot.id).locator(".op__subject")).to_have_text("Job: Engineer at Acme")
    expect(card(page, review.id).locator(".op__subject")).to_have_text("CV: cv.txt")
    # Another owner's job is not readable through Ada's workspace: its read is the 404 of a
    # deleted one (ADR 60), and that is all she is told of it.
    expect(card(page, foreign.id).locator(".op__subject")).to_have_text("A deleted job")
    expect(card(page, foreign.id)).not_to_contain_text("Engineer")
    screenshot(page, "40-operations-named")

    page.get_by_role("button", name="Cancel CV review for cv.txt").click()
    dialog = page.get_by_role("dialog", name="Cancel this operation?")
    expect(dialog).to_contain_text("CV review for cv.txt will stop.")
    page.get_by_role("button", name="Keep running").click()

    page.get_by_role("button", name="Cancel Strategy snapshot for Engineer at Acme").click()
    expect(dialog).to_contain_text("Strategy snapshot for Engineer at Acme will stop.")
    screenshot(page, "41-cancel-dialog-named")
    page.get_by_role("button", name="Cancel operation").click()
    expect(card(page, snapshot.id).locator(".state")).to_have_text("Cancelled")
    expect(page.get_by_role("status").filter(has_text="cancelled")).to_have_text(
        "Strategy snapshot for Engineer at Acme cancelled."
    )


def test_a_notification_names_its_task_and_links_to_the_operation_and_the_result(
    page: Page, ui_gateway: LiveGateway, ui_services: Services, screenshot: Screenshot
) -> None:
    job_id = create_job(ui_services.workspace, "ada")
    cv_id = create_cv(ui_services.workspace, "ada")
    succeeded = create_operation(ui_services, "ada", subject=("job", job_id))
    claimed = claim(ui_services, ["strategy.snapshot"])
    publish(ui_services, claimed, ANSWER)
    complete(ui_services, claimed)
    failed = create_operation(
        ui_services, "ada", task_type="cv.review", subject=("attachment", cv_id), max_attempts=1
    )
    fail(ui_services, claim(ui_services, ["cv.review"]))

    sign_in(page, ui_gateway, "ada")
    ready = page.locator(".note").filter(has_text="Strategy snapshot is ready")
    expect(ready.locator(".note__about")).to_have_text("Strategy snapshot for Engineer at Acme")
    not_done = page.locator(".note").filter(has_text="CV review could not be completed")
    expect(not_done.locator(".note__about")).to_have_text("CV review for cv.txt")
    # A failure has nothing to show but its operation.
    expect(not_done.get_by_role("link", name=re.compile("^View the result"))).to_have_count(0)
    screenshot(page, "42-notifications-named")

    not_done.get_by_role("link", name=re.compile("^Open the operation")).click()
    expect(page).to_have_url(re.compile(f"#operation-{failed.id}$"))
    expect(card(page, failed.id)).to_have_class(re.compile("is-highlighted"))
    expect(card(page, succeeded.id)).not_to_have_class(re.compile("is-highlighted"))
    expect(card(page, failed.id)).to_be_in_viewport()

    ready.get_by_role("link", name=re.compile("^View the result")).click()
    page.wait_for_url(re.compile(f"/jobs\\?result=\\w+#job-{job_id}$"))
    job = page.locator(f"#job-{job_id}")
    expect(job).to_have_class(re.compile("is-highlighted"))
    expect(job.get_by_text("Fit: 82")).to_be_visible()
    screenshot(page, "43-notification-opened-the-result")


def test_an_operation_link_opens_it_even_when_the_list_does_not_hold_it(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    job_id = create_job(ui_services.workspace, "ada")
    oldest = create_operation(ui_services, "ada", subject=("job", job_id), key="oldest")
    for index in range(20):  # one page is 20: the oldest is not on it
        create_operation(ui_services, "ada", subject=("job", job_id), key=f"newer-{index}")
    sign_in(page, ui_gateway, "ada")
    expect(page.locator("ol[aria-labelledby='operations-heading'] li.op")).to_have_count(20)
    page.goto(f"{ui_gateway.url}/operations#operation-{oldest.id}")
    shown = page.get_by_role("list", name="The operation you opened").locator("li.op")
    expect(shown).to_have_attribute("data-id", oldest.id)
    expect(shown.locator(".op__subject")).to_have_text("Job: Engineer at Acme")
    expect(shown).to_have_class(re.compile("is-highlighted"))

    page.goto(f"{ui_gateway.url}/operations#operation-{'0' * 32}")  # none of Ada's
    expect(page.get_by_role("alert")).to_have_text("The operation you opened is not among yours.")


def test_mark_all_read_and_the_bell_follow_at_once(
    page: Page, ui_gateway: LiveGateway, ui_services: Services, screenshot: Screenshot
) -> None:
    job_id = create_job(ui_services.workspace, "ada")
    for index in range(3):
        create_operation(ui_services, "ada", subject=("job", job_id), key=f"done-{index}")
        complete(ui_services, claim(ui_services, ["strategy.snapshot"]))
    sign_in(page, ui_gateway, "ada")
    expect(bell(page)).to_have_attribute("aria-label", "Notifications, 3 unread")
    expect(page.locator(".note--unread")).to_have_count(3)
    mark_all = page.get_by_role("button", name="Mark all read")
    screenshot(page, "44-mark-all-read-before")

    mark_all.click()
    expect(bell(page)).to_have_attribute(
        "aria-label", "Notifications, none unread", timeout=BELL_MS
    )
    expect(page.locator(".note--unread")).to_have_count(0)
    expect(page.locator(".note")).to_have_count(3)  # read, not dismissed
    expect(page.get_by_role("status").filter(has_text="marked")).to_have_text(
        "3 notifications marked as read."
    )
    expect(mark_all).to_be_hidden()  # nothing left to mark
    screenshot(page, "45-mark-all-read-after")


def test_the_bell_follows_a_terminal_state_the_operations_page_sees(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    job_id = create_job(ui_services.workspace, "ada")
    running = create_operation(ui_services, "ada", subject=("job", job_id), key="running")
    claimed = claim(ui_services, ["strategy.snapshot"])
    sign_in(page, ui_gateway, "ada")
    expect(card(page, running.id).locator(".state")).to_have_text("Waiting for the model")
    expect(bell(page)).to_have_attribute("aria-label", "Notifications, none unread")

    complete(ui_services, claimed)
    expect(bell(page)).to_have_attribute("aria-label", "Notifications, 1 unread", timeout=BELL_MS)

    # One that starts and ends between two polls is new and already over: it counts too.
    # Nothing was live, so the page sees it within one idle poll (2 s), then the bell
    # looks at once: far below the bell's own 60 s.
    create_operation(ui_services, "ada", subject=("job", job_id), key="quick")
    complete(ui_services, claim(ui_services, ["strategy.snapshot"]))
    expect(bell(page)).to_have_attribute(
        "aria-label", "Notifications, 2 unread", timeout=IDLE_POLL_MS + BELL_MS
    )


def test_the_bell_follows_an_analysis_that_ends_on_the_jobs_page(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    entitle(ui_services.db, "ada")
    create_job(ui_services.workspace, "ada")
    sign_in(page, ui_gateway, "ada", "/jobs")
    job = page.locator("ol[aria-label='Your jobs'] li.item")
    job.get_by_role("button", name="Start strategy snapshot").click()
    expect(job.locator(".analysis .state")).to_have_text("Queued")
    expect(bell(page)).to_have_attribute("aria-label", "Notifications, none unread")

    claimed = claim(ui_services, ["strategy.snapshot"])
    publish(ui_services, claimed, ANSWER)
    complete(ui_services, claimed)
    expect(job.get_by_text("Fit: 82")).to_be_visible()
    expect(bell(page)).to_have_attribute("aria-label", "Notifications, 1 unread", timeout=BELL_MS)
