"""What a user does on the jobs page, spelled once for the browser tests."""

from __future__ import annotations

from playwright.sync_api import Locator, Page, expect

from tests.support.signin import dev_sign_in
from tests.support.workspace_client import JOB_TEXT

JOBS = "ol[aria-label='Your jobs'] li.item"


def open_jobs(page: Page, base_url: str, user: str) -> None:
    """Sign in as `user` and open the Jobs page."""
    dev_sign_in(page, base_url, user, then="/jobs")


def add_job(page: Page, title: str, company: str, description: str = JOB_TEXT) -> Locator:
    """Fill in and send the job form; the page's one job item, once it shows."""
    form = page.get_by_role("form", name="Add a job posting")
    form.get_by_label("Title").fill(title)
    form.get_by_label("Company").fill(company)
    form.get_by_label("Description").fill(description)
    form.get_by_role("button", name="Add job").click()
    job = page.locator(JOBS)
    expect(job).to_have_count(1)
    return job
