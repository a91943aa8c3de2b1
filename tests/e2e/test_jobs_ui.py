"""The jobs page in a real browser: add a job and a CV, start a snapshot, watch it finish,
cancel it (in time, or too late), and the poll's pace while it is live; a read that fails
is tried again; more jobs and CVs than one page; the names of each card's controls."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from playwright.sync_api import (
    APIResponse,
    Browser,
    Locator,
    Page,
    Request,
    Response,
    Route,
    expect,
)
from sqlalchemy import func, select, update

from durable_ops.api.operations.v1 import operations_pb2 as ops_pb
from durable_ops.clock import utc_now
from durable_ops.model.scope import Role
from durable_ops.storage import budgets
from durable_ops.storage.schema import Attachment, UserOperation
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
from tests.support.grpc_services import Services, metadata
from tests.support.jobs_page import JOBS, add_job, open_jobs
from tests.support.long_polls import RequestsInFlight, looks_once_a_step, refuse_long_polls
from tests.support.signin import dev_sign_in
from tests.support.stored import scalar
from tests.support.workspace_client import (
    CV_TEXT,
    JOB_TEXT,
    create_cv,
    create_job,
    entitle,
    snapshot_request,
)

pytestmark = pytest.mark.browser
Screenshot = Callable[[Page, str], Path]
ANSWER = {
    "fit_score": 82,
    "summary": "A strong match on Python and gRPC.",
    "strengths": ["Python", "gRPC services"],
    "gaps": ["Kubernetes"],
    "next_steps": ["Mention the on-call rotation you led"],
}


def test_start_a_strategy_snapshot_and_read_its_result(
    page: Page, ui_gateway: LiveGateway, ui_services: Services, screenshot: Screenshot
) -> None:
    entitle(ui_services.db, "alice")
    open_jobs(page, ui_gateway.url, "alice")
    expect(page.get_by_text("Plan: Pro")).to_be_visible()
    expect(page.get_by_role("complementary", name="AI settings and CVs")).to_be_visible()

    cv_form = page.get_by_role("form", name="Add a CV")
    cv_form.get_by_label("File name").fill("cv.txt")
    cv_form.get_by_label("CV text").fill(CV_TEXT)
    cv_form.get_by_role("button", name="Add CV").click()
    expect(page.locator("#cvs-heading ~ ol li.item")).to_have_count(1)
    expect(cv_form.get_by_role("status")).to_have_text("CV “cv.txt” added.")

    job = add_job(page, "Platform engineer", "Acme")
    job_form = page.get_by_role("form", name="Add a job posting")
    expect(job_form.get_by_role("status")).to_have_text("Job “Platform engineer” added.")
    expect(job.locator(".analysis__plan")).to_be_hidden()  # Pro: nothing to say before a start
    job.get_by_label("CV to compare with").select_option(label="cv.txt")
    job.get_by_role("button", name="Start strategy snapshot").click()
    expect(job.get_by_text("Queued")).to_be_visible()

    # Play the worker: claim, report progress, publish the validated answer, complete.
    claimed = claim(ui_services, ["strategy.snapshot"])
    assert claimed.context_ref, "the chosen CV travels with the operation"
    heartbeat(ui_services, claimed, 40)
    expect(job.get_by_label("Analysis progress")).to_have_attribute("value", "40")
    screenshot(page, "20-jobs-snapshot-running")
    publish(ui_services, claimed, ANSWER)
    complete(ui_services, claimed)

    expect(job.get_by_text("Fit: 82")).to_be_visible()
    expect(job.get_by_text("Kubernetes")).to_be_visible()
    screenshot(page, "21-jobs-snapshot-result")

    # A new run makes it the previous result: relabelled in place, not put into the card's
    # live region again (a screen reader would read all of it aloud once more).
    result = job.locator(".analysis__result")
    result.evaluate("(element) => { element.dataset.seen = 'before'; }")
    job.get_by_role("button", name="Start strategy snapshot").click()
    expect(result.locator(".analysis__result-heading")).to_have_text(
        re.compile("^Previous result, .+, with cv\\.txt$")
    )
    expect(job.locator(".analysis__result[data-seen='before']")).to_have_count(1)

    page.goto(f"{ui_gateway.url}/operations")
    link = page.get_by_role("link", name="View result")
    expect(link).to_have_attribute(
        "href", f"/jobs?result={claimed.operation_id}#job-{claimed.subject_id}"
    )


def stored_state(services: Services, claimed: Claimed) -> ops_pb.Operation:
    reply: ops_pb.Operation = services.operations.GetOperation(
        ops_pb.GetOperationRequest(operation_id=claimed.operation_id),
        metadata=metadata(Role.GATEWAY, claimed.owner),
    )
    return reply


def open_job_with_a_snapshot(page: Page, gateway: LiveGateway, services: Services) -> Locator:
    """Alice (Pro) on /jobs with one job whose snapshot she has just started: it is queued,
    as no AI worker runs in these tests."""
    entitle(services.db, "alice")
    create_job(services.workspace, "alice")
    open_jobs(page, gateway.url, "alice")
    job = page.locator("ol[aria-label='Your jobs'] li.item")
    expect(job).to_have_count(1)
    job.get_by_role("button", name="Start strategy snapshot").click()
    expect(job.locator(".analysis .state")).to_have_text("Queued")
    return job


def snapshot_requests(page: Page) -> list[Request]:
    """The page's finished GETs of a job's strategy snapshot, in order."""
    seen: list[Request] = []

    def note(request: Request) -> None:
        if request.method == "GET" and request.url.endswith("/strategy-snapshot"):
            seen.append(request)

    page.on("requestfinished", note)
    return seen


def wait_for(page: Page, seen: list[Request], expected: int, timeout_ms: int = 5000) -> None:
    for _ in range(timeout_ms // 50):
        if len(seen) >= expected:
            return
        page.wait_for_timeout(50)
    assert len(seen) >= expected, f"saw {len(seen)} requests, expected {expected}"


def test_cancel_a_queued_analysis_from_the_jobs_page(
    page: Page, ui_gateway: LiveGateway, ui_services: Services, screenshot: Screenshot
) -> None:
    job = open_job_with_a_snapshot(page, ui_gateway, ui_services)
    cancel = job.get_by_role("button", name="Cancel analysis")
    expect(cancel).to_be_visible()
    expect(job.get_by_label("Analysis progress")).to_have_attribute("value", "0")
    screenshot(page, "22-jobs-snapshot-queued")

    cancel.click()
    dialog = page.get_by_role("dialog", name="Cancel this analysis?")
    expect(dialog).to_contain_text("Strategy snapshot for Engineer at Acme will stop.")
    expect(page.get_by_role("button", name="Keep running")).to_be_focused()
    page.get_by_role("button", name="Keep running").click()
    expect(dialog).to_have_count(0)
    expect(cancel).to_be_focused()
    expect(job.locator(".analysis .state")).to_have_text("Queued")

    cancel.click()
    page.get_by_role("button", name="Stop analysis").click()
    # A queued analysis stops at once: no worker has it.
    expect(job.locator(".analysis .state")).to_have_text("Cancelled")
    expect(job.get_by_role("button", name="Cancel analysis")).to_have_count(0)
    expect(job.get_by_label("Analysis progress")).to_have_count(0)
    # The button that had focus is gone: focus goes to the start button, not the page.
    expect(job.get_by_role("button", name="Start strategy snapshot")).to_be_focused()
    expect(job.get_by_role("alert")).to_be_hidden()

    page.goto(f"{ui_gateway.url}/operations")
    expect(page.locator("li.op .state")).to_have_text("Cancelled")


def test_starting_an_analysis_already_under_way_or_scheduled_says_so(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """A start that found its analysis already there looked like a new one (ADR 0058)."""
    entitle(ui_services.db, "alice")
    now_job = create_job(ui_services.workspace, "alice")
    scheduled_job = create_job(ui_services.workspace, "alice")
    later = snapshot_request(scheduled_job)
    later.not_before.FromDatetime(datetime.now(UTC) + timedelta(days=2))
    ui_services.admission.Admit(later, metadata=metadata(Role.GATEWAY, "alice"))
    open_jobs(page, ui_gateway.url, "alice")

    job = page.locator(f"#job-{now_job}")
    start = job.get_by_role("button", name="Start strategy snapshot")
    start.click()
    expect(job.locator(".analysis .state")).to_have_text("Queued")
    expect(job.locator(".analysis__notice")).to_be_hidden()  # a new one: nothing to say
    start.click()
    expect(job.locator(".analysis__notice")).to_have_text(
        "This analysis is already under way: no second one was started."
    )
    scheduled = page.locator(f"#job-{scheduled_job}")
    # Queued, and when it runs, as /operations says it.
    expect(scheduled.locator(".analysis .state")).to_have_text("Queued")
    expect(scheduled.locator(".analysis__when")).to_have_text(re.compile(r"^scheduled for .+\d"))
    expect(job.locator(".analysis__when")).to_be_hidden()
    scheduled.get_by_role("button", name="Start strategy snapshot").click()
    expect(scheduled.locator(".analysis__notice")).to_have_text(
        re.compile(r"^This analysis is already scheduled for .+: no second one was started\.$")
    )
    expect(page.get_by_role("alert")).to_have_count(0)


def test_cancel_a_running_analysis_shows_cancelling_until_the_worker_stops(
    page: Page, ui_gateway: LiveGateway, ui_services: Services, screenshot: Screenshot
) -> None:
    job = open_job_with_a_snapshot(page, ui_gateway, ui_services)
    claimed = claim(ui_services, ["strategy.snapshot"])
    heartbeat(ui_services, claimed, 30)
    expect(job.get_by_label("Analysis progress")).to_have_attribute("value", "30")
    expect(job.locator(".analysis .state")).to_have_text("Running")

    cancel = job.get_by_role("button", name="Cancel analysis")
    cancel.click()
    page.get_by_role("button", name="Stop analysis").click()
    cancelling = job.get_by_role("button", name="Cancelling…")
    expect(cancelling).to_have_attribute("aria-disabled", "true")
    expect(cancelling).to_be_focused()  # the same button, so focus stays on it
    expect(job.locator(".analysis .state")).to_have_text("Cancelling")
    assert stored_state(ui_services, claimed).cancel_requested is True
    screenshot(page, "23-jobs-snapshot-cancelling")

    expect(cancelling).to_be_disabled()
    page.keyboard.press("Enter")  # still focusable, but inert: asks nothing
    expect(page.get_by_role("dialog")).to_have_count(0)

    assert heartbeat(ui_services, claimed, 45) is True  # the worker learns of it and stops
    acknowledge_cancel(ui_services, claimed)
    expect(job.locator(".analysis .state")).to_have_text("Cancelled")
    expect(job.get_by_role("button", name="Cancelling…")).to_have_count(0)
    expect(job.get_by_text("cancel came too late")).to_have_count(0)


def make_the_retry_due(services: Services, claimed: Claimed) -> Claimed:
    """The failed attempt's retry, claimed at once instead of after its delay."""
    due = utc_now() - timedelta(seconds=1)
    services.db.run(
        lambda tx: tx.execute(
            update(UserOperation)
            .where(UserOperation.id == claimed.operation_id)
            .values(next_attempt_at=due)
        ),
        owner_id=None,
    )
    services.sweep()
    return claim(services, ["strategy.snapshot"])


def test_an_analysis_the_model_has_not_started_says_it_waits_for_the_model_and_which_try(
    page: Page, ui_gateway: LiveGateway, ui_services: Services, screenshot: Screenshot
) -> None:
    """A worker holds the analysis and the model has shown no sign of it (down, or not yet
    begun): the card says it waits for the model, not "Running" beside a bar at 0 %, for
    as long as the worker asks the model again and waits for it (about a minute and a
    half in all when it stays down); once a try failed, which attempt of how many."""
    job = open_job_with_a_snapshot(page, ui_gateway, ui_services)
    state = job.locator(".analysis .state")
    when = job.locator(".analysis__when")
    bar = job.get_by_label("Analysis progress")
    claimed = claim(ui_services, ["strategy.snapshot"])
    expect(state).to_have_text("Waiting for the model")
    expect(bar).to_have_count(0)  # nothing to measure yet: no bar at 0 %
    expect(when).to_be_hidden()  # the first attempt
    expect(job.get_by_role("button", name="Cancel analysis")).to_be_visible()
    screenshot(page, "29-jobs-snapshot-waiting-for-the-model")

    heartbeat(ui_services, claimed, 12)  # the model's first sign
    expect(state).to_have_text("Running")
    expect(bar).to_have_attribute("value", "12")

    fail(ui_services, claimed, retryable=True)  # e.g. the model went down: tried again later
    expect(state).to_have_text("Waiting to retry")
    expect(when).to_have_text(re.compile(r"^next try .+, attempt 2 of 3$"))

    retried = make_the_retry_due(ui_services, claimed)
    expect(state).to_have_text("Waiting for the model")
    expect(when).to_have_text("retrying: attempt 2 of 3")
    expect(bar).to_have_count(0)  # a new run starts from nothing, not from the last one's 12 %
    screenshot(page, "29-jobs-snapshot-waiting-for-the-model-retrying")

    heartbeat(ui_services, retried, 30)
    expect(state).to_have_text("Running")
    expect(when).to_have_text("retrying: attempt 2 of 3")
    expect(bar).to_have_attribute("value", "30")
    publish(ui_services, retried, ANSWER)
    complete(ui_services, retried)
    expect(job.get_by_text("Fit: 82")).to_be_visible()
    expect(job.locator(".analysis__status")).to_have_count(0)  # a success shows its result


def offline(route: Route) -> None:
    route.abort("connectionrefused")


def test_a_cancel_that_was_not_sent_says_so_beside_it_and_errors_go_once_the_card_moves(
    page: Page, ui_gateway: LiveGateway, ui_services: Services, screenshot: Screenshot
) -> None:
    job = open_job_with_a_snapshot(page, ui_gateway, ui_services)
    page.route("**/api/operations/*/cancel", offline)
    page.route(
        "**/api/attachments",
        lambda r: offline(r) if r.request.method == "POST" else r.continue_(),
    )
    cv_form = page.get_by_role("form", name="Add a CV")
    cv_form.get_by_label("File name").fill("cv.txt")
    cv_form.get_by_label("CV text").fill(CV_TEXT)
    cv_form.get_by_role("button", name="Add CV").click()
    expect(cv_form.get_by_role("alert")).to_have_text("The server could not be reached.")

    cancel = job.get_by_role("button", name="Cancel analysis")
    cancel.click()
    page.get_by_role("button", name="Stop analysis").click()
    # Beside the cancel, which stays to try again; nothing under Start.
    failed = job.locator(".analysis__status + .analysis__action-error")
    expect(failed).to_have_text(
        "The cancel was not sent. The server could not be reached."
        " The analysis goes on: you can try again."
    )
    expect(failed).to_have_attribute("role", "alert")
    screenshot(page, "27-jobs-cancel-not-sent")
    expect(job.locator(".analysis-block > .form-error")).to_be_hidden()
    expect(cancel).to_be_focused()
    expect(cancel).not_to_have_attribute("aria-disabled", "true")

    # The server heard from again (a worker took the analysis): neither error is true now.
    page.unroute("**/api/operations/*/cancel")
    page.unroute("**/api/attachments")
    claim(ui_services, ["strategy.snapshot"])
    expect(job.locator(".analysis .state")).to_have_text("Waiting for the model")
    expect(failed).to_be_hidden()
    expect(page.get_by_role("alert")).to_have_count(0)


def test_jobs_deleted_or_added_elsewhere_leave_and_come(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """Another tab (or the API) deleted a job or a CV, or added one: a start on a deleted one
    says so as a delete would, and the lists are read again when the page is shown again."""
    entitle(ui_services.db, "alice")
    first = create_job(ui_services.workspace, "alice", title="First")
    second = create_job(ui_services.workspace, "alice", title="Second")
    open_jobs(page, ui_gateway.url, "alice")
    expect(page.locator(JOBS)).to_have_count(2)

    def delete_elsewhere(row_id: str, collection: str = "jobs") -> None:
        gone = page.request.delete(
            f"{ui_gateway.url}/api/{collection}/{row_id}", headers={"Origin": ui_gateway.url}
        )
        assert gone.status == 204

    delete_elsewhere(first)
    page.locator(f"#job-{first}").get_by_role("button", name="Start strategy snapshot").click()
    expect(page.locator(f"#job-{first}")).to_have_count(0)
    said = page.get_by_role("region", name="Job postings").locator(".item-status")
    expect(said).to_have_text("First at Acme had already been deleted.")
    expect(page.locator(JOBS).get_by_role("heading", name="Second")).to_be_focused()

    # The CV chosen to compare with is the one gone: it leaves, and the card says why.
    cv = create_cv(ui_services.workspace, "alice", filename="gone.txt")
    page.evaluate("document.dispatchEvent(new Event('visibilitychange'))")  # shown again
    job = page.locator(f"#job-{second}")
    job.get_by_label("CV to compare with").select_option(label="gone.txt")
    delete_elsewhere(cv, "attachments")
    job.get_by_role("button", name="Start strategy snapshot").click()
    expect(job.get_by_role("alert")).to_have_text(
        "gone.txt had already been deleted: choose another CV, or none."
    )
    expect(page.locator(f"#attachment-{cv}")).to_have_count(0)
    expect(job.get_by_label("CV to compare with")).to_have_value("")

    third = create_job(ui_services.workspace, "alice", title="Third")
    delete_elsewhere(second)
    page.evaluate("document.dispatchEvent(new Event('visibilitychange'))")  # shown again
    expect(page.locator(f"#job-{second}")).to_have_count(0)
    expect(said).to_have_text("Second at Acme had already been deleted.")
    added = page.locator(f"#job-{third}")
    expect(added.get_by_role("button", name="Start strategy snapshot")).to_be_visible()
    expect(page.locator(JOBS)).to_have_count(1)


def test_closing_the_dialog_of_an_analysis_that_ended_leaves_focus_on_its_card(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    job = open_job_with_a_snapshot(page, ui_gateway, ui_services)
    claimed = claim(ui_services, ["strategy.snapshot"])
    expect(job.locator(".analysis .state")).to_have_text("Waiting for the model")
    job.get_by_role("button", name="Cancel analysis").click()
    dialog = page.get_by_role("dialog", name="Cancel this analysis?")
    publish(ui_services, claimed, ANSWER)
    complete(ui_services, claimed)
    expect(dialog).to_contain_text("has already finished: there is nothing left to stop.")
    dialog.get_by_role("button", name="Close").click()
    expect(dialog).to_have_count(0)
    expect(job.get_by_role("button", name="Start strategy snapshot")).to_be_focused()


def test_a_cancel_after_the_result_was_published_came_too_late(
    page: Page, ui_gateway: LiveGateway, ui_services: Services, screenshot: Screenshot
) -> None:
    job = open_job_with_a_snapshot(page, ui_gateway, ui_services)
    claimed = claim(ui_services, ["strategy.snapshot"])
    publish(ui_services, claimed, ANSWER)  # the result is out: from here a cancel cannot win

    job.get_by_role("button", name="Cancel analysis").click()
    page.get_by_role("button", name="Stop analysis").click()
    expect(job.get_by_role("button", name="Cancelling…")).to_be_visible()
    complete(ui_services, claimed)

    expect(job.locator(".analysis .state")).to_have_text("Succeeded")
    note = job.locator(".analysis__note")
    expect(note).to_have_text("The cancel came too late: the analysis had already finished.")
    expect(job.locator(".analysis[aria-live='polite'] .analysis__note")).to_have_count(1)
    expect(job.get_by_text("Fit: 82")).to_be_visible()
    expect(job.get_by_role("button", name="Cancelling…")).to_have_count(0)
    stored = stored_state(ui_services, claimed)
    assert stored.state == ops_pb.OPERATION_STATE_SUCCEEDED
    assert stored.cancel_requested is True
    screenshot(page, "24-jobs-cancel-too-late")

    page.reload()  # shown from the stored state too, not only as it happened
    expect(job.locator(".analysis__note")).to_contain_text("The cancel came too late")
    expect(job.get_by_text("Fit: 82")).to_be_visible()


def test_a_live_analysis_is_followed_by_the_event_stream_not_polled(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    polls = snapshot_requests(page)
    streams: list[Request] = []
    page.on("request", lambda r: streams.append(r) if "/api/events" in r.url else None)
    job = open_job_with_a_snapshot(page, ui_gateway, ui_services)
    page.wait_for_timeout(1500)  # polling while live would read it three times by now
    looked = len(polls)
    assert looked <= 2, f"{looked} reads of the snapshot while it is followed"
    assert streams, "no event stream"

    claimed = claim(ui_services, ["strategy.snapshot"])
    expect(job.locator(".analysis .state")).to_have_text("Waiting for the model")
    heartbeat(ui_services, claimed, 45)
    expect(job.get_by_label("Analysis progress")).to_have_attribute("value", "45")
    assert len(polls) == looked, "the moves came by the event stream"
    publish(ui_services, claimed, ANSWER)
    complete(ui_services, claimed)
    expect(job.get_by_text("Fit: 82")).to_be_visible()  # the end loads the result once
    wait_for(page, polls, looked + 1)
    assert len(polls) == looked + 1


def test_when_the_long_poll_fails_a_live_analysis_is_polled_fast_and_a_finished_one_not_at_all(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """The page's time moves only as the test moves it: gaps measured between requests
    failed on a loaded machine."""
    refuse_long_polls(page)
    polls = snapshot_requests(page)
    page.clock.install()
    job = open_job_with_a_snapshot(page, ui_gateway, ui_services)
    looks_once_a_step(page, polls, 600)  # while it is queued, every 500 ms (idle: 2000 ms)
    in_flight = RequestsInFlight(page)

    job.get_by_role("button", name="Cancel analysis").click()
    page.get_by_role("button", name="Stop analysis").click()
    expect(job.locator(".analysis .state")).to_have_text("Cancelled")
    in_flight.wait_quiet()
    settled = len(polls)
    page.clock.run_for(4100)  # two of the idle rhythm's 2000 ms
    in_flight.wait_quiet()
    assert len(polls) == settled, "a finished analysis is not polled"


def cancel_with_timers_stopped(
    page: Page, gateway: LiveGateway, services: Services, polls: list[Request]
) -> tuple[Locator, int]:
    """Start a snapshot, stop the page's timers, then cancel it (confirmed); the job, and
    how many looks the page had made before the cancel."""
    page.clock.install()
    job = open_job_with_a_snapshot(page, gateway, services)
    # From here no timer fires: any later look is one the page asked for itself.
    page.clock.pause_at(datetime.now() + timedelta(seconds=1))
    page.wait_for_timeout(300)
    before = len(polls)
    job.get_by_role("button", name="Cancel analysis").click()
    page.get_by_role("button", name="Stop analysis").click()
    return job, before


def test_after_a_cancel_the_page_looks_again_at_once(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    polls = snapshot_requests(page)
    job, before = cancel_with_timers_stopped(page, ui_gateway, ui_services, polls)
    expect(job.locator(".analysis .state")).to_have_text("Cancelled")
    wait_for(page, polls, before + 1, timeout_ms=2000)
    page.wait_for_timeout(300)
    assert len(polls) == before + 1


def test_a_cancel_whose_answer_comes_after_the_long_polls_looks_once(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """Cancelling a queued analysis ends it, which wakes the long-poll too: here the
    cancel's answer is held until the long-poll's look has loaded the end, and the
    page does not read that same end a second time."""
    polls = snapshot_requests(page)
    held: list[tuple[Route, APIResponse]] = []

    def hold(route: Route) -> None:
        held.append((route, route.fetch()))

    page.route("**/api/operations/*/cancel", hold)
    job, before = cancel_with_timers_stopped(page, ui_gateway, ui_services, polls)
    wait_for(page, polls, before + 1, timeout_ms=2000)  # the long-poll saw the end
    assert len(held) == 1, "the cancel's answer is held"
    route, answer = held[0]
    route.fulfill(response=answer)
    expect(job.locator(".analysis .state")).to_have_text("Cancelled")
    page.wait_for_timeout(300)
    assert len(polls) == before + 1


def test_without_pro_the_refusal_is_shown(
    page: Page, ui_gateway: LiveGateway, screenshot: Screenshot
) -> None:
    open_jobs(page, ui_gateway.url, "carol")
    expect(page.get_by_text("Free (AI analyses need Pro)")).to_be_visible()
    job_form = page.get_by_role("form", name="Add a job posting")
    job_form.get_by_label("Title").fill("Engineer")
    job_form.get_by_label("Description").fill(JOB_TEXT)
    job_form.get_by_role("button", name="Add job").click()
    job = page.locator("ol[aria-label='Your jobs'] li.item")
    start = job.get_by_role("button", name="Start strategy snapshot")
    # Said on the card before the press, and the button is described by it.
    note = "AI analyses need the Pro plan: your plan is Free (see AI settings)."
    expect(job.locator(".analysis__plan")).to_have_text(note)
    expect(start).to_have_accessible_description(note)
    screenshot(page, "25-jobs-free-plan")
    start.click()
    expect(job.get_by_role("alert")).to_contain_text("Pro")


def test_help_text_describes_its_field_and_is_no_part_of_its_name(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    entitle(ui_services.db, "dana")
    open_jobs(page, ui_gateway.url, "dana")
    privacy = page.get_by_role("combobox", name="Privacy", exact=True)
    expect(privacy).to_have_accessible_description(
        "External models see your text only when you allow it."
    )
    cv_text = page.get_by_role("textbox", name="CV text", exact=True)
    expect(cv_text).to_have_accessible_description(re.compile("^Paste the text of your CV\\."))


def test_empty_fields_all_say_so_at_once_and_the_server_still_judges_what_is_sent(
    page: Page, ui_gateway: LiveGateway, screenshot: Screenshot
) -> None:
    posts: list[str] = []
    open_jobs(page, ui_gateway.url, "carol")
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
    form = page.get_by_role("form", name="Add a job posting")
    title, description = form.get_by_label("Title"), form.get_by_label("Description")
    title.fill("   ")
    description.fill("   ")
    form.get_by_role("button", name="Add job").click()
    # Both fields at once, each by its field and described by its message; nothing sent.
    for field, message in ((title, "Title"), (description, "Description")):
        expect(field).to_have_attribute("aria-invalid", "true")
        expect(field).to_have_accessible_description(re.compile(f"^{message} must not be empty\\."))
    expect(title).to_be_focused()
    screenshot(page, "26-jobs-empty-fields")
    expect(form.get_by_label("Company")).not_to_have_attribute("aria-invalid", "true")
    title.fill("Engineer")
    expect(title).to_have_attribute("aria-invalid", "false")
    expect(form.get_by_text("Title must not be empty.")).to_be_hidden()
    assert posts == []

    # What passes here, the server still judges: its refusal names the field.
    description.fill("Python\u0007")
    form.get_by_role("button", name="Add job").click()
    expect(form.get_by_role("alert")).to_have_text(
        re.compile("^Description must not contain control characters")
    )
    expect(description).to_have_attribute("aria-invalid", "true")
    expect(title).not_to_have_attribute("aria-invalid", "true")
    description.press_sequentially("Python")
    expect(description).to_have_attribute("aria-invalid", "false")
    # The refusal was about the text before: it goes with the edit, not at the next send.
    expect(form.locator(".form-error").filter(has_text="control characters")).to_be_hidden()


def test_a_result_link_to_no_result_of_the_users_says_so(
    page: Page, ui_gateway: LiveGateway
) -> None:
    dev_sign_in(page, ui_gateway.url, "carol", then="/jobs?result=no-such-operation")
    expect(page.get_by_role("alert")).to_have_text(
        "The result you opened was not found among yours."
    )


def test_a_page_whose_module_did_not_load_says_so_and_offers_a_reload(
    page: Page, ui_gateway: LiveGateway
) -> None:
    page.route("**/static/pages/jobs.js", lambda route: route.abort("connectionreset"))
    dev_sign_in(page, ui_gateway.url, "carol", then="/jobs")
    failed = page.get_by_role("alert")
    expect(failed).to_contain_text("This page could not load.")
    page.unroute("**/static/pages/jobs.js")
    failed.get_by_role("button", name="Reload").click()
    expect(page.get_by_role("form", name="Add a job posting")).to_be_visible()
    expect(page.get_by_role("alert")).to_have_count(0)


def test_past_the_daily_budget_the_page_says_why(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    entitle(ui_services.db, "dana")
    ui_services.db.run(
        lambda tx: budgets.set_override(tx, 1_000, set_by="test", now=datetime.now(UTC)),
        owner_id="dana",
    )
    open_jobs(page, ui_gateway.url, "dana")
    expect(page.locator("#ai-budget")).to_have_text(
        "0 of 1,000 tokens used today; the budget renews at 00:00 UTC."
    )
    job_form = page.get_by_role("form", name="Add a job posting")
    job_form.get_by_label("Title").fill("Engineer")
    job_form.get_by_label("Description").fill(JOB_TEXT)
    job_form.get_by_role("button", name="Add job").click()
    job = page.locator("ol[aria-label='Your jobs'] li.item")
    job.get_by_role("button", name="Start strategy snapshot").click()
    # The 429's own sentence, without "try again in 40,000 s": a budget smaller than one
    # analysis's worst case is not "used up" (the line above says 0 of 1,000 used).
    expect(job.get_by_role("alert")).to_have_text(
        re.compile(
            r"Your daily AI budget \(1,000 tokens\) is less than one analysis may use"
            r" \([\d,]+\): none can start until the budget is raised\."
        )
    )


def test_the_budget_renewal_is_told_in_the_readers_own_time(
    browser: Browser, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    entitle(ui_services.db, "kenji")
    context = browser.new_context(timezone_id="Asia/Tokyo")
    try:
        page = context.new_page()
        open_jobs(page, ui_gateway.url, "kenji")
        expect(page.locator("#ai-budget")).to_have_text(
            "0 of 100,000 tokens used today; the budget renews at 09:00 your time (00:00 UTC)."
        )
    finally:
        context.close()


def test_a_spent_budgets_refusal_tells_the_renewal_in_the_readers_own_time(
    browser: Browser, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    entitle(ui_services.db, "kenji")
    create_job(ui_services.workspace, "kenji")
    now = datetime.now(UTC)
    ui_services.db.run(
        lambda tx: budgets.reserve(tx, tokens=100_000, limit=100_000, day=now.date(), now=now),
        owner_id="kenji",
    )
    context = browser.new_context(timezone_id="Asia/Kolkata")  # +05:30: not a whole hour
    try:
        page = context.new_page()
        open_jobs(page, ui_gateway.url, "kenji")
        job = page.locator("ol[aria-label='Your jobs'] li.item")
        job.get_by_role("button", name="Start strategy snapshot").click()
        expect(job.get_by_role("alert")).to_have_text(
            "Your daily AI budget is used up; it renews at 05:30 your time (00:00 UTC)."
        )
    finally:
        context.close()


def complete_having_used(services: Services, claimed: Claimed, tokens: int) -> None:
    """What the worker SDK sends at the end: the outcome with what the model counted."""
    used = ops_pb.Usage(prompt_tokens=tokens - 100, completion_tokens=100, model_ms=900)
    item = ops_pb.SettleOperationsRequest.Item(owner_id=claimed.owner, usage=used)
    item.complete.operation_id, item.complete.lease_token = (
        claimed.operation_id,
        claimed.lease_token,
    )
    reply = services.operations.SettleOperations(
        ops_pb.SettleOperationsRequest(items=[item]), metadata=metadata(Role.WORKER)
    )
    assert not reply.outcomes[0].status_code, reply.outcomes[0].error_code


def test_the_token_line_follows_an_analysis_and_tells_reserved_from_used(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    job = open_job_with_a_snapshot(page, ui_gateway, ui_services)
    budget = page.locator("#ai-budget")
    # Running analyses hold a reservation: not spent, and not said to be.
    expect(budget).to_have_text(
        re.compile(r"^0 used and [1-9][\d,]* reserved of 100,000 tokens today; the budget renews")
    )
    claimed = claim(ui_services, ["strategy.snapshot"])
    publish(ui_services, claimed, ANSWER)
    complete_having_used(ui_services, claimed, 590)
    expect(job.get_by_text("Fit: 82")).to_be_visible()
    expect(budget).to_have_text("590 of 100,000 tokens used today; the budget renews at 00:00 UTC.")


def test_signing_out_in_one_tab_signs_out_a_jobs_tab_at_once(
    page: Page, ui_gateway: LiveGateway
) -> None:
    """The jobs page polls nothing while its event stream is open: the stream's
    ``signed_out`` is what moves it, with no change of the user's to carry it."""
    dev_sign_in(page, ui_gateway.url, "ada", then="/jobs")
    expect(page.locator("header .user")).to_have_text("ada")
    other = page.context.new_page()
    other.goto(ui_gateway.url + "/operations")
    other.get_by_role("button", name="Sign out").click()
    other.wait_for_url(ui_gateway.url + "/")
    # The keepalive is 15 s. The sign-in page knows where the tab was, and leads back there.
    page.wait_for_url(ui_gateway.url + "/?expired=1&next=%2Fjobs", timeout=5_000)
    other.close()
    page.get_by_label("User id").fill("ada")
    page.get_by_role("button", name="Sign in as this user").click()
    page.wait_for_url(ui_gateway.url + "/jobs")


def test_a_session_that_ends_while_text_is_typed_keeps_the_text(
    page: Page, ui_gateway: LiveGateway, ui_services: Services, screenshot: Screenshot
) -> None:
    """Leaving for the sign-in page would lose what was typed: the page stays, says what to
    do, and once the user has signed in again in another tab the text is sent. Signed in
    again as someone else, the page sends nothing (it sent ada's CV into bob's account):
    it says so, and its stream does not open again."""
    streams: list[str] = []
    page.on("request", lambda r: streams.append(r.url) if "/api/events" in r.url else None)
    open_jobs(page, ui_gateway.url, "ada")
    form = page.get_by_role("form", name="Add a job posting")
    form.get_by_label("Title").fill("Engineer")
    form.get_by_label("Description").fill(JOB_TEXT)
    other = page.context.new_page()
    other.goto(ui_gateway.url + "/operations")
    other.get_by_role("button", name="Sign out").click()
    other.wait_for_url(ui_gateway.url + "/")

    ended = page.get_by_role("alert").filter(has_text="Your session ended")
    expect(ended).to_contain_text("What you typed is still here.")
    sign_in = ended.get_by_role("link", name="Sign in again in a new tab")
    expect(sign_in).to_have_attribute("href", "/?next=%2Fjobs")
    assert page.url == ui_gateway.url + "/jobs"
    expect(form.get_by_label("Title")).to_have_value("Engineer")
    screenshot(page, "28-jobs-session-ended")

    dev_sign_in(other, ui_gateway.url, "bob")
    streams.clear()
    page.evaluate("document.dispatchEvent(new Event('visibilitychange'))")  # back to this tab
    another = page.get_by_role("alert").filter(has_text="now signed in as another user")
    expect(another.locator("p")).to_have_text(
        "This browser is now signed in as another user. Nothing on this page is sent."
        " Copy what you typed, then reload the page."
    )
    expect(another.get_by_role("button", name="Reload")).to_be_visible()
    expect(ended).to_have_count(0)
    cv_form = page.get_by_role("form", name="Add a CV")
    cv_form.get_by_label("File name").fill("cv.txt")
    cv_form.get_by_label("CV text").fill(CV_TEXT)
    cv_form.get_by_role("button", name="Add CV").click()
    expect(cv_form.get_by_role("alert")).to_have_text(
        re.compile("^This page was opened as another user; this browser is now signed in as")
    )
    expect(page.locator("header .user")).to_have_text("ada")
    expect(another).to_be_visible()
    assert stored_attachments(ui_services) == 0  # neither ada's nor bob's
    assert streams == []

    dev_sign_in(other, ui_gateway.url, "ada")
    other.close()
    with page.expect_request(lambda r: "/api/events" in r.url) as reopened:
        page.evaluate("document.dispatchEvent(new Event('visibilitychange'))")  # back to this tab
    expect(page.locator(".session-ended")).to_have_count(0)
    assert reopened.value.url == f"{ui_gateway.url}/api/events?page_user=ada"
    form.get_by_role("button", name="Add job").click()
    expect(form.get_by_role("status")).to_have_text("Job “Engineer” added.")
    expect(page.locator(JOBS)).to_have_count(1)


def stored_attachments(services: Services) -> int:
    return int(scalar(services.db, select(func.count()).select_from(Attachment)) or 0)


def test_a_double_click_adds_one_job_and_one_cv(page: Page, ui_gateway: LiveGateway) -> None:
    """The second click of a double click lands while the first one's request is on its way:
    the form sends once."""
    created: list[str] = []
    page.on(
        "request",
        lambda r: created.append(r.url) if r.method == "POST" and "/api/" in r.url else None,
    )
    open_jobs(page, ui_gateway.url, "carol")
    job_form = page.get_by_role("form", name="Add a job posting")
    job_form.get_by_label("Title").fill("Engineer")
    job_form.get_by_label("Description").fill(JOB_TEXT)
    job_form.get_by_role("button", name="Add job").dblclick()
    cv_form = page.get_by_role("form", name="Add a CV")
    cv_form.get_by_label("File name").fill("cv.txt")
    cv_form.get_by_label("CV text").fill(CV_TEXT)
    cv_form.get_by_role("button", name="Add CV").dblclick()
    expect(page.locator("#cvs-heading ~ ol li.item")).to_have_count(1)

    page.reload()  # the lists as stored, after both forms' requests have answered
    expect(page.locator(JOBS)).to_have_count(1)
    expect(page.locator("#cvs-heading ~ ol li.item")).to_have_count(1)
    assert [url.rsplit("/", 1)[1] for url in created] == ["jobs", "attachments"]


def test_the_tab_that_signs_out_goes_home_though_a_call_of_its_was_refused_meanwhile(
    page: Page, ui_gateway: LiveGateway
) -> None:
    """A call of the signing-out tab answered 401 while the logout was on its way (its
    session ending under it) and sent the tab to "your session expired" instead of home:
    a CI run saw a poll do it. The logout and the call are held here to order them."""
    held: dict[str, Route] = {}
    dev_sign_in(page, ui_gateway.url, "ada")
    expect(page.locator("header .user")).to_have_text("ada")
    page.route("**/api/settings/ai", lambda route: held.setdefault("call", route))
    page.route("**/auth/logout", lambda route: held.setdefault("logout", route))
    page.evaluate(
        "() => { import('/static/api.js').then((m) => m.api('/api/settings/ai')).catch(() => {}); }"
    )
    page.get_by_role("button", name="Sign out").click()
    for _ in range(100):
        if len(held) == 2:
            break
        page.wait_for_timeout(50)
    held["call"].fulfill(status=401, json={"code": "unauthenticated"})
    page.wait_for_timeout(300)  # the refused call's handlers have run
    held["logout"].continue_()
    page.wait_for_url(ui_gateway.url + "/", timeout=5_000)


# ---- a read that fails, the stream that reconnects ------------------------------------------


def refuse_reads(page: Page) -> list[str]:
    """The page's reads of a snapshot fail from now on, as with the gateway away; their URLs."""
    refused: list[str] = []

    def refuse(route: Route) -> None:
        refused.append(route.request.url)
        route.abort("connectionrefused")

    page.route("**/strategy-snapshot", refuse)
    return refused


def test_a_read_that_fails_after_the_stream_told_the_end_is_tried_again(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """The stream told the end; the one read of the result failed and was never tried
    again: the card said "Running", its draft "Being written…", for good."""
    job = open_job_with_a_snapshot(page, ui_gateway, ui_services)
    claimed = claim(ui_services, ["strategy.snapshot"])
    expect(job.locator(".analysis .state")).to_have_text("Waiting for the model")
    refused = refuse_reads(page)
    publish(ui_services, claimed, ANSWER)
    complete(ui_services, claimed)

    paused = page.get_by_role("alert").filter(has_text="Updates paused.")
    expect(paused).to_contain_text("The service is not reachable right now.")
    # The end as the stream told it, not "Running" with a cancel.
    expect(job.get_by_role("button", name="Cancel analysis")).to_have_count(0)
    expect(job.locator(".analysis__notice")).to_have_text(
        "This analysis has finished: its result shows here once it can be loaded."
    )
    for _ in range(100):  # tried again by itself
        if len(refused) >= 2:
            break
        page.wait_for_timeout(50)
    assert len(refused) >= 2, refused
    page.unroute("**/strategy-snapshot")
    expect(job.get_by_text("Fit: 82")).to_be_visible()
    expect(paused).to_have_count(0)
    expect(job.locator(".analysis__notice")).to_be_hidden()


def test_when_the_stream_reconnects_the_page_reads_again_at_once(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """A read failed while the gateway was away and waits its turn (here the page's
    timers are stopped, so it never comes): the stream open again reads it at once."""
    entitle(ui_services.db, "alice")
    create_job(ui_services.workspace, "alice")
    page.clock.install()
    # The sign-in lands on /operations, whose stream opens once its tab holds the live lock
    # (live.js), which may be after the page loaded: waited for, so the route below takes
    # /jobs' stream alone.
    with page.expect_response("**/api/events*"):
        dev_sign_in(page, ui_gateway.url, "alice")
    streams: list[Route] = []

    def stream(route: Route) -> None:
        streams.append(route)
        if len(streams) == 1:  # opens, then ends: the browser asks again, and waits
            route.fulfill(status=200, content_type="text/event-stream", body="retry: 100\n\n")

    page.route("**/api/events*", stream)  # ?page_user=
    refuse_reads(page)
    page.goto(f"{ui_gateway.url}/jobs")
    paused = page.get_by_role("alert").filter(has_text="Updates paused.")
    expect(paused).to_be_visible()
    for _ in range(100):
        if len(streams) == 2:
            break
        page.wait_for_timeout(50)
    assert len(streams) == 2, "the stream was not asked for again"
    page.clock.pause_at(datetime.now() + timedelta(seconds=1))
    page.wait_for_timeout(500)  # a read the jump's timers made has been refused
    page.unroute("**/strategy-snapshot")
    page.wait_for_timeout(500)
    expect(paused).to_be_visible()  # nothing reads it by itself

    streams[1].continue_()  # the gateway is back: the stream opens again
    expect(paused).to_have_count(0)
    expect(page.locator(JOBS).get_by_role("button", name="Start strategy snapshot")).to_be_visible()


# ---- the keyboard, and names ------------------------------------------------------------------


def test_starting_from_the_keyboard_keeps_focus_on_the_start_button(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    entitle(ui_services.db, "alice")
    create_job(ui_services.workspace, "alice")
    open_jobs(page, ui_gateway.url, "alice")
    job = page.locator(JOBS)
    start = job.get_by_role("button", name="Start strategy snapshot")
    start.focus()
    page.keyboard.press("Enter")
    expect(job.locator(".analysis .state")).to_have_text("Queued")
    expect(start).not_to_have_attribute("aria-disabled", "true")
    expect(start).to_be_focused()


def test_each_cards_controls_say_which_job_or_cv_they_are_for(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    entitle(ui_services.db, "alice")
    for title in ("Engineer", "Designer"):
        create_job(ui_services.workspace, "alice", title=title)
    create_cv(ui_services.workspace, "alice")
    open_jobs(page, ui_gateway.url, "alice")
    expect(page.locator(JOBS)).to_have_count(2)
    for title in ("Engineer", "Designer"):
        name = f"{title} at Acme"
        expect(
            page.get_by_role("button", name=f"Start strategy snapshot: {name}", exact=True)
        ).to_have_count(1)
        expect(
            page.get_by_role("combobox", name=f"CV to compare with {name}", exact=True)
        ).to_have_count(1)
        job = page.locator(JOBS).filter(has=page.get_by_role("heading", name=title))
        expect(job.locator("summary")).to_have_accessible_name(f"Description: {name}")
    expect(page.get_by_role("button", name="Review CV: cv.txt", exact=True)).to_have_count(1)
    job_choice = page.get_by_role("combobox", name="Job to compare with cv.txt", exact=True)
    expect(job_choice).to_have_count(1)

    job = page.locator(JOBS).filter(has_text="Designer")
    job.get_by_role("button", name="Start strategy snapshot").click()
    name = "Strategy snapshot for Designer at Acme"
    expect(job.get_by_role("button", name=f"Cancel analysis: {name}", exact=True)).to_be_visible()
    progress = job.get_by_role("progressbar", name=f"Analysis progress: {name}", exact=True)
    expect(progress).to_be_visible()


# ---- settings -----------------------------------------------------------------------------------


def test_changing_privacy_is_confirmed_and_said_as_switching_ai_is(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    entitle(ui_services.db, "dana")
    open_jobs(page, ui_gateway.url, "dana")
    privacy = page.get_by_role("combobox", name="Privacy", exact=True)
    expect(privacy).to_have_value("local_only")

    privacy.select_option("external_allowed")
    dialog = page.get_by_role("dialog", name="Allow an external model?")
    dialog.get_by_role("button", name="Keep local only").click()
    expect(dialog).to_have_count(0)
    expect(privacy).to_have_value("local_only")
    assert page.request.get(f"{ui_gateway.url}/api/settings/ai").json()["privacy"] == "local_only"

    privacy.select_option("external_allowed")
    dialog.get_by_role("button", name="Allow external").click()
    expect(page.get_by_role("status").filter(has_text="Privacy saved")).to_have_text(
        "Privacy saved: new analyses may use an external model."
    )
    expect(privacy).to_have_value("external_allowed")
    assert page.request.get(f"{ui_gateway.url}/api/settings/ai").json()["privacy"] == (
        "external_allowed"
    )


# ---- more than a page ---------------------------------------------------------------------------


def test_show_more_lists_older_jobs_and_cvs_and_every_cv_is_offered(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    entitle(ui_services.db, "alice")
    create_job(ui_services.workspace, "alice", title="Oldest job")
    create_cv(ui_services.workspace, "alice", filename="oldest-cv.txt")
    for n in range(50):
        create_job(ui_services.workspace, "alice", title=f"Job {n}")
        create_cv(ui_services.workspace, "alice", filename=f"cv-{n}.txt")
    open_jobs(page, ui_gateway.url, "alice")
    jobs = page.locator(JOBS)
    cvs = page.locator("#cvs-heading ~ ol li.item")
    expect(jobs).to_have_count(50)
    expect(cvs).to_have_count(50)
    # Every CV is offered on each job; a CV's choice of a job says how to reach older ones.
    newest_job = jobs.first
    expect(newest_job.get_by_label("CV to compare with").locator("option")).to_have_count(52)
    newest_job.get_by_label("CV to compare with").select_option(label="oldest-cv.txt")
    choice = cvs.first.get_by_label("Job to compare with")
    expect(choice.locator("option:not([disabled])")).to_have_count(51)
    expect(choice.locator("option[disabled]")).to_have_text(re.compile("Show more jobs"))

    more_jobs = page.get_by_role("button", name="Show more jobs")
    more_jobs.focus()
    page.keyboard.press("Enter")
    expect(jobs).to_have_count(51)
    oldest = jobs.last
    expect(oldest.get_by_role("heading", name="Oldest job")).to_be_focused()
    expect(more_jobs).to_be_hidden()
    expect(oldest.locator(".analysis__start")).to_be_visible()
    expect(choice.locator("option:not([disabled])")).to_have_count(52)  # offered now
    expect(choice.locator("option[disabled]")).to_have_count(0)

    page.get_by_role("button", name="Show more CVs").click()
    expect(cvs).to_have_count(51)
    expect(cvs.last.get_by_role("heading", name="oldest-cv.txt")).to_be_focused()
    expect(page.get_by_role("button", name="Show more CVs")).to_be_hidden()

    # A job added keeps the older ones shown.
    add_job_form = page.get_by_role("form", name="Add a job posting")
    add_job_form.get_by_label("Title").fill("Newest job")
    add_job_form.get_by_label("Description").fill(JOB_TEXT)
    add_job_form.get_by_role("button", name="Add job").click()
    expect(jobs.first.get_by_role("heading")).to_have_text("Newest job")
    expect(jobs).to_have_count(52)


def test_cvs_shown_again_are_read_again_only_when_they_changed(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """Shown again, the page asks for each page of CVs naming the copy it has: unchanged,
    each is a 304 with no body and the cards stay as they were, the same elements; a CV
    added or deleted in another tab meanwhile comes or goes."""
    for n in range(105):  # two pages of the API's largest, 100
        create_cv(ui_services.workspace, "alice", filename=f"cv-{n}.txt")
    answers: list[tuple[str, int]] = []

    def heard(response: Response) -> None:
        if "/api/attachments?" in response.url:
            answers.append((response.url, response.status))

    page.on("response", heard)
    open_jobs(page, ui_gateway.url, "alice")
    cvs = page.locator("#cvs-heading ~ ol li.item")
    expect(cvs).to_have_count(50)
    assert sorted({status for _, status in answers}) == [200]
    page.evaluate("document.querySelector('#cvs-heading ~ ol li.item').dataset.kept = 'yes'")

    def shown_again() -> list[int]:
        """The statuses of the CV list's pages the page read as it was shown again."""
        answers.clear()
        with page.expect_response(lambda r: "/api/attachments?" in r.url and "page_token" in r.url):
            page.evaluate("document.dispatchEvent(new Event('visibilitychange'))")
        return [status for _, status in answers]

    assert shown_again() == [304, 304]
    expect(cvs.first).to_have_attribute("data-kept", "yes")  # the same card, not drawn again
    expect(cvs).to_have_count(50)

    newest = create_cv(ui_services.workspace, "alice", filename="newest.txt")
    assert 200 in shown_again()
    expect(page.locator(f"#attachment-{newest}")).to_be_visible()
    expect(cvs).to_have_count(51)
    expect(page.locator("[data-kept='yes']")).to_have_count(1)  # the others stay

    gone = page.request.delete(
        f"{ui_gateway.url}/api/attachments/{newest}", headers={"Origin": ui_gateway.url}
    )
    assert gone.status == 204
    assert 200 in shown_again()
    expect(page.locator(f"#attachment-{newest}")).to_have_count(0)
    assert shown_again() == [304, 304]
