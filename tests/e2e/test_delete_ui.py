"""Deleting a job or a CV on the jobs page, in a real browser (ADR 60): asked first (Escape
keeps it), gone from the page and from the API; refused while an analysis uses it, which
the card names and offers to cancel, after which the delete goes through; a CV gone from
every card's choice, and the results made with it from the cards that showed them; one
deleted elsewhere leaves too; other failures show beside the button. The operations page
then names the deleted job as such, with no result to open and no retry."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Locator, Page, Route, expect

from durable_ops.api.operations.v1 import operations_pb2 as ops_pb
from durable_ops.model.scope import Role
from tests.support.gateway import LiveGateway, claim, complete, create_operation, publish
from tests.support.grpc_services import Services, metadata
from tests.support.jobs_page import JOBS, open_jobs
from tests.support.workspace_client import (
    ANSWER,
    create_cv,
    create_job,
    entitle,
    snapshot_request,
)

pytestmark = pytest.mark.browser
Screenshot = Callable[[Page, str], Path]
CVS = "ol[aria-label='Your CVs'] li.item"
WARNING = "This also deletes every analysis result made from it."


# What a gateway whose workspace is down answers (problems.py): no fault of the page's.
UNAVAILABLE = json.dumps(
    {
        "title": "Service Unavailable",
        "status": 503,
        "code": "backend_unavailable",
        "detail": "the workspace is not reachable right now",
    }
)


def refuse_deletes(route: Route) -> None:
    if route.request.method == "DELETE":
        route.fulfill(status=503, content_type="application/problem+json", body=UNAVAILABLE)
    else:
        route.continue_()


def state_of(services: Services, owner: str, operation_id: str) -> int:
    reply: ops_pb.Operation = services.operations.GetOperation(
        ops_pb.GetOperationRequest(operation_id=operation_id),
        metadata=metadata(Role.GATEWAY, owner),
    )
    return int(reply.state)


def confirm_delete(page: Page, what: str, name: str) -> Locator:
    """Open the delete question of `name` (a "job" or "CV") and answer yes; its button."""
    button = page.get_by_role("button", name=f"Delete {what}: {name}")
    button.click()
    dialog = page.get_by_role("dialog", name=f"Delete this {what}?")
    expect(dialog).to_contain_text(f"Delete {name}? {WARNING}")
    dialog.get_by_role("button", name=f"Delete {what}").click()
    expect(dialog).to_have_count(0)
    return button


def test_delete_a_job_asks_first_and_escape_keeps_it(
    page: Page, ui_gateway: LiveGateway, ui_services: Services, screenshot: Screenshot
) -> None:
    first = create_job(ui_services.workspace, "ada", title="First")
    create_job(ui_services.workspace, "ada", title="Second")
    open_jobs(page, ui_gateway.url, "ada")
    expect(page.locator(JOBS)).to_have_count(2)

    delete = page.get_by_role("button", name="Delete job: First at Acme")
    delete.click()
    dialog = page.get_by_role("dialog", name="Delete this job?")
    expect(dialog).to_contain_text(f"Delete First at Acme? {WARNING}")
    expect(dialog.get_by_role("button", name="Keep it")).to_be_focused()
    screenshot(page, "70-delete-job-dialog")
    page.keyboard.press("Escape")
    expect(dialog).to_have_count(0)
    expect(delete).to_be_focused()
    expect(page.locator(JOBS)).to_have_count(2)
    assert page.request.get(f"{ui_gateway.url}/api/jobs/{first}").status == 200

    confirm_delete(page, "job", "First at Acme")
    expect(page.locator(JOBS)).to_have_count(1)
    expect(page.locator(f"#job-{first}")).to_have_count(0)
    expect(page.get_by_role("status").filter(has_text="was deleted")).to_have_text(
        "First at Acme was deleted, with every analysis result made from it."
    )
    # Focus goes to the card beside it (the one above, for the last), not to the page.
    expect(page.locator(JOBS).get_by_role("heading", name="Second")).to_be_focused()
    assert page.request.get(f"{ui_gateway.url}/api/jobs/{first}").status == 404


def test_an_analysis_under_way_is_cancelled_first_then_the_job_goes(
    page: Page, ui_gateway: LiveGateway, ui_services: Services, screenshot: Screenshot
) -> None:
    job_id = create_job(ui_services.workspace, "ada")  # "Engineer" at "Acme"
    done = create_operation(ui_services, "ada", subject=("job", job_id), key="done")
    claimed = claim(ui_services, ["strategy.snapshot"])
    publish(ui_services, claimed, ANSWER)
    complete(ui_services, claimed)
    queued = create_operation(ui_services, "ada", subject=("job", job_id), key="queued")
    open_jobs(page, ui_gateway.url, "ada")

    delete = confirm_delete(page, "job", "Engineer at Acme")
    blocker = page.locator(f"#job-{job_id} .item__delete")
    expect(blocker.get_by_role("status")).to_contain_text(
        "An analysis that uses this job is still queued; cancel it first, then delete the job."
    )
    expect(
        blocker.get_by_role("link", name="Strategy snapshot for Engineer at Acme")
    ).to_be_visible()
    expect(page.locator(JOBS)).to_have_count(1)
    screenshot(page, "71-delete-refused-while-an-analysis-runs")

    blocker.get_by_role("button", name="Cancel Strategy snapshot for Engineer at Acme").click()
    dialog = page.get_by_role("dialog", name="Cancel this analysis?")
    expect(dialog.get_by_role("button", name="Keep running")).to_be_focused()
    dialog.get_by_role("button", name="Stop analysis").click()
    expect(blocker.get_by_role("status")).to_have_text(
        "Strategy snapshot for Engineer at Acme is cancelled: you can delete the job now."
    )
    expect(delete).to_be_focused()
    assert state_of(ui_services, "ada", queued.id) == ops_pb.OPERATION_STATE_CANCELLED

    confirm_delete(page, "job", "Engineer at Acme")
    expect(page.locator(f"#job-{job_id}")).to_have_count(0)
    expect(page.get_by_text("No jobs yet")).to_be_visible()
    expect(page.get_by_role("heading", name="Job postings")).to_be_focused()
    assert page.request.get(f"{ui_gateway.url}/api/jobs/{job_id}").status == 404

    # Its operations stay, and say what they were about: a deleted job, with no result.
    page.goto(f"{ui_gateway.url}/operations")
    for operation in (done, queued):
        card = page.locator(f'li.op[data-id="{operation.id}"]')
        expect(card.locator(".op__subject")).to_have_text("A deleted job")
        expect(card).not_to_contain_text(job_id)
    # Nothing of the job is left to open or to run again.
    expect(
        page.locator("li.op").get_by_role("link", name=re.compile("^View result"))
    ).to_have_count(0)
    expect(page.locator("li.op").get_by_role("button", name=re.compile("^Retry"))).to_have_count(0)
    expect(page.locator(".note__about").first).to_have_text("Strategy snapshot for a deleted job")
    screenshot(page, "72-operations-of-a-deleted-job")


def test_the_blocker_says_so_once_the_analysis_in_the_way_has_ended(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    job_id = create_job(ui_services.workspace, "ada")
    create_operation(ui_services, "ada", subject=("job", job_id))
    open_jobs(page, ui_gateway.url, "ada")
    confirm_delete(page, "job", "Engineer at Acme")
    blocker = page.locator(f"#job-{job_id} .item__delete")
    expect(blocker.get_by_role("status")).to_contain_text("is still queued; cancel it first")

    claimed = claim(ui_services, ["strategy.snapshot"])  # it runs, and finishes elsewhere
    publish(ui_services, claimed, ANSWER)
    complete(ui_services, claimed)
    expect(blocker.get_by_role("status")).to_have_text(
        "Strategy snapshot for Engineer at Acme has ended: you can delete the job now."
    )
    expect(blocker.get_by_role("button", name=re.compile("^Cancel"))).to_have_count(0)


def test_a_deleted_cv_leaves_every_choice_and_what_was_made_with_it(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    entitle(ui_services.db, "ada")
    job_id = create_job(ui_services.workspace, "ada")
    first = create_cv(ui_services.workspace, "ada", filename="first.txt")
    second = create_cv(ui_services.workspace, "ada", filename="second.txt")
    # The job's snapshot made with the first CV quotes it: it goes with the CV.
    ui_services.admission.Admit(
        snapshot_request(job_id, first), metadata=metadata(Role.GATEWAY, "ada")
    )
    claimed = claim(ui_services, ["strategy.snapshot"])
    publish(ui_services, claimed, ANSWER)
    complete(ui_services, claimed)
    open_jobs(page, ui_gateway.url, "ada")
    job = page.locator(f"#job-{job_id}")
    expect(job.get_by_text("Fit: 82")).to_be_visible()
    choice = job.get_by_role("combobox", name="CV to compare with")
    newest_first = ["Without a CV", "second.txt", "first.txt"]
    expect(choice.locator("option")).to_have_text(newest_first)
    choice.select_option(label="first.txt")

    # A failure the page cannot help shows beside the button, and nothing is lost.
    page.route(f"**/api/attachments/{first}", refuse_deletes)
    confirm_delete(page, "CV", "first.txt")
    expect(page.locator(f"#attachment-{first}").get_by_role("alert")).to_have_text(
        "first.txt could not be deleted. The workspace is not reachable right now."
    )
    expect(page.locator(CVS)).to_have_count(2)
    page.unroute(f"**/api/attachments/{first}")

    confirm_delete(page, "CV", "first.txt")
    expect(page.locator(CVS)).to_have_count(1)
    expect(choice.locator("option")).to_have_text(["Without a CV", "second.txt"])
    expect(choice).to_have_value("")
    expect(page.locator(CVS).get_by_role("heading", name="second.txt")).to_be_focused()
    expect(job.get_by_text("Fit: 82")).to_have_count(0)

    # Deleted in another tab: the page finds it gone, and lets it go.
    elsewhere = page.request.delete(
        f"{ui_gateway.url}/api/attachments/{second}", headers={"Origin": ui_gateway.url}
    )
    assert elsewhere.status == 204
    confirm_delete(page, "CV", "second.txt")
    expect(page.get_by_role("status").filter(has_text="already")).to_have_text(
        "second.txt had already been deleted."
    )
    expect(page.locator(CVS)).to_have_count(0)
    expect(page.get_by_text("No CV yet")).to_be_visible()
    expect(page.get_by_role("heading", name="CVs")).to_be_focused()
    expect(choice.locator("option")).to_have_text(["Without a CV"])
