"""Results as history and actions where the user is (issue 39, points 4 and 5), in a real
browser: a re-run keeps the previous result, labelled as the previous one and naming its
CV and model; a cancelled or failed run never sits above an older result as its own;
"View result" on a past operation opens that operation's result; retry on the card (the
earlier notice cleared, and the page says so); the cancel dialog when the analysis ends
while it is open."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.support.gateway import (
    Claimed,
    LiveGateway,
    acknowledge_cancel,
    claim,
    complete,
    fail,
    heartbeat,
    publish,
)
from tests.support.grpc_services import Services
from tests.support.long_polls import RequestsInFlight, refuse_long_polls
from tests.support.signin import dev_sign_in
from tests.support.workspace_client import create_cv, create_job, entitle

pytestmark = pytest.mark.browser
Screenshot = Callable[[Page, str], Path]
SNAPSHOT = "strategy.snapshot"
QWEN = ("127.0.0.1", "qwen2.5-3b-instruct", "local")
HEURISTIC = ("127.0.0.1", "dev-heuristic", "local")
CLEARED = "The earlier notice is cleared; you will be told when this run ends."


def answer(score: int) -> dict[str, Any]:
    return {
        "fit_score": score,
        "summary": f"Scored {score}.",
        "strengths": ["Python"],
        "gaps": ["Kubernetes"],
        "next_steps": ["Mention the on-call rotation"],
    }


def open_job(page: Page, gateway: LiveGateway, services: Services, *, cv: bool = True) -> Locator:
    """Alice (Pro) on /jobs with one job (and a CV, cv.txt); no AI worker runs here."""
    entitle(services.db, "alice")
    create_job(services.workspace, "alice")
    if cv:
        create_cv(services.workspace, "alice")
    dev_sign_in(page, gateway.url, "alice", then="/jobs")
    job = page.locator("ol[aria-label='Your jobs'] li.item")
    expect(job).to_have_count(1)
    return job


def start(job: Locator, cv: str = "") -> None:
    job.get_by_label("CV to compare with").select_option(label=cv or "Without a CV")
    job.get_by_role("button", name="Start strategy snapshot").click()
    expect(job.locator(".analysis .state")).to_have_text("Queued")


def finish(services: Services, score: int, provenance: tuple[str, str, str] = QWEN) -> Claimed:
    claimed = claim(services, [SNAPSHOT])
    publish(services, claimed, answer(score), provenance=provenance)
    complete(services, claimed)
    return claimed


def results(job: Locator) -> Locator:
    return job.locator(".analysis__result")


def notifications_of(page: Page, gateway: LiveGateway, operation_id: str) -> list[Any]:
    listed = page.request.get(f"{gateway.url}/api/notifications").json()
    return [item for item in listed["items"] if item["operation_id"] == operation_id]


def test_a_rerun_keeps_the_previous_result_labelled_with_its_cv_and_model(
    page: Page, ui_gateway: LiveGateway, ui_services: Services, screenshot: Screenshot
) -> None:
    job = open_job(page, ui_gateway, ui_services)
    start(job, "cv.txt")
    finish(ui_services, 21)
    own = results(job)
    expect(own).to_have_count(1)
    expect(own.locator(".analysis__result-heading")).to_have_text(
        re.compile(r"^Result, .+, with cv\.txt$")
    )
    expect(own).to_contain_text("Fit: 21")
    expect(own).to_contain_text("Produced by qwen2.5-3b-instruct, a local model.")

    start(job)  # again, without a CV this time
    previous = results(job)
    expect(previous).to_have_count(1)
    expect(previous).to_have_class(re.compile("analysis__result--previous"))
    expect(previous.locator(".analysis__result-heading")).to_have_text(
        re.compile(r"^Previous result, .+, with cv\.txt$")
    )
    expect(previous).to_contain_text("Produced by qwen2.5-3b-instruct")  # its own model
    claimed = claim(ui_services, [SNAPSHOT])
    heartbeat(ui_services, claimed, 30)
    expect(job.locator(".analysis .state")).to_have_text("Running")
    expect(previous.locator(".analysis__result-heading")).to_have_text(
        re.compile(r"^Previous result, ")
    )
    screenshot(page, "70-jobs-running-above-the-previous-result")

    publish(ui_services, claimed, answer(64), provenance=HEURISTIC)
    complete(ui_services, claimed)
    newest = results(job)
    expect(newest.locator(".analysis__result-heading")).to_have_text(
        re.compile(r"^Result, .+, without a CV$")
    )
    expect(newest).to_contain_text("Fit: 64")
    expect(newest).to_contain_text("Produced by dev-heuristic, the built-in development heuristic.")
    expect(job.get_by_text("Fit: 21")).to_have_count(0)

    page.reload()  # from the stored results too
    expect(results(job).locator(".analysis__result-heading")).to_have_text(
        re.compile(r"^Result, .+, without a CV$")
    )


def test_a_cancelled_run_never_sits_above_an_older_result_as_its_own(
    page: Page, ui_gateway: LiveGateway, ui_services: Services, screenshot: Screenshot
) -> None:
    job = open_job(page, ui_gateway, ui_services)
    start(job, "cv.txt")
    finish(ui_services, 21)
    expect(job.get_by_text("Fit: 21")).to_be_visible()

    start(job, "cv.txt")
    claimed = claim(ui_services, [SNAPSHOT])
    heartbeat(ui_services, claimed, 40)
    job.get_by_role("button", name="Cancel analysis").click()
    page.get_by_role("button", name="Stop analysis").click()
    expect(job.get_by_role("button", name="Cancelling…")).to_be_visible()  # the cancel landed
    assert heartbeat(ui_services, claimed, 45) is True
    acknowledge_cancel(ui_services, claimed)
    expect(job.locator(".analysis .state")).to_have_text("Cancelled")
    kept = results(job)
    expect(kept).to_have_count(1)
    expect(kept.locator(".analysis__result-heading")).to_have_text(
        re.compile(r"^Previous result, .+, with cv\.txt$")
    )
    expect(kept).to_contain_text("Produced by qwen2.5-3b-instruct")  # not "not recorded"
    expect(job.get_by_text("The model that produced this result is not recorded")).to_have_count(0)
    expect(job.get_by_role("button", name="Retry analysis")).to_be_visible()
    screenshot(page, "71-jobs-cancelled-above-the-previous-result")

    page.reload()
    expect(job.locator(".analysis .state")).to_have_text("Cancelled")
    expect(results(job).locator(".analysis__result-heading")).to_have_text(
        re.compile(r"^Previous result, ")
    )


def test_view_result_on_a_past_operation_opens_that_operations_result(
    page: Page, ui_gateway: LiveGateway, ui_services: Services, screenshot: Screenshot
) -> None:
    job = open_job(page, ui_gateway, ui_services)
    start(job, "cv.txt")
    first = finish(ui_services, 21)
    expect(job.get_by_text("Fit: 21")).to_be_visible()
    start(job)
    second = finish(ui_services, 64, HEURISTIC)
    expect(job.get_by_text("Fit: 64")).to_be_visible()

    page.goto(f"{ui_gateway.url}/operations")
    older = page.locator(f'li.op[data-id="{first.operation_id}"]')
    older.get_by_role("link", name="View result").click()
    page.wait_for_url(re.compile(rf"/jobs\?result={first.operation_id}#job-{first.subject_id}$"))
    earlier = job.get_by_role("region", name="Earlier result")
    expect(earlier).to_contain_text("Fit: 21")
    expect(earlier.locator(".analysis__result-heading")).to_have_text(
        re.compile(r"^Earlier result, .+, with cv\.txt$")
    )
    expect(earlier).to_contain_text("Produced by qwen2.5-3b-instruct")
    # The newest result is still there, as the result of the run the card shows.
    expect(job.locator(".analysis__result:not(.analysis__result--earlier)")).to_contain_text(
        "Fit: 64"
    )
    screenshot(page, "72-jobs-view-an-earlier-result")
    earlier.get_by_role("button", name="Hide this earlier result").click()
    expect(earlier).to_have_count(0)

    # The newest run's link opens the card as it is: nothing shown twice.
    page.goto(f"{ui_gateway.url}/operations")
    newest = page.locator(f'li.op[data-id="{second.operation_id}"]')
    newest.get_by_role("link", name="View result").click()
    page.wait_for_url(re.compile(rf"/jobs\?result={second.operation_id}#"))
    expect(job.get_by_text("Fit: 64")).to_be_visible()
    expect(job.get_by_role("region", name="Earlier result")).to_have_count(0)
    expect(results(job)).to_have_count(1)


def test_retry_on_the_card_after_a_failure_clears_the_earlier_notice(
    page: Page, ui_gateway: LiveGateway, ui_services: Services, screenshot: Screenshot
) -> None:
    job = open_job(page, ui_gateway, ui_services, cv=False)
    start(job)
    claimed = claim(ui_services, [SNAPSHOT])
    fail(ui_services, claimed)
    expect(job.locator(".analysis .state")).to_have_text("Failed")
    assert len(notifications_of(page, ui_gateway, claimed.operation_id)) == 1

    job.get_by_role("button", name="Retry analysis").click()
    expect(job.get_by_role("status").filter(has_text=CLEARED)).to_be_visible()
    expect(job.locator(".analysis .state")).to_have_text("Queued")
    expect(job.get_by_role("alert")).to_be_hidden()
    assert notifications_of(page, ui_gateway, claimed.operation_id) == []  # seed 003
    screenshot(page, "73-jobs-retried-on-the-card")

    again = claim(ui_services, [SNAPSHOT])
    assert again.operation_id == claimed.operation_id  # the same operation, run again
    publish(ui_services, again, answer(50), provenance=QWEN)
    complete(ui_services, again)
    expect(job.get_by_text("Fit: 50")).to_be_visible()
    expect(job.get_by_role("status").filter(has_text=CLEARED)).to_have_count(0)
    assert len(notifications_of(page, ui_gateway, claimed.operation_id)) == 1


def retries(page: Page) -> list[str]:
    """The retries the page sends from now on."""
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.url) if r.url.endswith("/retry") else None)
    return sent


def cancel_on_the_card(page: Page, job: Locator) -> None:
    job.get_by_role("button", name="Cancel analysis").click()
    page.get_by_role("button", name="Stop analysis").click()
    expect(job.locator(".analysis .state")).to_have_text("Cancelled")


def test_retry_on_the_card_after_a_cancel_sends_one_retry_for_a_double_click(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """The second click of a double click sent a second retry, whose 409 stood in red beside
    "Queued again"."""
    sent = retries(page)
    job = open_job(page, ui_gateway, ui_services, cv=False)
    start(job)
    cancel_on_the_card(page, job)
    retry = job.get_by_role("button", name="Retry analysis")
    retry.dblclick()
    expect(job.locator(".analysis .state")).to_have_text("Queued")
    expect(job.get_by_text(CLEARED)).to_be_visible()
    expect(job.get_by_role("button", name="Cancel analysis")).to_be_visible()
    expect(retry).to_have_count(0)
    page.wait_for_timeout(300)
    assert len(sent) == 1, sent
    expect(job.get_by_role("alert")).to_be_hidden()


def test_a_retry_that_found_the_analysis_started_again_is_no_error(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """Another tab retried it first: the retry answers 409, which says what happened."""
    job = open_job(page, ui_gateway, ui_services, cv=False)
    start(job)
    cancel_on_the_card(page, job)
    problem = {
        "title": "Conflict",
        "status": 409,
        "detail": "Only failed or cancelled operations can be retried, not queued.",
        "code": "failed_precondition",
    }
    page.route(
        "**/api/operations/*/retry",
        lambda route: route.fulfill(
            status=409, content_type="application/problem+json", json=problem
        ),
    )
    job.get_by_role("button", name="Retry analysis").click()
    expect(job.locator(".analysis__notice")).to_have_text(
        "This analysis had already been started again: there was nothing to retry."
    )
    expect(job.get_by_role("alert")).to_be_hidden()


def test_the_cancel_dialog_says_already_finished_when_the_analysis_ends_while_open(
    page: Page, ui_gateway: LiveGateway, ui_services: Services, screenshot: Screenshot
) -> None:
    job = open_job(page, ui_gateway, ui_services, cv=False)
    start(job)
    claimed = claim(ui_services, [SNAPSHOT])
    expect(job.locator(".analysis .state")).to_have_text("Waiting for the model")
    job.get_by_role("button", name="Cancel analysis").click()
    dialog = page.get_by_role("dialog", name="Cancel this analysis?")
    expect(dialog.get_by_role("button", name="Stop analysis")).to_be_visible()

    publish(ui_services, claimed, answer(82), provenance=QWEN)
    complete(ui_services, claimed)
    expect(dialog).to_contain_text("has already finished: there is nothing left to stop.")
    expect(dialog.get_by_role("button", name="Stop analysis")).to_have_count(0)
    close = dialog.get_by_role("button", name="Close")
    expect(close).to_be_focused()
    screenshot(page, "74-jobs-cancel-dialog-already-finished")
    close.click()
    expect(dialog).to_have_count(0)
    expect(job.get_by_text("Fit: 82")).to_be_visible()
    expect(job.get_by_role("alert")).to_be_hidden()
    expect(page.get_by_text("state changed")).to_have_count(0)


def test_a_stop_that_crosses_the_end_on_its_way_is_no_error(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """The page cannot hear of the end (stream and long-poll down, timers stopped) and the
    user confirms: the cancel answers 409, and the page says the analysis had already
    finished, in no red alert, and shows its result."""
    refuse_long_polls(page)
    requests = RequestsInFlight(page)
    page.clock.install()
    job = open_job(page, ui_gateway, ui_services, cv=False)
    start(job)
    page.clock.pause_at(datetime.now() + timedelta(seconds=1))
    # Pausing fires the timers due, and a failed long-poll makes the page read at once (its
    # 503 is this test's route, which answers only while the test waits on the page): the
    # end must not come while such a read is still on its way.
    requests.wait_quiet()
    job.get_by_role("button", name="Cancel analysis").click()
    finish(ui_services, 82)
    page.get_by_role("button", name="Stop analysis").click()
    expect(job.get_by_text("had already finished: there was nothing left to stop")).to_be_visible()
    expect(job.get_by_role("alert")).to_be_hidden()
    expect(page.get_by_text("state changed")).to_have_count(0)
    expect(job.locator(".analysis .state")).to_have_count(0)  # succeeded: only the result
    expect(job.get_by_text("Fit: 82")).to_be_visible()


def test_a_link_to_a_result_no_longer_kept_says_so_on_the_card(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    job = open_job(page, ui_gateway, ui_services, cv=False)
    start(job)
    claimed = finish(ui_services, 40)
    expect(job.get_by_text("Fit: 40")).to_be_visible()
    # Its result pruned, as each analysis keeps only its newest 20.
    page.route(
        f"**/api/operations/{claimed.operation_id}/result",
        lambda route: route.fulfill(status=404, json={"code": "result_not_found"}),
    )
    page.goto(f"{ui_gateway.url}/jobs?result={claimed.operation_id}#job-{claimed.subject_id}")
    expect(job.get_by_role("status").filter(has_text="no longer kept")).to_be_visible()
    expect(job.get_by_role("alert")).to_be_hidden()


def test_a_link_to_no_run_of_the_users_says_not_found_on_the_card(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """A mistyped link said the result was "no longer kept", as if it had been there."""
    job = open_job(page, ui_gateway, ui_services, cv=False)
    job_id = str(job.get_attribute("id")).removeprefix("job-")
    page.goto(f"{ui_gateway.url}/jobs?result=deadbeef#job-{job_id}")
    expect(job.locator(".analysis__notice")).to_have_text(
        "That result was not found: the link names no run of yours."
    )
    expect(job.get_by_role("alert")).to_be_hidden()
