"""The jobs page in a real browser: add a job and a CV, start a snapshot, watch it finish."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from durable_ops.api.workspace.v1 import workspace_pb2 as workspace_pb
from durable_ops.model.scope import Role
from tests.support.gateway import LiveGateway, claim, complete, heartbeat
from tests.support.grpc_services import Services, metadata
from tests.support.workspace_client import CV_TEXT, JOB_TEXT, entitle

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
    page.goto(f"{ui_gateway.url}/auth/dev-login?user=alice")
    page.goto(f"{ui_gateway.url}/jobs")
    expect(page.get_by_text("Plan: Pro")).to_be_visible()

    cv_form = page.get_by_role("form", name="Add a CV")
    cv_form.get_by_label("CV text").fill(CV_TEXT)
    cv_form.get_by_role("button", name="Add CV").click()
    expect(page.locator("#cvs-heading ~ ol li.item")).to_have_count(1)

    job_form = page.get_by_role("form", name="Add a job posting")
    job_form.get_by_label("Title").fill("Platform engineer")
    job_form.get_by_label("Company").fill("Acme")
    job_form.get_by_label("Description").fill(JOB_TEXT)
    job_form.get_by_role("button", name="Add job").click()
    job = page.locator("ol[aria-label='Your jobs'] li.item")
    expect(job).to_have_count(1)
    job.get_by_label("CV to compare with").select_option(label="cv.txt")
    job.get_by_role("button", name="Start strategy snapshot").click()
    expect(job.get_by_text("Queued")).to_be_visible()

    # Play the worker: claim, report progress, publish the validated answer, complete.
    claimed = claim(ui_services, ["strategy.snapshot"])
    assert claimed.context_ref, "the chosen CV travels with the operation"
    heartbeat(ui_services, claimed, 40)
    expect(job.get_by_label("Analysis progress")).to_have_attribute("value", "40")
    screenshot(page, "20-jobs-snapshot-running")
    note = ui_services.workspace.PublishNote(
        workspace_pb.PublishNoteRequest(
            kind="strategy.snapshot",
            subject_type="job",
            subject_id=claimed.subject_id,
            operation_id=claimed.operation_id,
            body_json=json.dumps(ANSWER),
        ),
        metadata=metadata(Role.WORKER, "alice"),
    )
    assert note.published
    complete(ui_services, claimed)

    expect(job.get_by_text("Fit: 82")).to_be_visible()
    expect(job.get_by_text("Kubernetes")).to_be_visible()
    screenshot(page, "21-jobs-snapshot-result")

    page.goto(f"{ui_gateway.url}/operations")
    link = page.get_by_role("link", name="View result")
    expect(link).to_have_attribute("href", f"/jobs#job-{claimed.subject_id}")


def test_without_pro_the_refusal_is_shown(page: Page, ui_gateway: LiveGateway) -> None:
    page.goto(f"{ui_gateway.url}/auth/dev-login?user=carol")
    page.goto(f"{ui_gateway.url}/jobs")
    expect(page.get_by_text("Free (AI analyses need Pro)")).to_be_visible()
    job_form = page.get_by_role("form", name="Add a job posting")
    job_form.get_by_label("Title").fill("Engineer")
    job_form.get_by_label("Description").fill(JOB_TEXT)
    job_form.get_by_role("button", name="Add job").click()
    job = page.locator("ol[aria-label='Your jobs'] li.item")
    job.get_by_role("button", name="Start strategy snapshot").click()
    expect(job.get_by_role("alert")).to_contain_text("Pro")
