"""Results stay put, plans and models read right, in a real browser: a re-run keeps the
CV of the last run; "View result" scrolls to and highlights its job; a saved job's
description opens again; a CV review is tied to a job from the page; a Free user sees
why AI analyses are off and the command that grants Pro, and cannot switch them on;
every result names the model that produced it, and a missing score is "Not scored"."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, Route, expect

from durable_ops.storage import workspace
from tests.support.gateway import Claimed, LiveGateway, claim, complete, publish
from tests.support.grpc_services import Services
from tests.support.jobs_page import JOBS, add_job, open_jobs
from tests.support.workspace_client import create_cv, create_job, entitle

pytestmark = pytest.mark.browser
Screenshot = Callable[[Page, str], Path]
SNAPSHOT = {
    "fit_score": 82,
    "summary": "A strong match on Python and gRPC.",
    "strengths": ["Python"],
    "gaps": ["Kubernetes"],
    "next_steps": ["Mention the on-call rotation"],
}
REVIEW = {
    "overall_score": 74,
    "summary": "A clear CV; quantify more of the results.",
    "strengths": ["Opens with a profile"],
    "improvements": ["Quantify the on-call work"],
    "keywords_missing": ["Kubernetes"],
}
AD = (
    "We are hiring a platform engineer to run our Python services.\n\n"
    "You will build gRPC APIs on MariaDB and share the on-call rotation.\n\n"
    "Nice to have: Kubernetes and Terraform."
)
DEV_MODEL = {"provider": "127.0.0.1", "model": "dev-heuristic", "route": "local"}


def finish_snapshot(services: Services) -> Claimed:
    claimed = claim(services, ["strategy.snapshot"])
    publish(services, claimed, SNAPSHOT)
    complete(services, claimed)
    return claimed


def job_item(page: Page, job_id: str) -> Locator:
    return page.locator(f"#job-{job_id}")


def test_an_end_heard_while_the_starts_look_is_on_its_way_is_shown(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    """The start's first look at its run is answered from before the run ended, and the
    stream's news of the end comes while that look is on its way: the card read again
    (CI once left it "Running" for good: the news was dropped as "a look reads it")."""
    entitle(ui_services.db, "alice")
    job_id = create_job(ui_services.workspace, "alice")
    open_jobs(page, ui_gateway.url, "alice")
    job = job_item(page, job_id)
    expect(job.get_by_role("button", name="Start strategy snapshot")).to_be_visible()
    page.evaluate(
        """window.addEventListener("live:operation", (event) => {
            if (event.detail.operation.state === "succeeded") window.endHeard = true;
        })"""
    )
    held: list[tuple[Route, Any]] = []

    def hold_the_first_look(route: Route) -> None:
        if route.request.method == "GET" and not held:
            held.append((route, route.fetch()))  # answered now, before the run ends
        else:
            route.continue_()

    page.route(f"**/api/jobs/{job_id}/strategy-snapshot", hold_the_first_look)
    job.get_by_role("button", name="Start strategy snapshot").click()
    for _ in range(100):  # the handler runs while the page waits
        if held:
            break
        page.wait_for_timeout(50)
    assert held, "the start's look never came"
    finish_snapshot(ui_services)
    page.wait_for_function("window.endHeard === true")
    route, stale = held[0]
    route.fulfill(response=stale)
    expect(job.get_by_text("Fit: 82")).to_be_visible()


# ---- results stay put ------------------------------------------------------------------------


def test_a_rerun_keeps_the_cv_of_the_last_run(
    page: Page, ui_gateway: LiveGateway, ui_services: Services, screenshot: Screenshot
) -> None:
    entitle(ui_services.db, "alice")
    job_id = create_job(ui_services.workspace, "alice")
    cv_id = create_cv(ui_services.workspace, "alice")
    open_jobs(page, ui_gateway.url, "alice")
    job = job_item(page, job_id)
    choice = job.get_by_label("CV to compare with")
    expect(choice).to_have_value("")  # nothing chosen yet: "Without a CV"
    choice.select_option(label="cv.txt")
    job.get_by_role("button", name="Start strategy snapshot").click()
    assert finish_snapshot(ui_services).context_ref == cv_id
    expect(job.get_by_text("Fit: 82")).to_be_visible()

    page.reload()  # a new visit shows the last run's CV, not "Without a CV"
    expect(choice).to_have_value(cv_id)
    # Adding a CV redraws the lists: the choice stays too.
    cv_form = page.get_by_role("form", name="Add a CV")
    cv_form.get_by_label("File name").fill("second.txt")
    cv_form.get_by_label("CV text").fill("Another CV with Go and Rust")
    cv_form.get_by_role("button", name="Add CV").click()
    expect(page.locator("#cvs-heading ~ ol li.item")).to_have_count(2)
    expect(choice).to_have_value(cv_id)
    screenshot(page, "50-jobs-rerun-keeps-the-cv")

    job.get_by_role("button", name="Start strategy snapshot").click()
    expect(job.locator(".analysis .state")).to_have_text("Queued")
    assert claim(ui_services, ["strategy.snapshot"]).context_ref == cv_id


def test_view_result_scrolls_to_and_highlights_the_job(
    page: Page, ui_gateway: LiveGateway, ui_services: Services, screenshot: Screenshot
) -> None:
    entitle(ui_services.db, "alice")
    first = create_job(ui_services.workspace, "alice")  # the oldest: last in the list
    for _ in range(5):
        create_job(ui_services.workspace, "alice")
    open_jobs(page, ui_gateway.url, "alice")
    expect(page.locator(JOBS)).to_have_count(6)
    job_item(page, first).get_by_role("button", name="Start strategy snapshot").click()
    expect(job_item(page, first).locator(".analysis .state")).to_have_text("Queued")
    finish_snapshot(ui_services)

    page.goto(f"{ui_gateway.url}/operations")
    page.get_by_role("link", name="View result").click()
    page.wait_for_url(re.compile(f"/jobs\\?result=\\w+#job-{first}$"))
    target = job_item(page, first)
    expect(target).to_have_class(re.compile("is-highlighted"))
    expect(target).to_be_in_viewport()
    expect(target).to_be_focused()
    expect(page.locator(".is-highlighted")).to_have_count(1)
    expect(target.get_by_text("Fit: 82")).to_be_in_viewport()
    screenshot(page, "51-jobs-view-result-highlighted")


def test_a_saved_jobs_description_opens_again(
    page: Page, ui_gateway: LiveGateway, screenshot: Screenshot
) -> None:
    open_jobs(page, ui_gateway.url, "alice")
    job = add_job(page, "Platform engineer", "Acme", AD)
    description = job.locator(".item__description-text")
    expect(description).to_be_hidden()  # folded, so the list stays short
    job.get_by_text("Description", exact=True).click()
    expect(description).to_be_visible()
    expect(description).to_contain_text("share the on-call rotation")
    screenshot(page, "52-jobs-description-opened")

    page.reload()  # saved: it opens again on a later visit
    job.get_by_text("Description", exact=True).click()
    expect(description).to_be_visible()
    text = description.inner_text()
    assert text.count("\n\n") >= 2, f"the paragraphs are kept apart: {text!r}"


def test_a_cv_review_is_tied_to_a_job_from_the_page(
    page: Page, ui_gateway: LiveGateway, ui_services: Services, screenshot: Screenshot
) -> None:
    entitle(ui_services.db, "alice")
    cv_id = create_cv(ui_services.workspace, "alice")
    open_jobs(page, ui_gateway.url, "alice")
    job_id = add_job(page, "Platform engineer", "Acme", AD).get_attribute("id") or ""
    cv = page.locator(f"#attachment-{cv_id}")
    cv.get_by_label("Job to compare with").select_option(label="Platform engineer at Acme")
    cv.get_by_role("button", name="Review CV").click()
    expect(cv.locator(".analysis .state")).to_have_text("Queued")

    claimed = claim(ui_services, ["cv.review"])
    assert claimed.subject_id == cv_id
    assert f"job-{claimed.context_ref}" == job_id  # the job travels with the review
    publish(ui_services, claimed, REVIEW, kind="cv.review", subject="attachment")
    complete(ui_services, claimed)
    expect(cv.get_by_text("Overall: 74")).to_be_visible()
    expect(cv.get_by_label("Job to compare with")).to_have_value(claimed.context_ref)
    screenshot(page, "53-cv-review-tied-to-a-job")

    page.goto(f"{ui_gateway.url}/operations")
    expect(page.locator("li.op .op__subject")).to_contain_text("CV: cv.txt")


# ---- plans -------------------------------------------------------------------------------------


def test_a_free_user_sees_why_and_the_command_and_cannot_switch_ai_on(
    page: Page, ui_gateway: LiveGateway, ui_services: Services, screenshot: Screenshot
) -> None:
    open_jobs(page, ui_gateway.url, "carol")
    notice = page.locator("#plan-notice")
    expect(notice).to_contain_text("Your plan is Free, so AI analyses are off")
    # The exact command of `opsctl` (services/cli.py: users set-plan USER {free,pro}).
    expect(notice.locator("pre code")).to_have_text("opsctl users set-plan carol pro")
    switch = page.get_by_role("checkbox", name="Use AI analyses")
    expect(switch).to_be_disabled()
    expect(switch).not_to_be_checked()
    screenshot(page, "54-free-plan-explained")

    # Forced on anyway (an old page, a crafted click): the API refuses and the page says so.
    switch.evaluate("element => { element.disabled = false; }")
    switch.click()
    page.get_by_role("dialog").get_by_role("button", name="Switch on").click()
    alert = page.locator(".settings .form-error")
    expect(alert).to_be_visible()
    expect(alert).to_contain_text("The setting was not changed.")
    expect(alert).to_contain_text("opsctl users set-plan")
    expect(alert).to_have_text(re.compile(r"[.!?]$"))
    expect(switch).not_to_be_checked()
    stored = ui_services.db.run(workspace.ai_settings, owner_id="carol", write=False)
    assert stored.ai_enabled is False

    # Granted Pro by the operator: the notice goes and the switch works.
    entitle(ui_services.db, "carol", ai_enabled=False)
    page.reload()
    expect(page.get_by_text("Plan: Pro.")).to_be_visible()
    expect(notice).to_have_count(0)
    expect(switch).to_be_enabled()
    switch.check()
    page.get_by_role("dialog").get_by_role("button", name="Switch on").click()
    expect(alert).to_be_hidden()
    for _ in range(50):
        if ui_services.db.run(workspace.ai_settings, owner_id="carol", write=False).ai_enabled:
            break
        page.wait_for_timeout(100)
    else:
        pytest.fail("switching AI on as a Pro user did not reach the API")


# ---- models and scores -------------------------------------------------------------------------


def with_snapshot_changes(page: Page, change: Callable[[dict[str, Any]], None]) -> None:
    """Answers of GET …/strategy-snapshot as the gateway sent them, then ``change``d."""

    def handle(route: Route) -> None:
        if route.request.method != "GET":
            route.continue_()
            return
        response = route.fetch()
        body = response.json()
        change(body)
        route.fulfill(response=response, body=json.dumps(body))

    page.route("**/api/jobs/*/strategy-snapshot", handle)


def test_every_result_names_its_model_and_the_heuristic_says_what_it_is(
    page: Page, ui_gateway: LiveGateway, ui_services: Services, screenshot: Screenshot
) -> None:
    entitle(ui_services.db, "alice")
    job_id = create_job(ui_services.workspace, "alice")
    provenance: dict[str, Any] = dict(DEV_MODEL)

    def add_provenance(body: dict[str, Any]) -> None:
        if body.get("snapshot"):
            body["snapshot"]["provenance"] = provenance

    with_snapshot_changes(page, add_provenance)
    open_jobs(page, ui_gateway.url, "alice")
    job = job_item(page, job_id)
    job.get_by_role("button", name="Start strategy snapshot").click()
    expect(job.locator(".analysis .state")).to_have_text("Queued")
    finish_snapshot(ui_services)
    label = job.locator(".model-label")
    expect(label).to_contain_text("Produced by dev-heuristic, the built-in development heuristic.")
    expect(label).to_contain_text("it is not an AI assessment.")
    screenshot(page, "55-result-by-the-development-heuristic")

    provenance.update(provider="api.example", model="gpt-4o-mini", route="external")
    page.reload()
    expect(label).to_have_text("Produced by gpt-4o-mini, an external model.")
    expect(job.get_by_text("not an AI assessment")).to_have_count(0)


def test_a_result_without_its_model_says_so(
    page: Page, ui_gateway: LiveGateway, ui_services: Services
) -> None:
    entitle(ui_services.db, "alice")
    job_id = create_job(ui_services.workspace, "alice")
    open_jobs(page, ui_gateway.url, "alice")
    job = job_item(page, job_id)
    job.get_by_role("button", name="Start strategy snapshot").click()
    expect(job.locator(".analysis .state")).to_have_text("Queued")
    finish_snapshot(ui_services)
    expect(job.get_by_text("Fit: 82")).to_be_visible()
    label = job.locator(".model-label")
    snapshot = job.page.evaluate(
        "path => fetch(path).then(r => r.json())", f"/api/jobs/{job_id}/strategy-snapshot"
    )
    assert "provenance" not in (snapshot["operation"] or {})  # the result's to say (SPEC §5)
    recorded = (snapshot["snapshot"] or {}).get("provenance")
    if recorded:  # the API names the model: the label does too
        expect(label).to_contain_text(f"Produced by {recorded['model']}")
    else:
        expect(label).to_have_text("The model that produced this result is not recorded.")


@pytest.mark.parametrize("missing", ["null", "absent"])
def test_a_missing_score_reads_not_scored_never_zero(
    page: Page, ui_gateway: LiveGateway, ui_services: Services, missing: str, screenshot: Screenshot
) -> None:
    entitle(ui_services.db, "alice")
    job_id = create_job(ui_services.workspace, "alice")

    def unscored(body: dict[str, Any]) -> None:
        if body.get("snapshot"):
            result = body["snapshot"]["result"]
            if missing == "null":
                result["fit_score"] = None
            else:
                result.pop("fit_score", None)
            body["snapshot"]["provenance"] = DEV_MODEL

    with_snapshot_changes(page, unscored)
    open_jobs(page, ui_gateway.url, "alice")
    job = job_item(page, job_id)
    job.get_by_role("button", name="Start strategy snapshot").click()
    expect(job.locator(".analysis .state")).to_have_text("Queued")
    finish_snapshot(ui_services)
    expect(job.locator(".analysis__score")).to_contain_text("Fit: Not scored")
    expect(job.locator(".analysis__result")).not_to_contain_text("0 / 100")
    expect(job.locator(".analysis__result")).not_to_contain_text("null")
    expect(job.get_by_text("Kubernetes")).to_be_visible()  # the rest of the result still shows
    if missing == "null":
        screenshot(page, "56-result-not-scored")
