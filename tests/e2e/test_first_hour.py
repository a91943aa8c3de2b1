"""The first hour of a new user, on the stack `scripts/run.sh` starts, in a real browser.

Nothing is set up behind the page: `opsctl up` with no secrets set (a new
user has none), the development model at the pace `opsctl up` gives it, and
every step taken the way a person takes it. A screenshot of each step goes
to ``test-artifacts/screenshots/first-hour-*.png``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from tests.e2e.conftest import DESKTOP
from tests.support.jobs_page import add_job
from tests.support.product import opsctl_up, product_env

pytestmark = [pytest.mark.browser, pytest.mark.slow]
Screenshot = Callable[[Page, str], Path]
ANSWER_MS = 30_000  # a paced answer takes about 4 s; this only stops a hang
BELL_MS = 2_000  # the bar: the bell follows a terminal state within 2 s
TITLE, COMPANY = "Platform engineer", "Northwind"
AD = """We are looking for a platform engineer to join the team that runs our payments APIs.

You will design and build Python services on gRPC and MariaDB, run them on Kubernetes,
and improve our CI/CD pipelines. You will share an on-call rotation of one week in six.

You have five years of backend experience with Python and SQL, you write tests first,
and you have operated services in production. Terraform and Go are a plus."""
CV = """Ada Lovelace, backend engineer

Designed and built Python services and gRPC APIs on MariaDB for a payments platform.
Ran them on Kubernetes with Terraform; cut deploy time in half with a new CI/CD pipeline.
Some Go tooling; test-driven development throughout; on call for five years."""


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """One tab for the whole hour: the session has to survive sign-out, sign-in and a restart."""
    context = browser.new_context(viewport=DESKTOP)  # type: ignore[arg-type]
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    yield opened
    context.close()
    assert errors == [], f"uncaught errors in the page: {errors}"


def _state(item: Locator) -> Locator:
    return item.locator(".analysis .state")


def _bell(page: Page) -> Locator:
    return page.locator("#bell")


def _expect_the_bell_to_follow(page: Page) -> None:
    """Within 2 s the bell shows what the API counts now (a retry withdraws the old note)."""
    origin = re.match(r"https?://[^/]+", page.url)
    assert origin is not None, page.url
    count = page.request.get(f"{origin.group(0)}/api/notifications/unread-count").json()["count"]
    label = f"Notifications, {count} unread" if count else "Notifications, none unread"
    expect(_bell(page)).to_have_attribute("aria-label", label, timeout=BELL_MS)


def _token(user: str, env: dict[str, str], cwd: Path) -> str:
    """What a user pastes: the token `opsctl token` prints, from the same folder."""
    printed = subprocess.run(
        [sys.executable, "-m", "durable_ops.cli", "token", "--user", user],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return printed.stdout.strip()


def test_the_first_hour(page: Page, tmp_path: Path, screenshot: Screenshot) -> None:
    env = product_env()  # every port free; the dev model at `opsctl up`'s own pace
    for name in ("OPS_JWT_SECRET", "OPS_SERVICE_SECRET", "OPS_DEV_MODEL_SECONDS"):
        env.pop(name, None)  # what a new user has: nothing set
    database = f"sqlite:///{tmp_path / 'first-hour.sqlite3'}"

    def shot(name: str) -> None:
        screenshot(page, f"first-hour-{name}")

    with opsctl_up(database, env, cwd=tmp_path) as product:
        base = product.url.rstrip("/")
        page.goto(product.login)  # the page `opsctl up` printed, its form filled in with demo
        page.get_by_role("button", name="Sign in as this user").click()
        expect(page).to_have_url(re.compile("/operations$"))
        shot("01-signed-in")

        page.goto(f"{base}/jobs")
        job = add_job(page, TITLE, COMPANY, AD)
        job.locator(".item__description summary").click()
        expect(job.locator(".item__description-text")).to_contain_text("on-call rotation")
        shot("02-job-added")

        cv_form = page.get_by_role("form", name="Add a CV")
        cv_form.get_by_label("File name").fill("ada-lovelace.txt")
        cv_form.get_by_label("CV text").fill(CV)
        cv_form.get_by_role("button", name="Add CV").click()
        cv = page.locator("#cvs-heading ~ ol li.item")
        expect(cv).to_have_count(1)
        shot("03-cv-added")

        job.get_by_label("CV to compare with").select_option(label="ada-lovelace.txt")
        job.get_by_role("button", name="Start strategy snapshot").click()
        expect(_state(job)).to_have_text(re.compile("Queued|Running"))
        score = job.locator(".analysis__score")
        expect(score).to_contain_text(re.compile(r"Fit: \d+"), timeout=ANSWER_MS)
        fit = int(re.search(r"Fit: (\d+)", score.inner_text()).group(1))  # type: ignore[union-attr]
        assert fit >= 70, f"a strong match scored {fit}"
        expect(job).to_contain_text("not an AI assessment")  # the model is named for what it is
        expect(job.get_by_label("CV to compare with")).to_have_value(
            re.compile(".+")
        )  # the choice stays for the next run
        shot("04-snapshot-with-the-cv")

        cv.get_by_label("Job to compare with").select_option(label=f"{TITLE} at {COMPANY}")
        cv.get_by_role("button", name="Review CV").click()
        expect(cv.locator(".analysis__score")).to_contain_text(
            re.compile(r"Overall: \d+"), timeout=ANSWER_MS
        )
        shot("05-cv-review-tied-to-the-job")

        page.goto(f"{base}/operations")
        named = page.locator("li.op").filter(has_text=f"Job: {TITLE} at {COMPANY}")
        expect(named).to_have_count(1)
        expect(page.locator("li.op").filter(has_text="CV: ada-lovelace.txt")).to_have_count(1)
        shot("06-operations-named")

        # A second run, cancelled from the page while it runs; the bell follows.
        page.goto(f"{base}/jobs")
        job = page.locator("ol[aria-label='Your jobs'] li.item")
        expect(job.get_by_label("CV to compare with")).to_have_value(re.compile(".+"))
        job.get_by_role("button", name="Start strategy snapshot").click()
        expect(_state(job)).to_have_text("Running", timeout=ANSWER_MS)
        job.get_by_role("button", name="Cancel analysis").click()
        page.get_by_role("button", name="Stop analysis").click()
        expect(_state(job)).to_have_text("Cancelled", timeout=BELL_MS)
        _expect_the_bell_to_follow(page)
        shot("07-running-analysis-cancelled")

        page.goto(f"{base}/operations")
        cancelled = page.locator("li.op").filter(has_text="Cancelled")
        expect(cancelled).to_have_count(1)
        retried = page.locator(f'li.op[data-id="{cancelled.get_attribute("data-id")}"]')
        retried.get_by_role("button", name=re.compile("^Retry ")).click()
        expect(retried.locator(".state")).to_have_text("Succeeded", timeout=ANSWER_MS)
        _expect_the_bell_to_follow(page)
        shot("08-retried-and-succeeded")

        ready = page.locator(".note").filter(has_text="Strategy snapshot is ready").first
        ready.get_by_role("link", name=re.compile("^View the result")).click()
        page.wait_for_url(re.compile(r"/jobs#job-\w+$"))
        opened = page.locator("ol[aria-label='Your jobs'] li.item")
        expect(opened).to_have_class(re.compile("is-highlighted"))
        expect(opened.locator(".analysis__score")).to_contain_text(re.compile(r"Fit: \d+"))
        shot("09-notification-opened-the-result")

        page.get_by_role("button", name="Sign out").click()
        expect(page.get_by_role("heading", name="Sign in to durable-ops")).to_be_visible()
        shot("10-signed-out")
        page.get_by_role("textbox", name="Token").fill(_token("demo", env, tmp_path))
        page.get_by_role("button", name="Sign in", exact=True).click()
        expect(page).to_have_url(re.compile("/operations$"))
        expect(page.locator("li.op")).to_have_count(3)  # the same user's work
        shot("11-signed-in-with-a-pasted-token")
        assert product.stop() == 0

    with opsctl_up(database, env, cwd=tmp_path):  # the same folder: the kept secrets
        page.goto(f"{base}/operations")
        expect(page).to_have_url(re.compile("/operations$"))
        expect(page.locator("li.op")).to_have_count(3)  # still signed in, nothing lost
        shot("12-after-a-restart")
